"""The softmax, layer norm and RMS norm row kernels on the simulator, each way rows spread over threads, against the references."""

from __future__ import annotations

import numpy as np
import pytest
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from simaccel.ops import get_op
from kernel_cases import DTYPES, TOL, PlanOnlyTarget, RecordingTarget, _misaligned, _random, check, run_op


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
@pytest.mark.parametrize("name", ["simaccel.layer_norm", "simaccel.rms_norm"])
def test_layer_and_rms_norm(name, shape, dtype, row_threads):
    rng = np.random.default_rng(len(shape) * 2000 + shape[-1])
    d = shape[-1]
    data = _random(rng, shape, dtype, scale=3.0) + np.array(5.0, dtype)  # non-zero mean
    weights = [_random(rng, (d,), dtype) for _ in range(2 if name.endswith("layer_norm") else 1)]
    check(name, [data, *weights], dict(epsilon=1e-5))


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
    # RMS norm (TVM's x * rsqrt(sum(x * x) / D + eps) * w): a NaN row is NaN; an infinity makes
    # its row's scale 0, so its finite values give 0 and the infinities NaN.
    with np.errstate(invalid="ignore"):
        out, ref = run_op("simaccel.rms_norm", [x, g], {"epsilon": 1e-5})
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    assert np.isnan(ref[[0, 2]]).all() and not np.isnan(ref[4]).any()
    for r in (1, 3):
        np.testing.assert_array_equal(np.isnan(ref[r]), np.isinf(x[r]))
        assert (out[r][np.isfinite(x[r])] == 0).all()
    np.testing.assert_allclose(out[4], ref[4], **TOL["float32"])


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
                                ("simaccel.rms_norm", [x, g], {"epsilon": 1e-5}),
                                ("simaccel.sum", [x], {"axes": [1], "keepdims": False})):
        if misplaced == "gamma" and not name.endswith("_norm"):
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
                                         {"epsilon": 1e-5}, normalization._layer_norm_long_kernel),
                                        ("simaccel.rms_norm", [x, gamma], {"epsilon": 1e-5},
                                         normalization._rms_norm_long_kernel)):
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


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_of_zero_rows_and_empty_tensors(dtype, row_threads):
    """A row of zeros normalises to zeros (eps keeps rsqrt finite; TVM rounds no float16 eps to
    0: 1e-8 too); zero rows or zero-length rows launch nothing."""
    x = np.zeros((3, 8), dtype)
    x[1] = 1.0
    out, ref = check("simaccel.rms_norm", [x, np.full(8, 2.0, dtype)], {"epsilon": 1e-8})
    assert (out[0] == 0).all() and (out[2] == 0).all()
    np.testing.assert_allclose(out[1].astype(np.float32), 2.0, rtol=1e-3)
    for shape in ((0, 5), (4, 0)):
        out, ref = run_op("simaccel.rms_norm", [np.ones(shape, dtype), np.ones(shape[-1:], dtype)], {"epsilon": 1e-5},
                          expected_launches=0)
        assert out.shape == ref.shape == shape
