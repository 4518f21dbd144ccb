"""The layout kernels on the simulator: views, permute_dims, strided_slice, concat and take, against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from simaccel.ops import get_op
from kernel_cases import DTYPES, PlanOnlyTarget, RecordingTarget, _random, check, run_op


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
    if np.dtype(dtype).itemsize == 2 and shape[-1] == 9:
        kernel = "_gather_kernel"  # 9 float16 or bfloat16 values are 18 bytes: less than a sector a row
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


# take: (data, indices, axis). Embedding tables (axis 0) with indices of rank 0..3, other axes,
# odd sizes, no indices, and an embedding row longer than a block.
TAKE_CASES = [((7, 5), (3,), 0), ((7, 5), (), 0), ((7, 5), (2, 3), 0), ((5,), (2, 1, 3), 0), ((3, 9, 2), (4,), 1),
              ((2, 3, 4), (2, 2), 2), ((6, 3), (0,), 0), ((0, 3), (0, 2), 0), ((4, 300), (5,), 0)]
# TVM's take (topi) for each mode, written apart from simaccel's: clip clamps (-1 reads 0), wrap
# is i mod n; fast reads i unchecked (only [0, n) is defined; simaccel clamps the rest, reading
# i + n for i in [-n, 0) as torch does).
TVM_TAKE = {"clip": lambda i, n: np.clip(i, 0, n - 1), "wrap": lambda i, n: np.mod(i, n), "fast": lambda i, n: i}


@pytest.mark.parametrize("dtype", DTYPES + ("int64", "bool"))
@pytest.mark.parametrize("mode", ["clip", "wrap", "fast"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("shape,index_shape,axis", TAKE_CASES, ids=str)
def test_take(shape, index_shape, axis, index_dtype, mode, dtype):
    rng = np.random.default_rng(len(shape) * 10 + axis)
    x = _random(rng, shape, dtype, scale=10.0) if dtype != "bool" else rng.random(shape) > 0.5
    if x.size and dtype.startswith("float"):
        x.reshape(-1)[: 3] = [np.nan, np.inf, -np.inf][: min(3, x.size)]  # copied as they are
    n = shape[axis]
    low, high = (0, n) if mode == "fast" else (-2 * n - 1, 2 * n + 2)  # fast: in range, TVM's defined answer
    indices = rng.integers(low, max(high, low + 1), index_shape).astype(index_dtype)
    out, ref = run_op("simaccel.take", [x, indices], {"axis": axis, "mode": mode},
                      expected_launches=int(np.prod(index_shape, dtype=int) > 0 and x.size > 0))
    want = np.take(x, TVM_TAKE[mode](indices.astype(np.int64), n), axis=axis) if indices.size else ref
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(ref, want)


def test_take_fast_out_of_range_is_torch_s_from_the_end_then_clamped():
    x = np.arange(5, dtype=np.float32) * 10
    indices = np.array([0, 4, -1, -5, 5, -6, 100, -100], np.int64)
    for mode, want in (("fast", [0, 40, 40, 0, 40, 0, 40, 0]), ("clip", [0, 40, 0, 0, 40, 0, 40, 0]),
                       ("wrap", [0, 40, 40, 0, 0, 40, 0, 0])):
        out, ref = run_op("simaccel.take", [x, indices], {"axis": 0, "mode": mode})
        assert out.tolist() == ref.tolist() == want, mode


def test_take_refuses_what_it_cannot_read():
    from simaccel.errors import DtypeError, ShapeError

    op = get_op("simaccel.take")
    with pytest.raises(ShapeError, match=r"simaccel.take: cannot take indices \(2,\) from axis 0 of data \(0, 3\)"):
        op.infer([(0, 3), (2,)], ["float32", "int64"], axis=0, mode="clip")
    with pytest.raises(ShapeError, match="axis 2 is not an axis of data"):
        op.infer([(3, 4), (2,)], ["float32", "int64"], axis=2, mode="clip")
    with pytest.raises(ShapeError, match="result must have rank 0..6"):
        op.infer([(2, 2, 2, 2, 2), (1, 1, 1)], ["float32", "int64"], axis=0, mode="clip")
    with pytest.raises(DtypeError, match="indices"):
        op.infer([(3, 4), (2,)], ["float32", "float32"], axis=0, mode="clip")
    with pytest.raises(ValueError, match="must be one of"):
        op.attrs["mode"]("nan")
