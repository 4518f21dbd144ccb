"""The max and average pooling kernels on the simulator, inside the image and on its border, against the references."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_cases import DTYPES, _random, check, run_op


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


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_window_all_in_padding_gives_tvms_min_value(dtype):
    """A max pool window that lies entirely in padding gives TVM's te.min_value of the dtype:
    its lowest finite value, but for bfloat16 float32's, which rounds to -inf when stored (a
    fuzz case found simaccel giving bfloat16's own lowest value there). Against TVM alone,
    exactly, on ref and sim."""
    from tvm import relax
    from tvm.script import relax as R

    from simaccel.tvm_integration.tools.testing import assert_matches_tvm

    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((1, 2, 3, 2), dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.max_pool2d(x, pool_size=(1, 1), padding=(0, 0, 0, 1)))
        bb.emit_func_output(out)
    data = _random(np.random.default_rng(3), (1, 2, 3, 2), dtype)
    for match in assert_matches_tvm(bb.get(), [data], engines=["ref", "sim"], rtol=0, atol=0):
        edge = match.outputs[0][..., -1].astype(np.float32)
        assert (edge == (-np.inf if dtype == "bfloat16" else np.finfo(dtype).min)).all(), (match.engine, edge)
