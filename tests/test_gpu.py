"""The accelerator on a real GPU: zero-copy, stream-ordered, matching TVM alone.

Every test here is marked `gpu` (skipped, with the reason, where no GPU exists). They run
prebuilt libraries (simaccel.tvm_integration.artifacts): from $SIMACCEL_GPU_ARTIFACTS when
set (a GPU machine whose TVM has only its runtime), else built in-process (full TVM). Only
`tvm.runtime` is used at run time, as in a deployment.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from simaccel import DeviceError
from simaccel.tvm_integration import deploy
from simaccel.tvm_integration.artifacts import case_inputs, load_manifest

pytestmark = pytest.mark.gpu

TOLERANCE = {"float32": dict(rtol=1e-4, atol=1e-4), "float16": dict(rtol=2e-2, atol=2e-2)}
ZERO = {"host_to_device": 0, "device_to_host": 0, "device_to_device": 0}


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory):
    directory = os.environ.get("SIMACCEL_GPU_ARTIFACTS")
    if not directory:
        from simaccel.tvm_integration.artifacts import build_artifacts

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
            g, w = g.numpy(), w.numpy()
            assert np.all(np.isfinite(g))
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), **TOLERANCE[self.dtype])


@pytest.mark.parametrize("name", ["demo_f32", "demo_f16", "hetero_f32", "hetero_f16", "upstream_f32", "mm1024"])
def test_matches_tvm_only_on_the_gpu_with_zero_host_traffic(artifacts, clean_runtime, name):
    case = Case(artifacts, name)
    tensors = case.tensors()
    want = case.run(tensors, reference=True)
    clean_runtime.ledger.reset()
    got = case.run(tensors)
    case.check(got, want)
    ledger = clean_runtime.ledger.snapshot()
    assert ledger["offloaded_calls"] == len(case.manifest["cases"][name]["regions"])
    assert sum(ledger["kernel_launches"].values()) >= len(ledger["ops"]) > 0
    assert ledger["bytes"] == ZERO


def test_pointer_identity(artifacts, clean_runtime):
    """The region reads the buffer TVM's kernel wrote and writes the buffer TVM allocated."""
    case = Case(artifacts, "hetero_f32")
    x, w, b = case.tensors()
    clean_runtime.ledger.tracing = True
    try:
        h0, h1, h2 = case.run([x, w, b])
    finally:
        clean_runtime.ledger.tracing = False
    trace = clean_runtime.ledger.trace()
    inputs = {e["address"] for e in trace if e["role"] == "input"}
    outputs = [e["address"] for e in trace if e["role"] == "output"]
    assert all(e["device"] == "cuda:0" for e in trace)
    assert h0.data_ptr() in inputs  # tanh's output, written by a TVM kernel, read in place
    assert {w.data_ptr(), b.data_ptr()} <= inputs  # the caller's weights, read in place
    assert outputs == [h1.data_ptr()]  # the region wrote TVM's own buffer; sigmoid read it
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


def test_non_default_stream_long_upstream_many_calls(artifacts, clean_runtime):
    """Correct on a user stream, behind a slow TVM kernel, with no sync between calls."""
    import tvm_ffi
    from numba import cuda

    case = Case(artifacts, "upstream_f32")
    inputs = [case.tensors(seed) for seed in range(8)]
    wants = [case.run(t, reference=True) for t in inputs]
    stream = cuda.stream()
    handle = int(stream)
    results = []
    with tvm_ffi.use_raw_stream(case.dev, handle):
        assert tvm_ffi.get_raw_stream(case.dev) == handle
        for _ in range(5):
            for tensors in inputs:
                results.append(case.run(tensors))
    stream.synchronize()
    for i, got in enumerate(results):
        case.check(got, wants[i % len(inputs)])
    assert clean_runtime.ledger.snapshot()["offloaded_calls"] == len(results)


def test_two_threads_two_vms(artifacts, clean_runtime):
    cases = [Case(artifacts, "demo_f32"), Case(artifacts, "demo_f32")]
    errors = []

    def work(case, seeds):
        try:
            for seed in seeds:
                tensors = case.tensors(seed)
                case.check(case.run(tensors), case.run(tensors, reference=True))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(c, range(i * 10, i * 10 + 10))) for i, c in enumerate(cases)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_warm_calls_allocate_nothing(artifacts, clean_runtime, monkeypatch):
    from simaccel.engines import get_engine

    case = Case(artifacts, "demo_f32")
    tensors = case.tensors()
    case.run(tensors)  # cold: plans and intermediates are made here
    engine = get_engine("cuda")
    allocations = []
    original = engine.allocate
    monkeypatch.setattr(engine, "allocate", lambda *a, **k: allocations.append(a) or original(*a, **k))
    plans = len(clean_runtime._plans)
    for _ in range(5):
        case.check(case.run(tensors), case.run(tensors, reference=True))
    assert allocations == [] and len(clean_runtime._plans) == plans


def test_cpu_tensor_into_a_gpu_region_is_refused(clean_runtime):
    import tvm

    from simaccel.program import OpNode, Program, TensorSpec

    program = Program(
        "relu", (TensorSpec("x", (4,), "float32"), TensorSpec("y", (4,), "float32")), (0,), (1,),
        (OpNode("simaccel.relu", (0,), 1),),
    )
    x = tvm.runtime.tensor(np.ones(4, np.float32), tvm.cuda(0))
    with pytest.raises(DeviceError, match="mixed devices.*x@cuda:0.*y@cpu:0"):
        clean_runtime.run(program, x, np.zeros(4, np.float32))
    with clean_runtime.use_engine("cuda"), pytest.raises(DeviceError, match="engine 'cuda' runs on cuda memory"):
        clean_runtime.run(program, np.ones(4, np.float32), np.zeros(4, np.float32))


def test_second_gpu_runs_its_own_regions(artifacts, clean_runtime):
    from numba import cuda

    if len(cuda.gpus) < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {len(cuda.gpus)}")
    case = Case(artifacts, "demo_f32", device="cuda:1")
    tensors = case.tensors()
    clean_runtime.ledger.tracing = True
    try:
        got = case.run(tensors)
    finally:
        clean_runtime.ledger.tracing = False
    case.check(got, case.run(tensors, reference=True))
    assert {e["device"] for e in clean_runtime.ledger.trace()} == {"cuda:1"}
    plans = [p for key, p in clean_runtime._plans.items() if key[2] == ("cuda", 1)]
    intermediates = [a for plan in plans for a in plan.slots if a is not None]
    assert intermediates
    # numba's record of the context each buffer was allocated in. (The driver's
    # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL through cuda.bindings answered 0 for memory that
    # numba allocated on GPU 1 in a plain script too, so it is not used here.)
    assert {a.gpu_data.context.device.id for a in intermediates} == {1}


# -- each kernel at real sizes on the GPU, against its numpy reference -----------------------
KERNEL_CASES = [
    ("simaccel.dense_bias_gelu", [(300, 257), (129, 257), (129,)], {}),
    ("simaccel.matmul_relu", [(2, 100, 64), (64, 200)], {}),
    ("simaccel.conv2d_bias_relu", [(2, 16, 33, 31), (24, 16, 3, 3), (1, 24, 1, 1)],
     {"strides": [2, 1], "padding": [1, 1, 2, 0], "dilation": [1, 2]}),
    ("simaccel.max_pool2d", [(2, 8, 65, 63)], {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1], "dilation": [1, 1]}),
    ("simaccel.avg_pool2d", [(2, 8, 65, 63)],
     {"pool_size": [3, 2], "strides": [2, 1], "padding": [1, 0, 1, 1], "dilation": [1, 1], "count_include_pad": False}),
    ("simaccel.softmax", [(3, 77, 1000)], {}),
    ("simaccel.layer_norm", [(3, 77, 768), (768,), (768,)], {"epsilon": 1e-5}),
    ("simaccel.add", [(4, 1, 30, 50), (7, 1, 50)], {}),
    ("simaccel.multiply", [(1000, 513), (513,)], {}),
    ("simaccel.gelu", [(1000, 513)], {}),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name, shapes, attrs", KERNEL_CASES, ids=[c[0] for c in KERNEL_CASES])
def test_kernels_at_real_sizes(name, shapes, attrs, dtype):
    from numba import cuda

    from simaccel.data import random_arrays
    from simaccel.kernels import KernelTarget
    from simaccel.ops import get_op

    op = get_op(name)
    arrays = random_arrays([(f"t{i}_w" if i == 1 else f"t{i}", s, dtype) for i, s in enumerate(shapes)], seed=1)
    attrs = op.all_attrs(attrs)
    want = op.reference(*arrays, **attrs)
    shape, out_dtype = op.infer([a.shape for a in arrays], [dtype] * len(arrays), **attrs)
    out = cuda.device_array(shape, dtype=out_dtype)
    stream = cuda.stream()
    launches = op.kernel(KernelTarget("cuda", stream), out, *[cuda.to_device(a, stream=stream) for a in arrays], **attrs)
    got = out.copy_to_host(stream=stream)
    stream.synchronize()
    assert launches >= 1
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **TOLERANCE[dtype])
