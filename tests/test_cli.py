"""The `simaccel` command line: its commands, and its answers to user mistakes.

Exit status: 0 success, 1 results mismatch, 2 user error (one line on stderr, no traceback),
3 internal error, 130 interrupted. The fault catalogue below runs each kind of bad
invocation in a process of its own and checks that answer (each a fork of one warm process,
tests/forks.py).
"""

import json
import os
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import forks
from simaccel.tvm_integration.tools import cli
from simaccel.errors import SimAccelError
from simaccel.tvm_integration.tools.bench import CASES as BENCH_CASES
from simaccel.tvm_integration.tools.common.arrays import read_arrays


def simaccel(*args, env=None):
    """Run the installed `simaccel` command (from outside the source tree): `python -m` its CLI,
    as a fork of a process that imported it (tests/forks.py)."""
    return forks.cli(*args, env=env)


def test_help_lists_commands():
    result = simaccel("--help")
    assert result.returncode == 0
    assert "demo" in result.stdout and "build" in result.stdout
    demo = simaccel("demo", "--help")
    assert "--engine" in demo.stdout and "--seed" in demo.stdout


@pytest.mark.parametrize("args", [("demo",), ("demo", "--seed", "3", "--dtype", "float16")])
def test_demo_verifies_against_tvm(args):
    result = simaccel(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "offloaded to simaccel: 2 region(s)" in out
    assert "relax.nn.leakyrelu: simaccel has no pattern for relax.nn.leakyrelu" in out
    assert "max abs error vs TVM alone" in out
    assert "bytes copied by simaccel: host->device 0" in out
    assert out.strip().endswith("RESULT: match")


def test_demo_rejects_a_bad_engine_from_the_environment():
    result = simaccel("demo", env={"SIMACCEL_ENGINE": "warp-drive"})
    assert result.returncode == 2
    assert "EngineError" in result.stderr and "warp-drive" in result.stderr


def test_ops_lists_the_isa():
    result = simaccel("ops", env={"SIMACCEL_OPS": ""})
    assert result.returncode == 0
    lines = result.stdout.rstrip().splitlines()
    assert "  simaccel.conv2d_bias_relu(data, weight, bias)  attrs: strides, padding, dilation, groups" in lines
    assert "simaccel.conv2d family (built-in): 2-D convolution, NCHW data, OIHW weight, grouped and depthwise too" in lines
    assert "  simaccel.reshape(data)  attrs: shape" in lines
    assert "  simaccel.relu(data)" in lines
    assert "  simaccel.concat(data...)  attrs: axis" in lines
    ops = [line for line in lines if line.startswith("  ")]
    families = [line for line in lines if not line.startswith("  ")]
    from simaccel.ops import registry

    built_in = [f for f in registry.families() if f.name.startswith("simaccel.")]
    assert len(families) == len(built_in) and all("family (built-in): " in line for line in families)
    assert len(ops) == sum(len(f.variants()) for f in built_in) == 79  # tests/test_isa.py BUILT_IN_OPS


def test_ops_lists_users_ops_from_the_environment():
    rms_norm_op = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "rms_norm_op.py")
    result = simaccel("ops", env={"SIMACCEL_OPS": rms_norm_op})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.rstrip().splitlines()
    assert lines[:-2] == simaccel("ops", env={"SIMACCEL_OPS": ""}).stdout.rstrip().splitlines()
    assert lines[-2:] == ["myaccel.rms_norm family (user op, namespace myaccel, drawn by simaccel fuzz)",
                          "  myaccel.rms_norm(data, weight)  attrs: epsilon"]
    bad = simaccel("ops", env={"SIMACCEL_OPS": "/no/such/ops.py"})
    assert bad.returncode == 2 and "cannot load '/no/such/ops.py'" in bad.stderr and "Traceback" not in bad.stderr


def test_demo_exits_1_on_a_mismatch(monkeypatch):
    """A wrong accelerator result must fail the demo, not pass silently."""
    import simaccel
    from harness import plant_reference
    from simaccel.tvm_integration.tools.demo import run_demo

    plant_reference(monkeypatch, "simaccel.softmax", lambda y: y[..., ::-1])
    lines = []
    try:
        assert run_demo(engine="ref", out=lines.append) == 1
    finally:
        simaccel.get_runtime().clear()
    assert lines[-1] == "RESULT: MISMATCH"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A folder with the demo model exported once, its inputs and output, and bad files of every kind."""
    from harness import tvm_alone
    from simaccel.tvm_integration import build
    from simaccel.tvm_integration.tools.models import demo_cnn, random_inputs

    d = tmp_path_factory.mktemp("cli")
    mod = demo_cnn(batch=1)
    build(mod).export_library(str(d / "demo.so"))
    inputs = random_inputs(mod, 5)
    want = tvm_alone(mod, inputs)
    np.savez(d / "in.npz", **{f"arg{i}": a for i, a in enumerate(inputs)})
    np.savez(d / "good.npz", arg0=want)
    np.savez(d / "bad.npz", arg0=want[:, ::-1])
    np.savez(d / "short.npz", arg0=inputs[0])
    _write_bad_files(d)
    return d


def _write_bad_files(d):
    x = np.zeros(2, np.float32)
    (d / "notes.txt").write_text("not a library, not an npz\n")
    (d / "empty.so").write_bytes(b"")
    (d / "folder").mkdir()
    np.save(d / "one.npy", x)
    (d / "corrupt.npz").write_bytes((d / "in.npz").read_bytes()[:100])
    np.savez(d / "gap.npz", arg0=x, arg2=x)
    np.savez(d / "duplicate.npz", arg1=x, arr_1=x)
    np.savez(d / "unknown.npz", arg0=x, weights=x)
    np.savez(d / "strings.npz", arg0=np.array(["a"]))
    with zipfile.ZipFile(d / "raw.npz", "w") as z:
        z.writestr("arg0", "bytes, not an array")
    (d / "model_none.py").write_text("import tvm\nmodel = None\n")
    (d / "model_int.py").write_text("mod = 3\n")
    (d / "model_raises.py").write_text("raise ValueError('weights.bin is missing')\n")
    (d / "model_exits.py").write_text("import sys\nsys.exit(4)\n")
    (d / "model_nomain.py").write_text("import tvm\nmod = tvm.IRModule()\n")
    (d / "model_dynamic.py").write_text(BUILD_MODEL.replace("(4, 16)", "(tvm.tirx.Var('n', 'int64'), 16)"))
    case = {"params": [["x", [8, 8], "float32"]], "regions": {}, "seed": 0}
    manifests = {
        "art_none": None,
        "art_notjson": "{not json",
        "art_nocases": {"target": "cuda"},
        "art_nokeys": {"cases": {"mm8": {"params": []}}},
        "art_badparams": {"cases": {"mm8": {**case, "params": [["x", [8], "float99"]]}}},
        "art_nolibs": {"cases": {name: case for name in BENCH_CASES}},
        "art_fewcases": {"cases": {"mm8": case}},
        "art_ok": {"cases": {name: case for name in BENCH_CASES}},
    }
    for name, manifest in manifests.items():
        (d / name).mkdir()
        if manifest is not None:
            text = manifest if isinstance(manifest, str) else json.dumps(manifest)
            (d / name / "manifest.json").write_text(text)
    for name in manifests["art_ok"]["cases"]:
        for build in ("simaccel", "tvm"):
            (d / "art_ok" / f"{name}.{build}.so").write_bytes(b"")  # never loaded: --out fails first


def test_run_checks_an_exported_library(files):
    ok = simaccel("run", str(files / "demo.so"), "--inputs", str(files / "in.npz"),
                  "--expect", str(files / "good.npz"), "--save", str(files / "outputs"))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip().endswith("RESULT: match")
    saved = read_arrays(files / "outputs")  # written at exactly that path, no ".npz" added
    np.testing.assert_allclose(saved[0], np.load(files / "good.npz")["arg0"], rtol=1e-4, atol=1e-5)

    mismatch = simaccel("run", str(files / "demo.so"), "--inputs", str(files / "in.npz"),
                        "--expect", str(files / "bad.npz"))
    assert mismatch.returncode == 1 and "RESULT: MISMATCH" in mismatch.stdout


# A model file as a user writes one: TVM -> simaccel -> TVM, two outputs, `mod` at module level.
BUILD_MODEL = """
import tvm
from tvm import relax

bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType((4, 16), "float32"))
w = relax.Var("w", relax.TensorType((8, 16), "float32"))
with bb.function("main", [x, w]):
    with bb.dataflow():
        h = bb.emit(relax.op.nn.leakyrelu(x, 0.1))
        y = bb.emit(relax.op.nn.relu(relax.op.matmul(h, relax.op.permute_dims(w))))
        out = bb.emit_output(relax.Tuple([y, relax.op.nn.log_softmax(y)]))
    bb.emit_func_output(out)
mod = bb.get()
"""

# The same kind of model as TVMScript, named `Module` as `mod.script()` (and a fuzz reproduction) names it.
BUILD_SCRIPT = """
from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((3, 8), dtype="float16"), w: R.Tensor((8, 5), dtype="float16")) -> R.Tensor((3, 5), dtype="float16"):
        with R.dataflow():
            lv = R.matmul(x, w)
            gv = R.nn.softmax(R.tanh(lv))
            R.output(gv)
        return gv
"""


def load_model_file(path):
    import runpy

    names = runpy.run_path(str(path))
    return names.get("mod", names.get("Module"))


@pytest.mark.parametrize("source, regions", [("--demo", 2), ("model.py", 1), ("script.py", 1)])
def test_build_makes_a_library_that_run_checks(tmp_path, source, regions):
    """`simaccel build` then `simaccel run` as its last line says: the library matches the
    outputs it wrote, and those are the outputs of TVM alone (rebuilt here) on its inputs."""
    from harness import tvm_alone
    from simaccel.tvm_integration.tools.models import demo_cnn

    (tmp_path / "model.py").write_text(BUILD_MODEL)
    (tmp_path / "script.py").write_text(BUILD_SCRIPT)
    args = ("--demo",) if source == "--demo" else (str(tmp_path / source),)
    built = simaccel("build", *args, "-o", str(tmp_path / "lib.so"), "--seed", "3")
    assert built.returncode == 0, built.stdout + built.stderr
    assert f"offloaded to simaccel: {regions} region(s)" in built.stdout
    command = built.stdout.strip().splitlines()[-1]
    assert command.startswith("check it: simaccel run ")
    ran = simaccel(*command.split()[3:], "--save", str(tmp_path / "got.npz"))
    assert ran.returncode == 0 and ran.stdout.strip().endswith("RESULT: match"), ran.stdout + ran.stderr

    mod = demo_cnn() if source == "--demo" else load_model_file(tmp_path / source)
    inputs = read_arrays(tmp_path / "lib.inputs.npz")
    want = tvm_alone(mod, inputs)
    want = want if isinstance(want, list) else [want]
    expected, got = read_arrays(tmp_path / "lib.expect.npz"), read_arrays(tmp_path / "got.npz")
    assert len(expected) == len(want) == len(got) == (2 if source == "model.py" else 1)
    for e, w, g in zip(expected, want, got):
        assert e.dtype == w.dtype == g.dtype and e.shape == w.shape
        np.testing.assert_array_equal(e, w)  # the same TVM-alone build on the same inputs
        tolerance = 2e-2 if w.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tolerance, atol=tolerance)


def test_build_partitions_for_the_profile_it_is_given(tmp_path):
    (tmp_path / "model.py").write_text(BUILD_MODEL)
    (tmp_path / "p.json").write_text(json.dumps({"name": "relu-only", "ops": ["simaccel.relu"]}))
    built = simaccel("build", str(tmp_path / "model.py"), "-o", str(tmp_path / "lib.so"), "--profile", str(tmp_path / "p.json"))
    assert built.returncode == 0, built.stderr
    assert "offloaded to simaccel: 1 region(s) (profile relu-only)" in built.stdout
    assert re.search(r"fused_\S+: simaccel.relu\n", built.stdout), built.stdout  # the matmul stays on TVM
    assert "simaccel.dense rejected: op simaccel.dense is not enabled in profile relu-only" in built.stdout
    ran = simaccel(*built.stdout.strip().splitlines()[-1].split()[3:])
    assert ran.returncode == 0 and ran.stdout.strip().endswith("RESULT: match"), ran.stdout + ran.stderr


def test_build_a_model_with_a_user_op_declared_beside_it(tmp_path):
    """The model file imports its ops module as a script would; `simaccel run` finds the op
    through $SIMACCEL_OPS, as docs/adding-an-op.md says."""
    import shutil

    shutil.copy(os.path.join(os.path.dirname(__file__), "..", "examples", "rms_norm_op.py"), tmp_path / "rms_norm_op.py")
    (tmp_path / "model.py").write_text("import rms_norm_op\n" + BUILD_MODEL.replace(
        "relax.op.nn.leakyrelu(x, 0.1)", "relax.op.nn.rms_norm(x, relax.const(__import__('numpy').ones(16, 'float32')), [-1])"))
    built = simaccel("build", str(tmp_path / "model.py"), "-o", str(tmp_path / "lib.so"), env={"SIMACCEL_OPS": ""})
    assert built.returncode == 0, built.stderr
    assert re.search(r"fused_\S+: myaccel.rms_norm -> simaccel.dense_relu\n", built.stdout), built.stdout
    command = built.stdout.strip().splitlines()[-1].split()[3:]
    ran = simaccel(*command, env={"SIMACCEL_OPS": str(tmp_path / "rms_norm_op.py")})
    assert ran.returncode == 0 and ran.stdout.strip().endswith("RESULT: match"), ran.stdout + ran.stderr


def test_build_draws_other_inputs_for_another_seed(tmp_path):
    (tmp_path / "model.py").write_text(BUILD_MODEL)
    drawn = []
    for seed in ("0", "1"):
        result = simaccel("build", str(tmp_path / "model.py"), "-o", str(tmp_path / f"s{seed}.so"), "--seed", seed)
        assert result.returncode == 0, result.stderr
        drawn.append(read_arrays(tmp_path / f"s{seed}.inputs.npz"))
    assert [a.shape for a in drawn[0]] == [(4, 16), (8, 16)] and not np.array_equal(drawn[0][0], drawn[1][0])


RUN = ("run", "{d}/demo.so", "--inputs", "{d}/in.npz")
NO_SYS = pytest.mark.skipif(not os.path.isdir("/sys"), reason="needs /sys, which not even root may write into")


def fault(args, names, env=None, *, id, marks=()):
    """A bad invocation: its arguments ({d}: the files folder), what its error line must say."""
    return pytest.param(args, names, {"SIMACCEL_DEBUG": "", **(env or {})}, id=id, marks=marks)


FAULTS = [
    fault(("run", "{d}/notes.txt", "--inputs", "{d}/in.npz"), "library {d}/notes.txt: TVM cannot load it", id="lib-text"),
    fault(("run", "{d}/empty.so", "--inputs", "{d}/in.npz"), "library {d}/empty.so: TVM cannot load it", id="lib-empty"),
    fault(("run", "{d}/folder", "--inputs", "{d}/in.npz"), "library {d}/folder: not a file", id="lib-folder"),
    fault(("run", "{d}/nothing.so", "--inputs", "{d}/in.npz"), "library {d}/nothing.so: no such file", id="lib-missing"),
    fault(("run", "{d}/demo.so", "--inputs", "{d}/short.npz"), "expects 11 arguments", id="inputs-too-few"),
    fault(("run", "{d}/demo.so", "--inputs", "{d}/nothing.npz"), "--inputs {d}/nothing.npz: no such file", id="inputs-missing"),
    fault(("run", "{d}/demo.so", "--inputs", "{d}/folder"), "--inputs {d}/folder: not a file", id="inputs-folder"),
    fault(("run", "{d}/demo.so", "--inputs", "{d}/notes.txt"), "--inputs {d}/notes.txt: not an .npz", id="inputs-text"),
    fault(("run", "{d}/demo.so", "--inputs", "{d}/empty.so"), "--inputs {d}/empty.so: not an .npz", id="inputs-empty"),
    fault(("run", "{d}/demo.so", "--inputs", "{d}/one.npy"), "--inputs {d}/one.npy: a single .npy", id="inputs-npy"),
    fault(("run", "{d}/demo.so", "--inputs", "{d}/corrupt.npz"), "--inputs {d}/corrupt.npz: a damaged", id="inputs-corrupt"),
    fault(("run", "{d}/demo.so", "--inputs", "{d}/gap.npz"), "keys arg0, arg2 leave out position(s) 1", id="inputs-gap"),
    fault(("run", "{d}/demo.so", "--inputs", "{d}/duplicate.npz"), "keys arg1, arr_1 mix", id="inputs-duplicate"),
    fault(("run", "{d}/demo.so", "--inputs", "{d}/unknown.npz"), "weights", id="inputs-unknown-name"),
    fault(("run", "{d}/demo.so", "--inputs", "{d}/strings.npz"), "'arg0' is not a numeric array", id="inputs-strings"),
    fault(("run", "{d}/demo.so", "--inputs", "{d}/raw.npz"), "'arg0' is not a numeric array", id="inputs-raw-member"),
    fault((*RUN, "--expect", "{d}/notes.txt"), "--expect {d}/notes.txt: not an .npz", id="expect-text"),
    fault((*RUN, "--expect", "{d}/gap.npz"), "--expect {d}/gap.npz: keys arg0, arg2", id="expect-gap"),
    fault((*RUN, "--save", "{d}/nowhere/out.npz"), "--save {d}/nowhere/out.npz: cannot write", id="save-no-folder"),
    fault((*RUN, "--save", "{d}/notes.txt/out.npz"), "--save {d}/notes.txt/out.npz: cannot write", id="save-under-file"),
    fault((*RUN, "--save", "{d}/folder"), "--save {d}/folder: cannot write", id="save-folder"),
    fault((*RUN, "--save", "/sys/simaccel-out.npz"), "--save /sys/simaccel-out.npz: cannot write", id="save-read-only", marks=NO_SYS),
    fault((*RUN, "--device", "cuda:x"), "unknown device 'cuda:x'", id="device-malformed"),
    fault((*RUN, "--device", "tpu"), "unknown device 'tpu'", id="device-unknown"),
    fault((*RUN, "--device", "cuda:-1"), "unknown device 'cuda:-1'", id="device-negative"),
    fault((*RUN, "--device", "cuda:99"), "device cuda:99", id="device-absent"),
    fault((*RUN, "--rtol", "-1"), "--rtol -1.0: must be a finite number >= 0", id="rtol-negative"),
    fault((*RUN, "--atol", "nan"), "--atol nan", id="atol-nan"),
    fault((*RUN, "--atol", "inf"), "--atol inf", id="atol-inf"),
    fault(("demo", "--seed", "-1"), "--seed -1: must be >= 0", id="demo-seed-negative"),
    fault(("bench", "--artifacts", "{d}/art_ok", "--repeat", "0"), "--repeat 0: must be >= 1", id="bench-repeat-0"),
    fault(("bench", "--artifacts", "{d}/nothing"), "artifacts folder {d}/nothing: no such folder", id="bench-no-folder"),
    fault(("bench", "--artifacts", "{d}/art_none"), "no manifest.json in {d}/art_none", id="bench-no-manifest"),
    fault(("bench", "--artifacts", "{d}/art_notjson"), "{d}/art_notjson/manifest.json: not valid JSON", id="bench-not-json"),
    fault(("bench", "--artifacts", "{d}/art_nocases"), 'manifest.json: no "cases" object', id="bench-no-cases"),
    fault(("bench", "--artifacts", "{d}/art_nokeys"), "case 'mm8' lacks regions, seed", id="bench-missing-keys"),
    fault(("bench", "--artifacts", "{d}/art_badparams"), "case 'mm8': params must be", id="bench-bad-params"),
    fault(("bench", "--artifacts", "{d}/art_fewcases"), "has no case mm1024, mm4096, conv56", id="bench-missing-cases"),
    fault(("bench", "--artifacts", "{d}/art_nolibs"), "{d}/art_nolibs lacks mm8.simaccel.so", id="bench-missing-libraries"),
    fault(("bench", "--artifacts", "{d}/art_ok", "--out", "{d}/notes.txt/bench"), "output folder {d}/notes.txt/bench", id="bench-out-under-file"),
    fault(("demo",), "this TVM is runtime-only", {"TVM_USE_RUNTIME_LIB": "1"}, id="demo-runtime-only"),
    fault(("build", "-o", "{d}/b.so"), "build: give a model file (MODEL.py) or --demo", id="build-nothing"),
    fault(("build", "{d}/model_int.py", "--demo", "-o", "{d}/b.so"), "or --demo, not both", id="build-both"),
    fault(("build", "--demo", "-o", "{d}/b.tar"), "-o {d}/b.tar: the library's name must end in .so", id="build-not-so"),
    fault(("build", "--demo", "-o", "{d}/nowhere/b.so"), "-o {d}/nowhere/b.so: cannot write", id="build-no-folder"),
    fault(("build", "--demo", "-o", "{d}/b.so", "--seed", "-2"), "--seed -2: must be >= 0", id="build-seed-negative"),
    fault(("build", "{d}/nothing.py", "-o", "{d}/b.so"), "model file {d}/nothing.py: no such file", id="build-no-model"),
    fault(("build", "{d}/folder", "-o", "{d}/b.so"), "model file {d}/folder: not a file", id="build-model-folder"),
    fault(("build", "{d}/model_none.py", "-o", "{d}/b.so"), "defines no `mod` (or `Module`)", id="build-no-mod"),
    fault(("build", "{d}/model_int.py", "-o", "{d}/b.so"), "`mod` is a int, not a tvm.IRModule", id="build-mod-int"),
    fault(("build", "{d}/model_raises.py", "-o", "{d}/b.so"), "running it raised ValueError: weights.bin is missing",
          id="build-model-raises"),
    fault(("build", "{d}/model_exits.py", "-o", "{d}/b.so"), "exited (status 4)", id="build-model-exits"),
    fault(("build", "{d}/model_nomain.py", "-o", "{d}/b.so"), "has no Relax function `main`", id="build-no-main"),
    fault(("build", "{d}/model_dynamic.py", "-o", "{d}/b.so"), "main's parameter x is", id="build-dynamic-shape"),
    fault(("build", "--demo", "-o", "{d}/b.so", "--profile", "{d}/notes.txt"), "device profile {d}/notes.txt",
          id="build-bad-profile"),
    fault(("bench",), "bench: say what to do: --artifacts DIR", id="bench-no-flags"),
    fault(("bench", "--out", "{d}/b"), "--ops (time each op's kernel on a GPU) or --report NEW.json", id="bench-only-out"),
    fault(("bench", "--artifacts", "{d}/art_ok", "--report", "{d}/r.json", "--compare", "{d}/r.json"), "not both",
          id="bench-artifacts-and-report"),
]


@pytest.fixture(scope="module")
def fault_results(files):
    """Every invocation of the catalogue, by id: each a fork of one process that imported the CLI
    (tests/forks.py), or a process of its own where the environment acts at import."""
    commands = [{"argv": [a.format(d=files) for a in p.values[0]], "env": p.values[2]} for p in FAULTS]
    return {p.id: result for p, result in zip(FAULTS, forks.cli_many(commands), strict=True)}


@pytest.mark.parametrize("args, names, env", FAULTS)
def test_fault_catalogue(request, fault_results, files, args, names, env):
    """Each user mistake: exit 2, one line on stderr naming what is wrong, nothing run, no traceback."""
    result = fault_results[request.node.callspec.id]
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("simaccel: error: "), result.stderr
    assert names.format(d=files) in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize(
    "args, message",
    [(("run", "lib.so"), "--inputs"), (("demo", "--seed", "x"), "--seed"), (("run", "lib.so", "--inputs", "a", "--device"), "--device")],
)
def test_usage_errors_stay_with_argparse(args, message):
    result = simaccel(*args)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: simaccel") and message in result.stderr.splitlines()[-1]
    assert "Traceback" not in result.stderr


def test_read_arrays_orders_by_position_and_refuses_ambiguous_names(tmp_path):
    arrays = {f"arg{i}": np.full(1, i) for i in range(12)}  # arg10 sorts after arg9, not after arg1
    np.savez(tmp_path / "twelve.npz", **arrays)
    assert [int(a[0]) for a in read_arrays(tmp_path / "twelve.npz")] == list(range(12))
    np.savez(tmp_path / "positional.npz", np.zeros(1), np.ones(1))  # numpy names them arr_0, arr_1
    assert [a[0] for a in read_arrays(tmp_path / "positional.npz")] == [0, 1]
    for keys, message in [(("arg1",), "leave out position(s) 0"), (("arg0", "arg01"), "names arg01 are not argN"),
                          (("arr_0", "arg1"), "mix argN and arr_N"), (("arg0", "arg3", "arg5"), "position(s) 1, 2, 4")]:
        np.savez(tmp_path / "bad.npz", **{key: np.zeros(1) for key in keys})
        with pytest.raises(SimAccelError, match=re.escape(message)):
            read_arrays(tmp_path / "bad.npz", "--inputs")


@pytest.mark.parametrize(
    "raised, status, line",
    [
        (KeyboardInterrupt(), 130, "simaccel: interrupted"),
        (ZeroDivisionError("float division by zero"), 3,
         "simaccel: internal error: ZeroDivisionError: float division by zero (set SIMACCEL_DEBUG=1 for the traceback; please report it)"),
    ],
)
def test_interrupts_and_internal_errors_are_one_line(monkeypatch, capsys, raised, status, line):
    def dispatch(args):
        raise raised

    monkeypatch.setattr(cli, "_dispatch", dispatch)
    monkeypatch.delenv("SIMACCEL_DEBUG", raising=False)
    assert cli.main(["ops"]) == status
    assert capsys.readouterr().err.splitlines() == [line]

    monkeypatch.setenv("SIMACCEL_DEBUG", "1")  # the traceback too; the exit status stays
    assert cli.main(["ops"]) == status
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.splitlines()[-1] == line


@pytest.mark.parametrize(
    "args, message",
    [(("--staged",), "needs --device cuda"), (("--engine", "cuda", "--device", "cpu"), "cuda engine works on GPU tensors")],
)
def test_demo_rejects_impossible_combinations_before_compiling(args, message):
    result = simaccel("demo", *args)
    assert result.returncode == 2
    assert message in result.stderr and "[2] compile" not in result.stdout


def test_demo_with_a_device_profile(tmp_path):
    """--profile: the demo partitions for the user's accelerator, says so, and still matches TVM alone."""
    profile = tmp_path / "conv-only.json"
    profile.write_text(json.dumps({"name": "conv-only", "ops": ["simaccel.conv2d"], "max_region_bytes": 200000}))
    result = simaccel("demo", "--device", "cpu", "--profile", str(profile))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "region(s) (profile conv-only)" in result.stdout and "RESULT: match" in result.stdout
    assert "not enabled in profile conv-only" in result.stdout
    profile.write_text(json.dumps({"name": "bad", "max_rank": 0.5}))
    bad = simaccel("demo", "--device", "cpu", "--profile", str(profile))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "max_rank must be a positive integer" in bad.stderr


@pytest.mark.parametrize("command", ["demo", "fuzz"])
@pytest.mark.parametrize("content, message", [
    ({"name": "typo", "ops": ["simaccel.convv2d"]}, "profile typo: ops ['simaccel.convv2d'] are neither ops nor op families"),
    ([1, 2], "a device profile is an object of the fields"),
    ("conv-only", "got a str: 'conv-only'"),
])
def test_a_profile_the_isa_cannot_honour_is_a_user_error(tmp_path, command, content, message):
    """An op the ISA lacks (once: 0 regions and exit 0) and a JSON value that is no object
    (once: "unknown: [1, 2]"): one line naming the problem, exit 2, before any work."""
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(content))
    result = simaccel(command, "--profile", str(profile))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr and result.stdout == "", result.stderr
    assert "unknown:" not in result.stderr


def test_a_closed_pipe_is_no_error():
    """`simaccel ops | true`: the reader is gone before anything is written; no error, no traceback."""
    result = subprocess.run(f"{sys.executable} -m simaccel.tvm_integration.tools.cli ops | true; echo ${{PIPESTATUS[0]}}",
                            shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=300, cwd="/")
    assert result.stdout.strip() == "0" and result.stderr == ""
