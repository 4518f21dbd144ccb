"""The matmul and dense kernels on the simulator, on every tiling (float16 tensor cores too), against the references."""

from __future__ import annotations

import numpy as np
import pytest
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from simaccel.ops import get_op
from kernel_cases import DTYPES, TOL, PlanOnlyTarget, _random, check


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


# The GEMV takes 16-bit operands too (kernels/gemv.cu: 8 values a 16-byte load, float32 sums):
# every GEMV case runs in all three dtypes, the sliced-K ones in float32 (16-bit GEMMs of more
# rows go to the tensor cores).
@pytest.mark.parametrize("tiling,name,data_shape,n,weight_shape,dtype",
                         [("sliced", *c, "float32") for c in SLICED_CASES]
                         + [("gemv", *c, dtype) for c in GEMV_CASES for dtype in DTYPES], ids=str)
def test_matmul_shared_tile_tilings(tiling, name, data_shape, n, weight_shape, dtype):
    from simaccel.kernels import matmul as matmul_kernels

    rng = np.random.default_rng(17)
    arrays = _matmul_inputs(name, data_shape, n, dtype, rng)
    if weight_shape is not None:
        arrays[1] = _random(rng, weight_shape, dtype)
    op = get_op(name)
    target = PlanOnlyTarget()
    out_shape, out_dtype = op.infer([a.shape for a in arrays], [dtype] * len(arrays), **op.all_attrs({}))
    out = np.empty(out_shape, arrays[0].dtype)
    op.kernel(target, FakeCUDAArray(out), *map(FakeCUDAArray, arrays), **op.all_attrs({}))
    assert [fn for fn, *_ in target.launches] == [matmul_kernels._SHARED_TILE_KERNELS[tiling, "dense" in name, dtype]]
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


# float16 matmuls of at least 5 rows run on the tensor-core kernel (kernels/tensor_core.py); on the simulator its
# C++ main loop is stood in for by a numpy model that fills each thread's accumulators in the
# C++ layout, so the kernel around it (batch offsets, fragment positions, epilogue) runs here.
TENSOR_CORE_CASES = [
    ("simaccel.dense_bias_relu", (130, 40), 131, None),  # 2 x 2 tiles with 2- and 3-wide tails
    ("simaccel.matmul_gelu", (129, 3), 130, None),  # K < 8
    ("simaccel.matmul_bias", (2, 5, 33), 9, None),  # batch dims folded into rows
    ("simaccel.matmul", (3, 5, 17), 5, (1, 3, 17, 5)),  # batched weight, broadcast batch dim
    ("simaccel.matmul_bias_relu", (3, 6, 9), 130, (3, 9, 130)),  # batched weight, two column tiles
    ("simaccel.dense_gelu", (131, 70), 259, None),  # two row and two 256-wide column tiles, tails
    ("simaccel.matmul_bias", (2, 7, 33), 257, (2, 33, 257)),  # batched, a 1-wide column tail
]  # (at least 5 rows a matrix: fewer take the GEMV)


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
    assert fn is tensor_core.KERNELS[name.startswith("simaccel.dense"), bn, "float16"] and tuple(block) == (tensor_core.THREADS,)
    assert grid[0] == -(-n // bn)
    check(name, arrays)


@pytest.mark.parametrize("bn", [128, 256])
def test_the_gpu_partial_tile_gemms_cover_each_tile_width(bn):
    # tests/test_gpu_kernels.py's float16 GEMMs on partial tiles (JIT and native) reach both kernels.
    from simaccel.launch_plan import plan_launches

    from gpu_cases import one_op_program
    from test_gpu_kernels import TENSOR_CORE_SHAPES

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
