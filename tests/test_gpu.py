"""The accelerator on a real GPU: zero-copy, stream-ordered, matching TVM alone.

Every test here is marked `gpu` (skipped, with the reason, where no GPU exists). They run
prebuilt libraries (simaccel.tvm_integration.tools.artifacts): from $SIMACCEL_GPU_ARTIFACTS when
set (a GPU machine whose TVM has only its runtime), else built in-process (full TVM). Only
`tvm.runtime` is used at run time, as in a deployment.

A library's regions are native (simaccel.native); the tests parametrized by `path` run them
natively and routed to the Python "cuda" engine (`use_engine("cuda")`), the readable path.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from simaccel import DeviceError
from simaccel.tvm_integration.tools import deploy
from simaccel.tvm_integration.tools.artifacts import case_inputs, load_manifest

pytestmark = pytest.mark.gpu

TOLERANCE = {"float32": dict(rtol=1e-4, atol=1e-4), "float16": dict(rtol=2e-2, atol=2e-2)}
ZERO = {"host_to_device": 0, "device_to_host": 0, "device_to_device": 0}
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
            g, w = g.numpy(), w.numpy()
            assert np.all(np.isfinite(g))
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), **TOLERANCE[self.dtype])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", ["demo_f32", "demo_f16", "hetero_f32", "hetero_f16", "upstream_f32", "mm8", "mm1024"])
def test_matches_tvm_only_on_the_gpu_with_zero_host_traffic(artifacts, clean_runtime, name, path):
    case = Case(artifacts, name)
    tensors = case.tensors()
    want = case.run(tensors, reference=True)
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
    (traced by the Python engine; the native region's arguments are checked in test_native)."""
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


# -- each kernel at real sizes on the GPU, against its numpy reference -----------------------
KERNEL_CASES = [
    ("simaccel.dense_bias_gelu", [(300, 257), (129, 257), (129,)], {}),
    ("simaccel.matmul_relu", [(2, 100, 64), (64, 200)], {}),
    # The sliced-K tiling (kernels/matmul.py `tiling`): few 64x64 tiles, long K; batched; a
    # pointwise convolution of a 7x7 stage on it.
    ("simaccel.dense_bias_gelu", [(256, 3072), (768, 3072), (768,)], {}),
    ("simaccel.matmul", [(2, 3, 77, 64), (2, 3, 64, 77)], {}),
    # The GEMV (at most 4 rows): a classifier, both forms of B, K not a multiple of 4 (element
    # by element loads), column tails, a decoder step's batched attention.
    ("simaccel.dense_bias_gelu", [(1, 1280), (1000, 1280), (1000,)], {}),
    ("simaccel.matmul_relu", [(3, 1283), (1283, 70)], {}),
    ("simaccel.dense", [(2, 1283), (37, 1283)], {}),
    ("simaccel.matmul_bias", [(4, 768), (768, 3075), (3075,)], {}),
    ("simaccel.matmul", [(2, 4, 1, 64), (2, 4, 64, 77)], {}),
    # The GEMV at K = 1..3 (fewer elements than a lane's load; the H200 fuzz campaign's case 28
    # had a 1x1 @ 1x2 dense), in both forms of B.
    ("simaccel.dense_bias", [(1, 1), (2, 1), (2,)], {}),
    ("simaccel.matmul", [(3, 2), (2, 33)], {}),
    ("simaccel.dense", [(4, 3), (70, 3)], {}),
    ("simaccel.conv2d_bias_relu", [(2, 320, 7, 7), (1280, 320, 1, 1), (1, 1280, 1, 1)],
     {"strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1}),
    ("simaccel.conv2d_bias_relu", [(2, 16, 33, 31), (24, 16, 3, 3), (1, 24, 1, 1)],
     {"strides": [2, 1], "padding": [1, 1, 2, 0], "dilation": [1, 2], "groups": 1}),
    ("simaccel.max_pool2d", [(2, 8, 65, 63)], {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1], "dilation": [1, 1]}),
    ("simaccel.avg_pool2d", [(2, 8, 65, 63)],
     {"pool_size": [3, 2], "strides": [2, 1], "padding": [1, 0, 1, 1], "dilation": [1, 1], "count_include_pad": False}),
    ("simaccel.softmax", [(3, 77, 1000)], {}),
    ("simaccel.layer_norm", [(3, 77, 768), (768,), (768,)], {"epsilon": 1e-5}),
    ("simaccel.add", [(4, 1, 30, 50), (7, 1, 50)], {}),
    ("simaccel.multiply", [(1000, 513), (513,)], {}),
    ("simaccel.gelu", [(1000, 513)], {}),
    # The PyTorch ISA: attention's batched matmuls, MobileNet's depthwise convolution, the rest.
    ("simaccel.matmul", [(2, 4, 77, 64), (2, 4, 64, 77)], {}),
    ("simaccel.matmul_bias", [(8, 1, 100, 33), (1, 3, 33, 70), (70,)], {}),
    ("simaccel.conv2d_bias", [(2, 96, 57, 55), (96, 1, 3, 3), (1, 96, 1, 1)],
     {"strides": [2, 2], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 96}),
    ("simaccel.conv2d", [(1, 32, 20, 20), (64, 8, 3, 3)], {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 4}),
    # The grouped kernel (kernels/conv2d_grouped.py): 5x5 and 7x7 depthwise, ResNeXt's groups of
    # 4 and of 16 channels, a channel multiplier with strides, dilation and asymmetric padding.
    ("simaccel.conv2d_bias_relu", [(2, 48, 29, 31), (48, 1, 5, 5), (1, 48, 1, 1)],
     {"strides": [1, 1], "padding": [2, 2, 2, 2], "dilation": [1, 1], "groups": 48}),
    ("simaccel.conv2d_bias", [(2, 40, 30, 27), (40, 1, 7, 7), (1, 40, 1, 1)],
     {"strides": [1, 1], "padding": [3, 3, 3, 3], "dilation": [1, 1], "groups": 40}),
    ("simaccel.conv2d_relu", [(2, 128, 23, 25), (128, 4, 3, 3)],
     {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 32}),
    ("simaccel.conv2d", [(3, 64, 14, 14), (64, 16, 3, 3)], {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 4}),
    ("simaccel.conv2d", [(2, 24, 15, 17), (48, 1, 3, 3)], {"strides": [2, 2], "padding": [1, 0, 2, 1], "dilation": [2, 2], "groups": 24}),
    ("simaccel.clip", [(1000, 513)], {"min": 0.0, "max": 0.5}),
    ("simaccel.divide", [(300, 257), (257,)], {}),
    ("simaccel.power", [(300, 257), (257,)], {}),
    ("simaccel.silu", [(1000, 513)], {}),
    ("simaccel.gelu_tanh", [(1000, 513)], {}),
    ("simaccel.rsqrt", [(1000, 513)], {}),
    ("simaccel.broadcast_to", [(1, 30, 1)], {"shape": [4, 7, 30, 50]}),
    ("simaccel.permute_dims", [(2, 77, 12, 64)], {"axes": [0, 2, 1, 3]}),
    ("simaccel.permute_dims", [(1, 16, 2, 3, 256)], {"axes": [3, 1, 2, 0, 4]}),
    ("simaccel.strided_slice", [(3, 64, 2, 256)], {"begin": [1, 0, 0, 3], "end": [2, 64, 2, 256], "strides": [1, 2, 1, 3]}),
    ("simaccel.mean", [(8, 512, 7, 7)], {"axes": [2, 3], "keepdims": True}),
    ("simaccel.sum", [(64, 1000)], {"axes": [1], "keepdims": False}),
    ("simaccel.max", [(4, 1000, 33)], {"axes": [1], "keepdims": False}),
    ("simaccel.mean", [(8, 300, 1001)], {"axes": [1], "keepdims": False}),  # 8 threads an output, a tail
    ("simaccel.reshape", [(4, 77, 768)], {"shape": [308, 768]}),
    ("simaccel.concat", [(8, 64, 28, 28), (8, 3, 28, 28), (8, 128, 28, 28)], {"axis": 1}),
    # Large launches: elementwise and gather kernels with ILP elements per thread (>= 2^20
    # elements, tails), softmax and layer norm with a row cache (>= 1024 rows), a spatial
    # mean as row sums, the implicit-GEMM convolution at a ResNet stage (tap-major K).
    ("simaccel.add", [(3, 700, 513), (700, 1)], {}),
    ("simaccel.gelu", [(2049, 515)], {}),
    ("simaccel.clip", [(2049, 515)], {"min": -0.5, "max": 0.5}),
    ("simaccel.permute_dims", [(4, 300, 9, 101)], {"axes": [0, 2, 1, 3]}),
    ("simaccel.softmax", [(1100, 1000)], {}),
    ("simaccel.layer_norm", [(1030, 2100), (2100,), (2100,)], {"epsilon": 1e-5}),
    ("simaccel.mean", [(16, 256, 56, 56)], {"axes": [2, 3], "keepdims": True}),
    ("simaccel.conv2d_bias_relu", [(8, 64, 56, 56), (64, 64, 3, 3), (1, 64, 1, 1)],
     {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1}),
    # A 1x1 kernel with stride 2 (not pointwise: it takes the implicit GEMM, K of 256 channels).
    ("simaccel.conv2d", [(2, 256, 14, 14), (512, 256, 1, 1)], {"strides": [2, 2], "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1}),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name, shapes, attrs", KERNEL_CASES, ids=[c[0] for c in KERNEL_CASES])
def test_kernels_at_real_sizes(name, shapes, attrs, dtype):
    _check_at_real_size(name, shapes, attrs, dtype)


# Convolutions and float32 matmuls on both of their tilings, forced: 64 x 64 tiles and sliced
# K on 32 x 32 (kernels/conv2d.py and kernels/matmul.py `tiling` choose by the tile count): a
# partial channel tile (80 = 64 + 16), partial pixel tiles, strides, dilation, asymmetric
# padding; two groups of 64 channels; a 5x5 kernel; K of 33 and 100 (a K tail, several slices).
TILING_CASES = [
    ("simaccel.conv2d_bias_relu", [(8, 32, 121, 47), (80, 32, 3, 3), (1, 80, 1, 1)],
     {"strides": [2, 1], "padding": [1, 0, 2, 1], "dilation": [1, 2], "groups": 1}),
    ("simaccel.conv2d", [(8, 64, 30, 30), (128, 32, 3, 3)], {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 2}),
    ("simaccel.conv2d_relu", [(2, 48, 20, 21), (70, 48, 5, 5)], {"strides": [1, 1], "padding": [2, 2, 2, 2], "dilation": [1, 1], "groups": 1}),
    ("simaccel.dense_bias_gelu", [(300, 33), (129, 33), (129,)], {}),
    ("simaccel.matmul_relu", [(2, 100, 100), (100, 200)], {}),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("tiles", ["64x64", "sliced"])
@pytest.mark.parametrize("name, shapes, attrs", TILING_CASES, ids=[c[0] for c in TILING_CASES])
def test_both_tilings_at_real_sizes(name, shapes, attrs, tiles, dtype, monkeypatch):
    from simaccel.kernels import conv2d, matmul

    for module in (conv2d, matmul):  # 0: never sliced; past any tile count: always (where K allows)
        monkeypatch.setattr(module, "MIN_SMALL_TILES", 0 if tiles == "64x64" else 1 << 40)
    _check_at_real_size(name, shapes, attrs, dtype)


def _check_at_real_size(name, shapes, attrs, dtype):
    """Op `name`'s kernel on the GPU on random inputs of `shapes`, against its numpy reference."""
    from numba import cuda

    from simaccel.data import random_arrays
    from simaccel.kernels import KernelTarget
    from simaccel.ops import get_op

    op = get_op(name)
    arrays = random_arrays([(f"t{i}_w" if i == 1 else f"t{i}", s, dtype) for i, s in enumerate(shapes)], seed=1)
    if name in ("simaccel.rsqrt", "simaccel.divide"):  # away from 0: relative errors stay those of the op
        arrays[-1] = (np.abs(arrays[-1]) + 0.5).astype(dtype)
    if name == "simaccel.power":  # a positive base: real results
        arrays[0] = (np.abs(arrays[0]) + 0.5).astype(dtype)
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


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name", ["simaccel.dense_bias_relu", "simaccel.matmul"])
def test_matmul_main_loops_on_unaligned_operands(name, dtype):
    # The C++ main loops copy 16-byte vectors where rows are 16-byte aligned, else element by
    # element: views one element into their buffers take the second path, at real sizes.
    from numba import cuda

    from simaccel.kernels import KernelTarget
    from simaccel.ops import get_op

    op = get_op(name)
    rng = np.random.default_rng(3)
    M, K, N = 300, 256, 264
    shapes = [(M, K), (N, K) if name.startswith("simaccel.dense") else (K, N)] + [(N,)] * ("_bias" in name)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    attrs = op.all_attrs({})
    want = op.reference(*arrays, **attrs)
    stream = cuda.stream()
    views = []
    for a in arrays:
        buffer = cuda.to_device(np.concatenate([np.zeros(1, dtype), a.reshape(-1)]), stream=stream)
        views.append(buffer[1:].reshape(a.shape))  # 4 or 2 bytes past an aligned address
    out = cuda.device_array((M, N), dtype=dtype)
    op.kernel(KernelTarget("cuda", stream), out, *views, **attrs)
    got = out.copy_to_host(stream=stream)
    stream.synchronize()
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name, shapes, attrs", [("simaccel.softmax", [(2048, 1024)], {}),
                                                 ("simaccel.layer_norm", [(2048, 1024), (1024,), (1024,)], {"epsilon": 1e-5}),
                                                 ("simaccel.softmax", [(4096, 64)], {}),
                                                 ("simaccel.layer_norm", [(4096, 64), (64,), (64,)], {"epsilon": 1e-5}),
                                                 ("simaccel.softmax", [(64, 20000)], {}),
                                                 ("simaccel.sum", [(512, 4096)], {"axes": [1], "keepdims": False})],
                         ids=str)
def test_row_kernels_on_views_off_the_vector_alignment(name, shapes, attrs, dtype):
    # The row kernels move 16-byte vectors where every array is 16-byte aligned, else elements
    # (kernels/vector.py): each array in turn one element into its buffer, at real sizes.
    from numba import cuda

    from simaccel.kernels import KernelTarget
    from simaccel.ops import get_op

    op = get_op(name)
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    attrs = op.all_attrs(attrs)
    want = op.reference(*arrays, **attrs)
    shape, out_dtype = op.infer([a.shape for a in arrays], [dtype] * len(arrays), **attrs)
    stream = cuda.stream()

    def off(a):
        buffer = cuda.to_device(np.concatenate([np.zeros(1, a.dtype), a.reshape(-1)]), stream=stream)
        return buffer[1:].reshape(a.shape)

    for moved in range(len(arrays) + 1):  # which array is off the alignment (len: the output)
        inputs = [off(a) if i == moved else cuda.to_device(a, stream=stream) for i, a in enumerate(arrays)]
        out = off(np.zeros(shape, out_dtype)) if moved == len(arrays) else cuda.device_array(shape, dtype=out_dtype)
        op.kernel(KernelTarget("cuda", stream), out, *inputs, **attrs)
        got = out.copy_to_host(stream=stream)
        stream.synchronize()
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", ["bool", "int8", "float64", "int64"])
@pytest.mark.parametrize("name, inputs, attrs", [("simaccel.relu", 1, {}), ("simaccel.clip", 1, {"min": 0.0, "max": 1.0}),
                                                 ("simaccel.add", 2, {}), ("simaccel.softmax", 1, {}),
                                                 ("simaccel.sum", 1, {"axes": [1], "keepdims": False})],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_vector_copies_of_every_element_size(name, inputs, attrs, dtype):
    # Arrays outside the ISA's dtypes (Programs a user or the sanitizer builds) take the vector
    # copies too: 1-byte elements (bool's byte through numba's data model) and 32-byte vectors
    # (four float64s as two 16-byte accesses); test_aot checks the instructions, this the values.
    from numba import cuda

    from simaccel.kernels import KernelTarget
    from simaccel.ops import get_op

    op = get_op(name)
    rng = np.random.default_rng(5)
    # int8 values in -1..1: sums of a row stay far inside int8 (wrapping is not the question here).
    scale = 1 if dtype == "int8" else 3
    values = [rng.standard_normal((512, 1024)) * scale for _ in range(inputs)]
    arrays = [(v if dtype == "float64" else np.rint(v).clip(-scale, scale)).astype(dtype) for v in values]
    attrs = op.all_attrs(attrs)
    want = op.reference(*arrays, **attrs)
    stream = cuda.stream()
    out = cuda.device_array(want.shape, dtype=want.dtype)
    op.kernel(KernelTarget("cuda", stream), out, *[cuda.to_device(a, stream=stream) for a in arrays], **attrs)
    got = out.copy_to_host(stream=stream)
    stream.synchronize()
    if dtype == "float64" or name in ("simaccel.softmax", "simaccel.sum"):
        # float32 arithmetic inside: a sum's error scales with the sum of its terms' magnitudes
        atol = 4 * np.finfo(np.float32).eps * max(np.abs(a.astype(np.float64)).sum(axis=-1).max() for a in arrays)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-5, atol=atol)
    else:
        np.testing.assert_array_equal(got, want)


# float16 GEMMs whose tiles, K slices and rows are partial, in both forms of B, batched and
# broadcast: on the H200 the cubin's main loop is wgmma (sm_90a), its accumulator layout and
# shared-memory descriptors differ from mma.sync's, and a wrong one is wrong only in places.
TENSOR_CORE_SHAPES = [
    ("simaccel.matmul", [(300, 40), (40, 200)]),  # K: one partial slice; M, N: partial tiles
    ("simaccel.matmul", [(256, 1000), (1000, 384)]),  # K = 31 slices + a tail of 8
    ("simaccel.matmul", [(129, 17), (17, 130)]),  # rows of 34 bytes: the element-load path
    ("simaccel.matmul_bias_relu", [(3, 130, 64), (3, 64, 257), (257,)]),
    ("simaccel.matmul", [(2, 1, 70, 96), (1, 3, 96, 136)]),  # broadcast batch dims
    ("simaccel.dense_bias", [(300, 1000), (200, 1000), (200,)]),
    ("simaccel.dense", [(65, 24), (129, 24)]),
    ("simaccel.dense_bias_gelu", [(512, 4096), (1024, 4096), (1024,)]),
    ("simaccel.dense", [(7, 9, 33), (250, 33)]),
    # 128 x 256 tiles (kernels.tensor_core.width: at least MIN_WIDE_TILES of them, N > 128)
    ("simaccel.matmul", [(2000, 72), (72, 3000)]),  # K: a slice of 64 and a tail of 8; M, N tails
    ("simaccel.dense_bias_gelu", [(2100, 1000), (2900, 1000), (2900,)]),
    ("simaccel.matmul", [(2049, 33), (33, 2050)]),  # rows of 66 bytes: the element-load path
    ("simaccel.dense", [(2100, 45), (2300, 45)]),  # the same, the dense form
    ("simaccel.matmul_bias_relu", [(16, 300, 64), (16, 64, 1000), (1000,)]),  # batched
    ("simaccel.matmul", [(4, 1, 257, 96), (1, 8, 96, 520)]),  # broadcast batch dims
]


def _tensor_core_case(name, shapes, seed):
    from simaccel.ops import get_op

    op = get_op(name)
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1, 1, s).astype("float16") for s in shapes]
    attrs = op.all_attrs({})
    want = op.reference(*[a.astype(np.float64) for a in arrays], **attrs)
    return op, arrays, attrs, want


def _assert_tensor_core_close(got, want, shapes, err_msg=""):
    """Within float16's rounding of sums of K products of numbers within [-1, 1]."""
    scale = np.sqrt(shapes[0][-1])
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-2, atol=2e-3 * scale, err_msg=err_msg)


@pytest.mark.parametrize("name, shapes", TENSOR_CORE_SHAPES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(TENSOR_CORE_SHAPES)])
def test_float16_tensor_core_matmuls_on_partial_tiles(name, shapes):
    """Numba's own compile on this GPU (sm_90a on an H100/H200): every element of the output
    against float64 numpy, within float16's rounding of sums of up to 4096 products."""
    from numba import cuda

    from simaccel.kernels import KernelTarget

    op, arrays, attrs, want = _tensor_core_case(name, shapes, 5)
    shape, _ = op.infer([a.shape for a in arrays], ["float16"] * len(arrays), **attrs)
    stream = cuda.stream()
    out = cuda.device_array(shape, dtype="float16")
    op.kernel(KernelTarget("cuda", stream), out, *[cuda.to_device(a, stream=stream) for a in arrays], **attrs)
    got = out.copy_to_host(stream=stream)
    stream.synchronize()
    _assert_tensor_core_close(got, want, shapes)


def test_native_float16_tensor_core_matmuls_on_partial_tiles(clean_runtime, tmp_path):
    """The same GEMMs in one native library: the cubins simaccel.aot links for sm_90 (sm_90a's
    wgmma main loop), launched from C++ on TVM's tensors."""
    import tvm

    from simaccel.aot import toolchain_missing
    from simaccel.native.source import NativeRegion

    from simaccel.tvm_integration.tools.deploy import prepare_cuda

    reason = toolchain_missing()
    if reason:
        pytest.skip(reason)
    from native_support import region_library

    prepare_cuda()  # a runtime-only TVM run on its own: TVM's CUDA device API
    programs = {f"tc{i}": one_op_program(name, shapes, "float16") for i, (name, shapes) in enumerate(TENSOR_CORE_SHAPES)}
    library, _ = region_library([NativeRegion(s, p) for s, p in programs.items()], tmp_path)
    for i, (name, shapes) in enumerate(TENSOR_CORE_SHAPES):
        _, arrays, _, want = _tensor_core_case(name, shapes, 5)
        tensors = [tvm.runtime.tensor(a, tvm.cuda(0)) for a in arrays]
        got = tvm.runtime.tensor(np.zeros(want.shape, "float16"), tvm.cuda(0))
        library[f"tc{i}"](*tensors, got)
        _assert_tensor_core_close(got.numpy(), want, shapes, f"{name} {shapes}")


# -- the fault classes on the GPU: aliasing, special values, bounded memory, threads -----------------
def one_op_program(name, shapes, dtype, attrs=None):
    """A Program running op `name` alone on inputs of `shapes`."""
    from simaccel.ops import get_op
    from simaccel.program import OpNode, Program, TensorSpec

    op = get_op(name)
    attrs = attrs or {}
    out, _ = op.infer(shapes, [dtype] * len(shapes), **op.all_attrs(attrs))
    tensors = tuple(TensorSpec(f"t{i}", tuple(s), dtype) for i, s in enumerate([*shapes, out]))
    return Program(name.split(".")[1], tensors, tuple(range(len(shapes))), (len(shapes),),
                   (OpNode(name, tuple(range(len(shapes))), len(shapes), attrs),))


def specials(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    mask = rng.random(shape) < 0.25
    x[mask] = rng.choice(np.array([np.nan, np.inf, -np.inf], np.float32), size=int(mask.sum()))
    return x.astype(dtype)


POOL = {"pool_size": [3, 3], "strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1]}
EMPTY_WINDOWS = {"pool_size": [1, 1], "strides": [2, 2], "padding": [1, 1, 1, 1], "dilation": [1, 1]}
SPECIAL_PROGRAMS = [
    ("simaccel.relu", [(4, 33)], {}),
    ("simaccel.gelu", [(4, 33)], {}),
    ("simaccel.add", [(3, 4, 5), (4, 1)], {}),
    ("simaccel.multiply", [(3, 5), (3, 5)], {}),
    ("simaccel.softmax", [(6, 300)], {}),
    ("simaccel.layer_norm", [(5, 300), (300,), (300,)], {"epsilon": 1e-5}),
    ("simaccel.max_pool2d", [(1, 3, 9, 9)], POOL),
    ("simaccel.max_pool2d", [(1, 3, 3, 3)], EMPTY_WINDOWS),
    ("simaccel.avg_pool2d", [(1, 3, 3, 3)], {**EMPTY_WINDOWS, "count_include_pad": False}),
    ("simaccel.dense_bias_relu", [(70, 65), (66, 65), (66,)], {}),
    ("simaccel.conv2d_bias_relu", [(1, 3, 9, 9), (4, 3, 3, 3), (1, 4, 1, 1)],
     {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1}),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name, shapes, attrs", SPECIAL_PROGRAMS, ids=[f"{c[0]}-{i}" for i, c in enumerate(SPECIAL_PROGRAMS)])
def test_cuda_engine_equals_ref_on_nan_inf_and_empty_windows(clean_runtime, name, shapes, attrs, dtype):
    import tvm

    from compare import assert_same

    program = one_op_program(name, shapes, dtype, attrs)
    arrays = [specials(s, dtype, i) for i, s in enumerate(shapes)]
    out_spec = program.tensors[-1]
    want = np.empty(out_spec.shape, dtype)
    with clean_runtime.use_engine("ref"):
        clean_runtime.run(program, *arrays, want)
    tensors = [tvm.runtime.tensor(a, tvm.cuda(0)) for a in arrays]
    got = tvm.runtime.tensor(np.zeros(out_spec.shape, dtype), tvm.cuda(0))
    clean_runtime.run(program, *tensors, got)
    assert_same(got.numpy(), want, dtype)


def test_aliased_output_on_the_gpu(clean_runtime):
    import tvm

    program = one_op_program("simaccel.matmul", [(64, 64), (64, 64)], "float32")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 64, 64)).astype(np.float32)
    xt, wt = tvm.runtime.tensor(x, tvm.cuda(0)), tvm.runtime.tensor(w, tvm.cuda(0))
    clean_runtime.run(program, xt, wt, xt)  # the output is the input's own memory
    np.testing.assert_allclose(xt.numpy(), x @ w, rtol=1e-4, atol=1e-4)
    assert clean_runtime.ledger.snapshot()["bytes"] == {**ZERO, "device_to_device": x.nbytes}


@pytest.mark.device_alone
def test_evicted_plans_give_device_memory_back():
    import tvm
    from numba import cuda

    from simaccel.program import OpNode, Program, TensorSpec
    from simaccel.runtime import Runtime
    from simaccel.tvm_integration.tools.deploy import prepare_cuda

    prepare_cuda()  # a runtime-only TVM run on its own: TVM's CUDA device API
    shape = (1, 1 << 22)  # 16 MiB of float32
    runtime = Runtime(max_plans=2)
    x = tvm.runtime.tensor(np.ones(shape, np.float32), tvm.cuda(0))
    y = tvm.runtime.tensor(np.zeros(shape, np.float32), tvm.cuda(0))

    def chain(i):  # relu -> gelu: one 16 MiB intermediate per plan
        specs = tuple(TensorSpec(n, shape, "float32") for n in ("x", "h", "y"))
        return Program(f"chain{i}", specs, (0,), (2,), (OpNode("simaccel.relu", (0,), 1), OpNode("simaccel.gelu", (1,), 2)))

    def free_bytes():  # of GPU 0, whatever context an earlier test left current on this thread
        with cuda.gpus[0]:
            cuda.synchronize()
            return cuda.current_context().get_memory_info()[0]

    for i in range(12):
        runtime.run(chain(i), x, y)
        if i == 2:
            start = free_bytes()
    assert len(runtime._plans) == 2
    assert free_bytes() >= start - (32 << 20), "evicted plans kept their device memory"
    np.testing.assert_allclose(y.numpy()[0, :4], 0.8413447, rtol=1e-5)


def test_threads_creating_their_first_vms_at_once_on_the_gpu(clean_runtime):
    import tvm

    from simaccel.tvm_integration.tools.deploy import runtime_only

    if runtime_only():
        pytest.skip("builds in-process: needs the full TVM")
    from tvm import relax

    from simaccel.tvm_integration import build, build_tvm_only, default_target
    from simaccel.tvm_integration.tools.models import demo_cnn, random_inputs

    mod = demo_cnn(batch=2)
    arrays = random_inputs(mod)
    target = default_target("cuda")
    want = relax.VirtualMachine(build_tvm_only(mod, target), tvm.cuda(0))["main"](
        *[tvm.runtime.tensor(a, tvm.cuda(0)) for a in arrays]).numpy()
    executable = build(mod, target)
    start, errors = threading.Barrier(4), []

    def work():
        try:
            tensors = [tvm.runtime.tensor(a, tvm.cuda(0)) for a in arrays]
            start.wait()
            vm = relax.VirtualMachine(executable, tvm.cuda(0))
            for _ in range(25):
                np.testing.assert_allclose(vm["main"](*tensors).numpy(), want, rtol=1e-4, atol=1e-4)
        except BaseException as e:  # reported below
            errors.append(e)

    pool = [threading.Thread(target=work) for _ in range(4)]
    [t.start() for t in pool]
    [t.join() for t in pool]
    assert not errors, errors[:1]


def test_tvm_cuda_and_cpu_builds_differ_on_nan_in_max_pooling():
    """A fact about TVM that simaccel's docs rely on: its CUDA max pooling (fmaxf) drops NaN,
    its CPU build (a select on acc > v) keeps a NaN no later tap replaces; simaccel follows the CPU."""
    from simaccel.tvm_integration.tools.deploy import runtime_only

    if runtime_only():
        pytest.skip("builds in-process: needs the full TVM")
    import tvm
    from tvm import relax

    from simaccel.tvm_integration import build_tvm_only, default_target

    x = relax.Var("x", relax.TensorType((1, 1, 1, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.max_pool2d(x, (1, 2), strides=(1, 2)))
        bb.emit_func_output(out)
    data = np.array([[[[3.0, np.nan, np.nan, 3.0]]]], np.float32)
    results = {}
    for device in ("cpu", "cuda"):
        dev = tvm.device(device, 0)
        vm = relax.VirtualMachine(build_tvm_only(bb.get(), default_target(device)), dev)
        results[device] = vm["main"](tvm.runtime.tensor(data, dev)).numpy().ravel()
    assert np.isnan(results["cpu"][0]) and results["cpu"][1] == 3.0
    assert results["cuda"].tolist() == [3.0, 3.0]


# -- native regions: CUDA graphs, deployment without simaccel, special values, aliasing ------------
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


@pytest.fixture(scope="module")
def native_specials(tmp_path_factory):
    """One native library, compiled here, holding every special-value Program in both dtypes
    and a matmul whose output may alias its input."""
    from simaccel.aot import toolchain_missing
    from simaccel.native.source import NativeRegion

    from simaccel.tvm_integration.tools.deploy import prepare_cuda

    reason = toolchain_missing()
    if reason:
        pytest.skip(reason)
    from native_support import region_library

    prepare_cuda()  # a runtime-only TVM run on its own: TVM's CUDA device API
    programs = {f"s{i}_{dtype}": one_op_program(name, shapes, dtype, attrs)
                for i, (name, shapes, attrs) in enumerate(SPECIAL_PROGRAMS) for dtype in ("float32", "float16")}
    programs["alias"] = one_op_program("simaccel.matmul", [(64, 64), (64, 64)], "float32")
    library, _ = region_library([NativeRegion(s, p) for s, p in programs.items()], tmp_path_factory.mktemp("specials"))
    return library, programs


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_native_regions_equal_ref_on_nan_inf_and_empty_windows(clean_runtime, native_specials, dtype):
    import tvm

    from compare import assert_same

    library, programs = native_specials
    for i, (name, shapes, attrs) in enumerate(SPECIAL_PROGRAMS):
        program = programs[f"s{i}_{dtype}"]
        arrays = [specials(s, dtype, i) for i, s in enumerate(shapes)]
        want = np.empty(program.tensors[-1].shape, dtype)
        with clean_runtime.use_engine("ref"):
            clean_runtime.run(program, *arrays, want)
        tensors = [tvm.runtime.tensor(a, tvm.cuda(0)) for a in arrays]
        got = tvm.runtime.tensor(np.zeros(want.shape, dtype), tvm.cuda(0))
        library[f"s{i}_{dtype}"](*tensors, got)
        assert_same(got.numpy(), want, dtype)


def test_native_aliased_output_on_the_gpu(clean_runtime, native_specials):
    import tvm

    library, _ = native_specials
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 64, 64)).astype(np.float32)
    xt, wt = tvm.runtime.tensor(x, tvm.cuda(0)), tvm.runtime.tensor(w, tvm.cuda(0))
    library["alias"](xt, wt, xt)  # the output is the input's own memory
    np.testing.assert_allclose(xt.numpy(), x @ w, rtol=1e-4, atol=1e-4)
    assert clean_runtime.ledger.snapshot()["bytes"] == {**ZERO, "device_to_device": x.nbytes}
