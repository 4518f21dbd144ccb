"""Comparing results in the tests: `simaccel.compare` (NaN and inf where the reference has them,
the rest close, per-dtype tolerances), with the model's dtype choosing the tolerance.

No TVM import here, so tests that run where TVM has only its runtime can use it too.
"""

from __future__ import annotations

from simaccel.compare import TOLERANCE, assert_same

__all__ = ["TOLERANCE", "assert_same"]
