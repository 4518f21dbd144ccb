"""`simaccel conformance`: the model zoo through the whole flow against TVM alone, for simaccel
and for a second BYOC backend built in the tests (tests/backends/toy_backend.py), and
`--partition` on `simaccel fuzz`.

The toy backend shares nothing with simaccel (its own patterns, its own codegen lowering each
region with TVM's TOPI); $TOY_FAULT=add plants a defect in it, which both commands must find.
The Dask runs are in tests/test_fuzz_cluster.py (a real scheduler and workers).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import forks
import simaccel
from harness import plant_reference
from simaccel.errors import SimAccelError
from simaccel.tvm_integration.tools.backends import Backend, parse_partition
from simaccel.tvm_integration.tools.common.error_line import error_line
from simaccel.tvm_integration.tools.conformance import DECODERS, RELAX_MODELS, model_verdict, run_conformance, zoo
from simaccel.tvm_integration.tools.conformance import run_regressions as compare

HERE = Path(__file__).resolve().parent
TOY = f"{HERE / 'backends' / 'toy_backend.py'}:partition_for_toy"
USER_MODELS = HERE / "user_models"


def _cli(*args, env=None):
    """`python -m` the CLI, as a fork of a process that imported it (tests/forks.py)."""
    return forks.cli(*args, env=env, timeout=None)


def _results(out: Path) -> dict:
    return json.loads((out / "conformance.json").read_text())


@pytest.fixture(scope="module")
def relax_run(tmp_path_factory):
    """The Relax zoo on `ref`, every model reloaded in a fresh process."""
    out = tmp_path_factory.mktemp("relax")
    lines = []
    status = run_conformance(["relax"], engines=["ref"], out_dir=out, reload_every=1, log=lines.append)
    return status, _results(out), out, lines


def test_the_relax_zoo_passes_on_ref_with_partitions_reloads_and_tables(relax_run):
    status, results, out, lines = relax_run
    assert status == 0, lines
    names = list(RELAX_MODELS) + list(DECODERS)
    assert [r["model"]["name"] for r in results["models"]] == names
    assert results["counts"]["passed"] == len(names) and results["counts"]["failed"] == 0
    for result in results["models"]:
        assert model_verdict(result) == "passed"
        ref = result["engines"]["ref"]
        assert ref["verdict"] == "passed" and ref["offloaded_calls"] >= 1  # it ran on simaccel, not only TVM
        assert ref["reload"]["verdict"] == "passed"
        assert result["partition"]["regions"] >= 1
    demo = next(r for r in results["models"] if r["model"]["name"] == "demo_cnn")
    assert demo["partition"]["kept"]["relax.nn.leakyrelu"]["count"] == 1  # a kept op, with its reason
    assert "simaccel has no pattern for relax.nn.leakyrelu" in demo["partition_text"]
    table = (out / "conformance.md").read_text()
    assert "| demo_cnn | relax | passed | 2 |" in table and "## Failures: 0" in table
    assert "<table>" in (out / "conformance.html").read_text()
    assert any(line.startswith(f"[{len(names)}/{len(names)}]") for line in lines)
    for result in results["models"][len(RELAX_MODELS):]:  # the decoders: a prefill, then a decode step
        ref = result["engines"]["ref"]
        assert ref["shapes"] == [[1, 9]] and result["partition"]["kept"] == {}, result
        if importlib.util.find_spec("torch"):
            assert ref["vs_torch"] is None and result["tvm_vs_torch"] is None, result


@pytest.mark.parametrize("dtype", list(DECODERS.values()))
def test_a_decoders_inputs_are_valid_and_its_torch_twin_is_a_witness(dtype):
    """The decoder's tokens lie in its vocabulary (prefill and decode step), and torch's outputs
    are a real second witness: TVM alone matches them, a logit moved by 1 does not."""
    pytest.importorskip("torch")
    import tvm

    from simaccel.tvm_integration.tools import decoder
    from simaccel.tvm_integration.tools.common.runs import run_vm
    from simaccel.tvm_integration.tools.conformance.check import _torch_difference
    from simaccel.tvm_integration.tools.conformance.zoo import load
    from simaccel.tvm_integration.backend.pipeline import build_tvm_only

    loaded = load(f"decoder:{dtype}")
    [(shape, decode, decode_torch)] = loaded.more
    assert shape == (1, 9) and loaded.inputs[0].shape == (1, 9) and decode[0].shape == (1, 1)
    assert all(0 <= t.min() and t.max() < decoder.SMALL.vocab for t in (loaded.inputs[0], decode[0]))
    tvm_alone = build_tvm_only(loaded.mod, "llvm")
    for inputs, torch_outputs in ((loaded.inputs, loaded.torch_outputs), (decode, decode_torch)):
        want = run_vm(tvm_alone, inputs, tvm.cpu())
        assert _torch_difference(want, torch_outputs) is None
        want[0] = want[0] + np.asarray(1, want[0].dtype)
        assert "output 0" in _torch_difference(want, torch_outputs)


def test_a_second_backend_passes_and_its_report_names_it(tmp_path):
    status = run_conformance(["relax"], engines=["cpu"], partition=parse_partition(TOY), out_dir=tmp_path,
                             only="hetero_chain,demo_cnn", reload_every=1, log=lambda _: None)
    results = _results(tmp_path)
    assert status == 0 and results["backend"] == "partition_for_toy"
    hetero = next(r for r in results["models"] if r["model"]["name"] == "hetero_chain")
    assert hetero["engines"]["cpu"]["verdict"] == "passed" and hetero["engines"]["cpu"]["reload"]["verdict"] == "passed"
    assert hetero["partition"]["offloaded"] == {"toy.add": 1, "toy.matmul": 1, "toy.relu": 1}
    assert "offloaded to partition_for_toy: 3 region(s)" in hetero["partition_text"]
    assert "partition_for_toy does not offload relax.nn.log_softmax" in hetero["partition_text"]


def test_a_planted_fault_in_the_second_backend_fails_its_models_and_compare_flags_them(tmp_path):
    clean, faulty = tmp_path / "clean", tmp_path / "faulty"
    args = ["conformance", "--zoo", "relax", "--partition", TOY, "--only", "matmul_relu,hetero_chain",
            "--reload-every", "0"]
    assert _cli(*args, "--out", str(clean)).returncode == 0
    run = _cli(*args, "--out", str(faulty), "--compare", str(clean / "conformance.json"), env={"TOY_FAULT": "add"})
    assert run.returncode == 1, run.stdout + run.stderr
    results = _results(faulty)
    verdicts = {r["model"]["name"]: model_verdict(r) for r in results["models"]}
    assert verdicts == {"matmul_relu": "passed", "hetero_chain": "failed"}  # only the model with an add
    hetero = next(r for r in results["models"] if r["model"]["name"] == "hetero_chain")
    assert hetero["engines"]["cpu"]["stage"] == "output (cpu)" and "differs from TVM alone" in hetero["engines"]["cpu"]["reason"]
    assert "REGRESSION: hetero_chain: passed, now fails" in run.stdout
    assert results["compared_with"]["regressions"][0].startswith("hetero_chain: passed, now fails")


def test_users_models_from_a_folder_and_an_entry_point(tmp_path):
    entry = tmp_path / "my_models.py"
    entry.write_text("from simaccel.tvm_integration.tools import models\n"
                     "def zoo():\n    return {'tiny_mm': models.matmul_relu(8), 'tiny_conv': models.conv_bias_relu(1, 4, 6)}\n")
    chosen = zoo((), [str(USER_MODELS), f"{entry}:zoo"], only="two_layer_mlp,tiny_*")
    assert [m.name for m in chosen] == ["two_layer_mlp", "tiny_mm", "tiny_conv"]
    assert {m.source for m in chosen} == {"user"}
    status = run_conformance((), [str(USER_MODELS), f"{entry}:zoo"], engines=["ref"], only="two_layer_mlp,tiny_*",
                             out_dir=tmp_path / "out", log=lambda _: None)
    assert status == 0
    assert [model_verdict(r) for r in _results(tmp_path / "out")["models"]] == ["passed"] * 3


BAD_ARGUMENTS = [
    (["--partition", "no_colon"], "expected MODULE:FUNCTION"),
    (["--partition", "no_such_module_xyz:partition_for_x"], "cannot import no_such_module_xyz"),
    (["--partition", f"{TOY.rpartition(':')[0]}:partition_for_nothing"], "has no function partition_for_nothing"),
    (["--partition", TOY, "--engine", "ref"], "--engine ref: choose from cpu, cuda"),
    (["--engine", "cpu"], "--engine cpu: choose from ref, sim, cuda, native"),
    (["--only", "nothing_like_it*"], "--only nothing_like_it*: no model of the zoo matches"),
    (["--models", "/no/such/folder.py"], "--models /no/such/folder.py: no such file"),
    (["--models", "os:getcwd"], "returned a str; return a tvm.IRModule or a dict of them by name"),
    (["--compare", "/no/such.json"], "--compare /no/such.json: no such file"),
    (["--reload-every", "-1"], "--reload-every -1: must be >= 0"),
    (["--zoo", "onnx"], "unknown source(s) onnx"),
]


@pytest.fixture(scope="module")
def bad_argument_runs(tmp_path_factory):
    """Every bad command line, each a fork of one process that imported the CLI (tests/forks.py)."""
    out = tmp_path_factory.mktemp("bad")
    return forks.cli_many([{"argv": ["conformance", "--zoo", "relax", *args, "--out", str(out / str(i))]}
                           for i, (args, _) in enumerate(BAD_ARGUMENTS)])


@pytest.mark.parametrize("case", range(len(BAD_ARGUMENTS)), ids=[m.split(":")[0][:40] for _, m in BAD_ARGUMENTS])
def test_cli_conformance_refuses_bad_arguments(case, bad_argument_runs):
    run, (_, message) = bad_argument_runs[case], BAD_ARGUMENTS[case]
    assert run.returncode == 2, run.stdout + run.stderr
    assert message in run.stderr, run.stderr


def test_a_partition_function_that_returns_no_module_is_named():
    from simaccel.tvm_integration.tools import models

    with pytest.raises(SimAccelError, match="builtins:id: returned a int, not a tvm.IRModule"):
        Backend("builtins:id").partition(models.matmul_relu(4))


def test_compare_flags_a_slower_ratio_and_notes_a_fix():
    def run(verdict, ratio):
        entry = {"verdict": verdict, "stage": "", "reason": "", "ratio": ratio,
                 "median_us": {"tvm_only": 100.0, "backend": 100.0 * ratio}}
        return {"models": [{"model": {"name": "m", "source": "relax"}, "engines": {"native": entry}}]}

    regressions, notes = compare(run("passed", 1.3), run("passed", 1.0))
    assert regressions == ["m native: 1.00x -> 1.30x of TVM alone (+30%)"] and notes == []
    assert compare(run("passed", 1.05), run("passed", 1.0)) == ([], [])  # within noise
    regressions, notes = compare(run("passed", 1.0), run("failed", 1.0))
    assert regressions == [] and notes == ["m: failed, now passes"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None or importlib.util.find_spec("torchvision") is None,
                    reason="the torch zoo needs torch and torchvision: pip install '.[torch]'")
def test_a_torch_model_matches_tvm_alone_and_torch(tmp_path):
    status = run_conformance(["torch"], engines=["ref"], only="resnet18", out_dir=tmp_path, reload_every=0,
                             log=lambda _: None)
    (result,) = _results(tmp_path)["models"]
    assert status == 0 and result["model"]["source"] == "torch"
    assert result["tvm_vs_torch"] is None  # TVM alone matches torch; simaccel matches TVM alone
    assert result["engines"]["ref"]["verdict"] == "passed" and result["partition"]["kept_total"] == 0
    assert "vs_torch" in result["engines"]["ref"] and result["engines"]["ref"]["vs_torch"] is None
    assert "passed, = torch" in (tmp_path / "conformance.md").read_text()


def test_fuzz_checks_a_second_backend_and_finds_its_planted_fault(tmp_path):
    args = ["fuzz", "--partition", TOY, "--cases", "6", "--max-ops", "4", "--seed", "1", "--dtype", "float32",
            "--export-every", "3", "--shrink-seconds", "15"]
    clean = _cli(*args, "--out", str(tmp_path / "clean"))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    summary = json.loads((tmp_path / "clean" / "fuzz-summary.json").read_text())
    assert summary["cases_with_simaccel_regions"] >= 2 and summary["reloaded_in_fresh_process"] == 2
    assert set(summary["simaccel_ops_run"]) <= {"toy.relu", "toy.add", "toy.multiply", "toy.matmul", "toy.sigmoid"}
    faulty = _cli(*args, "--out", str(tmp_path / "faulty"), env={"TOY_FAULT": "add"})
    assert faulty.returncode == 1, faulty.stdout + faulty.stderr
    (failure, *_) = json.loads((tmp_path / "faulty" / "fuzz-summary.json").read_text())["failures"]
    assert (failure["stage"], failure["error"]) == ("output (cpu)", "mismatch"), failure
    repro = Path(failure["reproduction"]) / "repro.py"
    assert _cli_script(repro, {"TOY_FAULT": "add"}).returncode == 1  # replayed with the toy backend: still fails
    assert _cli_script(repro, {}).returncode == 0  # and passes once the fault is gone


def _cli_script(path: Path, env: dict):
    environ = {k: v for k, v in os.environ.items() if k != "TOY_FAULT"}
    return forks.run([sys.executable, str(path)], env={**environ, **env}, cwd="/", timeout=None)


def test_a_failure_with_no_message_is_reported_with_the_place_that_raised_it():
    """TVM's own schedule rules fail with bare asserts (dlight's GEMV rule on some small models);
    a skipped model's reason must still say where TVM alone failed."""
    def rule():
        raise AssertionError  # what a bare assert raises outside pytest's rewriting

    try:
        rule()
    except AssertionError as e:
        line = error_line(e)
    assert line.startswith("AssertionError in ") and line.endswith("(rule)"), line
    assert "test_conformance.py:" in line
    assert error_line(ValueError("first\nlast")) == "ValueError: last"


CONSTANT_WEIGHTS = """
import numpy as np
from tvm import relax

bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType((4, 8), "float32"))
w = relax.const(np.random.default_rng(0).standard_normal((8, 8)).astype("float32"))
with bb.function("main", [x]):
    with bb.dataflow():
        h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.matmul(x, w))))
        out = bb.emit_output(relax.op.nn.log_softmax(h))
    bb.emit_func_output(out)
mod = bb.get()
"""


def test_tvm_s_log_lines_stay_off_the_console_and_are_kept_with_the_model(tmp_path):
    """Exporting a model with a constant makes TVM's C++ write "Scope Saving:" on stderr (fd 2):
    the line is in the model's record, not on the console."""
    import re

    (tmp_path / "constant_weights.py").write_text(CONSTANT_WEIGHTS)
    result = _cli("conformance", "--zoo", "", "--models", str(tmp_path / "constant_weights.py"), "--reload-every", "1",
                  "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    console = result.stdout + result.stderr
    assert "Scope Saving" not in console and not re.search(r"^\[\d\d:\d\d:\d\d\] \S+:\d+: ", console, re.M), console
    assert "conformance: 1 models in" in result.stdout
    [model] = _results(tmp_path / "out")["models"]
    assert model["engines"]["ref"]["reload"]["verdict"] == "passed"
    assert model["stderr_lines"] >= 1 and any("executable.cc:276: Warning: Scope Saving:" in line
                                              for line in model["stderr"]), model.get("stderr")


NEEDS_TORCH = pytest.mark.skipif(importlib.util.find_spec("torch") is None or importlib.util.find_spec("torchvision") is None,
                                 reason="the torch zoo needs torch and torchvision: pip install '.[torch]'")


@NEEDS_TORCH
def test_dynamic_torch_models_run_one_build_at_each_of_their_shapes(tmp_path):
    status = run_conformance(["torch"], engines=["ref"], only="dyn_*", out_dir=tmp_path, reload_every=0,
                             log=lambda _: None)
    assert status == 0
    results = _results(tmp_path)["models"]
    assert sorted(r["model"]["name"] for r in results) == ["dyn_cnn", "dyn_encoder", "dyn_mlp"]
    for r in results:
        entry = r["engines"]["ref"]
        assert entry["verdict"] == "passed" and entry["vs_torch"] is None, r
        assert len(entry["shapes"]) == 2 and r["partition"]["kept_total"] == 0, r
    assert "passed, = torch, at 3 shapes" in (tmp_path / "conformance.md").read_text()


@NEEDS_TORCH
def test_a_fault_at_one_shape_of_a_dynamic_model_fails_it_naming_the_shape(tmp_path, monkeypatch):
    """layer_norm made wrong only for the upper-bound batch of dyn_mlp (8 x 64 rows)."""
    plant_reference(monkeypatch, "simaccel.layer_norm", lambda y: y + 1 if y.shape[:2] == (8, 64) else y)
    status = run_conformance(["torch"], engines=["ref"], only="dyn_mlp", out_dir=tmp_path, reload_every=0,
                             log=lambda _: None)
    monkeypatch.undo()
    simaccel.get_runtime().clear()
    assert status == 1
    [result] = _results(tmp_path)["models"]
    entry = result["engines"]["ref"]
    assert entry["verdict"] == "failed" and "at input shape (8, 64)" in entry["reason"], entry


def test_the_decoder_gpu_script_judges_a_step_as_conformance_does():
    """scripts/decoder_gpu.py's verdict of one step: passed where simaccel matches TVM alone and
    torch; TVM numerically off where simaccel matches torch and TVM alone does not (its bfloat16
    sums, seen on an H100); failed where simaccel misses torch, or misses TVM alone while TVM
    alone matches torch."""
    import importlib.util
    from pathlib import Path

    from simaccel.tvm_integration.tools.common.verdicts import FAIL, PASS, TVM_OFF

    path = Path(__file__).resolve().parents[1] / "scripts" / "decoder_gpu.py"
    spec = importlib.util.spec_from_file_location("decoder_gpu", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    # (simaccel matches TVM alone, simaccel matches torch, TVM alone matches torch) -> verdict
    cases = {(True, True, True): PASS, (True, True, False): PASS, (False, True, False): TVM_OFF,
             (False, True, True): FAIL, (True, False, True): FAIL, (False, False, False): FAIL}
    assert {args: script.step_verdict(*args) for args in cases} == cases
