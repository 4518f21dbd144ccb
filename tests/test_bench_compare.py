"""`simaccel bench --compare`: each mode against its peer in its own run (TVM alone for regions,
torch for kernels), flagged when more than 10% worse than an earlier report; checked on
synthetic reports and on committed H200 runs between which the matmul region and the row-sum
kernels regressed."""

from __future__ import annotations

import json
import pathlib

import pytest

from simaccel.errors import SimAccelError
from simaccel.tvm_integration.tools.bench_compare import load_report, peer_ratio_changes as compare
from test_cli import simaccel

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPU = ROOT / "results" / "gpu"
BEFORE = GPU / "2026-11-30-h200-native" / "runtime-only-x2" / "bench" / "bench.json"  # before batched matmul
REGRESSED = GPU / "2026-11-30-h200-nvvm13" / "bench" / "bench.json"  # after it: matmul 2.3x slower
# Kernel reports (ops.json): the first vector row sums made the spatial means 13-22% slower
# against torch; the warp-per-row sums then made them faster again.
OPS_BEFORE = GPU / "2026-12-03-h200-rownorm" / "after" / "ops.json"
OPS_REGRESSED = GPU / "2026-12-04-h200-vector-conv" / "ops-first" / "ops" / "ops.json"
OPS_MENDED = GPU / "2026-12-04-h200-warp-row-sums" / "final" / "ops.json"


def report(tmp_path, name, cases) -> pathlib.Path:
    path = tmp_path / name
    path.write_text(json.dumps({"cases": {c: {"modes": {m: {"median_us": us} for m, us in modes.items()}}
                                          for c, modes in cases.items()}}))
    return path


def test_a_mode_is_compared_by_its_ratio_to_tvm_alone_in_its_own_run(tmp_path):
    old = load_report(report(tmp_path, "old.json", {"mm": {"tvm_only": 100, "native": 110, "python": 500}}))
    # A machine twice as slow: every time doubles, no ratio changes, nothing is flagged...
    slower = load_report(report(tmp_path, "slow.json", {"mm": {"tvm_only": 200, "native": 220, "python": 1000}}))
    changes, notes = compare(slower, old)
    assert [(c.mode, round(c.change, 6), c.regressed()) for c in changes] == [("native", 0, False), ("python", 0, False)]
    assert notes == []
    # ...while 12% more against TVM alone is, and 9% is not.
    new = load_report(report(tmp_path, "new.json", {"mm": {"tvm_only": 100, "native": 123.2, "python": 545}}))
    assert [(c.mode, c.regressed()) for c in compare(new, old)[0]] == [("native", True), ("python", False)]


def test_cases_and_modes_in_one_report_only_are_listed_not_compared(tmp_path):
    old = load_report(report(tmp_path, "old.json", {"a": {"tvm_only": 1, "x": 1}, "b": {"tvm_only": 1, "x": 1}}))
    new = load_report(report(tmp_path, "new.json", {"a": {"tvm_only": 1, "y": 1}, "c": {"x": 1}}))
    changes, notes = compare(new, old)
    assert changes == []
    assert notes == ["a x: only in the old report", "a y: only in the new report", "b: only in the old report",
                     "c: only in the new report"]


@pytest.mark.parametrize("content, message", [
    ("not json", "not valid JSON"),
    ("[]", 'no "cases" object'),
    ('{"cases": {}}', 'no "cases" object'),
    ('{"ops": {"relu": {"torch_us": 3}}}', "op case 'relu' has no median_us"),
    ('{"ops": {"relu": {"median_us": 2, "torch_us": -1}}}', "case 'relu' has a median that is not > 0"),
    ('{"cases": {"mm": {"modes": {"tvm_only": {}}}}}', "case 'mm' has no modes with a median_us each"),
    ('{"cases": {"mm": {"modes": {"tvm_only": {"median_us": 0}}}}}', "case 'mm' has a median that is not > 0"),
])
def test_a_bad_report_is_refused_naming_the_file(tmp_path, content, message):
    path = tmp_path / "bench.json"
    path.write_text(content)
    with pytest.raises(SimAccelError, match=f"bench report {path}: .*{message}"):
        load_report(path)


def test_the_committed_matmul_regression_is_flagged_and_its_fix_is_not():
    result = simaccel("bench", "--report", str(REGRESSED), "--compare", str(BEFORE))
    assert result.returncode == 1, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("3 of 15 figures more than 10% worse against TVM alone: ")
    assert "mm4096 simaccel_native" in last and "mm1024 simaccel_native" in last
    # The same regressed run against itself: nothing is worse.
    same = simaccel("bench", "--report", str(REGRESSED), "--compare", str(REGRESSED))
    assert same.returncode == 0 and same.stdout.strip().splitlines()[-1].startswith("0 of 15 figures")


@pytest.mark.parametrize("args, message", [
    (("bench",), "bench: say what to do: --artifacts DIR"),
    (("bench", "--report", str(REGRESSED)), "also give --compare OLD.json"),
    (("bench", "--report", "/nonexistent.json", "--compare", str(BEFORE)), "bench report /nonexistent.json: no such file"),
    # Timing would need a GPU and prebuilt libraries: a bad --compare is refused before that.
    (("bench", "--artifacts", "/nonexistent", "--compare", "/old.json"), "bench report /old.json: no such file"),
    (("bench", "--artifacts", "/nonexistent", "--compare", str(OPS_BEFORE)), "a kernel report (ops.json)"),
    (("bench", "--report", str(OPS_REGRESSED), "--compare", str(BEFORE)),
     "a report against torch cannot be compared with one against TVM alone"),
])
def test_bench_compare_user_errors(args, message):
    result = simaccel(*args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_kernel_is_compared_by_its_ratio_to_torch_and_one_without_torch_is_listed(tmp_path):
    def ops(name, rows):
        path = tmp_path / name
        path.write_text(json.dumps({"ops": rows}))
        return load_report(path)

    old = ops("old.json", {"relu": {"median_us": 10, "torch_us": 10}, "pool": {"median_us": 5}})
    new = ops("new.json", {"relu": {"median_us": 24, "torch_us": 20}, "pool": {"median_us": 5}})
    assert old.peer == new.peer == "torch"
    changes, notes = compare(new, old)  # relu: 1.0x torch before, 1.2x now; the machine is not the cause
    assert [(c.case, c.mode, round(c.change, 6), c.regressed()) for c in changes] == [("relu", "simaccel", 0.2, True)]
    assert notes == ["pool: no torch time to compare against"]


def test_the_committed_row_sum_regression_is_flagged_and_its_fix_is_not():
    result = simaccel("bench", "--report", str(OPS_REGRESSED), "--compare", str(OPS_BEFORE))
    assert result.returncode == 1, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last == ("2 of 26 figures more than 10% worse against torch: mean spatial b64x2048x7x7 simaccel, "
                    "mean spatial b64x512x56x56 simaccel")
    mended = simaccel("bench", "--report", str(OPS_MENDED), "--compare", str(OPS_REGRESSED))
    assert mended.returncode == 0 and mended.stdout.strip().splitlines()[-1] == "0 of 26 figures more than 10% worse against torch"
