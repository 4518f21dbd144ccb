"""Comparing results: NaN and inf must sit where the reference has them, the rest be close.

No TVM import here, so tests that run where TVM has only its runtime can use it too.
"""

from __future__ import annotations

import numpy as np

TOLERANCE = {"float32": dict(rtol=1e-4, atol=1e-5), "float16": dict(rtol=2e-2, atol=2e-2)}


def assert_same(got, want, dtype: str) -> None:
    """Equal shapes and dtypes, NaN and inf where the reference has them, close elsewhere."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg="NaN positions differ")
    finite = np.isfinite(w)
    np.testing.assert_array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)], err_msg="infinities differ")
    np.testing.assert_allclose(g[finite], w[finite], **TOLERANCE[dtype])
