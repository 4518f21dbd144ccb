"""One answer to "is this result right?": every tool judges the same (got, want) pair alike.

simaccel.compare holds the one rule and the one tolerance table; `simaccel run --expect`,
`simaccel demo`, `assert_matches_tvm` (and so the pytest plugin), `simaccel fuzz`,
`simaccel conformance` and `simaccel bisect` each reach it their own way and format its
answer their own way. Each pair below goes through every tool's own path and must get the
verdict of the table. The first rows are the two disagreements the tools had before they
shared the rule (NaN where TVM alone also has NaN failed `simaccel run`; an error of 5e-5 at a
near-zero element of an output whose largest value is 10 failed `assert_matches_tvm`).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from simaccel.compare import TOLERANCE, array_difference, largest_difference, mismatch, output_scale, tolerance
from simaccel.tvm_integration.tools import demo
from simaccel.tvm_integration.tools.bisect import difference as bisect_difference
from simaccel.tvm_integration.tools.commands.run import compare_with_expected
from simaccel.tvm_integration.tools.common.verdicts import PASS
from simaccel.tvm_integration.tools.conformance.check import output_mismatch
from simaccel.tvm_integration.tools.fuzz.check import case_verdict
from simaccel.tvm_integration.tools.testing import output_mismatches

F32, F16 = np.float32, np.float16
NAN, INF = np.nan, np.inf
TEN = [10.0, 3.0, 0.0, -2.0]  # an output whose largest magnitude is 10

# (name, got, want, dtype, matches)
PAIRS = [
    ("NaN where TVM alone has NaN", [1.0, NAN], [1.0, NAN], F32, True),
    ("5e-5 at a near-zero element of an output whose largest value is 10", [10.0, 3.0, 5e-5, -2.0], TEN, F32, True),
    ("equal", [1.0, 2.0], [1.0, 2.0], F32, True),
    ("within rtol", [1.0, 2.0001], [1.0, 2.0], F32, True),
    ("2e-3 at a near-zero element of an output whose largest value is 10", [10.0, 3.0, 2e-3, -2.0], TEN, F32, False),
    ("1e-3 off at 1: beyond float32's tolerance", [1.001, 0.5], [1.0, 0.5], F32, False),
    ("1e-2 off at 1: within float16's", [1.01, 0.5], [1.0, 0.5], F16, True),
    ("1e-1 off at 1: beyond float16's", [1.1, 0.5], [1.0, 0.5], F16, False),
    ("NaN where TVM alone has a number", [1.0, NAN], [1.0, 2.0], F32, False),
    ("a number where TVM alone has NaN", [1.0, 2.0], [1.0, NAN], F32, False),
    ("NaN at another place", [NAN, 2.0], [1.0, NAN], F32, False),
    ("the same infinities", [INF, -INF, 1.0], [INF, -INF, 1.0], F32, True),
    ("an infinity of the other sign", [-INF, 1.0], [INF, 1.0], F32, False),
    ("an infinity where TVM alone is finite", [INF, 1.0], [3e38, 1.0], F32, False),
    ("integers: exact", [5, 6], [5, 7], np.int32, False),
    ("integers: equal", [5, 7], [5, 7], np.int32, True),
    ("all NaN", [NAN, NAN], [NAN, NAN], F32, True),
    ("empty", [], [], F32, True),
]


def _arrays(got, want, dtype):
    return np.array(got, dtype), np.array(want, dtype)


def _case(dtype):
    """What the fuzzer's verdict reads of a case: its dtype, and that no float64 reference settles a difference."""
    return SimpleNamespace(dtype=str(np.dtype(dtype)), specials=True, exact_reference=False,
                           independent_reference=True, user_ops=[])


def verdicts(got, want, dtype) -> dict[str, bool]:
    """Whether each tool's own path takes `got` as matching `want`."""
    lines: list[str] = []
    rtol, atol = tolerance(want.dtype)
    return {
        "simaccel.compare": array_difference(got, want, scaled=True).ok,
        "simaccel run --expect": compare_with_expected([got], [want], out=lines.append) == 0,
        "simaccel demo": demo.compare_with_tvm_alone(got, want, out=lines.append),
        "assert_matches_tvm": output_mismatches([got], [want]) == [],
        "simaccel fuzz": case_verdict(_case(dtype), [got], [want], "engine ref").verdict == PASS,
        "simaccel conformance": output_mismatch([got], [want]) is None,
        "simaccel bisect": bisect_difference(got, want, rtol, atol).ok,
    }


@pytest.mark.parametrize("name, got, want, dtype, matches", PAIRS, ids=[p[0] for p in PAIRS])
def test_every_tool_gives_one_verdict(name, got, want, dtype, matches):
    got, want = _arrays(got, want, dtype)
    found = verdicts(got, want, dtype)
    assert found == {tool: matches for tool in found}, name


def test_a_shape_or_dtype_that_differs_is_a_mismatch_everywhere():
    for got, want in ((np.zeros((2, 2), F32), np.zeros(4, F32)), (np.zeros(4, F16), np.zeros(4, F32))):
        assert array_difference(got, want, scaled=True).reason.startswith("got shape")
        assert output_mismatch([got], [want]) and output_mismatches([got], [want])
        assert compare_with_expected([got], [want], out=lambda line: None) == 1
        assert not bisect_difference(got, want, *tolerance(want.dtype)).ok


def test_one_table():
    assert TOLERANCE == {"float32": dict(rtol=1e-4, atol=1e-5), "float16": dict(rtol=2e-2, atol=2e-2),
                         "bfloat16": dict(rtol=5e-2, atol=5e-2), "float64": dict(rtol=1e-7, atol=1e-9)}
    assert tolerance("float16") == (2e-2, 2e-2) and tolerance("int8") == (0.0, 0.0) and tolerance("bool") == (0.0, 0.0)
    assert tolerance("float32", rtol=0.5) == (0.5, 1e-5)


def test_the_output_scale_is_one_plus_the_largest_finite_magnitude():
    assert output_scale(np.array([NAN, -INF, -4.0, 2.0], F32)) == 5.0
    assert output_scale(np.array([], F32)) == output_scale(np.array([NAN], F32)) == 1.0
    # element by element the absolute tolerance is atol itself: the near-zero element fails there
    got, want = _arrays([10.0, 3.0, 5e-5, -2.0], TEN, F32)
    assert mismatch(got, want) is not None and mismatch(got, want, scaled=True) is None


def test_the_difference_says_where_and_how_much():
    got, want = _arrays([1.0, 2.0, 3.5], [1.0, 2.0, 3.0], F32)
    found = array_difference(got, want, scaled=True)
    assert (found.ok, found.max_error, found.where, found.got, found.want) == (False, 0.5, (2,), 3.5, 3.0)
    assert found.scale == 4.0 and found.scaled_error == 0.125
    assert found.reason == ("1 of 3 elements differ beyond rtol=0.0001, atol=1e-05; max abs error 0.5 at index (2,): "
                            "got 3.5, want 3 (atol times 1 + max |want| = 4)")
    assert found.line() == "max error 0.5 at (2,): got 3.5, want 3"
    assert largest_difference(np.array([NAN, INF], F32), np.array([NAN, INF], F32)) == (0.0, (0,))
    assert largest_difference(np.array([1.0, NAN], F32), np.array([1.0, 2.0], F32)) == (INF, (1,))
