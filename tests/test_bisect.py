"""Region bisection (`simaccel.debug.bisect`, `simaccel bisect`) and the capture it runs under.

The planted defect is tests/user_ops/wrong_op.py: `wrongaccel.abs`, whose reference and kernel
are both 0.25 off in one element, placed in the third of five regions. Bisection must name
that region and op, the element and the error, and its reproducer must fail the same way in a
fresh process. A clean model must give no culprit; a wrong built-in op and results spoiled at
a region's boundary or after it must be found too; bad inputs are SimAccelErrors.
"""

import json
import os
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

import forks
import simaccel
from harness import plant_reference
from simaccel.debug import Capture, Watcher, bisect, watching
from simaccel.errors import DtypeError, EngineError, ShapeError, SimAccelError
from simaccel.tvm_integration import partition_report
from simaccel.tvm_integration.tools.bisect import Difference, NothingOffloaded
from simaccel.tvm_integration.tools.models import random_inputs

from test_runtime import mlp_inputs, mlp_program

WRONG_OP = str(Path(__file__).resolve().parent / "user_ops" / "wrong_op.py")
WRONG_REGION = 2  # the third region holds tanh -> wrongaccel.abs


def five_regions(rows: int = 2, features: int = 8, third=relax.op.abs) -> tvm.IRModule:
    """matmul+relu | tanh | tanh -> `third` (abs) | exp | multiply, separated by log_softmax (kept on TVM)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((rows, features), "float32"))
    w = relax.Var("w", relax.TensorType((features, features), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.matmul(x, w))))
            h = bb.emit(relax.op.nn.log_softmax(h))
            h = bb.emit(relax.op.tanh(h))
            h = bb.emit(relax.op.nn.log_softmax(h))
            h = bb.emit(third(bb.emit(relax.op.tanh(h))))
            h = bb.emit(relax.op.nn.log_softmax(h))
            h = bb.emit(relax.op.exp(h))
            h = bb.emit(relax.op.nn.log_softmax(h))
            out = bb.emit_output(bb.emit(relax.op.multiply(h, h)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.fixture
def wrong_op(isolated_isa, monkeypatch):
    """wrongaccel.abs declared (through $SIMACCEL_OPS) for the test only."""
    modules = set(sys.modules)
    monkeypatch.setenv("SIMACCEL_OPS", WRONG_OP)
    isolated_isa.get_op("wrongaccel.abs")
    yield isolated_isa
    for name in set(sys.modules) - modules:
        if name.startswith("simaccel_user_ops_") or getattr(sys.modules[name], "__file__", "") == WRONG_OP:
            del sys.modules[name]


def regions(mod) -> list[tuple[str, list[str]]]:
    _, report = partition_report(mod)
    return list(report.regions.items())


def test_the_model_has_five_regions_and_the_wrong_op_in_the_third(wrong_op):
    found = regions(five_regions())
    assert [ops for _, ops in found] == [["simaccel.matmul_relu"], ["simaccel.tanh"], ["simaccel.tanh", "wrongaccel.abs"],
                                         ["simaccel.exp"], ["simaccel.multiply"]]


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_bisect_names_the_wrong_user_op_and_its_reproducer_fails_the_same_way(wrong_op, engine, tmp_path):
    mod = five_regions()
    lines = []
    report = bisect(mod, random_inputs(mod, 0), engine=engine, out_dir=tmp_path / "repro", log=lines.append)
    c = report.culprit
    assert c is not None and c.level == "op"
    assert (c.region, c.op, c.op_index) == (regions(mod)[WRONG_REGION][0], "wrongaccel.abs", 1)
    assert c.call == WRONG_REGION and (c.shape, c.dtype) == ((2, 8), "float32")
    assert c.where == (0, 5)  # flat index 5 of wrong_op.WRONG_INDEX
    assert c.max_error == pytest.approx(0.25, abs=1e-6) and c.got - c.want == pytest.approx(0.25, abs=1e-6)
    assert c.explanation.startswith("agrees with simaccel")  # the declaration itself is wrong, kernel and reference alike
    assert c.user_op_module == WRONG_OP
    assert report.engine == engine and report.checked == {"regions": 3, "ops": 4, "calls": 5}
    assert not report.model[0].ok  # the whole model differs too
    text = report.format()
    assert "wrongaccel.abs" in text and "max error 0.25 at (0, 5)" in text and "RESULT: MISMATCH" in text
    assert any("region 3/5" in line and "wrongaccel.abs" in line for line in lines), lines  # progress lines

    folder = report.repro_dir
    assert folder == tmp_path / "repro"
    assert {p.name for p in folder.iterdir()} >= {"module.py", "inputs.npz", "repro.py", "bisect.json"}
    assert "R.abs(" in (folder / "module.py").read_text()
    with np.load(folder / "inputs.npz") as data:
        assert list(data.files) == ["arg0"] and data["arg0"].shape == (2, 8)
    env = {k: v for k, v in os.environ.items() if k not in ("SIMACCEL_OPS", "SIMACCEL_ENGINE")}
    result = forks.run([sys.executable, str(folder / "repro.py")], timeout=600, env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert Difference(False, c.max_error, c.where, c.got, c.want).line() in result.stdout, result.stdout
    assert "RESULT: MISMATCH" in result.stdout


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_a_clean_model_has_no_culprit(engine, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mod = five_regions(third=relax.op.sigmoid)
    assert [ops for _, ops in regions(mod)][2] == ["simaccel.tanh", "simaccel.sigmoid"] and len(regions(mod)) == 5
    report = bisect(mod, random_inputs(mod, 1), engine=engine)
    assert report.culprit is None and report.repro_dir is None
    assert report.checked == {"regions": 5, "ops": 6, "calls": 5}
    assert all(d.ok for d in report.model) and report.notes == []
    assert "RESULT: every region and op matches TVM alone" in report.format()
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_wrong_built_in_op_is_named(monkeypatch, tmp_path, request):
    request.addfinalizer(simaccel.get_runtime().clear)  # plans hold the planted op: none may outlive the test

    def off_in_one_element(result):
        result = np.array(result, dtype=np.float32)
        result.reshape(-1)[3] -= 0.125
        return result

    plant_reference(monkeypatch, "simaccel.tanh", off_in_one_element)
    monkeypatch.chdir(tmp_path)
    mod = five_regions()
    report = bisect(mod, random_inputs(mod, 0), engine="ref")
    c = report.culprit
    assert (c.level, c.region, c.op, c.op_index, c.where) == ("op", regions(mod)[1][0], "simaccel.tanh", 0, (0, 3))
    assert c.max_error == pytest.approx(0.125, abs=1e-6) and c.user_op_module is None
    assert report.repro_dir.parent == tmp_path and report.repro_dir.name.startswith("simaccel-bisect-")
    assert "simaccel.tanh" in report.repro_dir.name


class Spoil(Watcher):
    """Adds 1 to element 0 of a region's first output at region_end (a wrong boundary copy)."""

    def __init__(self, region: str):
        self.region = region

    def region_end(self, run):
        if run.program.name == self.region:
            out = run.program.outputs[0]
            host = run.to_host(out)
            host.reshape(-1)[0] += 1
            run.engine.from_host(run.call, run.slots[out], host)


def spoiled_bisect(monkeypatch, before_capture: bool):
    """bisect with a Spoil watcher installed before the capture (it sees the spoiled output) or after."""
    from simaccel.debug import hooks

    mod = five_regions(third=relax.op.sigmoid)
    spoil = Spoil(regions(mod)[3][0])  # exp's region
    install = hooks.install

    def install_with_spoil(watcher):
        if isinstance(watcher, Capture) and before_capture:
            install(spoil)
        install(watcher)
        if isinstance(watcher, Capture) and not before_capture:
            install(spoil)

    monkeypatch.setattr(hooks, "install", install_with_spoil)
    try:
        return mod, bisect(mod, random_inputs(mod, 0), engine="ref")
    finally:
        hooks.uninstall(spoil)


def test_an_output_spoiled_at_the_region_boundary_is_reported_at_region_level(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    mod, report = spoiled_bisect(monkeypatch, before_capture=True)
    c = report.culprit
    assert (c.level, c.region, c.op, c.where) == ("region", regions(mod)[3][0], None, (0, 0))
    assert c.max_error == pytest.approx(1.0, abs=1e-6)
    assert report.checked["regions"] == 4 and report.checked["ops"] == 5  # every op up to there matched
    assert "R.exp(" in (report.repro_dir / "module.py").read_text()


def test_an_error_no_region_shows_is_reported_at_model_level(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    mod, report = spoiled_bisect(monkeypatch, before_capture=False)
    c = report.culprit
    assert (c.level, c.region, c.op) == ("model", None, None)
    assert report.checked == {"regions": 5, "ops": 6, "calls": 5}
    assert "outside them" in c.explanation and "the model's output" in report.format()


def test_bad_inputs_are_simaccel_errors():
    mod = five_regions()
    x, w = random_inputs(mod, 0)
    with pytest.raises(SimAccelError, match=r"main takes 2 inputs \(x, w\), got 1"):
        bisect(mod, [x])
    with pytest.raises(ShapeError, match=r"input w has shape \(8, 7\); main takes \(8, 8\) float32"):
        bisect(mod, [x, w[:, :7]])
    with pytest.raises(DtypeError, match=r"input x has dtype float16"):
        bisect(mod, [x.astype(np.float16), w])
    with pytest.raises(SimAccelError, match="takes a Relax IRModule"):
        bisect("model.py", [x, w])
    with pytest.raises(SimAccelError, match="over the limit of 100"):
        bisect(mod, [x, w], max_bytes=100)
    with pytest.raises(EngineError, match="unknown engine 'gpu'"):
        bisect(mod, [x, w], engine="gpu")
    with pytest.raises(SimAccelError, match="rtol -1 must be a finite number"):
        bisect(mod, [x, w], rtol=-1)


def test_capture_keeps_each_op_s_inputs_and_output(clean_runtime):
    x, w, b = mlp_inputs()
    y = np.zeros((4, 6), np.float32)
    capture = Capture()
    with clean_runtime.use_engine("ref"), watching(capture):
        clean_runtime.run(mlp_program(), x, w, b, y)
    (call,) = capture.calls
    assert call.region == "mlp" and call.engine == "ref" and call.ops_done == 2
    for got, want in zip(call.inputs(), (x, w, b)):
        np.testing.assert_array_equal(got, want)
    hidden = np.maximum(x @ w.T + b, 0)
    np.testing.assert_allclose(call.op_output(0), hidden, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(call.op_inputs(1)[0], call.op_output(0))
    np.testing.assert_array_equal(call.region_outputs()[0], y)
    assert capture.nbytes == sum(a.nbytes for a in (x, w, b)) + hidden.nbytes + 2 * y.nbytes
    x[0, 0] += 1  # host copies: the caller's buffers changing later does not change them
    assert call.inputs()[0][0, 0] != x[0, 0]
    with pytest.raises(SimAccelError, match=r"region mlp \(call 1\): keeping input .* over the limit of 10"):
        with clean_runtime.use_engine("ref"), watching(Capture(max_bytes=10)):
            clean_runtime.run(mlp_program(), x, w, b, y)


ROOT = Path(__file__).resolve().parent.parent
BISECT_MODEL = (ROOT / "examples" / "bisect_model.py").read_text()  # the model docs/debugging.md bisects


def cli(*args, env=None, cwd="/"):
    return forks.run([sys.executable, "-m", forks.CLI, "bisect", *args], timeout=600, cwd=cwd,
                     env={**{k: v for k, v in os.environ.items() if k != "SIMACCEL_OPS"}, **(env or {})})


def test_cli_bisect_on_a_model_file(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(BISECT_MODEL)
    found = cli(str(model), "-o", str(tmp_path / "out"), env={"SIMACCEL_OPS": WRONG_OP})
    assert found.returncode == 1, found.stdout + found.stderr
    assert "culprit: region" in found.stdout and "op 1 wrongaccel.abs" in found.stdout
    assert "max error 0.25 at (0, 5)" in found.stdout and "bisect: region 2/2" in found.stdout
    assert (tmp_path / "out" / "repro.py").is_file()

    clean = cli(str(model), cwd=str(tmp_path))  # abs stays on TVM: every region matches
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "RESULT: every region and op matches TVM alone" in clean.stdout
    assert not list(tmp_path.glob("simaccel-bisect-*"))

    np.savez(tmp_path / "bad.npz", arg0=np.zeros((2, 8), np.float32), arg1=np.zeros(3, np.float32))
    for args, message in (((str(model), "--inputs", str(tmp_path / "bad.npz")), "main takes 1 inputs (x), got 2"),
                          ((), "give a model file (MODEL.py) or --demo"),
                          ((str(model), "--rtol", "-1"), "--rtol -1.0: must be a finite number >= 0")):
        bad = cli(*args)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_a_region_called_twice_is_checked_at_each_call(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mod = five_regions()  # abs stays on TVM (wrongaccel.abs is not declared): both tanh regions are one function
    assert len(regions(mod)) == 4
    report = bisect(mod, random_inputs(mod, 2), engine="ref")
    assert report.culprit is None and report.checked == {"regions": 5, "ops": 5, "calls": 5}


@pytest.mark.gpu
def test_bisect_on_the_gpu_sees_native_regions_through_the_capture(wrong_op, tmp_path):
    mod = five_regions()
    report = bisect(mod, random_inputs(mod, 0), target="cuda", out_dir=tmp_path / "repro")
    c = report.culprit
    assert report.engine == "cuda" and report.target == "cuda"  # native regions forwarded to the Python engine
    assert (c.region, c.op, c.op_index, c.where) == (regions(mod)[WRONG_REGION][0], "wrongaccel.abs", 1, (0, 5))
    assert c.max_error == pytest.approx(0.25, abs=1e-6)


def test_a_region_with_scalar_constants_is_checked_op_by_op(wrong_op, tmp_path):
    """The region's own scalar constants (x * 0.5, + 1.5) are tensors of its Program between its
    parameters and its results: the op-level check must still read each op's right inputs."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.multiply(x, relax.const(0.5, "float32")))
            h = bb.emit(relax.op.add(h, relax.const(1.5, "float32")))
            h = bb.emit(relax.op.abs(bb.emit(relax.op.tanh(h))))
            out = bb.emit_output(bb.emit(relax.op.nn.log_softmax(h)))
        bb.emit_func_output(out)
    mod = bb.get()
    assert [ops for _, ops in regions(mod)] == [["simaccel.multiply", "simaccel.add", "simaccel.tanh", "wrongaccel.abs"]]
    report = bisect(mod, random_inputs(mod, 0), engine="ref", out_dir=tmp_path / "repro")
    c = report.culprit
    assert c is not None and c.level == "op" and (c.op, c.op_index) == ("wrongaccel.abs", 3), report.format()
    assert report.checked["ops"] == 4 and not report.notes, report.notes  # every op checked, none skipped
    assert c.max_error == pytest.approx(0.25, abs=1e-6) and c.where == (0, 5)


def test_the_documented_failing_bisect_works_as_written(tmp_path):
    """docs/debugging.md's failing-bisect example: its command line, run in a folder holding the
    files it names at the same paths as the checkout (the example model, the planted op), exits 1
    and prints every line the doc shows (paths printed relative to that folder)."""
    doc = (ROOT / "docs" / "debugging.md").read_text()
    found = re.search(r"^    \$ (SIMACCEL_OPS=\S+ simaccel bisect .*)\n((?:    .*\n)+)", doc, re.M)
    assert found, "docs/debugging.md shows no failing `simaccel bisect` run"
    env, program, *args = shlex.split(found.group(1))
    assert program == "simaccel"
    name, value = env.split("=", 1)
    for path in (value, *[a for a in args if a.endswith(".py")]):
        assert (ROOT / path).is_file(), f"the documented command names {path}, which the checkout does not hold"
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text((ROOT / path).read_text())
    result = forks.run([sys.executable, "-m", forks.CLI, *args], timeout=600, cwd=str(tmp_path),
                       env={**{k: v for k, v in os.environ.items() if k != "SIMACCEL_OPS"}, name: value})
    assert result.returncode == 1, result.stdout + result.stderr
    printed = {line.strip().replace(f"{tmp_path}/", "") for line in result.stdout.splitlines()}
    shown = [line.strip() for line in found.group(2).splitlines() if line.strip() != "..."]
    assert len(shown) >= 10 and [line for line in shown if line not in printed] == [], result.stdout
    assert (tmp_path / args[args.index("-o") + 1] / "repro.py").is_file()


CUMPROD_ONLY = """
from tvm import relax

bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType((4, 8), "float32"))
with bb.function("main", [x]):
    with bb.dataflow():
        out = bb.emit_output(relax.op.cumprod(x, axis=1))
    bb.emit_func_output(out)
mod = bb.get()
"""
ADD_RELU = CUMPROD_ONLY.replace("relax.op.cumprod(x, axis=1)", "relax.op.nn.relu(relax.op.add(x, x))")


@pytest.mark.parametrize("model, profile, reason", [
    (CUMPROD_ONLY, None, "relax.cumprod: simaccel has no pattern for relax.cumprod"),
    (ADD_RELU, {"name": "matmul-only", "ops": ["simaccel.matmul"]},
     "relax.nn.relu: simaccel.relu rejected: op simaccel.relu is not enabled in profile matmul-only"),
    (ADD_RELU, {"name": "fp16-only", "dtypes": ["float16"]}, "lhs dtype float32 is not supported (profile fp16-only"),
], ids=["an op simaccel lacks", "ops a profile leaves out", "a dtype a profile leaves out"])
def test_bisect_of_a_model_with_nothing_offloaded_says_so(tmp_path, model, profile, reason):
    (tmp_path / "model.py").write_text(model)
    args = [str(tmp_path / "model.py")]
    if profile is not None:
        (tmp_path / "profile.json").write_text(json.dumps(profile))
        args += ["--profile", str(tmp_path / "profile.json")]
    result = cli(*args, cwd=str(tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "nothing was offloaded to simaccel" in line and "nothing to bisect" in line and reason in line, line
    assert "internal error" not in line and not list(tmp_path.glob("simaccel-bisect-*"))


def test_bisect_from_python_of_a_model_with_nothing_offloaded_raises():
    namespace = {}
    exec(CUMPROD_ONLY, namespace)  # noqa: S102 - the test's own model text
    mod = namespace["mod"]
    with pytest.raises(NothingOffloaded, match=r"nothing was offloaded .* relax.cumprod") as raised:
        bisect(mod, random_inputs(mod, 0))
    assert isinstance(raised.value, SimAccelError) and raised.value.partition.kept


def test_bisect_finds_the_wrong_op_of_a_symbolic_model_at_the_sizes_of_its_inputs(wrong_op, tmp_path):
    """A model with a symbolic batch: the inputs give the sizes (n = 3 here), the captures are at
    those sizes, and the planted op is found; inputs that disagree on n are a ShapeError naming it."""
    n = tvm.tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.abs(bb.emit(relax.op.tanh(x))))
            out = bb.emit_output(bb.emit(relax.op.nn.log_softmax(h)))
        bb.emit_func_output(out)
    mod = bb.get()
    arrays = [np.random.default_rng(0).standard_normal((3, 8)).astype("float32")]
    report = bisect(mod, arrays, engine="ref", out_dir=tmp_path / "repro")
    c = report.culprit
    assert c is not None and c.op == "wrongaccel.abs" and c.max_error == pytest.approx(0.25, abs=1e-6), report.format()
    with pytest.raises(ShapeError, match="main takes"):
        bisect(mod, [np.zeros((3, 7), "float32")], engine="ref")


def test_bisect_runs_tvm_alone_on_an_op_that_takes_the_region_s_sizes(tmp_path, monkeypatch):
    """A region whose tensors show b and s only as b * s takes them as a shape argument: bisect
    passes the captured call's sizes to TVM alone's one-op module (no "numpy reference only"
    note), finds the planted op, and reproduces it with the whole model."""
    from harness import plant_reference
    from test_symbolic_models import SizesPassed

    plant_reference(monkeypatch, "simaccel.matmul_relu", lambda y: y + 0.5)
    arrays = [np.random.default_rng(1).standard_normal((3, 5, 16)).astype("float32"),
              np.random.default_rng(2).standard_normal((16, 4)).astype("float32")]
    report = bisect(SizesPassed, arrays, engine="ref", out_dir=tmp_path / "repro")
    monkeypatch.undo()
    simaccel.get_runtime().clear()
    c = report.culprit
    assert c is not None and c.op == "simaccel.matmul_relu" and c.max_error == pytest.approx(0.5, abs=1e-5), report.format()
    assert not [n for n in report.notes if "numpy reference only" in n], report.notes
    # TVM alone's one-op module ran (the planted reference is what the ref engine runs too)
    assert c.explanation.startswith("agrees with simaccel: the op's declaration"), c.explanation
    assert (tmp_path / "repro" / "module.py").exists() and "R.reshape" in (tmp_path / "repro" / "module.py").read_text()
