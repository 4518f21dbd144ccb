"""Prebuilt libraries on a real GPU: zero-copy, stream-ordered, matching TVM alone, in CUDA graphs, deployed bare."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from simaccel.tvm_integration.tools import deploy
from simaccel.tvm_integration.tools.artifacts import case_inputs, load_manifest
from gpu_cases import TOLERANCE, ZERO

# Every test here is marked `gpu` (skipped, with the reason, where no GPU exists). They run
# prebuilt libraries (simaccel.tvm_integration.tools.artifacts): from $SIMACCEL_GPU_ARTIFACTS when
# set (a GPU machine whose TVM has only its runtime), else built in-process (full TVM). Only
# `tvm.runtime` is used at run time, as in a deployment.
#
# A library's regions are native (simaccel.native); the tests parametrized by `path` run them
# natively and routed to the Python "cuda" engine (`use_engine("cuda")`), the readable path.
pytestmark = pytest.mark.gpu


PATHS = ["native", "python"]


def on_path(runtime, path: str):
    """Run regions natively, or through the Python "cuda" engine."""
    return runtime.use_engine("cuda") if path == "python" else contextlib.nullcontext()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory):
    directory = os.environ.get("SIMACCEL_GPU_ARTIFACTS")
    if not directory:
        from simaccel.tvm_integration.tools.artifacts import build_artifacts

        directory = build_artifacts(tmp_path_factory.mktemp("gpu-artifacts"), log=lambda _: None)
    return directory, load_manifest(directory)


class Case:
    """One prebuilt case: its two libraries loaded as VMs on one device."""

    def __init__(self, artifacts, name: str, device: str = "cuda:0"):
        directory, manifest = artifacts
        self.name, self.manifest = name, manifest
        self.dtype = manifest["cases"][name]["params"][0][2]
        self.vm, self.dev = deploy.load(os.path.join(directory, f"{name}.simaccel.so"), device)
        self.ref_vm, _ = deploy.load(os.path.join(directory, f"{name}.tvm.so"), device)

    def tensors(self, seed=None):
        import tvm

        return [tvm.runtime.tensor(a, self.dev) for a in case_inputs(self.manifest, self.name, seed)]

    def run(self, tensors, reference=False):
        return deploy.outputs_as_list((self.ref_vm if reference else self.vm)["main"](*tensors))

    def check(self, got, want):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            g, w = g.numpy(), (w.numpy() if hasattr(w, "numpy") else w)
            assert np.all(np.isfinite(g))
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), **TOLERANCE[self.dtype])


# TVM alone sums bfloat16 in bfloat16 (its matmul and conv2d accumulate in the output's type),
# so over 1024 products it strays far past one rounding: 0.19 at a scale of 4 on its CPU build,
# where simaccel, summing in float32 and rounding once, is within 0.012 of the float32 model.
# A bfloat16 case's reference is its float32 twin built by TVM alone, on the same inputs
# widened, rounded once to bfloat16.
FLOAT32_TWINS = {"hetero_bf16": "hetero_f32", "mm1024_bf16": "mm1024", "conv28_bf16": "conv28"}


def reference_outputs(artifacts, case, tensors):
    """TVM alone's outputs for `tensors`; for a bfloat16 case, its float32 twin's, rounded."""
    twin = FLOAT32_TWINS.get(case.name)
    if twin is None:
        return case.run(tensors, reference=True)
    import ml_dtypes
    import tvm

    wide = [tvm.runtime.tensor(t.numpy().astype(np.float32), case.dev) for t in tensors]
    return [w.numpy().astype(ml_dtypes.bfloat16) for w in Case(artifacts, twin).run(wide, reference=True)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", ["demo_f32", "demo_f16", "hetero_f32", "hetero_f16", "hetero_bf16", "upstream_f32", "mm8",
                                  "mm1024", "mm1024_bf16", "conv28_bf16"])
def test_matches_tvm_only_on_the_gpu_with_zero_host_traffic(artifacts, clean_runtime, name, path):
    case = Case(artifacts, name)
    tensors = case.tensors()
    want = reference_outputs(artifacts, case, tensors)
    clean_runtime.ledger.reset()
    with on_path(clean_runtime, path):
        got = case.run(tensors)
    case.check(got, want)
    ledger = clean_runtime.ledger.snapshot()
    assert ledger["offloaded_calls"] == len(case.manifest["cases"][name]["regions"])
    assert sum(ledger["kernel_launches"].values()) >= len(ledger["ops"]) > 0
    assert ledger["bytes"] == ZERO


def test_native_and_python_paths_give_identical_bits(artifacts, clean_runtime):
    """One switch, one result: the same kernels, launched natively or by numba."""
    for name in ("demo_f32", "demo_f16", "hetero_f16", "upstream_f32"):
        case = Case(artifacts, name)
        tensors = case.tensors(seed=3)
        native = case.run(tensors)
        with clean_runtime.use_engine("cuda"):
            python = case.run(tensors)
        for a, b in zip(native, python, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_pointer_identity(artifacts, clean_runtime):
    """The region reads the buffer TVM's kernel wrote and writes the buffer TVM allocated
    (traced by the Python engine; the native region's arguments are checked in test_native_regions)."""
    case = Case(artifacts, "hetero_f32")
    x, w, b = case.tensors()
    clean_runtime.ledger.tracing = True
    try:
        with clean_runtime.use_engine("cuda"):
            h0, h1, h2 = case.run([x, w, b])
    finally:
        clean_runtime.ledger.tracing = False
    trace = clean_runtime.ledger.trace()
    inputs = {e["address"] for e in trace if e["role"] == "input"}
    outputs = [e["address"] for e in trace if e["role"] == "output"]
    assert all(e["device"] == "cuda:0" for e in trace)
    assert h0.data_ptr() in inputs  # leaky_relu's output, written by a TVM kernel, read in place
    assert {w.data_ptr(), b.data_ptr()} <= inputs  # the caller's weights, read in place
    assert outputs == [h1.data_ptr()]  # the region wrote TVM's own buffer; log_softmax read it
    assert len({h0.data_ptr(), h1.data_ptr(), h2.data_ptr()}) == 3
    case.check([h0, h1, h2], case.run([x, w, b], reference=True))


def test_host_staged_mode_counts_the_copies(artifacts, clean_runtime):
    case = Case(artifacts, "hetero_f32")
    tensors = case.tensors()
    want = case.run(tensors, reference=True)
    with clean_runtime.use_staged():
        clean_runtime.ledger.reset()
        got = case.run(tensors)
    case.check(got, want)
    # region inputs: h0 (64x256), fc_w (512x256), fc_b (512); output h1 (64x512); float32
    moved = 4 * (64 * 256 + 512 * 256 + 512 + 64 * 512)
    assert clean_runtime.ledger.snapshot()["bytes"] == {
        "host_to_device": moved, "device_to_host": moved, "device_to_device": 0
    }


@pytest.mark.parametrize("path", PATHS)
def test_non_default_stream_long_upstream_many_calls(artifacts, clean_runtime, path):
    """Correct on a user stream, behind a slow TVM kernel, with no sync between calls."""
    import tvm_ffi
    from numba import cuda

    case = Case(artifacts, "upstream_f32")
    inputs = [case.tensors(seed) for seed in range(8)]
    wants = [case.run(t, reference=True) for t in inputs]
    stream = cuda.stream()
    handle = int(stream)
    results = []
    with tvm_ffi.use_raw_stream(case.dev, handle), on_path(clean_runtime, path):
        assert tvm_ffi.get_raw_stream(case.dev) == handle
        for _ in range(5):
            for tensors in inputs:
                results.append(case.run(tensors))
    stream.synchronize()
    for i, got in enumerate(results):
        case.check(got, wants[i % len(inputs)])
    assert clean_runtime.ledger.snapshot()["offloaded_calls"] == len(results)


@pytest.mark.parametrize("path", PATHS)
def test_two_threads_two_vms(artifacts, clean_runtime, path):
    cases = [Case(artifacts, "demo_f32"), Case(artifacts, "demo_f32")]
    errors = []

    def work(case, seeds):
        try:
            for seed in seeds:
                tensors = case.tensors(seed)
                with on_path(clean_runtime, path):
                    got = case.run(tensors)
                case.check(got, case.run(tensors, reference=True))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(c, range(i * 10, i * 10 + 10))) for i, c in enumerate(cases)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_warm_calls_allocate_nothing(artifacts, clean_runtime, monkeypatch):
    """The Python engine's plans: intermediates are made on the cold call only."""
    from simaccel.engines import get_engine

    case = Case(artifacts, "demo_f32")
    tensors = case.tensors()
    with clean_runtime.use_engine("cuda"):
        case.run(tensors)  # cold: plans and intermediates are made here
        engine = get_engine("cuda")
        allocations = []
        original = engine.allocate
        monkeypatch.setattr(engine, "allocate", lambda *a, **k: allocations.append(a) or original(*a, **k))
        plans = len(clean_runtime._plans)
        for _ in range(5):
            case.check(case.run(tensors), case.run(tensors, reference=True))
    assert allocations == [] and len(clean_runtime._plans) == plans


def test_second_gpu_runs_its_own_regions(artifacts, clean_runtime):
    from numba import cuda

    if len(cuda.gpus) < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {len(cuda.gpus)}")
    case = Case(artifacts, "demo_f32", device="cuda:1")
    tensors = case.tensors()
    want = case.run(tensors, reference=True)
    case.check(case.run(tensors), want)  # native: its kernels loaded on the second GPU
    clean_runtime.ledger.tracing = True
    try:
        with clean_runtime.use_engine("cuda"):
            got = case.run(tensors)
    finally:
        clean_runtime.ledger.tracing = False
    case.check(got, want)
    assert {e["device"] for e in clean_runtime.ledger.trace()} == {"cuda:1"}
    plans = [p for key, p in clean_runtime._plans.items() if key[2] == ("cuda", 1)]
    intermediates = [a for plan in plans for a in plan.slots if a is not None]
    assert intermediates
    # numba's record of the context each buffer was allocated in. (The driver's
    # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL through cuda.bindings answered 0 for memory that
    # numba allocated on GPU 1 in a plain script too, so it is not used here.)
    assert {a.gpu_data.context.device.id for a in intermediates} == {1}


# -- native regions: CUDA graphs, deployment without simaccel ------------------------------------
def test_tvm_cuda_graph_captures_and_replays_native_regions(artifacts, clean_runtime):
    """Built with relax.backend.use_cuda_graph: TVM runs the model once, captures what reads
    only static memory on a fresh stream (a region's first call there allocates on the
    stream), then replays that graph. A replayed region calls no region function (the ledger
    does not count it) yet the results match TVM alone with new inputs each run."""
    case = Case(artifacts, "graph_f32")
    regions = len(case.manifest["cases"]["graph_f32"]["regions"])
    inputs = case.tensors()
    clean_runtime.ledger.reset()
    for seed in (0, 1, 2, 3):
        fresh = case.tensors(seed)
        for tensor, new in zip(inputs, fresh):
            tensor.copyfrom(new)  # the graph reads the same buffers; their contents change
        case.check(case.run(inputs), case.run(inputs, reference=True))
    calls = clean_runtime.ledger.snapshot()["offloaded_calls"]
    assert 0 < calls < 4 * regions, f"{calls} region calls in 4 runs of {regions} regions: none was replayed from a graph"


def test_a_user_captured_graph_replays_native_regions(artifacts, clean_runtime):
    """A user captures TVM's stream (torch.cuda.graph) after a warm-up and replays it."""
    torch = pytest.importorskip("torch")
    import tvm_ffi

    case = Case(artifacts, "demo_f32")
    inputs = case.tensors()
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with tvm_ffi.use_raw_stream(case.dev, stream.cuda_stream), torch.cuda.stream(stream):
        for _ in range(3):  # warm-up: TVM's memory pool and the regions' memory for this stream
            case.run(inputs)
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            captured = case.run(inputs)
    for seed in (5, 6):
        for tensor, new in zip(inputs, case.tensors(seed)):
            tensor.copyfrom(new)
        graph.replay()
        torch.cuda.synchronize()
        case.check(captured, case.run(inputs, reference=True))


BARE_RUN = r"""
import ctypes, os, pathlib, sys
sys.modules["simaccel"] = sys.modules["numba"] = None  # importing either fails
os.environ["TVM_DEVICE_BACKEND_AUTOLOAD"] = "0"
import numpy as np, tvm
from tvm import base
from tvm.runtime.vm import VirtualMachine
library, inputs, output = sys.argv[1:4]
if "tvm_runtime_cuda" not in base._LOADED_LIBS:  # a runtime-only TVM: load its CUDA part
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        ctypes.CDLL(load_nvidia_dynamic_lib("cudart").abs_path, mode=ctypes.RTLD_GLOBAL)
    except Exception:
        ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)
    from tvm_ffi.libinfo import load_lib_ctypes
    lib_dir = pathlib.Path(base._LOADED_LIBS["tvm_runtime"]._name).resolve().parent
    base._LOADED_LIBS["tvm_runtime_cuda"] = load_lib_ctypes(
        package="tvm", target_name="tvm_runtime_cuda", extra_lib_paths=[lib_dir], mode="RTLD_LOCAL")
    import tvm_ffi
    from tvm.support import nvcc
    tvm_ffi.register_global_func("tvm_callback_cuda_compile", lambda code, *_: nvcc.compile_cuda(
        code, target_format="cubin", compiler="nvrtc", arch="sm_90a"), override=True)
dev = tvm.cuda(0)
vm = VirtualMachine(tvm.runtime.load_module(library), dev)
arrays = np.load(inputs)
result = vm["main"](*[tvm.runtime.tensor(arrays[f"arg{i}"], dev) for i in range(len(arrays.files))])
np.save(output, result.numpy())
print("modules:", sorted(m for m in ("simaccel", "numba") if sys.modules.get(m) is not None))
"""


def test_a_deployed_library_runs_without_simaccel_or_numba(artifacts, tmp_path):
    directory, manifest = artifacts
    case = Case(artifacts, "demo_f32")
    arrays = case_inputs(manifest, "demo_f32")
    np.savez(tmp_path / "inputs.npz", **{f"arg{i}": a for i, a in enumerate(arrays)})
    done = subprocess.run([sys.executable, "-c", BARE_RUN, os.path.join(directory, "demo_f32.simaccel.so"),
                           str(tmp_path / "inputs.npz"), str(tmp_path / "out.npy")],
                          capture_output=True, text=True, cwd="/", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "modules: []" in done.stdout
    want = case.run(case.tensors(), reference=True)[0].numpy()
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, **TOLERANCE["float32"])
