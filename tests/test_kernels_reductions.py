"""The sum, mean and max kernels on the simulator (a block, slices or lanes an output), and the
cumsum kernel, against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from simaccel.ops import get_op
from kernel_cases import DTYPES, TOL, PlanOnlyTarget, _random, check, run_op


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


# -- cumsum ------------------------------------------------------------------------------------
CUMSUM_CASES = [((3, 17), 1), ((4, 5, 6), 1), ((40,), 0), ((2, 3, 4, 5), 0), ((2, 300), 1), ((5, 1, 3), 1),
                ((2, 3, 1, 2, 1, 3), 3)]


@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", CUMSUM_CASES, ids=str)
def test_cumsum_of_floats(shape, axis, dtype, exclusive):
    """A float32 running sum in index order, a thread per column (rows, columns, the last axis
    and the first), against a float64 numpy cumsum."""
    x = _random(np.random.default_rng(sum(shape)), shape, dtype)
    out, _ = check("simaccel.cumsum", [x], {"axis": axis, "exclusive": exclusive})
    want = np.cumsum(x.astype(np.float64), axis=axis)
    if exclusive:
        want = want - x.astype(np.float64)
    scale = np.abs(x.astype(np.float64)).sum(axis=axis, keepdims=True)  # a running sum's error grows with it
    assert (np.abs(out.astype(np.float64) - want) <= TOL[dtype]["rtol"] * scale + TOL[dtype]["atol"]).all()


@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "int8"])
def test_cumsum_of_integers_is_exact_and_wraps_as_its_type(dtype, exclusive):
    """Integers exactly, in their own type's arithmetic: an int8 or int32 sum past its range
    wraps (two's complement), as TVM's and numpy's do."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(3)
    x = rng.integers(info.max // 3, info.max // 2, (3, 9), dtype=dtype)  # sums past the range by the 3rd element
    x[1] = -x[1]
    out, ref = run_op("simaccel.cumsum", [x], {"axis": 1, "exclusive": exclusive})
    want = np.cumsum(x, axis=1, dtype=dtype)
    if exclusive:
        want = np.concatenate([np.zeros((3, 1), dtype), want[:, :-1]], axis=1)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(ref, want)
    if dtype != "int64":
        assert (np.cumsum(x.astype(np.int64), axis=1) != np.cumsum(x, axis=1, dtype=dtype)).any()  # it did wrap


@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
def test_cumsum_of_bools_is_a_running_or(exclusive):
    """bool sums as numpy's: true from the first true on (the one before it, exclusive), however
    many trues follow (300 of them would wrap a byte's count to 44, and 256 to 0)."""
    x = np.zeros((3, 300), bool)
    x[0, 5] = True
    x[1, 7:] = True
    x[2, 0] = x[2, 299] = True
    out, ref = run_op("simaccel.cumsum", [x], {"axis": 1, "exclusive": exclusive})
    first = np.argmax(x, axis=1)[:, None] + int(exclusive)
    want = np.arange(300)[None, :] >= first
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(np.cumsum(x, axis=1, dtype=bool), np.arange(300)[None, :] >= first - int(exclusive))


def test_cumsum_spreads_nan_and_inf_from_where_they_enter():
    x = np.ones((2, 6), np.float32)
    x[0, 2], x[1, 3] = np.nan, np.inf
    out, _ = run_op("simaccel.cumsum", [x], {"axis": 1, "exclusive": False})
    np.testing.assert_array_equal(np.isnan(out[0]), [False, False, True, True, True, True])
    np.testing.assert_array_equal(out[1], [1, 2, 3, np.inf, np.inf, np.inf])


@pytest.mark.parametrize("dtype, stops", [("float16", 2048), ("bfloat16", 256)])
def test_a_16_bit_cumsum_is_nearer_float64_than_tvm_alones(dtype, stops):
    """TVM alone adds float16 and bfloat16 in their own type, so a long running sum of ones stops
    where the next integer is not representable; simaccel adds in float32 (docs/isa.md)."""
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    from simaccel.tvm_integration import build, build_tvm_only

    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((1, 4096), dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.cumsum(x, axis=1))
        bb.emit_func_output(y)
    mod = bb.get()
    ones = np.ones((1, 4096), dtype)
    ours, theirs = (relax.VirtualMachine(b(mod, "llvm"), tvm.cpu())["main"](tvm.runtime.tensor(ones)).numpy()
                    .astype(np.float64) for b in (build, build_tvm_only))
    want = np.arange(1, 4097, dtype=np.float64)[None, :].astype(dtype).astype(np.float64)  # exact sums, rounded once
    np.testing.assert_array_equal(ours, want)
    assert theirs.max() == stops
