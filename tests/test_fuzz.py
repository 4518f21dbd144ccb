"""`simaccel fuzz`: a bounded seeded run stays clean, a planted fault is found, shrunk and reproduced."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import simaccel
from conftest import HAS_GPU
from harness import plant_reference, run_vm
from simaccel.tvm_integration import build_tvm_only
from simaccel.tvm_integration.tools.fuzz import PASS, case_from_json, case_to_json, replay, run_fuzz
from simaccel.tvm_integration.tools.fuzz_models import Config, Draw, draw_case


def test_seeded_run_on_ref_is_clean_and_reloads_a_sample(tmp_path):
    lines = []
    assert run_fuzz(cases=24, seed=11, engines=["ref"], out_dir=tmp_path, export_every=8, log=lines.append) == 0
    summary = json.loads((tmp_path / "fuzz-summary.json").read_text())
    assert summary["cases"] == 24 and summary["counts"]["failed"] == 0
    assert summary["counts"][PASS] >= 12, summary  # most drawn models are valid for TVM alone
    assert summary["reloaded_in_fresh_process"] == 3
    assert lines[-1].startswith("fuzz: 24 cases") and lines[-1].endswith("all matched")


def test_seeded_run_on_sim_is_clean(tmp_path):
    assert run_fuzz(cases=4, seed=3, engines=["sim"], out_dir=tmp_path, export_every=0, max_ops=3, log=lambda _: None) == 0


def test_same_seed_same_models():
    draws = [[case_to_json(draw_case(Draw.seeded(seed), Config())) for seed in (5, 6)] for _ in range(2)]
    assert draws[0] == draws[1] and draws[0][0] != draws[0][1]


@pytest.mark.parametrize("seed", range(16))
def test_float64_reference_of_drawn_models_matches_tvm(seed):
    """The fuzzer's own oracle knows each op's semantics (checked where TVM alone builds the model)."""
    case = draw_case(Draw.seeded(1000 + seed), Config(specials_percent=0))
    try:
        executable = build_tvm_only(case.bound_module())
    except Exception:  # noqa: BLE001 - a model TVM cannot build has nothing to compare
        pytest.skip("TVM alone cannot build this model")
    got = run_vm(executable, case.runtime_arrays())
    got = got if isinstance(got, list) else [got]
    if not case.exact_reference:
        pytest.skip("ceil-mode pooling: the reference does not claim TVM's semantics")
    tol = 1e-4 if case.dtype == "float32" else 3e-2
    for g, want in zip(got, case.reference(), strict=True):
        finite = np.isfinite(want)
        np.testing.assert_array_equal(np.isfinite(g), finite)
        scale = 1 + (np.abs(want[finite]).max() if finite.any() else 0)
        assert np.all(np.abs(g[finite] - want[finite]) <= tol * scale), case.describe()


@pytest.fixture
def wrong_relu(monkeypatch):
    """simaccel.relu's reference made wrong (what the ref engine runs), for as long as the test runs."""
    plant_reference(monkeypatch, "simaccel.relu", lambda y: y + 1)
    yield
    monkeypatch.undo()
    simaccel.get_runtime().clear()


def test_a_planted_fault_is_found_shrunk_and_reproduced(tmp_path, wrong_relu):
    lines = []
    assert run_fuzz(cases=40, seed=2, engines=["ref"], out_dir=tmp_path, export_every=0, shrink_seconds=60,
                    log=lines.append) == 1
    [folder] = [p for p in tmp_path.iterdir() if p.name.startswith("case-")]
    assert {p.name for p in folder.iterdir()} >= {"model.py", "inputs.npz", "case.json", "repro.py"}
    saved = json.loads((folder / "case.json").read_text())
    case = case_from_json(saved["case"])
    assert "relu" in case.ops and len(case.ops) <= 3, case.describe()  # shrunk to the op at fault
    assert "differs from TVM alone" in saved["reason"]
    assert "R.nn.relu" in (folder / "model.py").read_text()
    assert replay(folder, log=lines.append) == 1  # still failing while relu is wrong
    simaccel.get_runtime().clear()


def test_a_reproduction_passes_once_the_fault_is_gone(tmp_path, monkeypatch):
    plant_reference(monkeypatch, "simaccel.relu", lambda y: y + 1)
    assert run_fuzz(cases=40, seed=2, engines=["ref"], out_dir=tmp_path, export_every=0, shrink_seconds=10,
                    log=lambda _: None) == 1
    monkeypatch.undo()
    simaccel.get_runtime().clear()
    [folder] = [p for p in tmp_path.iterdir() if p.name.startswith("case-")]
    result = subprocess.run([sys.executable, str(folder / "repro.py")], capture_output=True, text=True, timeout=300, cwd="/")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed" in result.stdout


def simaccel_cli(*args):
    return subprocess.run([sys.executable, "-m", "simaccel.tvm_integration.tools.cli", *args], capture_output=True, text=True, timeout=600, cwd="/")


def test_cli_fuzz_prints_progress_and_a_summary(tmp_path):
    result = simaccel_cli("fuzz", "--cases", "3", "--seed", "4", "--out", str(tmp_path), "--export-every", "0")
    assert result.returncode == 0, result.stderr
    assert "fuzz: 3 cases in" in result.stdout and "0 failed" in result.stdout


@pytest.mark.parametrize("args, message", [
    (("--cases", "0"), "--cases 0: must be >= 1"),
    (("--engine", "warp"), "--engine warp: choose from ref, sim, cuda"),
    (("--dtype", "float64"), "--dtype float64: choose from float32, float16"),
    (("--replay", "/nonexistent"), "not a simaccel fuzz reproduction"),
    (("--out", "/proc/no/such/place"), "--out /proc/no/such/place: cannot create the folder"),
    pytest.param(("--engine", "cuda"), "engine 'cuda' cannot run here",
                 marks=pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")),
])
def test_cli_fuzz_refuses_bad_arguments(args, message):
    result = simaccel_cli("fuzz", *args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_drawn_models_are_valid_relax():
    """The generator's own shape rules agree with Relax's (a disagreement wastes a case as a skip)."""
    for seed in range(300):
        case = draw_case(Draw.seeded(seed), Config())
        mod = case.module()
        out = mod["main"].ret_ty
        shapes = [tuple(int(d) for d in t.shape.values) for t in (out.fields if hasattr(out, "fields") else [out])]
        assert shapes == [case.values[i].shape for i in case.outputs], case.describe()
