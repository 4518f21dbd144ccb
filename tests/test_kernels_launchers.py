"""The kernel launchers as a whole: every op has a kernel test, launch geometry at real sizes, early shape refusal."""

from __future__ import annotations

import numpy as np
import pytest
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from simaccel.ops import get_op, list_ops
from kernel_cases import PlanOnlyTarget
from test_kernels_conv2d import CONV_OPS
from test_kernels_elementwise import BINARY_OPS, UNARY_OPS
from test_kernels_layout import VIEW_CASES
from test_kernels_matmul import MATMUL_OPS


def test_every_op_has_a_kernel_test():
    tested = set(MATMUL_OPS) | set(CONV_OPS) | set(BINARY_OPS) | set(UNARY_OPS) | {name for name, _, _ in VIEW_CASES} | {
        "simaccel.max_pool2d", "simaccel.avg_pool2d", "simaccel.softmax", "simaccel.layer_norm", "simaccel.rms_norm", "simaccel.clip",
        "simaccel.broadcast_to", "simaccel.permute_dims", "simaccel.strided_slice", "simaccel.sum", "simaccel.mean",
        "simaccel.max", "simaccel.concat", "simaccel.take", "simaccel.cumsum",
        "simaccel.attention", "simaccel.grouped_attention", "simaccel.attention_bias",  # tests/test_attention.py
        "simaccel.grouped_attention_bias",
        "simaccel.conv2d_transpose",  # tests/test_kernels_conv2d.py
    }
    from test_mask_ops import mask_kernel_ops  # the mask and index ops' kernels: tests/test_mask_ops.py

    assert set(list_ops()) == tested | mask_kernel_ops()


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
