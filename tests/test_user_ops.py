"""Users' ops with values in their patterns: scalar constants and numbers, end to end and in `simaccel fuzz`.

The ops are tests/user_ops/*.py, written from docs/adding-an-op.md alone: hard swish
(x * clip(x + 3, 0, 6) / 6: two scalar ``R.const`` values and clip's two bounds, all checked)
and max(x, slope * x) (a scalar ``R.const`` slope, offloaded only in [0, 1]). Every result is
compared with the same model built by TVM alone. Last, a user op's numpy reference whose result
is not the op's declared output (None, a scalar, a list, a tuple, a shape numpy would broadcast,
objects or complex numbers) is an error naming the op on the ref engine, never a wrong answer.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

import forks
import simaccel
from harness import compare_with_tvm
from simaccel.errors import OpDeclarationError, SimAccelError
from simaccel.profile import DeviceProfile
from simaccel.testing import assert_matches_tvm, assert_offloads
from simaccel.tvm_integration import partition_report
from simaccel.tvm_integration.tools.fuzz import run_fuzz
from simaccel.tvm_integration.tools.fuzz.models import Config, Draw, UserFuzzOp, draw_case, drawable_user_families

USER_OPS = Path(__file__).resolve().parent / "user_ops"
HARD_SWISH_OP, LEAKY_OP = str(USER_OPS / "hard_swish_op.py"), str(USER_OPS / "leaky_op.py")
RMS_NORM_OP = str(Path(__file__).resolve().parents[1] / "examples" / "rms_norm_op.py")


@pytest.fixture
def user_ops(isolated_isa, monkeypatch):
    """myaccel.hard_swish and myaccel.leaky declared (through $SIMACCEL_OPS) for the test only."""
    modules = set(sys.modules)
    monkeypatch.setenv("SIMACCEL_OPS", f"{HARD_SWISH_OP},{LEAKY_OP}")
    isolated_isa.get_op("myaccel.hard_swish")  # loads $SIMACCEL_OPS
    yield isolated_isa
    for name in set(sys.modules) - modules:
        if name.startswith("simaccel_user_ops_") or getattr(sys.modules[name], "__file__", "") in (HARD_SWISH_OP, LEAKY_OP):
            del sys.modules[name]


def _model(shape, dtype, body) -> tvm.IRModule:
    """main(x) = body(x) in one dataflow block, then tanh (a built-in op sharing the region)."""
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with builder.function("main", [x]):
        with builder.dataflow():
            y = builder.emit(relax.op.tanh(builder.emit(body(builder, x))))
            out = builder.emit_output(y)
        builder.emit_func_output(out)
    return builder.get()


def hard_swish(shape, dtype, three=3.0, low=0.0, high=6.0, six=6.0) -> tvm.IRModule:
    def body(b, x):
        clipped = b.emit(relax.op.clip(b.emit(relax.op.add(x, relax.const(three, dtype))), low, high))
        return relax.op.divide(b.emit(relax.op.multiply(x, clipped)), relax.const(six, dtype))
    return _model(shape, dtype, body)


def leaky(shape, dtype, slope) -> tvm.IRModule:
    constant = relax.const(np.full((), slope) if np.ndim(slope) == 0 else np.asarray(slope), dtype)
    return _model(shape, dtype, lambda b, x: relax.op.maximum(x, b.emit(relax.op.multiply(x, constant))))


def specials(shape, dtype) -> np.ndarray:
    """Seeded values with NaN, +-inf, a zero and a value whose product with 6 overflows float16."""
    a = np.random.default_rng(0).uniform(-8, 8, shape)
    flat = a.reshape(-1)
    flat[: min(5, flat.size)] = [np.nan, np.inf, -np.inf, 0.0, 6e4 if dtype == "float16" else 1e38][: min(5, flat.size)]
    return a.astype(dtype)


MODELS = [("myaccel.hard_swish", lambda shape, dtype: hard_swish(shape, dtype))] + [
    ("myaccel.leaky", lambda shape, dtype, s=s: leaky(shape, dtype, s)) for s in (0.1, 0.5, 1.0)]


# -- scalar constants as values: partition, codegen, run ------------------------------------------
@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", [(2, 3), (7,), (0, 3)])
@pytest.mark.parametrize("op, model", MODELS, ids=["hard_swish", "leaky0.1", "leaky0.5", "leaky1"])
def test_values_from_scalar_constants_offload_and_match_tvm(user_ops, engine, dtype, shape, op, model):
    """The report offloads the op, the codegen builds it (the constants are bound in its
    composite, no region parameters), and every engine gives TVM alone's result."""
    mod = model(shape, dtype)
    partitioned, report = partition_report(mod)
    assert list(report.regions.values()) == [[op, "simaccel.tanh"]] and report.kept == []
    [region] = [f for f in partitioned.functions.values() if f.attrs and f.attrs.get("Codegen") == "simaccel"]
    assert [p.name for p in region.params] == ["x"]  # the constants are values, not region inputs
    _, _, snapshot = compare_with_tvm(mod, engine, arrays=[np.random.default_rng(1).uniform(-8, 8, shape).astype(dtype)],
                                      expect_offload=0 not in shape)
    if 0 not in shape:
        assert snapshot["ops"].get(op) == 1, snapshot


def test_equal_matches_with_different_constants_each_keep_their_own(user_ops, simaccel_engine):
    """FuseOpsByPattern makes one composite function of equal matches, whatever their constants:
    each call gets its own copy with its own slope (hard swish's equal constants share one)."""
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 4), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            ys = [builder.emit(relax.op.maximum(x, builder.emit(relax.op.multiply(x, relax.const(s, "float32")))))
                  for s in (0.25, 0.5)]
            hs = []
            for v in (x, ys[0]):  # equal matches with equal constants
                c = builder.emit(relax.op.clip(builder.emit(relax.op.add(v, relax.const(3.0, "float32"))), 0, 6))
                hs.append(builder.emit(relax.op.divide(builder.emit(relax.op.multiply(v, c)), relax.const(6.0, "float32"))))
            out = builder.emit_output(relax.Tuple(ys + hs))
        builder.emit_func_output(out)
    mod = builder.get()
    report = assert_offloads(mod, ops=["myaccel.hard_swish"] * 2 + ["myaccel.leaky"] * 2)
    assert sorted(op for ops in report.regions.values() for op in ops) == ["myaccel.hard_swish"] * 2 + ["myaccel.leaky"] * 2, report.format()
    x = specials((3, 4), "float32")
    [run] = assert_matches_tvm(mod, [x], engines=[simaccel_engine])
    got = run.outputs
    negative = np.isfinite(x) & (x < 0)
    assert negative.any() and np.allclose(got[1][negative], 2 * got[0][negative])  # two slopes, two results
    assert run.ledger["ops"] == {"myaccel.leaky": 2, "myaccel.hard_swish": 2}, run.ledger


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("op, model", MODELS[:3], ids=["hard_swish", "leaky0.1", "leaky0.5"])
@pytest.mark.filterwarnings("error")
def test_nan_and_inf_are_results_on_every_engine_with_warnings_as_errors(user_ops, engine, dtype, op, model):
    """NaN, inf and overflow inside a user's kernel on `sim` (numpy scalar math) raise no
    warning, as inside built-in kernels (tanh, and exp overflowing, in the same region)."""
    mod = model((2, 4), dtype)
    x = specials((2, 4), dtype)
    compare_with_tvm(mod, engine, arrays=[x])
    exp_model = _model((2, 4), dtype, lambda b, x: relax.op.exp(b.emit(relax.op.multiply(x, relax.const(40.0, dtype)))))
    compare_with_tvm(exp_model, engine, arrays=[x])


@pytest.mark.parametrize("values, reason", [
    ({"three": 2.0}, "myaccel.hard_swish rejected: not hard swish: {'three': 2.0}"),
    ({"low": -1.0}, "myaccel.hard_swish rejected: not hard swish: {'low': -1.0}"),
    ({"high": 5.0, "six": 5.0}, "myaccel.hard_swish rejected: not hard swish: {'high': 5.0, 'six': 5.0}"),
])
def test_hard_swish_values_that_fail_its_check_stay_on_tvm_with_the_reason(user_ops, values, reason):
    """Its match is rejected by value: with the op alone enabled, its ops stay on TVM with the
    reason; with every op, simaccel's built-in add, clip, multiply and divide take them."""
    mod = hard_swish((2, 3), "float32", **values)
    only = DeviceProfile(name="hard-swish-only", ops={"myaccel.hard_swish"})
    _, report = partition_report(mod, only)
    assert report.regions == {} and [r for _, op, r in report.kept if op == "relax.divide"] == [reason + " (hard swish is x * clip(x + 3, 0, 6) / 6)"], report.format()
    compare_with_tvm(mod, "ref", profile=only, expect_offload=False)
    _, report = partition_report(mod)
    assert list(report.regions.values()) == [["simaccel.add", "simaccel.clip", "simaccel.multiply", "simaccel.divide",
                                              "simaccel.tanh"]]
    compare_with_tvm(mod, "ref")


@pytest.mark.parametrize("slope, reason", [
    (1.5, "myaccel.leaky rejected: max(x, 1.5 * x) is a leaky ReLU only for a slope in (0, 1]"),
    (-0.5, "myaccel.leaky rejected: max(x, -0.5 * x) is a leaky ReLU only for a slope in (0, 1]"),
    (0.0, "myaccel.leaky rejected: max(x, 0.0 * x) is a leaky ReLU only for a slope in (0, 1]"),
    ([0.5, 0.5, 0.5], "myaccel.leaky rejected: slope is not a constant"),  # a tensor constant, not a scalar
])
def test_a_constant_that_fails_the_check_stays_on_tvm_with_the_reason(user_ops, slope, reason):
    mod = leaky((2, 3), "float32", slope)
    _, report = partition_report(mod)
    [kept] = [k for k in report.kept if k[1] == "relax.maximum"]
    assert kept[2].startswith(reason), report.format()
    assert all("myaccel.leaky" not in ops for ops in report.regions.values())
    compare_with_tvm(mod, "ref")


def test_a_value_that_is_a_variable_stays_on_tvm(user_ops):
    builder = relax.BlockBuilder()
    x, s = relax.Var("x", relax.TensorType((2, 3), "float32")), relax.Var("s", relax.TensorType((), "float32"))
    with builder.function("main", [x, s]):
        with builder.dataflow():
            out = builder.emit_output(relax.op.maximum(x, builder.emit(relax.op.multiply(x, s))))
        builder.emit_func_output(out)
    _, report = partition_report(builder.get())
    assert list(report.regions.values()) == [["simaccel.multiply"]]  # the built-in op takes the product alone
    assert any(r.startswith("myaccel.leaky rejected: slope is not a constant") for _, _, r in report.kept), report.format()


# -- simaccel fuzz: every declared user op with a hook is drawn -----------------------------------
@pytest.fixture
def with_rms_norm(user_ops, monkeypatch):
    monkeypatch.setenv("SIMACCEL_OPS", f"{HARD_SWISH_OP},{LEAKY_OP},{RMS_NORM_OP}")
    user_ops.get_op("myaccel.rms_norm")
    yield user_ops
    for name in [n for n, m in sys.modules.items() if getattr(m, "__file__", "") == RMS_NORM_OP]:
        del sys.modules[name]


@pytest.mark.parametrize("config", [Config(), Config(tiny=True, dtypes=("float16",))], ids=["default", "tiny-float16"])
def test_every_declared_user_op_with_a_fuzz_hook_is_drawn(with_rms_norm, config):
    """Each family is drawn in 80 cases, its values (inner clip's bounds, scalar constants)
    in the Relax call, and most of its drawn calls are ones simaccel offloads."""
    families = [f.name for f in drawable_user_families(config)]
    assert families == ["myaccel.hard_swish", "myaccel.leaky", "myaccel.rms_norm"]
    nodes = [(case, v) for case in (draw_case(Draw.seeded(seed), config) for seed in range(80)) for v in case.values
             if v.op in families]
    for name in families:
        drawn = [(case, v) for case, v in nodes if v.op == name]
        assert len(drawn) >= 3, (name, len(drawn))
        takes = [UserFuzzOp(name).exact_for([case.values[a].shape for a in v.args], v.attrs, case.dtype) for case, v in drawn]
        assert sum(takes) > len(takes) / 2, (name, takes)
    case, node = next((c, v) for c, v in nodes if v.op == "myaccel.hard_swish")
    script = case.module().script()
    assert "R.clip(" in script and "T.float64(0.0), T.float64(6.0)" in script
    assert f'R.const(3.0, "{case.dtype}")' in script and f'R.const(6.0, "{case.dtype}")' in script
    slopes = {v.attrs["slope"]["const"] for _, v in nodes if v.op == "myaccel.leaky"}
    assert slopes & {0.1, 0.25, 0.5, 1.0} and slopes & {1.5, -0.5}, slopes  # offloaded and kept-on-TVM slopes drawn


def _declare_variant(registry, name, fuzz):
    family = registry.get_op("myaccel.leaky").family
    from simaccel.ops import declare

    return declare(dataclasses.replace(family, name=name, fuzz=fuzz))


@pytest.mark.parametrize("hook, message", [
    (lambda shape, draw: ({}, {}), "its fuzz hook gave no value for relax_value(s) ['slope']"),
    (lambda shape, draw: ({}, {"slope": np.ones(2)}), "an array of shape (2,); a constant value is 0-d"),
    (lambda shape, draw: ({}, {"slope": np.array(0.5), "axis": 1}), "which Relax refuses: TypeError"),
    (lambda shape, draw: None, "simaccel fuzz cannot draw it: its fuzz hook returned None for each of the 20 input"),
    (lambda shape, draw: ({}, {"slope": np.array(3.0)}), "simaccel keeps every call its fuzz hook gave on TVM, e.g. "
                                                         "max(x, 3.0 * x) is a leaky ReLU only"),
    (lambda shape, draw: 1 / 0, "its fuzz hook failed on shape"),
], ids=["no-value", "array", "bad-kwarg", "never", "always-rejected", "raises"])
def test_a_user_op_fuzz_cannot_draw_is_an_error_naming_the_family(user_ops, tmp_path, hook, message):
    """No silent redraw: the run stops before its first case, naming the family and why."""
    _declare_variant(user_ops, "badaccel.leaky", hook)
    with pytest.raises(OpDeclarationError, match="op family 'badaccel.leaky'") as error:
        drawable_user_families(Config())
    assert message in str(error.value)
    with pytest.raises(OpDeclarationError, match="badaccel.leaky"):
        run_fuzz(cases=1, engines=["ref"], out_dir=tmp_path / "out", log=lambda _: None)
    assert not (tmp_path / "out").exists()


def simaccel_cli(*args, env):
    return forks.cli(*args, env=env, timeout=900)


def test_cli_fuzz_offloads_user_ops_with_values_and_leaves_no_running_folder(tmp_path):
    """A seeded run with both ops in $SIMACCEL_OPS: models hold them, simaccel runs them, all
    match TVM alone; the run leaves no empty running/ folder."""
    result = simaccel_cli("fuzz", "--cases", "8", "--seed", "2", "--out", str(tmp_path), "--export-every", "4",
                          "--dtype", "float32", env={"SIMACCEL_OPS": f"{HARD_SWISH_OP},{LEAKY_OP}"})
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "fuzz-summary.json").read_text())
    assert summary["counts"]["failed"] == 0 and summary["cases"] == 8
    assert all(summary["user_ops_in_models"][op] >= 1 for op in ("myaccel.hard_swish", "myaccel.leaky")), summary
    assert all(summary["simaccel_ops_run"].get(op, 0) >= 1 for op in ("myaccel.hard_swish", "myaccel.leaky")), summary
    assert not (tmp_path / "running").exists()


def test_cli_fuzz_refuses_an_unknown_engine_from_the_environment(tmp_path):
    result = simaccel_cli("fuzz", "--cases", "1", "--out", str(tmp_path / "out"), env={"SIMACCEL_ENGINE": "bogus"})
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "EngineError" in line and "SIMACCEL_ENGINE" in line and "'bogus'" in line
    assert not (tmp_path / "out").exists()  # refused before any work


def test_fuzz_removes_its_running_folder(tmp_path):
    assert run_fuzz(cases=2, seed=0, engines=["ref"], out_dir=tmp_path, export_every=0, log=lambda _: None) == 0
    assert not (tmp_path / "running").exists() and (tmp_path / "fuzz-summary.json").exists()


def test_the_docs_hard_swish_pattern_and_hook_are_the_tested_op_s(user_ops):
    """docs/adding-an-op.md shows hard swish's pattern and fuzz hook: they are what is tested here."""
    import re

    from simaccel.ops import relax_op, relax_value

    docs = (Path(__file__).resolve().parents[1] / "docs" / "adding-an-op.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", docs, re.S)
    [pattern] = [b for b in blocks if b.startswith('relax_op("relax.divide"')]
    family = user_ops.get_op("myaccel.hard_swish").family
    assert eval(pattern, {"relax_op": relax_op, "relax_value": relax_value}) == family.pattern
    [hook] = [line for b in blocks for line in b.splitlines() if '"three": np.array(3.0)' in line]
    docs_hook = eval(hook.removeprefix("fuzz="), {"np": np})
    (shapes, kwargs), (_, tested) = docs_hook((2, 3), None), family.fuzz((2, 3), None)
    assert shapes == {} and {k: (type(v), np.asarray(v).item()) for k, v in kwargs.items()} == {
        k: (type(v), np.asarray(v).item()) for k, v in tested.items()}


def test_fuzz_refuses_a_user_op_other_processes_would_not_know(user_ops, tmp_path):
    """An op declared in this process only (not in a module $SIMACCEL_OPS names) would fail every
    case checked again in a fresh process or on a worker: refused before any work, naming it and
    the variable; a campaign that stays in this process may draw it."""
    _declare_variant(user_ops, "onlyhere.leaky", lambda shape, draw: ({}, {"slope": np.array(0.25)}))
    with pytest.raises(SimAccelError, match=r"would draw onlyhere\.leaky, declared in this process only: .*"
                                            r"the modules \$SIMACCEL_OPS names \(.*leaky"):
        run_fuzz(cases=2, seed=0, engines=["ref"], out_dir=tmp_path / "out", export_every=1, log=lambda _: None)
    assert not (tmp_path / "out").exists()
    assert run_fuzz(cases=2, seed=0, engines=["ref"], dtypes=["float32"], out_dir=tmp_path / "here", export_every=0,
                    log=lambda _: None) == 0


# -- a reference's result is checked against the op's declared output ----------------------------
def _unused_kernel(target, out, *arrays, **attrs):
    raise AssertionError("the ref engine runs no kernel")


def _refcheck_family(reference, dtypes=("float32", "float16"), activations=(), name="refcheck.op", **changes):
    """An elementwise user op on relax.abs whose numpy reference is `reference`."""
    from simaccel.ops import OpFamily, relax_op

    return OpFamily(name=name, inputs=("data",), pattern=relax_op("relax.abs", "data"), infer=lambda shapes: shapes[0],
                    reference=reference, kernel=_unused_kernel, dtypes=dtypes, activations=activations, **changes)


def _run_on_ref(runtime, name, x, out_dtype=None):
    """Run op `name` alone on `x` through the runtime (a Program, the ref engine); the output."""
    from simaccel.ops import get_op
    from simaccel.program import OpNode, Program, TensorSpec

    op = get_op(name)
    shape, dtype = op.infer([x.shape], [str(x.dtype)], **op.all_attrs({}))
    program = Program(f"refcheck_{abs(hash(name))}", (TensorSpec("x", x.shape, str(x.dtype)), TensorSpec("y", shape, dtype)),
                      (0,), (1,), (OpNode(name, (0,), 1, {}),))
    out = np.zeros(shape, dtype)
    with runtime.use_engine("ref"):
        runtime.run(program, x, out)
    return out


X = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)

# (id, reference, what the error says it returned): each a result numpy could broadcast or cast into
# the (2, 3) output without a word, or one that is no array at all.
WRONG_RESULTS = [
    ("none", lambda data: None, "None, not a numpy array"),
    ("python-scalar", lambda data: 2.0, r"float \(2\.0\), not a numpy array"),
    ("list", lambda data: np.abs(data).tolist(), r"a list of 2 \(list, list\), not a numpy array"),
    ("tuple-of-two", lambda data: (np.abs(data), np.abs(data)), r"a tuple of 2 \(array \(2, 3\) float32, array \(2, 3\) float32\), not a numpy array"),
    ("tuple-of-one", lambda data: (np.abs(data),), r"a tuple of 1 \(array \(2, 3\) float32\), not a numpy array"),
    ("row", lambda data: np.abs(data)[0], r"an array of shape \(3,\) \(numpy broadcasting would spread it silently\)"),
    ("column", lambda data: np.abs(data)[:, :1], r"an array of shape \(2, 1\) \(numpy broadcasting"),
    ("numpy-scalar", lambda data: np.float32(1.0), r"an array of shape \(\) \(numpy broadcasting"),
    ("transposed", lambda data: np.abs(data).T, r"an array of shape \(3, 2\) for inputs"),
    ("flat", lambda data: np.abs(data).reshape(-1), r"an array of shape \(6,\) for inputs"),
    ("objects", lambda data: np.abs(data).astype(object), r"an array of dtype object, which does not cast to float32 \(an output"),
    ("complex", lambda data: np.abs(data).astype(np.complex64), r"an array of dtype complex64, which does not cast to float32 \(an output takes a float, integer"),
]


@pytest.mark.parametrize("activations", [(), ("relu",)], ids=["plain", "fused-relu"])
@pytest.mark.parametrize("reference, returned", [c[1:] for c in WRONG_RESULTS], ids=[c[0] for c in WRONG_RESULTS])
def test_a_reference_whose_result_is_not_the_declared_output_is_an_error_naming_the_op(isolated_isa, clean_runtime,
                                                                                       reference, returned, activations):
    """The ref engine would copy such a result into the output (broadcast, cast, or NaN for a
    None made float for the fused relu): an OpDeclarationError names the op, what its reference
    returned and what the output is, for the plain op and for its fused variant alike."""
    isolated_isa.declare(_refcheck_family(reference, activations=activations))
    for name in ["refcheck.op", *(f"refcheck.op_{a}" for a in activations)]:
        with pytest.raises(OpDeclarationError, match=rf"{name}: its numpy reference returned {returned}") as error:
            _run_on_ref(clean_runtime, name, X)
        assert "for inputs data=(2, 3) float32; the output is an array of shape (2, 3) and dtype float32" in str(error.value)


@pytest.mark.parametrize("reference, dtypes, x", [
    (lambda data: np.abs(data).astype(np.float32), ("int64",), X.astype(np.int64)),  # float math on integers
    (lambda data: np.abs(data), ("int8",), X.astype(np.int64).astype(np.int8)),
    (lambda data: np.abs(data).astype(np.int64), ("int8",), X.astype(np.int8)),
    (lambda data: np.abs(data) > 1, ("bool",), X > 0),
    (lambda data: data.astype(np.int8), ("bool",), X > 0),
    (lambda data: np.abs(data).astype(np.float64), ("float16",), X.astype(np.float16)),  # float64 rounds to float16
    (lambda data: np.abs(data).astype(np.int32), ("float32",), X),  # an integer result into a float output
], ids=["float-for-int64", "int8-for-int8", "int64-for-int8", "bool-for-bool", "int8-for-bool", "float64-for-float16",
        "int32-for-float32"])
def test_a_reference_s_float_integer_or_bool_result_is_cast_to_the_output_s_dtype(isolated_isa, clean_runtime,
                                                                                  reference, dtypes, x):
    """As a kernel's store rounds: the built-in float ops compute in float32 for any input, so a
    float result for an integer output is the norm, not a mistake (objects and complex numbers
    are: WRONG_RESULTS)."""
    isolated_isa.declare(_refcheck_family(reference, dtypes=dtypes))
    got = _run_on_ref(clean_runtime, "refcheck.op", x)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, np.asarray(reference(x)).astype(x.dtype))


@pytest.mark.parametrize("name", ["simaccel.relu", "simaccel.add", "simaccel.softmax", "simaccel.sum"])
@pytest.mark.parametrize("dtype", ["bool", "int8", "int64", "float64"])
def test_a_built_in_reference_runs_on_arrays_outside_its_dtypes(name, dtype):
    """Programs a user or the sanitizer builds may hold arrays outside an op's dtypes (the GPU's
    vector copies are tested on them): the built-in references compute in float32 and their
    result is cast, not refused."""
    from simaccel.ops import get_op

    op = get_op(name)
    arrays = [np.arange(-3, 3).reshape(2, 3).astype(dtype)] * (2 if name == "simaccel.add" else 1)
    attrs = op.all_attrs({"axes": [1], "keepdims": False} if name == "simaccel.sum" else {})
    got = op.reference(*arrays, **attrs)
    assert got.dtype == np.dtype(dtype) and got.shape == ((2,) if name == "simaccel.sum" else (2, 3))


def test_a_numpy_scalar_is_the_result_of_an_op_with_a_0_d_output(isolated_isa, clean_runtime):
    """numpy's reductions give a numpy scalar, not a 0-d array: that is a result of shape ()."""
    isolated_isa.declare(_refcheck_family(lambda data: np.sum(data)))
    got = _run_on_ref(clean_runtime, "refcheck.op", np.array(2.5, np.float32))
    assert got.shape == () and got == np.float32(2.5)


def test_a_wrong_reference_stops_a_tvm_build_s_run_naming_the_op(isolated_isa, clean_runtime):
    """End to end: the region's op, run by the ref engine inside TVM's VM, raises the same error
    class across TVM's FFI, where the broadcast row would have been a wrong answer."""
    from harness import run_vm
    from simaccel.tvm_integration import build

    isolated_isa.declare(_refcheck_family(lambda data: np.abs(data)[0]))
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            out = builder.emit_output(relax.op.abs(x))
        builder.emit_func_output(out)
    with clean_runtime.use_engine("ref"):
        executable = build(builder.get())
        with pytest.raises(OpDeclarationError, match=r"refcheck.op: its numpy reference returned an array of shape \(3,\)"):
            run_vm(executable, [X])
