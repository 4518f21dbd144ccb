"""Comparing a result with its reference: NaN and inf where the reference has them, the rest close.

Where it sits: after a run, when simaccel's outputs are checked against TVM alone's
(`simaccel.testing.assert_matches_tvm`, the project's tests through `tests/compare.py`). No TVM
and no Numba here, so it also serves where TVM has only its runtime.

Default tolerances are per dtype (`TOLERANCE`); a dtype without an entry (integers, bool) must
match exactly.
"""

from __future__ import annotations

import numpy as np

TOLERANCE = {"float32": dict(rtol=1e-4, atol=1e-5), "float16": dict(rtol=2e-2, atol=2e-2),
             "float64": dict(rtol=1e-7, atol=1e-9)}


def tolerance(dtype, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    """(rtol, atol) for `dtype`: the given ones, else the dtype's default, else exact (0, 0)."""
    default = TOLERANCE.get(str(np.dtype(dtype)), dict(rtol=0.0, atol=0.0))
    return (default["rtol"] if rtol is None else rtol), (default["atol"] if atol is None else atol)


def mismatch(got, want, rtol: float | None = None, atol: float | None = None, dtype=None) -> str | None:
    """None when `got` matches `want`, else one line saying how it differs (first the shape or
    dtype, then NaN or inf positions, then the values beyond tolerance: how many, the largest
    error and where). `dtype` picks the default tolerance (default: `want`'s dtype)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"got shape {got.shape} {got.dtype}, want {want.shape} {want.dtype}"
    rtol, atol = tolerance(want.dtype if dtype is None else dtype, rtol, atol)
    g, w = got.astype(np.float64), want.astype(np.float64)
    for what, bad in (("NaN positions differ", np.isnan(g) != np.isnan(w)),
                      ("infinities differ", np.isinf(w) & (g != w)),
                      ("non-finite where the reference is finite", np.isfinite(w) & ~np.isfinite(g))):
        if bad.any():
            where = _index(np.argwhere(bad)[0])
            return f"{what} ({int(bad.sum())} of {bad.size} elements); first at index {where}: got {g[where]:.7g}, want {w[where]:.7g}"
    finite = np.isfinite(w)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf where both are inf: not compared
        error = np.where(finite, np.abs(g - w), 0.0)
    bad = finite & (error > atol + rtol * np.abs(w))
    if not bad.any():
        return None
    worst = _index(np.unravel_index(int(np.argmax(np.where(bad, error, -1.0))), w.shape)) if w.ndim else ()
    return (f"{int(bad.sum())} of {bad.size} elements differ beyond rtol={rtol:g}, atol={atol:g}; "
            f"max abs error {float(error[worst]):.4g} at index {worst}: got {g[worst]:.7g}, want {w[worst]:.7g}")


def assert_same(got, want, dtype=None, rtol: float | None = None, atol: float | None = None, name: str = "result") -> None:
    """AssertionError naming `name` unless `got` matches `want` (see `mismatch`)."""
    problem = mismatch(got, want, rtol, atol, dtype)
    if problem is not None:
        raise AssertionError(f"{name}: {problem}")


def _index(index) -> tuple[int, ...]:
    return tuple(int(i) for i in index)
