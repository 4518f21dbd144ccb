"""simaccel.kernels on the Numba CUDA simulator ("sim" target) against the op registry's
numpy references.

Every registered op is run through `op.kernel` on tiny shapes (the simulator runs one Python
thread per CUDA thread), including sizes that are not multiples of the matmul tile and
float16 inputs, and compared with `op.reference`. Launches go through a recording target
that also checks each launch passes only views of the caller's arrays (no host copies).
"""

from __future__ import annotations

import numpy as np
import pytest
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from simaccel.kernels import KernelTarget
from simaccel.kernels.activation import ACTIVATIONS, apply_activation
from simaccel.ops import get_op, list_ops

DTYPES = ("float32", "float16")
TOL = {"float32": dict(rtol=1e-4, atol=1e-4), "float16": dict(rtol=2e-2, atol=2e-2)}


class RecordingTarget(KernelTarget):
    """The "sim" target, recording every launch's grid, block and arguments."""

    def __init__(self):
        super().__init__("sim")
        self.launches = []

    def launch(self, fn, grid, block, *args, shared_bytes=0):
        self.launches.append((fn, grid, block, args))
        super().launch(fn, grid, block, *args, shared_bytes=shared_bytes)


def _random(rng, shape, dtype, scale=1.0):
    return np.asarray(rng.standard_normal(shape) * scale).astype(dtype)


def run_op(name, arrays, attrs=None, *, expected_launches=1):
    """Run op `name` on the simulator; return (kernel output, reference output)."""
    op = get_op(name)
    attrs = op.all_attrs(attrs or {})
    assert op.takes(len(arrays)), (name, op.inputs)
    shape, dtype = op.infer([a.shape for a in arrays], [str(a.dtype) for a in arrays], **attrs)
    originals = [a.copy() for a in arrays]
    # Fill with NaN so any output element the kernel fails to write shows up.
    out = np.full(shape, np.nan, dtype=dtype)
    target = RecordingTarget()
    launches = op.kernel(target, FakeCUDAArray(out), *[FakeCUDAArray(a) for a in arrays], **attrs)
    assert launches == expected_launches == len(target.launches)
    for _, _, _, args in target.launches:
        for arg in args:
            if isinstance(arg, FakeCUDAArray):
                # Only no-copy views of the caller's arrays may reach a kernel.
                assert any(np.shares_memory(arg._ary, a) for a in (out, *arrays)), name
            else:
                assert isinstance(arg, (int, float)), (name, type(arg))
    for a, orig in zip(arrays, originals):
        np.testing.assert_array_equal(a, orig)  # inputs are left alone
    ref = op.reference(*arrays, **attrs)
    assert ref.shape == out.shape and ref.dtype == out.dtype
    return out, ref


def check(name, arrays, attrs=None, *, expected_launches=1):
    out, ref = run_op(name, arrays, attrs, expected_launches=expected_launches)
    assert not np.isnan(out).any(), f"{name}: kernel left output elements unwritten"
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), **TOL[str(out.dtype)])
    return out, ref


# ---------------------------------------------------------------------------------------
# matmul / dense: 12 op variants


MATMUL_OPS = [
    f"simaccel.{kind}{bias}{act}"
    for kind in ("matmul", "dense")
    for bias in ("", "_bias")
    for act in ("", "_relu", "_gelu")
]

# (data shape, N): rank 2..4, single-block shapes; K > 16 (two K slices: in float32 the sliced
# tiling, test_matmul_crosses_block_tiles forces 64 x 64 ones too) somewhere.
MATMUL_SHAPES = [((3, 5), 7), ((2, 3, 17), 5), ((2, 1, 4, 9), 3), ((1, 1), 1)]


def _matmul_inputs(name, data_shape, n, dtype, rng, bias_2d=False):
    transpose_b = name.startswith("simaccel.dense")
    k = data_shape[-1]
    arrays = [_random(rng, data_shape, dtype), _random(rng, (n, k) if transpose_b else (k, n), dtype)]
    if "_bias" in name:
        arrays.append(_random(rng, (1, n) if bias_2d else (n,), dtype))
    return arrays


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", MATMUL_OPS)
def test_matmul_ops(name, dtype):
    idx = MATMUL_OPS.index(name)
    data_shape, n = MATMUL_SHAPES[idx % len(MATMUL_SHAPES)]
    rng = np.random.default_rng(idx)
    arrays = _matmul_inputs(name, data_shape, n, dtype, rng, bias_2d=idx % 2 == 1)
    out, ref = check(name, arrays)
    if "_relu" in name:
        assert (out >= 0).all() and (out.size < 8 or (out == 0).any())


@pytest.mark.parametrize(
    "name,data_shape,n,dtype",
    [
        ("simaccel.matmul_bias_gelu", (17, 20), 17, "float32"),  # 2 K slices, K tail
        ("simaccel.dense_bias_relu", (2, 9, 20), 18, "float32"),  # 18 rows x 18 cols
        ("simaccel.dense", (17, 33), 3, "float16"),  # 3 K slices
    ],
)
def test_matmul_multi_tile(name, data_shape, n, dtype):
    rng = np.random.default_rng(7)
    check(name, _matmul_inputs(name, data_shape, n, dtype, rng, bias_2d=True))


# Shapes that cross the 64x64 block tile and the 16-deep K slice (tails everywhere), and the
# degenerate K = 1, M = 1, N = 1; both weight layouts, both dtypes, with and without
# bias/activation. Rows 65..70 and columns 65..67 put 1..6 valid rows/columns in the second
# block, so every thread's 4x4 micro-tile is partly out of bounds somewhere.
@pytest.mark.parametrize(
    "name,data_shape,n,dtype",
    [
        ("simaccel.matmul", (70, 17), 67, "float32"),
        ("simaccel.dense", (65, 17), 67, "float16"),
        ("simaccel.matmul_bias_gelu", (2, 35, 33), 65, "float16"),  # rank 3: 70 rows, 3 K slices
        ("simaccel.dense_bias_relu", (66, 17), 70, "float32"),
        ("simaccel.matmul_bias", (70, 1), 67, "float16"),  # K = 1
        ("simaccel.dense_relu", (67, 1), 65, "float32"),  # K = 1
        ("simaccel.matmul_gelu", (1, 17), 67, "float32"),  # M = 1
        ("simaccel.dense_bias", (1, 1, 20), 66, "float16"),  # M = 1, rank 3
        ("simaccel.matmul_relu", (70, 17), 1, "float16"),  # N = 1
        ("simaccel.dense_bias_gelu", (65, 18), 1, "float32"),  # N = 1
    ],
)
@pytest.mark.parametrize("tiles", ["as chosen", "64x64 forced"])
def test_matmul_crosses_block_tiles(name, data_shape, n, dtype, tiles, monkeypatch):
    """Each on the tiling its shape takes (in float32 the sliced one for most: few tiles), and
    with 64 x 64 tiles forced (several K slices, tails)."""
    from simaccel.kernels import matmul as matmul_kernels

    if tiles == "64x64 forced":
        monkeypatch.setattr(matmul_kernels, "MIN_SMALL_TILES", 0)
    rng = np.random.default_rng(11)
    out, _ = check(name, _matmul_inputs(name, data_shape, n, dtype, rng, bias_2d=data_shape[0] == 1))
    if "_relu" in name:
        assert (out >= 0).all() and (out == 0).any()


@pytest.mark.parametrize("name", ["simaccel.matmul_bias", "simaccel.dense_relu"])
def test_matmul_row_tiles_beyond_grid_y(name, monkeypatch):
    # With gridDim.y capped at 2, 3 row tiles (130 rows) take two launches: tiles 0-1, then 2.
    from simaccel.kernels import matmul as matmul_kernels

    monkeypatch.setattr(matmul_kernels, "_MAX_GRID_Y", 2)
    rng = np.random.default_rng(12)
    check(name, _matmul_inputs(name, (130, 3), 5, "float32", rng), expected_launches=2)


# (data shape, weight shape): both batched, batch dims broadcast both ways (attention's Q @ K^T).
BATCHED_CASES = [((2, 3, 5), (2, 5, 4)), ((3, 5), (2, 5, 4)), ((2, 1, 3, 5), (1, 3, 5, 4)), ((4, 3, 17), (1, 17, 2)),
                 ((2, 2, 70, 3), (2, 2, 3, 66))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["simaccel.matmul", "simaccel.matmul_bias_relu"])
@pytest.mark.parametrize("data_shape,weight_shape", BATCHED_CASES, ids=str)
def test_matmul_with_a_batched_weight(name, data_shape, weight_shape, dtype):
    rng = np.random.default_rng(13)
    arrays = [_random(rng, data_shape, dtype), _random(rng, weight_shape, dtype)]
    if "_bias" in name:
        arrays.append(_random(rng, (weight_shape[-1],), dtype))
    out, _ = check(name, arrays)
    want = np.matmul(arrays[0].astype(np.float64), arrays[1].astype(np.float64))
    if "_bias" not in name:
        np.testing.assert_allclose(out.astype(np.float64), want, **TOL[dtype])


LARGE_TILE_CASES = [("simaccel.matmul_bias_relu", (130, 9), 131, "float32"), ("simaccel.dense_gelu", (2, 70, 17), 129, "float32"),
                    ("simaccel.matmul", (5, 1), 1, "float32")]


@pytest.mark.parametrize("name,data_shape,n,dtype", LARGE_TILE_CASES, ids=str)
def test_matmul_large_tiles(name, data_shape, n, dtype, monkeypatch):
    # Real sizes choose 128x128 tiles (8x8 outputs per thread); here they are forced on shapes
    # the simulator runs quickly: a tile tail in M, N and K, a K slice of 8 crossed twice.
    from simaccel.kernels import matmul as matmul_kernels

    monkeypatch.setattr(matmul_kernels, "MIN_LARGE_TILES", 0)
    target = PlanOnlyTarget()
    arrays = _matmul_inputs(name, data_shape, n, dtype, np.random.default_rng(15), bias_2d=False)
    op = get_op(name)
    out = np.empty(op.infer([a.shape for a in arrays], [dtype] * len(arrays), **op.all_attrs({}))[0], dtype)
    op.kernel(target, FakeCUDAArray(out), *map(FakeCUDAArray, arrays), **op.all_attrs({}))
    assert target.launches[0][0] is matmul_kernels._KERNELS["dense" in name, True]
    check(name, arrays)


# The sliced-K tiling: 32x32 tiles, K split over four groups of the block's threads. Tails in
# M and N (1..31 valid rows / columns of the last tile), K not a multiple of the 16-deep slice
# nor of 4 (the element-by-element loads), K past 4 slices (every group has a second round),
# M = 5 (the fewest rows past the GEMV) and N = 1, both forms of B, batched weights, bias and activation.
SLICED_CASES = [("simaccel.matmul", (33, 64), 35, None), ("simaccel.dense_bias_relu", (2, 20, 130), 33, None),
                ("simaccel.matmul_bias_gelu", (5, 97), 65, None), ("simaccel.dense", (40, 66), 1, None),
                ("simaccel.matmul_relu", (2, 3, 5, 70), 7, (2, 3, 70, 7))]


# The GEMV tiling: 4 x 8 tiles for matrices of 1..4 rows. Column tails (1..7 valid columns, and
# a tail inside a run of 4), K below one warp's stride, K not a multiple of 4, K past several
# strides, both forms of B, a row count folded from batch dims, batched weights (a decoder
# step's attention), bias and activations.
GEMV_CASES = [("simaccel.dense", (1, 1280), 37, None), ("simaccel.matmul_bias_relu", (3, 5), 13, None),
              ("simaccel.dense_bias_gelu", (2, 2, 301), 8, None), ("simaccel.matmul", (4, 515), 70, None),
              ("simaccel.matmul_relu", (2, 3, 1, 70), 7, (2, 3, 70, 7)), ("simaccel.dense_bias", (1, 64), 1, None),
              # K = 1..3: fewer elements than one lane's load (the H200 campaign's 1x1 @ 1x2 dense)
              ("simaccel.dense_bias", (1, 1), 2, None), ("simaccel.matmul", (3, 2), 33, None),
              ("simaccel.dense", (4, 3), 70, None)]


@pytest.mark.parametrize("tiling,name,data_shape,n,weight_shape",
                         [("sliced", *c) for c in SLICED_CASES] + [("gemv", *c) for c in GEMV_CASES], ids=str)
def test_matmul_shared_tile_tilings(tiling, name, data_shape, n, weight_shape):
    from simaccel.kernels import matmul as matmul_kernels

    rng = np.random.default_rng(17)
    arrays = _matmul_inputs(name, data_shape, n, "float32", rng)
    if weight_shape is not None:
        arrays[1] = _random(rng, weight_shape, "float32")
    op = get_op(name)
    target = PlanOnlyTarget()
    out = np.empty(op.infer([a.shape for a in arrays], ["float32"] * len(arrays), **op.all_attrs({}))[0], np.float32)
    op.kernel(target, FakeCUDAArray(out), *map(FakeCUDAArray, arrays), **op.all_attrs({}))
    assert [fn for fn, *_ in target.launches] == [matmul_kernels._SHARED_TILE_KERNELS[tiling, "dense" in name]]
    check(name, arrays)


def test_the_sliced_tiling_crosses_grid_y(monkeypatch):
    from simaccel.kernels import matmul as matmul_kernels

    monkeypatch.setattr(matmul_kernels, "_MAX_GRID_Y", 2)
    rng = np.random.default_rng(18)
    check("simaccel.dense_bias", _matmul_inputs("simaccel.dense_bias", (70, 64), 5, "float32", rng),
          expected_launches=2)  # 3 row tiles of 32: tiles 0-1, then 2


def test_the_tiling_follows_the_tiles_a_launch_fills():
    from simaccel.kernels.matmul import MIN_SLICED_K, tiling

    assert tiling(4096, 4096, 4096, 1) == "large"
    assert tiling(1280, 49, 320, 1) == "sliced"  # a 7x7 stage's pointwise convolution: 20 small tiles
    assert tiling(256, 768, 3072, 1) == "sliced"  # 48 small tiles
    assert tiling(256, 2304, 768, 1) == "sliced"  # 144
    assert tiling(1024, 1024, 1024, 1) == "small"  # 256
    assert tiling(1280, 49, MIN_SLICED_K - 1, 1) == "small"  # one K slice: nothing to split
    assert tiling(48, 784, 48, 1) == "sliced"  # a batch-1 pointwise convolution of 48 channels
    assert tiling(64, 64, 512, 200) == "large"  # batches count as tiles
    assert tiling(1, 1000, 1280, 1) == "gemv"  # a classifier
    assert tiling(4, 4096, 4096, 1) == "gemv" and tiling(5, 4096, 4096, 1) != "gemv"
    assert tiling(1, 64, 64, 100000) == "gemv"  # a decoder step's attention, many heads


def test_batched_matmul_large_tiles_beyond_grid_z(monkeypatch):
    from simaccel.kernels import matmul as matmul_kernels

    monkeypatch.setattr(matmul_kernels, "MIN_LARGE_TILES", 0)
    monkeypatch.setattr(matmul_kernels, "_MAX_GRID_Z", 4)
    rng = np.random.default_rng(16)
    check("simaccel.matmul", [_random(rng, (3, 2, 3, 9), "float32"), _random(rng, (1, 2, 9, 5), "float32")],
          expected_launches=2)  # 6 matrices: 4, then 2


def test_batched_matmul_beyond_grid_z(monkeypatch):
    # With gridDim.z capped at 2, 5 matrices take three launches (2, 2 and 1 matrices).
    from simaccel.kernels import matmul as matmul_kernels

    monkeypatch.setattr(matmul_kernels, "_MAX_GRID_Z", 2)
    rng = np.random.default_rng(14)
    check("simaccel.matmul", [_random(rng, (5, 3, 4), "float32"), _random(rng, (5, 4, 2), "float32")], expected_launches=3)


# float16 matmuls run on the tensor-core kernel (kernels/tensor_core.py); on the simulator its
# C++ main loop is stood in for by a numpy model that fills each thread's accumulators in the
# C++ layout, so the kernel around it (batch offsets, fragment positions, epilogue) runs here.
TENSOR_CORE_CASES = [
    ("simaccel.dense_bias_relu", (130, 40), 131, None),  # 2 x 2 tiles with 2- and 3-wide tails
    ("simaccel.matmul_gelu", (129, 3), 130, None),  # K < 8
    ("simaccel.matmul_bias", (2, 5, 33), 9, None),  # batch dims folded into rows
    ("simaccel.matmul", (3, 2, 17), 5, (1, 3, 17, 5)),  # batched weight, broadcast batch dim
    ("simaccel.matmul_bias_relu", (3, 2, 9), 130, (3, 9, 130)),  # batched weight, two column tiles
    ("simaccel.dense_gelu", (131, 70), 259, None),  # two row and two 256-wide column tiles, tails
    ("simaccel.matmul_bias", (2, 3, 33), 257, (2, 33, 257)),  # batched, a 1-wide column tail
]


@pytest.mark.parametrize("wide", [False, True], ids=["128x128", "128x256"])
@pytest.mark.parametrize("name,data_shape,n,weight_shape", TENSOR_CORE_CASES, ids=str)
def test_float16_matmul_on_the_tensor_core_kernel(name, data_shape, n, weight_shape, wide, monkeypatch):
    # Both tile widths on every case: the 128 x 256 tiles only where a GEMM has MIN_WIDE_TILES
    # of them and N > 128 (sizes the simulator cannot run), so here from one tile on.
    from simaccel.kernels import tensor_core

    if wide:
        monkeypatch.setattr(tensor_core, "MIN_WIDE_TILES", 1)
    rng = np.random.default_rng(21)
    arrays = _matmul_inputs(name, data_shape, n, "float16", rng)
    if weight_shape is not None:
        arrays[1] = _random(rng, weight_shape, "float16")
    target = PlanOnlyTarget()
    op = get_op(name)
    out = np.empty(op.infer([a.shape for a in arrays], ["float16"] * len(arrays), **op.all_attrs({}))[0], np.float16)
    op.kernel(target, FakeCUDAArray(out), *map(FakeCUDAArray, arrays), **op.all_attrs({}))
    [(fn, grid, block, _)] = target.launches
    bn = 256 if wide and n > 128 else 128
    assert fn is tensor_core.KERNELS[name.startswith("simaccel.dense"), bn] and tuple(block) == (tensor_core.THREADS,)
    assert grid[0] == -(-n // bn)
    check(name, arrays)


@pytest.mark.parametrize("bn", [128, 256])
def test_the_gpu_partial_tile_gemms_cover_each_tile_width(bn):
    # tests/test_gpu.py's float16 GEMMs on partial tiles (JIT and native) reach both kernels.
    from simaccel.launch_plan import plan_launches

    from test_gpu import TENSOR_CORE_SHAPES, one_op_program

    used = {launch.kernel.__name__ for name, shapes in TENSOR_CORE_SHAPES
            for launch in plan_launches(one_op_program(name, shapes, "float16"))}
    assert {f"_matmul_tensor_core_kernel_{bn}", f"_dense_tensor_core_kernel_{bn}"} <= used


def test_float16_tile_width_follows_the_gemm():
    from simaccel.kernels.tensor_core import MIN_WIDE_TILES, width

    assert width(4096, 4096, 1) == 256  # 512 tiles of 128 x 256
    assert width(1024, 1024, 1) == 128  # 32 wide tiles would leave most SMs idle
    assert width(128, 4096, MIN_WIDE_TILES // 16) == 256 and width(128, 4096, MIN_WIDE_TILES // 16 - 1) == 128
    assert width(1 << 20, 128, 1) == 128  # N fits one 128-wide tile


@pytest.mark.parametrize("bn", [128, 256])
def test_tensor_core_accumulators_cover_the_tile_once(bn):
    # The map from (thread, accumulator) to the tile's element, shared by the epilogue and the
    # simulator model (and written out in tensor_core.cu), is a bijection onto the 128 x bn tile.
    from collections import Counter

    from simaccel.kernels.tensor_core import BM, THREADS, accumulators, fragment_position

    seen = Counter(fragment_position(i, t % 32, t // 32, bn) for t in range(THREADS) for i in range(accumulators(bn)))
    assert set(seen.values()) == {1} and set(seen) == {(r, c) for r in range(BM) for c in range(bn)}


def test_tensor_core_stage_buffers_fit_every_target():
    # The dynamic shared memory of each tile width and main loop fits the most a block may have
    # where it runs: sm_90a (227 KiB), sm_80/87 (163 KiB), sm_86/89/120 (99 KiB); none below sm_80.
    from simaccel.kernels.tensor_core import WIDTHS, dynamic_shared_bytes

    most = {(9, 0, "a"): 232448, (8, 0): 166912, (8, 6): 101376, (8, 9): 101376, (9, 0): 232448, (12, 0): 101376}
    for bn in WIDTHS:
        assert dynamic_shared_bytes(bn, (7, 5)) == 0
        for target, limit in most.items():
            assert 48 * 1024 < dynamic_shared_bytes(bn, target) <= limit, (bn, target)
        assert dynamic_shared_bytes(bn, (9, 0, "a")) > dynamic_shared_bytes(bn, (9, 0))  # wgmma's 64-deep slices


@pytest.mark.parametrize("name", ["simaccel.matmul", "simaccel.dense"])
def test_matmul_float16_accumulates_in_float32(name):
    # sum = 2048 + 63 * 1: exact in float32 (2111 -> 2112 in float16), but a float16
    # accumulator gets stuck at 2048 (2048 + 1 rounds back to 2048).
    k = 64
    data = np.ones((1, k), np.float16)
    weight = np.ones((1, k) if name.endswith("dense") else (k, 1), np.float16)
    weight.reshape(-1)[0] = 2048
    out, ref = check(name, [data, weight])
    assert out[0, 0] == np.float16(2112) == ref[0, 0]


# ---------------------------------------------------------------------------------------
# conv2d: 4 op variants

CONV_OPS = ["simaccel.conv2d", "simaccel.conv2d_bias", "simaccel.conv2d_relu", "simaccel.conv2d_bias_relu"]

# (data shape, weight shape, strides, padding (top, left, bottom, right), dilation, groups)
CONV_CASES = [
    ((1, 3, 5, 6), (4, 3, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((2, 2, 7, 6), (3, 2, 3, 2), (2, 1), (1, 0, 2, 1), (1, 2), 1),
    ((1, 3, 6, 5), (2, 3, 1, 1), (1, 2), (0, 0, 0, 0), (1, 1), 1),
    ((1, 1, 6, 6), (5, 1, 2, 3), (3, 2), (2, 1, 0, 1), (2, 1), 1),
    ((2, 4, 6, 5), (4, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 4),  # depthwise (MobileNet)
    ((1, 6, 5, 5), (4, 3, 3, 2), (1, 1), (1, 0, 1, 1), (1, 1), 2),  # two groups of 3 channels
    ((1, 3, 5, 5), (6, 1, 2, 2), (1, 1), (0, 0, 0, 0), (2, 2), 3),  # depthwise, 2 outputs per channel
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", CONV_OPS)
def test_conv2d_ops(name, dtype):
    idx = CONV_OPS.index(name)
    rng = np.random.default_rng(100 + idx)
    for case, (dshape, wshape, strides, padding, dilation, groups) in enumerate(CONV_CASES):
        arrays = [_random(rng, dshape, dtype), _random(rng, wshape, dtype, scale=0.5)]
        if "_bias" in name:
            o = wshape[0]
            arrays.append(_random(rng, (1, o, 1, 1) if case % 2 == 0 else (o, 1, 1), dtype))
        out, _ = check(name, arrays, dict(strides=strides, padding=padding, dilation=dilation, groups=groups))
        if "_relu" in name:
            assert (out >= 0).all()


# Convolutions with at least MIN_GEMM_CHANNELS output channels (a full 64-channel tile per group
# where grouped: conv2d.uses_implicit_gemm) run as an implicit GEMM (channels inner: the C++ K loop, sliced at these sizes): channel tails (17 of 64 rows), pixel tiles crossed
# (100 pixels), K not a multiple of the slice (27, 18, 5), strides, asymmetric padding,
# dilation, two groups, a 1x1 convolution (a plain GEMM over pixels); the last three with
# channels per group a multiple of the K slice (16), where K runs channels fastest.
GEMM_CONV_CASES = [
    ((1, 3, 6, 7), (17, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((2, 4, 9, 7), (128, 2, 3, 3), (2, 1), (1, 0, 2, 1), (1, 2), 2),
    ((1, 5, 9, 8), (16, 5, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((1, 2, 10, 10), (20, 2, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((1, 16, 6, 5), (17, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((2, 32, 8, 8), (128, 16, 3, 3), (1, 1), (1, 0, 2, 1), (1, 2), 2),
    ((1, 32, 4, 5), (20, 32, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
]


def _conv_inputs(name, case, dtype, rng):
    dshape, wshape, strides, padding, dilation, groups = case
    arrays = [_random(rng, dshape, dtype), _random(rng, wshape, dtype, scale=0.5)]
    if "_bias" in name:
        arrays.append(_random(rng, (1, wshape[0], 1, 1), dtype))
    return arrays, dict(strides=strides, padding=padding, dilation=dilation, groups=groups)


@pytest.mark.parametrize("tiles", ["as chosen", "64x64 forced"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(GEMM_CONV_CASES)))
def test_conv2d_as_implicit_gemm(case, dtype, tiles, monkeypatch):
    """Each case on the kernel its shape takes (these small images: the sliced 32 x 32 tiles
    where K is channels inner and long enough), and with 64 x 64 tiles forced."""
    from simaccel.kernels import conv2d as conv_kernels

    if tiles == "64x64 forced":
        monkeypatch.setattr(conv_kernels, "MIN_SMALL_TILES", 0)

    name = CONV_OPS[case % len(CONV_OPS)]
    arrays, attrs = _conv_inputs(name, GEMM_CONV_CASES[case], dtype, np.random.default_rng(400 + case))
    target = PlanOnlyTarget()
    op = get_op(name)
    out = np.empty(op.infer([a.shape for a in arrays], [dtype] * len(arrays), **op.all_attrs(attrs))[0], dtype)
    op.kernel(target, FakeCUDAArray(out), *map(FakeCUDAArray, arrays), **op.all_attrs(attrs))
    channels_inner = GEMM_CONV_CASES[case][1][1] % 16 == 0
    (kernel,) = [fn for fn, *_ in target.launches]
    if conv_kernels.is_pointwise(arrays[1].shape, attrs["strides"], attrs["padding"], attrs["groups"]):
        assert kernel.__name__.startswith("_matmul_")  # a pointwise conv: the matmul kernels, bias in the epilogue
    else:
        N, _, _, _ = arrays[0].shape
        O, CG, KH, KW = arrays[1].shape
        P = out.shape[2] * out.shape[3]
        groups = attrs["groups"]
        if channels_inner and conv_kernels.tiling(O // groups, P, CG * KH * KW, N * groups) == "sliced":
            assert kernel is conv_kernels._SLICED_KERNELS[dtype] and tiles == "as chosen"
        else:
            assert kernel is conv_kernels._GEMM_KERNELS[(True, dtype) if channels_inner else (False, None)]
    check(name, arrays, attrs)


def _random_conv(rng):
    """A random valid conv2d (data, weight shapes and attributes) for the kernel tests."""
    while True:
        groups = int(rng.choice([1, 1, 2, 3]))
        cg = int(rng.choice([1, 3, 16, 17, 32]))
        og = int(rng.choice([1, 5, 16, 20, 33]))
        kh, kw = (int(k) for k in rng.integers(1, 4, 2))
        strides = tuple(int(v) for v in rng.integers(1, 3, 2))
        dilation = tuple(int(v) for v in rng.integers(1, 3, 2))
        padding = tuple(int(v) for v in rng.integers(0, 3, 4))
        h, w = (int(v) for v in rng.integers(1, 10, 2))
        dshape, wshape = (int(rng.integers(1, 3)), cg * groups, h, w), (og * groups, cg, kh, kw)
        attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups)
        try:
            get_op("simaccel.conv2d").infer([dshape, wshape], ["float32"] * 2, **get_op("simaccel.conv2d").all_attrs(attrs))
        except Exception:
            continue
        return dshape, wshape, attrs


@pytest.mark.parametrize("seed", range(8))
def test_conv2d_random_shapes(seed):
    """Random convolutions of every kind the launcher tells apart (direct; implicit GEMM with
    K channel-major or tap-major; channel and pixel tails; groups), each against its reference."""
    rng = np.random.default_rng(900 + seed)
    for _ in range(3):
        dshape, wshape, attrs = _random_conv(rng)
        name = CONV_OPS[int(rng.integers(len(CONV_OPS)))]
        arrays = [_random(rng, dshape, "float32"), _random(rng, wshape, "float32", scale=0.5)]
        if "_bias" in name:
            arrays.append(_random(rng, (1, wshape[0], 1, 1), "float32"))
        check(name, arrays, attrs)


@pytest.mark.parametrize("out_channels, size, gemm", [(16, 4, True), (15, 4, False), (64, 3, False)])
def test_conv2d_kernel_choice(out_channels, size, gemm):
    # The implicit GEMM from 16 output channels (ungrouped) and 16 output pixels per image;
    # below either the grouped kernel (kernels/conv2d_grouped.py, tests/test_conv2d_grouped.py).
    from simaccel.kernels import conv2d as conv_kernels

    op = get_op("simaccel.conv2d")
    # (3x3, padded: a 1x1 convolution would take the matmul kernels, `is_pointwise`)
    attrs = op.all_attrs(dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1))
    data, weight = np.zeros((2, 3, size, size), np.float32), np.zeros((out_channels, 3, 3, 3), np.float32)
    target = PlanOnlyTarget()
    out = np.zeros((2, out_channels, size, size), np.float32)
    op.kernel(target, FakeCUDAArray(out), FakeCUDAArray(data), FakeCUDAArray(weight), **attrs)
    [(fn, *_)] = target.launches
    if gemm:
        assert fn is conv_kernels._GEMM_KERNELS[False, None]
    else:
        assert fn.__name__.startswith("_conv2d_grouped_kernel_"), fn.__name__


def test_conv2d_implicit_gemm_beyond_the_grid_caps(monkeypatch):
    # 70 output channels: two row tiles of 64 in two launches (gridDim.y capped at 1); 2
    # images x 1 group in two more (gridDim.z capped at 1): four launches, one output.
    from simaccel.kernels import conv2d as conv_kernels

    monkeypatch.setattr(conv_kernels, "_MAX_GRID_YZ", 1)
    case = ((2, 3, 4, 5), (70, 3, 2, 2), (1, 1), (1, 0, 0, 1), (1, 1), 1)
    arrays, attrs = _conv_inputs("simaccel.conv2d_bias_relu", case, "float32", np.random.default_rng(410))
    check("simaccel.conv2d_bias_relu", arrays, attrs, expected_launches=4)


@pytest.mark.parametrize("out_channels", [4, 16], ids=["grouped", "implicit-gemm"])
def test_conv2d_padding_is_a_zero_multiplied_like_any_input(out_channels):
    # An infinite weight tap that meets padding (the top-left tap of a 2x2 kernel on a 1-pixel
    # pad, in output row 0 and column 0): 0 * inf is NaN there, as in TVM; elsewhere inf.
    data = np.ones((1, 1, 7, 7), np.float32)
    weight = np.ones((out_channels, 1, 2, 2), np.float32)
    weight[:, 0, 0, 0] = np.inf
    attrs = dict(strides=(2, 2), padding=(1, 1, 0, 0), dilation=(1, 1), groups=1)
    out, ref = run_op("simaccel.conv2d", [data, weight], attrs)
    assert np.isnan(ref[:, :, 0, 0]).all()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(out[~np.isnan(out)], ref[~np.isnan(ref)])


# ---------------------------------------------------------------------------------------
# pooling

# (data shape, pool_size, strides, padding, dilation)
POOL_CASES = [
    ((1, 2, 4, 6), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1)),
    ((2, 1, 5, 7), (3, 2), (1, 2), (1, 1, 1, 0), (1, 2)),
    ((1, 2, 5, 5), (3, 3), (2, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 1, 7, 5), (2, 3), (3, 1), (0, 2, 1, 2), (2, 1)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_max_pool2d(case, dtype):
    dshape, pool_size, strides, padding, dilation = POOL_CASES[case]
    rng = np.random.default_rng(200 + case)
    # All-negative data: a kernel that let padded zeros into the max would be caught.
    data = -np.abs(_random(rng, dshape, dtype)) - np.array(0.5, dtype)
    attrs = dict(pool_size=pool_size, strides=strides, padding=padding, dilation=dilation)
    out, ref = check("simaccel.max_pool2d", [data], attrs)
    np.testing.assert_array_equal(out, ref)  # max is exact
    assert (out < 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_avg_pool2d(case, count_include_pad, dtype):
    dshape, pool_size, strides, padding, dilation = POOL_CASES[case]
    rng = np.random.default_rng(300 + case)
    data = _random(rng, dshape, dtype) + np.array(2.0, dtype)  # positive: padding visibly matters
    attrs = dict(pool_size=pool_size, strides=strides, padding=padding, dilation=dilation,
                 count_include_pad=count_include_pad)
    check("simaccel.avg_pool2d", [data], attrs)


@pytest.mark.parametrize("window", [((3, 3), (2, 2), (1, 1, 1, 1), (1, 1)), ((2, 2), (2, 2), (0, 0, 1, 1), (1, 1)),
                                    ((3, 2), (1, 2), (2, 1, 0, 1), (2, 1))], ids=str)
def test_pooling_inside_and_on_the_border_agree_with_tvm(window):
    # Images large enough that most windows lie inside (the unchecked, unrolled taps) and the
    # border's do not; NaNs inside and on the border, (5, 6) and (5, 7) the last tap of an
    # inside window in each case (a NaN kept): max pooling keeps TVM's order exactly.
    pool_size, strides, padding, dilation = window
    rng = np.random.default_rng(11)
    data = _random(rng, (2, 2, 11, 13), "float32")
    data[0, 0, 4, 5] = data[0, 1, 0, 0] = data[1, 0, 10, 6] = data[1, 1, 5, 12] = np.nan
    data[1, 0, 5, 6] = data[1, 0, 5, 7] = np.nan
    attrs = dict(pool_size=pool_size, strides=strides, padding=padding, dilation=dilation)
    out, ref = run_op("simaccel.max_pool2d", [data], attrs)
    np.testing.assert_array_equal(out, ref)
    assert np.isnan(ref).any() and not np.isnan(ref).all()
    for include in (True, False):
        out, ref = run_op("simaccel.avg_pool2d", [data], {**attrs, "count_include_pad": include})
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


def test_avg_pool2d_count_include_pad_differs():
    # A corner window of a padded all-ones input: 1 (in-bounds only) vs 4/9 (window area).
    data = np.ones((1, 1, 3, 3), np.float32)
    attrs = dict(pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))
    excl, _ = check("simaccel.avg_pool2d", [data], {**attrs, "count_include_pad": False})
    incl, _ = check("simaccel.avg_pool2d", [data], {**attrs, "count_include_pad": True})
    np.testing.assert_allclose(excl, 1.0, rtol=1e-6)
    assert incl[0, 0, 0, 0] == pytest.approx(4 / 9) and incl[0, 0, 1, 1] == pytest.approx(1.0)


# Large launches give each thread ILP elements (a block apart, all loaded before any is
# stored); forced here on sizes that leave partial chunks: 2 blocks of 256 x 8 and a tail.
ILP_CASES = [("simaccel.add", [(3, 1500), (1500,)], {}), ("simaccel.multiply", [(4100,), ()], {}),
             ("simaccel.gelu", [(4111,)], {}), ("simaccel.clip", [(2, 2053)], {"min": -0.5, "max": 0.5}),
             ("simaccel.permute_dims", [(7, 9, 65)], {"axes": [2, 0, 1]}), ("simaccel.broadcast_to", [(1, 600)],
                                                                              {"shape": [7, 600]}),
             # A thread's next elements step along the innermost dim from its first one's
             # indices: an innermost dim of 1500 with a stride-0 operand (the step adds 0 to it),
             # and one of 9, shorter than a block (every step divides again), rank 4.
             ("simaccel.subtract", [(2, 3, 5, 300), (3, 1, 1)], {}), ("simaccel.divide", [(3, 5, 7, 9), (5, 1, 9)], {}),
             # Lengths a multiple of 4: the vector copies (a bias along rows of 48, broadcast
             # into vectors; a clip; a relu with the NaN rule).
             ("simaccel.add", [(2, 4, 6, 8), (4, 1, 1)], {}), ("simaccel.clip", [(2, 2052)], {"min": -0.5, "max": 0.5}),
             ("simaccel.relu", [(4112,)], {})]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, shapes, attrs", ILP_CASES, ids=[c[0] for c in ILP_CASES])
def test_elementwise_kernels_with_several_elements_per_thread(name, shapes, attrs, dtype, monkeypatch):
    from simaccel.kernels import elementwise

    monkeypatch.setattr(elementwise, "MIN_ILP_TOTAL", 0)
    assert elementwise.per_thread(5) == elementwise.ILP
    rng = np.random.default_rng(21)
    arrays = [_random(rng, s, dtype) for s in shapes]
    if name in ("simaccel.relu", "simaccel.clip"):  # TVM's NaN rules (0, and max), in both copies
        arrays[0].reshape(-1)[[3, 700]] = np.nan
    check(name, arrays, attrs)


# (op, input shapes, attrs, the misplaced arrays with which the vector copy still runs): the
# innermost collapsed dim a multiple of 4 with each input along it or broadcast along it (one
# element a vector: its alignment does not matter); none where an input strides across it or
# the length is odd.
VECTOR_CASES = [("simaccel.add", [(3, 1500), (1500,)], {}, {None}), ("simaccel.multiply", [(4100,), ()], {}, {None, -1}),
                ("simaccel.subtract", [(2, 3, 5, 300), (3, 1, 1)], {}, {None, -1}),
                ("simaccel.add", [(5, 1, 7), (1, 4, 7)], {}, set()), ("simaccel.divide", [(3, 5, 7, 12), (5, 1, 12)], {}, {None}),
                ("simaccel.relu", [(4112,)], {}, {None}), ("simaccel.gelu", [(4111,)], {}, set()),
                ("simaccel.clip", [(2, 2052)], {"min": -0.5, "max": 0.5}, {None}),
                ("simaccel.broadcast_to", [(1, 600)], {"shape": [7, 600]}, {None})]


@pytest.mark.parametrize("misplaced", [None, 0, -1, "out"])
@pytest.mark.parametrize("name, shapes, attrs, vector", VECTOR_CASES, ids=[f"{c[0]}{c[1]}" for c in VECTOR_CASES])
def test_elementwise_vector_copies_only_on_aligned_arrays(name, shapes, attrs, vector, misplaced, monkeypatch):
    """Large launches move 4 elements per access where the shapes allow and every array read
    or written in vectors is 16-byte aligned (the simulator's stand-ins check each access the
    GPU would fault on); an array off the alignment (an input or the output, a view into a
    larger buffer) takes the element copy, with the same results."""
    from simaccel.kernels import elementwise, vector as vector_module

    monkeypatch.setattr(elementwise, "MIN_ILP_TOTAL", 0)
    taken = []
    check_vector = vector_module._check_vector
    monkeypatch.setattr(vector_module, "_check_vector", lambda array, index, count: (count > 1 and taken.append(count))
                        or check_vector(array, index, count))
    rng = np.random.default_rng(5)
    arrays = [_random(rng, s, "float32") for s in shapes]
    if misplaced in (0, -1):
        arrays[misplaced] = _misaligned(arrays[misplaced])
    op = get_op(name)
    attrs = op.all_attrs(attrs)
    shape_out, dtype = op.infer([a.shape for a in arrays], ["float32"] * len(arrays), **attrs)
    out = np.full(shape_out, np.nan, dtype)
    if misplaced == "out":
        out = _misaligned(out)
    op.kernel(RecordingTarget(), FakeCUDAArray(out), *map(FakeCUDAArray, arrays), **attrs)
    np.testing.assert_allclose(out, op.reference(*arrays, **attrs), rtol=1e-6, atol=1e-6)
    assert bool(taken) == (misplaced in vector), (taken, misplaced)


# ---------------------------------------------------------------------------------------
# softmax / layer_norm

# Row lengths 1, 5, 17, 100, 256 (grouped: 1, 8, 8, 16 (float32) or 32 lanes a row; blocks of
# 128 / lanes rows, most past the end), 300 (8 per thread in registers, some threads short of
# 8), 2100 (longer than 8 x 256: the rest read in a loop on a thread per 4 elements; a block of
# 512 cached), 1024 (a block of 128 cached).
ROW_SHAPES = [(3, 1), (2, 3, 5), (1, 1, 2, 17), (5, 100), (9, 256), (1, 300), (7,), (2, 2100), (9, 1024)]


@pytest.fixture(params=["per-element", "cached", "warp-per-row"])
def row_threads(request, monkeypatch):
    """The three ways the row kernels spread rows over threads: a block per row with one
    vector (4 elements) per thread (launches of few rows, as here) or ROW_CACHE per thread (from
    MIN_CACHED_ROWS rows, forced), and a group of lanes per row (from MIN_WARP_ROWS rows of at
    most 256, forced: softmax's and layer norm's longer rows stay on the cached block kernel,
    row sums' take a warp each from MIN_WARP_SUM_ROWS rows, forced too)."""
    from simaccel.kernels import normalization

    if request.param == "cached":
        monkeypatch.setattr(normalization, "MIN_CACHED_ROWS", 1)
    if request.param == "warp-per-row":
        monkeypatch.setattr(normalization, "MIN_CACHED_ROWS", 1)
        monkeypatch.setattr(normalization, "MIN_WARP_ROWS", 1)
        monkeypatch.setattr(normalization, "MIN_WARP_SUM_ROWS", 1)
    return request.param


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=str)
def test_softmax(shape, dtype, row_threads):
    rng = np.random.default_rng(len(shape) * 1000 + shape[-1])
    data = _random(rng, shape, dtype, scale=4.0)
    data.reshape(-1)[0] = 30.0  # exp(30) overflows float16 and stresses the max subtraction
    out, _ = check("simaccel.softmax", [data])
    np.testing.assert_allclose(out.astype(np.float32).sum(axis=-1), 1.0, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=str)
def test_layer_norm(shape, dtype, row_threads):
    rng = np.random.default_rng(len(shape) * 2000 + shape[-1])
    d = shape[-1]
    data = _random(rng, shape, dtype, scale=3.0) + np.array(5.0, dtype)  # non-zero mean
    gamma = _random(rng, (d,), dtype)
    beta = _random(rng, (d,), dtype)
    check("simaccel.layer_norm", [data, gamma, beta], dict(epsilon=1e-5))


@pytest.mark.parametrize("D", [17, 300, 2100])
def test_row_kernels_keep_nan_and_inf_as_numpy(D, row_threads):
    # NaNs, +infs, a row of -inf, -infs among finite values and a finite row, on each of the
    # three layouts (and rows of 2100 on a thread per 4 elements: the rest past the cache, where
    # softmax sums online): NaN exactly where numpy's formula gives it (whole rows: softmax's
    # first three, layer norm's first four), the same values elsewhere.
    x = _random(np.random.default_rng(9), (5, D), "float32") * 4
    x[0, [3, D - 1]], x[1, [5, D - 2]], x[2, :], x[3, [1, D - 3]] = np.nan, np.inf, -np.inf, -np.inf
    g, b = np.ones(D, np.float32), np.zeros(D, np.float32)
    for name, arrays, attrs, nan_rows in (("simaccel.softmax", [x], {}, 3),
                                          ("simaccel.layer_norm", [x, g, b], {"epsilon": 1e-5}, 4)):
        with np.errstate(invalid="ignore"):
            out, ref = run_op(name, arrays, attrs)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
        assert np.isnan(ref[:nan_rows]).all() and not np.isnan(ref[nan_rows:]).any(), name
        np.testing.assert_allclose(out[nan_rows:], ref[nan_rows:], **TOL["float32"])


def _misaligned(array, elements=1):
    """A copy of `array` whose data starts `elements` elements past a 16-byte boundary."""
    buf = np.empty(array.size + 16, array.dtype)
    skip = (-buf.ctypes.data % 16) // array.itemsize + elements
    out = buf[skip:skip + array.size].reshape(array.shape)
    out[...] = array
    return out


@pytest.mark.parametrize("misplaced", ["x", "gamma", "out"])
@pytest.mark.parametrize("shape", [(9, 256), (2, 2100), (9, 1024), (3, 64)], ids=str)
def test_row_kernels_on_arrays_off_the_vector_alignment(shape, misplaced, row_threads, monkeypatch):
    """Rows whose length is a multiple of the vector but whose arrays are not 16-byte aligned
    (a view into a larger buffer) take the element-wise loop: same results, and no vector
    access where the GPU would fault (the simulator's stand-ins check every one); aligned
    arrays take the vector loop."""
    from simaccel.kernels import vector

    taken = []
    check_vector = vector._check_vector
    monkeypatch.setattr(vector, "_check_vector", lambda array, index, count: (count > 1 and taken.append(count))
                        or check_vector(array, index, count))
    rng = np.random.default_rng(shape[-1])
    x = _random(rng, shape, "float32", scale=3.0)
    g, b = _random(rng, shape[-1:], "float32"), _random(rng, shape[-1:], "float32")
    for name, arrays, attrs in (("simaccel.softmax", [x], {}), ("simaccel.layer_norm", [x, g, b], {"epsilon": 1e-5}),
                                ("simaccel.sum", [x], {"axes": [1], "keepdims": False})):
        if misplaced == "gamma" and name != "simaccel.layer_norm":
            continue
        check(name, arrays, attrs)
        assert taken, f"{name}: aligned arrays took no vector access"
        taken.clear()
        moved = [_misaligned(a) if role == misplaced else a for role, a in zip(["x", "gamma", "beta"], arrays)]
        if misplaced == "out":  # the kernels write into a view off the alignment
            op = get_op(name)
            attrs_all = op.all_attrs(attrs)
            shape_out, dtype = op.infer([a.shape for a in arrays], ["float32"] * len(arrays), **attrs_all)
            out = _misaligned(np.full(shape_out, np.nan, dtype))
            op.kernel(RecordingTarget(), FakeCUDAArray(out), *map(FakeCUDAArray, arrays), **attrs_all)
            np.testing.assert_allclose(out, op.reference(*arrays, **attrs_all), **TOL["float32"])
        else:
            check(name, moved, attrs)
        if name != "simaccel.sum" or misplaced == "x":  # a sum writes single values: its output is not vector-written
            assert not taken, f"{name}: a vector access with {misplaced} off the alignment"
        taken.clear()


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_rows_read_their_tail_in_several_passes(dtype):
    """Rows of 6181 on a block of 256 (few rows): 2048 cached, the rest in three passes of 8
    loads a thread, the last one partial; the row max and large values in the later passes
    (softmax's online sum rescales there), and for softmax a -inf among them."""
    from simaccel.kernels import normalization

    D = 6181
    rng = np.random.default_rng(61)
    x = _random(rng, (2, D), dtype, scale=3.0)
    x[0, D - 5], x[1, 5000], x[1, D - 1] = 9.0, 8.0, 7.5
    with_inf = x.copy()
    with_inf[0, 3000] = -np.inf
    gamma, beta = _random(rng, (D,), dtype), _random(rng, (D,), dtype)
    for name, arrays, attrs, kernel in (("simaccel.softmax", [with_inf], {}, normalization._softmax_long_kernel),
                                        ("simaccel.layer_norm", [x + np.array(5.0, dtype), gamma, beta],
                                         {"epsilon": 1e-5}, normalization._layer_norm_long_kernel)):
        target = PlanOnlyTarget()
        op = get_op(name)
        op.kernel(target, FakeCUDAArray(np.empty_like(x)), *map(FakeCUDAArray, arrays), **op.all_attrs(attrs))
        assert [(fn, block) for fn, _, block, _ in target.launches] == [(kernel, 256)]
        check(name, arrays, attrs)


def test_layer_norm_unit_affine_is_normalized():
    rng = np.random.default_rng(5)
    data = _random(rng, (2, 40), "float32", scale=10.0) - 7
    out, _ = check("simaccel.layer_norm", [data, np.ones(40, np.float32), np.zeros(40, np.float32)],
                   dict(epsilon=1e-6))
    np.testing.assert_allclose(out.mean(axis=-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(out.var(axis=-1), 1.0, rtol=1e-4)


# ---------------------------------------------------------------------------------------
# elementwise

BROADCAST_CASES = [
    ((2, 3, 4), (4,)),
    ((3, 1), (1, 5)),
    ((2, 1, 3, 1), (4, 1, 1)),
    ((), (3, 2)),
    ((5,), (5,)),
    ((2, 3, 1, 2), (2, 3, 4, 2)),
    ((1, 4), (3, 2, 1, 1)),
    ((2, 1, 3, 1), (1, 4, 1, 5)),  # nothing collapses: all four dims indexed
]


BINARY_OPS = ["simaccel.add", "simaccel.subtract", "simaccel.multiply", "simaccel.divide", "simaccel.power"]
UNARY_OPS = [f"simaccel.{name}" for name in ACTIVATIONS if name != "none"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BINARY_OPS)
def test_binary(name, dtype):
    rng = np.random.default_rng(17 + BINARY_OPS.index(name))
    for lhs_shape, rhs_shape in BROADCAST_CASES:
        for a_shape, b_shape in ((lhs_shape, rhs_shape), (rhs_shape, lhs_shape)):
            a, b = _random(rng, a_shape, dtype), _random(rng, b_shape, dtype)
            if name.endswith("divide"):
                b = (np.sign(b) + (b == 0)) * (np.abs(b) + 0.5)  # away from 0: relative error stays small
            if name.endswith("power"):
                a = np.abs(a) + 0.5  # a positive base: a real result (special cases: the test below)
            check(name, [np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype)])


def test_binary_ops_are_not_commutative_by_mistake():
    a, b = np.array([6.0, 1.0], np.float32), np.array([2.0, 4.0], np.float32)
    assert run_op("simaccel.subtract", [a, b])[0].tolist() == [4.0, -3.0]
    assert run_op("simaccel.divide", [a, b])[0].tolist() == [3.0, 0.25]
    assert run_op("simaccel.power", [a, b])[0].tolist() == [36.0, 1.0]


def test_power_special_values_are_cs():
    # C's powf (TVM's, on CPU and GPU): NaN for a negative base and a fractional exponent,
    # x ** 0 = 1 and 1 ** y = 1 even for NaN, inf for 0 ** -1 and for overflow.
    a = np.array([-2.0, 0.0, 2.0, np.nan, 1.0, 10.0, -8.0], np.float32)
    b = np.array([0.5, -1.0, 3.0, 0.0, np.nan, 100.0, 3.0], np.float32)
    out, ref = run_op("simaccel.power", [a, b])
    np.testing.assert_array_equal(out, ref)
    assert np.isnan(out[0]) and out[1] == np.inf and out[3] == 1.0 and out[4] == 1.0 and out[6] == -512.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", UNARY_OPS)
@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (2, 1, 3, 4)], ids=str)
def test_unary(name, shape, dtype):
    rng = np.random.default_rng(len(shape))
    x = _random(rng, shape, dtype, scale=3.0)
    if name.endswith("sqrt"):
        x = np.asarray(np.abs(x) + 0.1, dtype=dtype)
    out, _ = check(name, [x])
    if name.endswith("relu"):
        assert (out >= 0).all()


@pytest.mark.parametrize("name", UNARY_OPS + ["simaccel.clip"])
def test_unary_special_values_match_the_reference(name):
    # NaN, infinities, zeros and large magnitudes (sigmoid must not overflow either way).
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 100.0, -100.0, -1.0, 7.0], np.float32)
    attrs = {"min": 0.0, "max": 6.0} if name.endswith("clip") else {}
    out, ref = run_op(name, [x], attrs)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-30, equal_nan=True)
    if name.endswith("clip"):  # TVM's clip: NaN -> max, like max(min(x, 6), 0) as selects
        assert out.tolist() == [6.0, 6.0, 0.0, 0.0, 0.0, 6.0, 0.0, 0.0, 6.0]
    if name.endswith("sigmoid"):
        assert out[5] == 1.0 and 0 <= out[6] < 1e-40


@pytest.mark.parametrize("dtype", DTYPES)
def test_clip(dtype):
    rng = np.random.default_rng(5)
    for low, high in ((0.0, 6.0), (-0.5, 0.25), (1.0, 1.0)):
        out, _ = check("simaccel.clip", [_random(rng, (3, 7), dtype, scale=4.0)], {"min": low, "max": high})
        assert out.min() >= np.asarray(low, dtype) and out.max() <= np.asarray(high, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,to", [((3,), (2, 3)), ((2, 1), (2, 4)), ((1, 3, 1), (2, 2, 3, 4)), ((), (2, 2)), ((4,), (4,))],
                         ids=str)
def test_broadcast_to(shape, to, dtype):
    x = _random(np.random.default_rng(1), shape, dtype)
    out, _ = check("simaccel.broadcast_to", [x], {"shape": list(to)})
    np.testing.assert_array_equal(out, np.broadcast_to(x, to))


# ---------------------------------------------------------------------------------------
# layout: views (copied when they are a region's output), permute_dims, strided_slice

VIEW_CASES = [
    ("simaccel.reshape", (2, 3, 4), (4, 6)),
    ("simaccel.expand_dims", (2, 3), (2, 1, 3)),
    ("simaccel.squeeze", (2, 1, 3, 1), (2, 3)),
    ("simaccel.flatten", (2, 3, 2), (12,)),
    ("simaccel.reshape", (1, 2, 1, 3, 1, 2), (12,)),
]


@pytest.mark.parametrize("name,shape,to", VIEW_CASES, ids=str)
def test_view_ops_copy_in_order(name, shape, to):
    x = _random(np.random.default_rng(2), shape, "float16")
    out, _ = check(name, [x], {"shape": list(to)})
    np.testing.assert_array_equal(out, x.reshape(to))


def test_a_view_of_another_size_is_refused():
    from simaccel.errors import ShapeError

    with pytest.raises(ShapeError, match=r"simaccel.reshape: cannot view data \(2, 3\) \(6 elements\) as \(4,\)"):
        get_op("simaccel.reshape").infer([(2, 3)], ["float32"], shape=[4])


PERMUTE_CASES = [((5,), [0]), ((3, 4), [1, 0]), ((2, 3, 4, 5), [0, 2, 1, 3]), ((2, 3, 4), [2, 0, 1]),
                 ((1, 3, 2, 2, 4), [3, 1, 2, 0, 4]), ((2, 1, 3, 2, 2, 3), [5, 4, 3, 2, 1, 0]), ((2, 0, 3), [2, 1, 0])]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axes", PERMUTE_CASES, ids=str)
def test_permute_dims(shape, axes, dtype):
    x = _random(np.random.default_rng(3), shape, dtype)
    out, ref = run_op("simaccel.permute_dims", [x], {"axes": axes}, expected_launches=int(x.size > 0))
    np.testing.assert_array_equal(out, np.transpose(x, axes))
    np.testing.assert_array_equal(ref, out)


def test_permute_merges_axes_that_stay_neighbours():
    from simaccel.kernels.layout import merged_dims

    # (B, H, S, D) -> (B, S, H, D): D stays contiguous, B steps over all of H*S*D.
    assert merged_dims([2, 4, 3, 8], [96, 8, 24, 1]) == ([1, 1, 2, 4, 3, 8], [0, 0, 96, 8, 24, 1])
    # The identity permutation is one flat copy.
    assert merged_dims([2, 3, 4], [12, 4, 1]) == ([1, 1, 1, 1, 1, 24], [0, 0, 0, 0, 0, 1])


# Each of the three layout kernels at sizes that leave partial tiles, chunks and lanes:
# the row copy (innermost axis kept: rows of 9, 16, 300), the tiled transpose (innermost axis
# moves: a batched 70x40 plane, NCHW -> NHWC, a 6-D one with batch dims on both sides) and the
# gather (a 3-channel NHWC -> NCHW plane, too narrow to tile).
LAYOUT_PATHS = [((3, 4, 5, 16), [0, 2, 1, 3], "_copy_rows_kernel"), ((4, 3, 9), [1, 0, 2], "_copy_rows_kernel"),
                ((3, 2, 300), [1, 0, 2], "_copy_rows_kernel"), ((2, 40, 70), [0, 2, 1], "_transpose_kernel"),
                ((2, 20, 5, 7), [0, 2, 3, 1], "_transpose_kernel"), ((2, 17, 3, 1, 2, 18), [4, 0, 3, 5, 2, 1], "_transpose_kernel"),
                ((2, 5, 7, 3), [0, 3, 1, 2], "_gather_kernel")]


@pytest.mark.parametrize("ilp", [1, 8])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axes,kernel", LAYOUT_PATHS, ids=str)
def test_permute_kernels(shape, axes, kernel, dtype, ilp, monkeypatch):
    from simaccel.kernels import elementwise

    monkeypatch.setattr(elementwise, "MIN_ILP_TOTAL", 0 if ilp == 8 else 1 << 40)
    x = _random(np.random.default_rng(7), shape, dtype)
    if dtype == "float16" and shape[-1] == 9:
        kernel = "_gather_kernel"  # 9 halves are 18 bytes: less than a sector a row
    target = RecordingTarget()
    out = np.full(tuple(shape[a] for a in axes), np.nan, dtype)
    get_op("simaccel.permute_dims").kernel(target, FakeCUDAArray(out), FakeCUDAArray(x), axes=axes)
    assert [fn.__name__ for fn, *_ in target.launches] == [kernel]
    np.testing.assert_array_equal(out, np.transpose(x, axes))


def test_layout_kernels_at_real_sizes():
    # The bench's permutes, sliced rows and concatenated rows: which kernel, and its geometry.
    from simaccel.kernels import layout

    def plan(name, shapes, attrs):
        target = PlanOnlyTarget()
        op = get_op(name)
        shape, _ = op.infer(shapes, ["float32"] * len(shapes), **op.all_attrs(attrs))
        op.kernel(target, FakeCUDAArray(np.empty(shape, np.float32)),
                  *[FakeCUDAArray(np.empty(s, np.float32)) for s in shapes], **op.all_attrs(attrs))
        return target.launches

    # (B, H, S, D) -> (B, S, H, D), D = 64: rows of 64, 8 lanes of 8 floats each, one chunk a row.
    [(fn, grid, block, args)] = plan("simaccel.permute_dims", [(64, 512, 16, 64)], {"axes": [0, 2, 1, 3]})
    assert fn is layout._copy_rows_kernel and block == 256 and args[2:8] == (64, 1, 1.0, 3, 8, 64 * 512 * 16)
    assert layout.plan_copy_rows(10, 64, "float16", 1 << 30) == (16, 8, 1)  # 16 halves a sector: 4 a lane
    # NCHW -> NHWC: a 12544 x 64 plane per image, in 32 x 64 tiles.
    [(fn, grid, block, args)] = plan("simaccel.permute_dims", [(8, 64, 112, 112)], {"axes": [0, 2, 3, 1]})
    assert fn is layout._transpose_kernel and block == (32, 8) and args[2:4] == (12544, 64)
    assert grid == 392 * 1 * 8
    [(fn, *_)] = plan("simaccel.strided_slice", [(8, 40)], {"begin": [1, 3], "end": [8, 40], "strides": [2, 1]})
    assert fn is layout._copy_rows_kernel
    assert [fn for fn, *_ in plan("simaccel.concat", [(4, 3), (4, 64)], {"axis": 1})] == [
        layout._concat_kernel, layout._copy_rows_kernel]


SLICE_CASES = [((5,), [1], [4], [1]), ((4, 6), [0, 1], [4, 6], [2, 3]), ((3, 4, 5), [1, 0, 2], [2, 4, 5], [1, 1, 2]),
               ((2, 3, 4, 2), [0, 2, 1, 0], [2, 3, 3, 2], [1, 1, 1, 1]), ((4, 4), [2, 0], [2, 4], [1, 1]),
               ((3, 5, 20), [1, 1, 3], [3, 5, 19], [1, 2, 1])]  # rows of 16 from an offset: the row copy


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,begin,end,strides", SLICE_CASES, ids=str)
def test_strided_slice(shape, begin, end, strides, dtype):
    x = _random(np.random.default_rng(4), shape, dtype)
    out, ref = run_op("simaccel.strided_slice", [x], {"begin": begin, "end": end, "strides": strides},
                      expected_launches=int(ref_size(shape, begin, end, strides) > 0))
    want = x[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))]
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(ref, want)


def ref_size(shape, begin, end, strides):
    return int(np.prod([len(range(b, e, s)) for b, e, s in zip(begin, end, strides)]))


CONCAT_CASES = [([(2, 3), (2, 1), (2, 4)], 1), ([(3,), (0,), (2,)], 0), ([(2, 3, 4), (2, 3, 4)], 0),
                ([(1, 2, 3, 1, 2, 2), (1, 2, 3, 2, 2, 2)], 3), ([(5, 7)], 1), ([(2, 0, 3), (2, 2, 3), (2, 1, 3)], 1),
                ([(3, 10), (3, 17), (3, 40)], 1)]  # rows of a sector or more: row copies


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes,axis", CONCAT_CASES, ids=str)
def test_concat(shapes, axis, dtype):
    rng = np.random.default_rng(5)
    xs = [_random(rng, shape, dtype) for shape in shapes]
    out, ref = run_op("simaccel.concat", xs, {"axis": axis}, expected_launches=sum(x.size > 0 for x in xs))
    np.testing.assert_array_equal(out, np.concatenate(xs, axis=axis))
    np.testing.assert_array_equal(ref, out)


def test_concat_refuses_shapes_numpy_would_not_join():
    from simaccel.errors import DtypeError, ShapeError

    op = get_op("simaccel.concat")
    with pytest.raises(ShapeError, match=r"simaccel.concat: data\[2\] \(2, 4\) differs from data\[0\] \(3, 4\) on an axis other than 1"):
        op.infer([(3, 4), (3, 1), (2, 4)], ["float32"] * 3, axis=1)
    with pytest.raises(ShapeError, match=r"data\[1\] \(3, 4, 1\) differs"):
        op.infer([(3, 4), (3, 4, 1)], ["float32"] * 2, axis=0)
    with pytest.raises(ShapeError, match="axis 2 is not an axis of data"):
        op.infer([(3, 4), (3, 4)], ["float32"] * 2, axis=2)
    with pytest.raises(DtypeError, match=r"data\[0\]=float32, data\[1\]=float16"):
        op.infer([(3, 4), (3, 4)], ["float32", "float16"], axis=0)


def test_a_slice_out_of_bounds_is_refused():
    from simaccel.errors import ShapeError

    with pytest.raises(ShapeError, match="axis 1: slice 2:5:1 is not within 0..4"):
        get_op("simaccel.strided_slice").infer([(3, 4)], ["float32"], begin=[0, 2], end=[3, 5], strides=[1, 1])


# ---------------------------------------------------------------------------------------
# reductions

# Sums and means over the innermost axes run one block per output: rows shorter and longer
# (300) than a block, and longer (2100) than the ROW_CACHE x 256 values a block loads per pass.
REDUCTION_CASES = [((3, 7), [1], False), ((2, 3, 4, 5), [2, 3], True), ((2, 3, 4), [0], False),
                   ((2, 3, 4), [0, 1, 2], False), ((4, 1, 3), [1, 2], True), ((2, 3, 4, 2, 2), [1, 2, 3], False),
                   ((2, 3, 300), [2], True), ((2, 2100), [1], False),
                   ((3, 19, 5), [1], False)]  # 8 loads at a time, then a tail of 3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["simaccel.sum", "simaccel.mean", "simaccel.max"])
@pytest.mark.parametrize("shape,axes,keepdims", REDUCTION_CASES, ids=str)
def test_reductions(name, shape, axes, keepdims, dtype):
    x = _random(np.random.default_rng(6), shape, dtype)
    out, _ = check(name, [x], {"axes": axes, "keepdims": keepdims})
    numpy_fn = {"sum": np.sum, "mean": np.mean, "max": np.max}[name.split(".")[1]]
    want = numpy_fn(x.astype(np.float64), axis=tuple(axes), keepdims=keepdims)
    np.testing.assert_allclose(out.astype(np.float64), want, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["simaccel.sum", "simaccel.mean"])
@pytest.mark.parametrize("shape,axes", [((2, 128, 5), [1]), ((3, 203, 40), [1]), ((37, 11, 17), [0, 1]),
                                        ((2, 300, 1, 3), [1, 2])], ids=str)
def test_sums_of_few_outputs_split_over_slices(name, shape, axes, dtype):
    """Few outputs over long reductions: SLICES threads an output (whole batches of 8 loads,
    a tail, a block's outputs across two outer indices, 2 x 3 outputs of a 256-thread
    block), a NaN and an infinity in separate slices."""
    from simaccel.kernels import reduction

    x = _random(np.random.default_rng(7), shape, dtype)
    target = PlanOnlyTarget()
    op = get_op(name)
    attrs = op.all_attrs({"axes": axes, "keepdims": False})
    op.kernel(target, FakeCUDAArray(np.empty(np.sum(x, axis=tuple(axes)).shape, dtype)), FakeCUDAArray(x), **attrs)
    assert [fn for fn, *_ in target.launches] == [reduction._split_reduction_kernel]
    out, _ = check(name, [x], {"axes": axes, "keepdims": False})
    numpy_fn = {"sum": np.sum, "mean": np.mean}[name.split(".")[1]]
    np.testing.assert_allclose(out.astype(np.float64), numpy_fn(x.astype(np.float64), axis=tuple(axes)), **TOL[dtype])
    flat = x.reshape(-1)
    flat[0], flat[-1] = np.nan, np.inf
    out, ref = run_op(name, [x], {"axes": axes, "keepdims": False})
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(ref))


def test_reductions_of_nothing_and_of_nan_are_tvms():
    empty = np.zeros((2, 0, 3), np.float32)
    assert run_op("simaccel.sum", [empty], {"axes": [1], "keepdims": False})[0].tolist() == [[0.0] * 3] * 2
    assert np.isnan(run_op("simaccel.mean", [empty], {"axes": [1], "keepdims": False})[0]).all()
    lowest = np.finfo(np.float32).min  # TVM's start value for max, not -inf
    assert (run_op("simaccel.max", [empty], {"axes": [1], "keepdims": False})[0] == lowest).all()
    x = np.array([[np.nan, 1.0, 2.0], [1.0, np.nan, 0.5], [1.0, 2.0, np.nan]], np.float32)
    out, ref = run_op("simaccel.max", [x], {"axes": [1], "keepdims": False})
    # A running `acc if acc > v else v`: a NaN survives only if no later element replaces it.
    np.testing.assert_array_equal(out, ref)
    assert out[0] == 2.0 and out[1] == 0.5 and np.isnan(out[2])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["simaccel.sum", "simaccel.mean"])
@pytest.mark.parametrize("shape,axes", [((3, 7), [1]), ((2, 3, 4, 5), [2, 3]), ((4, 1, 3), [1, 2]), ((5, 256), [1]),
                                        ((3, 100), [1]), ((3, 257), [1]), ((2, 1100), [1]), ((2, 4, 16, 33), [2, 3]),
                                        ((3, 1536), [1])], ids=str)
def test_row_sums_on_groups_of_lanes(name, shape, axes, dtype, monkeypatch):
    # Many short rows (a global average pool's 7 x 7) take a group of lanes each, many longer
    # ones a warp each, in passes of 8 values a lane (a partial last pass, an element loop
    # where the length is odd, whole passes at 1536 = 6 x 256): forced here.
    from simaccel.kernels import normalization

    monkeypatch.setattr(normalization, "MIN_WARP_ROWS", 1)
    monkeypatch.setattr(normalization, "MIN_WARP_SUM_ROWS", 1)
    x = _random(np.random.default_rng(8), shape, dtype)
    target = PlanOnlyTarget()
    out = np.empty(np.sum(x, axis=tuple(axes)).shape, dtype)
    op = get_op(name)
    op.kernel(target, FakeCUDAArray(out), FakeCUDAArray(x), **op.all_attrs({"axes": axes, "keepdims": False}))
    assert [fn for fn, *_ in target.launches] == [normalization._ROW_SUM_ROWS]
    out, _ = check(name, [x], {"axes": axes, "keepdims": False})
    numpy_fn = {"sum": np.sum, "mean": np.mean}[name.split(".")[1]]
    np.testing.assert_allclose(out.astype(np.float64), numpy_fn(x.astype(np.float64), axis=tuple(axes)), **TOL[dtype])


def test_max_keeps_tvms_nan_order_across_its_batches_of_loads():
    # 19 values a column, loaded 8 at a time: a NaN replaced by the next value (in a batch, at
    # a batch's end, in the tail), or kept when it is the last.
    x = np.arange(2 * 19 * 4, dtype=np.float32).reshape(2, 19, 4)[:, ::-1].copy()
    x[0, 3, 0] = x[0, 7, 1] = x[1, 15, 2] = x[1, 18, 3] = np.nan
    out, ref = run_op("simaccel.max", [x], {"axes": [1], "keepdims": False})
    np.testing.assert_array_equal(out, ref)
    assert out[0, 0] == x[0, 4, 0] and out[0, 1] == x[0, 8, 1] and out[1, 2] == x[1, 16, 2] and np.isnan(out[1, 3])


def test_a_reduction_over_axes_that_are_not_neighbours_is_refused():
    from simaccel.errors import ShapeError

    with pytest.raises(ShapeError, match=r"axes \[0, 2\] are not neighbours"):
        get_op("simaccel.sum").infer([(2, 3, 4)], ["float32"], axes=[0, 2], keepdims=False, reduction="sum")


@pytest.mark.parametrize(
    "a_shape,b_shape,nd",
    [((2, 3, 4), (2, 3, 4), 1), ((), (3, 2), 1), ((2, 3, 4), (4,), 2), ((1, 4), (3, 2, 1, 1), 2),
     ((2, 3, 1, 2), (2, 3, 4, 2), 3), ((2, 1, 3, 1), (1, 4, 1, 5), 4)],
)
def test_binary_collapses_dims(a_shape, b_shape, nd):
    # Same shapes run as one flat loop, a bias add as two dims: checked on the launch args.
    target = PlanOnlyTarget()
    a, b = np.zeros(a_shape, np.float32), np.zeros(b_shape, np.float32)
    out = np.zeros(np.broadcast_shapes(a_shape, b_shape), np.float32)
    add = get_op("simaccel.add")
    add.kernel(target, FakeCUDAArray(out), FakeCUDAArray(a), FakeCUDAArray(b), **add.all_attrs({}))
    (_, _, _, args), = target.launches
    assert args[3] == nd


def test_divmod_fast():
    # The index helper of the elementwise and pooling kernels (float64 quotient estimate).
    from simaccel.kernels.elementwise import divmod_fast

    rng = np.random.default_rng(3)
    for d in (1, 2, 3, 7, 16, 17, 1000, 65535, 3 * 2**20 + 1):
        ns = list(range(0, min(2 * d + 3, 200))) + [d * k + e for k in (10**6, 2**30 + 1) for e in (-1, 0, 1)]
        ns += [int(v) for v in rng.integers(0, 2**48, 200)]
        for n in ns:
            assert tuple(int(v) for v in divmod_fast(n, d, 1.0 / d)) == divmod(n, d), (n, d)


def test_apply_activation_scalar():
    # Plain Python on the simulator: the same helper the kernels call.
    assert apply_activation(-2.0, ACTIVATIONS["relu"]) == 0.0
    assert apply_activation(-2.0, ACTIVATIONS["none"]) == np.float32(-2.0)
    assert apply_activation(1.0, ACTIVATIONS["gelu"]) == pytest.approx(0.8413447460685429, rel=1e-6)
    assert isinstance(apply_activation(1.0, ACTIVATIONS["gelu"]), np.float32)


# ---------------------------------------------------------------------------------------
# coverage and launcher checks


def test_every_op_has_a_kernel_test():
    tested = set(MATMUL_OPS) | set(CONV_OPS) | set(BINARY_OPS) | set(UNARY_OPS) | {name for name, _, _ in VIEW_CASES} | {
        "simaccel.max_pool2d", "simaccel.avg_pool2d", "simaccel.softmax", "simaccel.layer_norm", "simaccel.clip",
        "simaccel.broadcast_to", "simaccel.permute_dims", "simaccel.strided_slice", "simaccel.sum", "simaccel.mean",
        "simaccel.max", "simaccel.concat",
    }
    from test_mask_ops import mask_kernel_ops  # the mask and index ops' kernels: tests/test_mask_ops.py

    assert set(list_ops()) == tested | mask_kernel_ops()


class PlanOnlyTarget(KernelTarget):
    """Records launches without running them (for checking launch geometry cheaply)."""

    def __init__(self):
        super().__init__("sim")
        self.launches = []

    def launch(self, fn, grid, block, *args, shared_bytes=0):
        self.launches.append((fn, grid, block, args))


def test_launch_shapes():
    # matmul: a grid of block tiles covering (N, rows), 16x16 threads per block: 128x128 tiles
    # where there are at least MIN_LARGE_TILES of them, else 64x64; gridDim.y capped at 65535
    # (the kernel loops over the remaining row tiles); one weight: one matrix (gridDim.z 1),
    # data's batch dims folded into rows
    from simaccel.kernels import matmul as matmul_kernels

    op = get_op("simaccel.dense")
    small, large = matmul_kernels._KERNELS[True, False], matmul_kernels._KERNELS[True, True]  # dense form
    for data_shape, n, want, kernel in (((2, 9, 5), 17, [(1, 1, 1)], small), ((65, 5), 129, [(3, 2, 1)], small),
                                        ((64, 5), 128, [(2, 1, 1)], small),
                                        ((65535 * 128 + 1, 1), 1, [(1, 65535, 1), (1, 1, 1)], large),
                                        ((1024, 8), 1024, [(16, 16, 1)], small), ((1024, 8), 2048, [(16, 8, 1)], large),
                                        ((4096, 8), 4096, [(32, 32, 1)], large)):
        target = PlanOnlyTarget()
        data, weight = np.empty(data_shape, np.float32), np.empty((n, data_shape[-1]), np.float32)
        out = np.empty(data_shape[:-1] + (n,), np.float32)
        op.kernel(target, FakeCUDAArray(out), FakeCUDAArray(data), FakeCUDAArray(weight), **op.all_attrs({}))
        assert [tuple(grid) for _, grid, _, _ in target.launches] == want, data_shape
        assert all(tuple(block) == (16, 16) and fn is kernel for fn, _, block, _ in target.launches), data_shape
        # The launch beyond gridDim.y's cap starts at row tile 65535 (its tile0 argument).
        assert [args[10] for _, _, _, args in target.launches] == [65535 * k for k in range(len(want))]
    # softmax / layer_norm: one block per row, block = next power of two >= D / 4 (a vector a
    # thread, capped at 256);
    # from 1024 rows on, >= D / 8 (capped at 1024, layer norm 512), rows longer than 8 a thread on the long-row
    # kernels; from 1024 rows of up to 256, a group of lanes per row (>= D / 8 and >= 8, a
    # sector of float32), 128 / lanes rows to a block of 128
    from simaccel.kernels import normalization as n

    block, grouped, long = ((n._softmax_kernel, n._layer_norm_kernel), (n._SOFTMAX_ROWS, n._LAYER_NORM_ROWS),
                            (n._softmax_long_kernel, n._layer_norm_long_kernel))
    for rows, d, want, kernels in ((3, 1, (3, 1), block), (3, 5, (3, 2), block), (3, 17, (3, 8), block),
                                   (3, 256, (3, 64), block), (3, 300, (3, 128), block), (3, 3000, (3, 256), long),
                                   (1024, 5, (64, 128), grouped), (1024, 64, (64, 128), grouped),
                                   (1024, 256, (256, 128), grouped), (1025, 1024, (1025, 128), block),
                                   (1024, 1025, (1024, 256), block), (1024, 3000, (1024, 512), block),
                                   (1024, 4096, (1024, 512), block),
                                   # softmax's cached kernel takes at most 512 threads, its wide twin 1024;
                                   # layer norm's cached kernel at most 512: 8192 is a long row there
                                   (1024, 8192, [(1024, 1024), (1024, 256)], (n._softmax_wide_kernel, n._layer_norm_long_kernel))):
        x = np.zeros((rows, d), np.float32)
        g = np.ones(d, np.float32)
        target = PlanOnlyTarget()
        get_op("simaccel.softmax").kernel(target, FakeCUDAArray(np.zeros_like(x)), FakeCUDAArray(x))
        get_op("simaccel.layer_norm").kernel(target, FakeCUDAArray(np.zeros_like(x)), FakeCUDAArray(x),
                                             FakeCUDAArray(g), FakeCUDAArray(g), epsilon=1e-5)
        want = want if isinstance(want, list) else [want] * 2
        assert [(grid, threads) for _, grid, threads, _ in target.launches] == want, (rows, d)
        assert tuple(fn for fn, *_ in target.launches) == kernels, (rows, d)
    # Rows longer than 8 x 1024: softmax keeps blocks of 1024, layer norm's long-row kernel 256.
    target = PlanOnlyTarget()
    x = np.zeros((1024, 8193), np.float32)
    get_op("simaccel.softmax").kernel(target, FakeCUDAArray(np.zeros_like(x)), FakeCUDAArray(x))
    get_op("simaccel.layer_norm").kernel(target, FakeCUDAArray(np.zeros_like(x)), FakeCUDAArray(x),
                                         FakeCUDAArray(x[0]), FakeCUDAArray(x[0]), epsilon=1e-5)
    assert [(fn, grid, block) for fn, grid, block, _ in target.launches] == [(long[0], 1024, 1024), (long[1], 1024, 256)]
    assert [n.row_lanes(1024, d, 4) for d in (1, 5, 17, 64, 100, 256, 257)] == [1, 8, 8, 8, 16, 32, None]
    assert [n.row_lanes(1024, d, 2) for d in (5, 17, 64, 200)] == [8, 16, 16, 32]  # 16 halves: a sector
    assert n.row_lanes(1023, 64, 4) is None
    # A global average pool (ResNet-50's last stage, batch 64): 7 x 7 rows on groups of 8 lanes.
    target = PlanOnlyTarget()
    x, out = np.empty((64, 2048, 7, 7), np.float32), np.empty((64, 2048, 1, 1), np.float32)
    mean = get_op("simaccel.mean")
    mean.kernel(target, FakeCUDAArray(out), FakeCUDAArray(x), **mean.all_attrs({"axes": [2, 3], "keepdims": True}))
    assert [(fn, grid, block, args[-1]) for fn, grid, block, args in target.launches] == [
        (n._ROW_SUM_ROWS, 64 * 2048 // 16, 128, 3)]
    # Many longer rows take a warp each (a mean over 56 x 56), few a block each.
    target = PlanOnlyTarget()
    for shape, out_shape in (((64, 512, 56, 56), (64, 512, 1, 1)), ((1, 2047, 56, 56), (1, 2047, 1, 1))):
        mean.kernel(target, FakeCUDAArray(np.empty(out_shape, np.float32)), FakeCUDAArray(np.empty(shape, np.float32)),
                    **mean.all_attrs({"axes": [2, 3], "keepdims": True}))
    assert [(fn, grid, block, args[-1]) for fn, grid, block, args in target.launches] == [
        (n._ROW_SUM_ROWS, 64 * 512 // 4, 128, 5), (n._row_sum_kernel, 2047, 256, 1)]


def test_shape_mismatch_is_refused_by_the_isa_before_any_launch():
    """Launchers trust validated shapes; the op's rule is what refuses a mismatch."""
    from simaccel import ShapeError

    op = get_op("simaccel.matmul")
    with pytest.raises(ShapeError, match="simaccel.matmul: reduction sizes differ: data \\(3, 4\\) has K=4, weight \\(5, 2\\) has K=5"):
        op.infer([(3, 4), (5, 2)], ["float32"] * 2, **op.all_attrs({}))
