"""Is this result right? The one rule and the one tolerance table every tool judges results by.

Where it sits: after a run, when an output is checked against its reference. `simaccel run
--expect`, `simaccel demo`, `simaccel.testing.assert_matches_tvm` (and so the pytest plugin),
`simaccel fuzz`, `simaccel conformance` and `simaccel bisect` all call `array_difference`, and
the project's tests call `assert_same` (tests/compare.py). No TVM and no Numba here, so it
also serves where TVM has only its runtime.

The rule. `got` matches `want` when both have the same shape and dtype, NaN at the same
places (NaN where the reference has NaN is a match), the same infinities at the same places,
nothing non-finite where the reference is finite, and every finite element within tolerance:

    |got - want| <= rtol * |want| + atol * scale

`scale` is 1 element by element, and 1 + max |want| (over the reference's finite elements)
where a tool compares a whole output (`scaled=True`, what every command does): the absolute
tolerance then follows the output's magnitude, so a near-zero element of an output whose
largest value is 10 is judged as sums of that size round, not against zero. (rtol, atol) are
the dtype's in `TOLERANCE` unless given; a dtype without an entry (integers, bool) must match
exactly. Each tool formats the `Difference` it gets back its own way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

TOLERANCE = {"float32": dict(rtol=1e-4, atol=1e-5), "float16": dict(rtol=2e-2, atol=2e-2),
             "bfloat16": dict(rtol=5e-2, atol=5e-2),
             "float64": dict(rtol=1e-7, atol=1e-9)}


def tolerance(dtype, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    """(rtol, atol) for `dtype`: the given ones, else the dtype's default, else exact (0, 0)."""
    default = TOLERANCE.get(str(np.dtype(dtype)), dict(rtol=0.0, atol=0.0))
    return (default["rtol"] if rtol is None else float(rtol)), (default["atol"] if atol is None else float(atol))


def output_scale(want) -> float:
    """1 + the largest magnitude among `want`'s finite elements: what a whole output's atol is times."""
    w = np.asarray(want).astype(np.float64)
    finite = np.abs(w[np.isfinite(w)])
    return 1.0 + (float(finite.max()) if finite.size else 0.0)


@dataclass(frozen=True)
class Difference:
    """How `got` differs from `want`: whether it matches (`ok`), the largest difference and
    where (0 where both are NaN or the same infinity; inf where NaN or infinities disagree or
    the shapes differ), the values there, the tolerance applied, and why it does not match."""

    ok: bool
    max_error: float
    where: tuple  # index of the largest difference (() for a 0-d array, an empty one or a shape mismatch)
    got: float | None = None  # got's and want's values there
    want: float | None = None
    rtol: float = 0.0
    atol: float = 0.0
    scale: float = 1.0  # what atol is times: 1, or 1 + max |want| for a whole output
    reason: str = ""  # one line saying how it differs ("" when it matches)

    @property
    def scaled_error(self) -> float:
        """The largest difference relative to the output's scale."""
        return self.max_error / self.scale

    def line(self, got: str = "got", want: str = "want") -> str:
        """"max error E at (i, j): got G, want W", naming the two sides `got` and `want`."""
        if self.got is None:
            return f"max error {self.max_error:.6g}"
        return f"max error {self.max_error:.6g} at {self.where}: {got} {self.got:.6g}, {want} {self.want:.6g}"


def largest_difference(got, want) -> tuple[float, tuple]:
    """The largest |got - want| and its index, whatever the dtypes (see `Difference`)."""
    g, w = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
    if g.shape != w.shape:
        return float("inf"), ()
    if g.size == 0:
        return 0.0, ()
    with np.errstate(invalid="ignore"):  # inf - inf is NaN, and taken as inf just below
        diff = np.where((np.isnan(g) & np.isnan(w)) | (np.isinf(w) & (g == w)), 0.0, np.abs(g - w))
    diff = np.where(np.isnan(diff), np.inf, diff)
    where = _index(np.unravel_index(int(np.argmax(diff)), diff.shape))
    return float(diff[where]), where


def scaled_error(got, reference) -> float:
    """The largest difference from `reference` relative to its scale (`output_scale`)."""
    return largest_difference(got, reference)[0] / output_scale(reference)


def array_difference(got, want, rtol: float | None = None, atol: float | None = None, dtype=None,
                     scaled: bool = False) -> Difference:
    """`got` judged against `want` by the rule (module docstring). `dtype` picks the default
    tolerance (default: `want`'s dtype); `scaled`: a whole output, atol times `output_scale(want)`."""
    got, want = np.asarray(got), np.asarray(want)
    rtol, atol = tolerance(want.dtype if dtype is None else dtype, rtol, atol)
    if got.shape != want.shape or got.dtype != want.dtype:
        return Difference(False, float("inf"), (), rtol=rtol, atol=atol,
                          reason=f"got shape {got.shape} {got.dtype}, want {want.shape} {want.dtype}")
    scale = output_scale(want) if scaled else 1.0
    max_error, where = largest_difference(got, want)
    values = (float(got[where]), float(want[where])) if got.size else (None, None)
    found = Difference(True, max_error, where, *values, rtol, atol, scale)
    reason = _reason(got.astype(np.float64), want.astype(np.float64), rtol, atol, scale)
    return found if reason is None else replace(found, ok=False, reason=reason)


def mismatch(got, want, rtol: float | None = None, atol: float | None = None, dtype=None,
             scaled: bool = False) -> str | None:
    """None when `got` matches `want`, else one line saying how it differs (first the shape or
    dtype, then NaN or inf positions, then the values beyond tolerance: how many, the largest
    error and where). Arguments as `array_difference`'s."""
    found = array_difference(got, want, rtol, atol, dtype, scaled)
    return None if found.ok else found.reason


def assert_same(got, want, dtype=None, rtol: float | None = None, atol: float | None = None, name: str = "result",
                scaled: bool = False) -> None:
    """AssertionError naming `name` unless `got` matches `want` (see `mismatch`)."""
    problem = mismatch(got, want, rtol, atol, dtype, scaled)
    if problem is not None:
        raise AssertionError(f"{name}: {problem}")


def _reason(g, w, rtol: float, atol: float, scale: float) -> str | None:
    """Why float64 copies `g` and `w` break the rule, in one line, or None."""
    for what, bad in (("NaN positions differ", np.isnan(g) != np.isnan(w)),
                      ("infinities differ", np.isinf(w) & (g != w)),
                      ("non-finite where the reference is finite", np.isfinite(w) & ~np.isfinite(g))):
        if bad.any():
            where = _index(np.argwhere(bad)[0])
            return f"{what} ({int(bad.sum())} of {bad.size} elements); first at index {where}: got {g[where]:.7g}, want {w[where]:.7g}"
    finite = np.isfinite(w)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf where both are inf: not compared
        error = np.where(finite, np.abs(g - w), 0.0)
    bad = finite & (error > atol * scale + rtol * np.abs(w))
    if not bad.any():
        return None
    worst = _index(np.unravel_index(int(np.argmax(np.where(bad, error, -1.0))), w.shape)) if w.ndim else ()
    scaled = f" (atol times 1 + max |want| = {scale:.4g})" if scale != 1.0 else ""
    return (f"{int(bad.sum())} of {bad.size} elements differ beyond rtol={rtol:g}, atol={atol:g}; "
            f"max abs error {float(error[worst]):.4g} at index {worst}: got {g[worst]:.7g}, want {w[worst]:.7g}{scaled}")


def _index(index) -> tuple[int, ...]:
    return tuple(int(i) for i in index)
