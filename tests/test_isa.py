"""The op declaration API (simaccel.ops): derived variants, validation of declarations, an op
declared from outside the package end to end, and the layering of the code."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest
from numba import cuda
from tvm import relax

import import_graph
from harness import compare_with_tvm
from model_zoo import single_op
from simaccel import OpDeclarationError, ShapeError
from simaccel.ops import OpFamily, Reject, attrs, declare, families, get_op, list_ops, relax_op, relax_tuple
from simaccel.testing import assert_matches_tvm, assert_offloads
from simaccel.tvm_integration import partition_report

ROOT = pathlib.Path(__file__).resolve().parents[1]
F32 = "float32"


# -- an op declared the way a user would: SiLU as x * sigmoid(x) (one role used twice) ----------
def silu_kernel(out, x, total, beta):
    i = cuda.grid(1)
    if i < total:
        v = x[i]
        out[i] = v / (1.0 + math.exp(-beta * v))


def launch_silu(target, out, data, *, beta):
    total = math.prod(data.shape)
    if total:
        flat = (total,)
        target.launch(silu_kernel, (total + 63) // 64, 64, target.reshape(out, flat), target.reshape(data, flat), total, beta)
    return int(total > 0)


def silu_from_relax(match):
    if match.dtypes["data"] != F32:
        raise Reject("testaccel.silu runs in float32 only")
    return {"beta": 1.0}


def silu_family():
    return OpFamily(
    name="testaccel.silu",
    inputs=("data",),
    pattern=relax_op("relax.multiply", "data", relax_op("relax.sigmoid", "data")),
    attrs={"beta": attrs.number},
    from_relax=silu_from_relax,
    infer=lambda shapes, **_: shapes[0],
    reference=lambda data, *, beta: data.astype(np.float32) / (1 + np.exp(-beta * data.astype(np.float32))),
    kernel=launch_silu,
    doc="x * sigmoid(x)",
    )


@pytest.fixture(autouse=True)
def silu(isolated_isa):
    """testaccel.silu is declared for each test of this module, and forgotten after it."""
    return declare(silu_family())


def silu_model(dtype=F32):
    return single_op(lambda x, w: relax.op.nn.relu(relax.op.matmul(relax.op.multiply(x, relax.op.sigmoid(x)), w)),
                     [((4, 8), dtype), ((8, 6), dtype)])


def test_a_user_op_partitions_with_built_in_ops_into_one_region():
    report = assert_offloads(silu_model(), ops=["testaccel.silu", "simaccel.matmul"], regions=1, kept=0)
    assert list(report.regions.values()) == [["testaccel.silu", "simaccel.matmul_relu"]]


def test_a_user_op_runs_end_to_end_equal_to_tvm(simaccel_engine):
    [run] = assert_matches_tvm(silu_model(), engines=[simaccel_engine])
    assert run.ledger["ops"]["testaccel.silu"] == 1
    assert run.ledger["kernel_launches"].get("testaccel.silu", 0) == (0 if simaccel_engine == "ref" else 1)


def test_a_user_op_s_reject_reason_is_reported():
    """Rejected, the user op leaves its Relax ops to lower-priority patterns, or to TVM with its reason."""
    _, report = partition_report(silu_model("float16"))
    assert list(report.regions.values()) == [["simaccel.sigmoid", "simaccel.multiply", "simaccel.matmul_relu"]]
    from simaccel.profile import DeviceProfile

    _, report = partition_report(silu_model("float16"), DeviceProfile(ops={"simaccel.matmul", "testaccel.silu"}))
    assert list(report.regions.values()) == [["simaccel.matmul_relu"]]
    assert any("testaccel.silu rejected: testaccel.silu runs in float32 only" in reason for _, _, reason in report.kept)


def test_a_user_op_is_listed_with_the_built_in_ones(silu):
    assert "testaccel.silu" in list_ops() and silu in families()
    assert get_op("testaccel.silu").family is silu


BUILT_IN_OPS = 79  # simaccel ops: 12 matmul/dense, 4 conv2d, conv2d_transpose, 2 pooling, 3 row-wise, 4 attention, 5 binary, 12 unary, clip,
                   # broadcast_to, 4 views, permute_dims, strided_slice, concat, take, 3 reductions, cumsum; masks: 6
                   # comparisons, 6 logical, where, astype, 4 fills, 3 integer binary, integer_max


def test_declared_ops_are_forgotten_outside_the_isolated_test():
    import sys

    import forks

    # Another process (a fork of one that never declared it): the test module's own declaration
    # is not part of the package.
    code = "import simaccel.ops as o; print('testaccel.silu' in o.list_ops(), len(o.list_ops()))"
    assert forks.run([sys.executable, "-c", code], cwd="/", timeout=None).stdout.split() == ["False", str(BUILT_IN_OPS)]


# -- derived variants ------------------------------------------------------------------------------
def test_variants_come_from_the_flags():
    conv = [op for op in list_ops() if op.startswith("simaccel.conv2d") and get_op(op).family.name == "simaccel.conv2d"]
    assert conv == ["simaccel.conv2d", "simaccel.conv2d_bias", "simaccel.conv2d_bias_relu", "simaccel.conv2d_relu"]
    assert [op.name for op in get_op("simaccel.conv2d_transpose").family.variants()] == ["simaccel.conv2d_transpose"]
    op = get_op("simaccel.dense_bias_gelu")
    assert op.inputs == ("data", "weight", "bias") and op.fixed == {"transpose_b": True, "activation": "gelu"}
    with pytest.raises(ShapeError, match="bias \\(4,\\) is not one value per output column"):
        op.infer([(2, 3), (5, 3), (4,)], [F32] * 3, **op.all_attrs({}))


def test_the_fused_reference_is_the_family_s_plus_bias_and_activation():
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float16) for s in ((3, 5), (4, 5), (4,)))
    op = get_op("simaccel.dense_bias_relu")
    got = op.reference(x, w, b, **op.all_attrs({}))
    want = np.maximum(x.astype(np.float32) @ w.astype(np.float32).T + b.astype(np.float32), 0).astype(np.float16)
    assert got.dtype == np.float16 and np.array_equal(got, want)


def test_kernel_and_isa_activation_tables_agree():
    from simaccel.kernels.activation import ACTIVATIONS as KERNEL_CODES
    from simaccel.ops.activation import ACTIVATIONS

    assert set(KERNEL_CODES) == {"none", *ACTIVATIONS}


# -- declarations that are refused -------------------------------------------------------------------
def family(**changes):
    base = dict(name="testaccel.ok", inputs=("data",), pattern=relax_op("relax.nn.relu", "data"),
                infer=lambda shapes: shapes[0], reference=lambda data: data, kernel="m:f")
    return OpFamily(**{**base, **changes})


@pytest.mark.parametrize("changes, message", [
    ({"name": "nonamespace"}, "'namespace.op'"),
    ({"name": "a.b.c"}, "'namespace.op'"),
    ({"inputs": ("data", "weight")}, "roles \\['data'\\] differ from inputs"),
    ({"inputs": ("data", "data")}, "distinct role names"),
    ({"pattern": "relax.nn.relu"}, "relax_op"),
    ({"kernel": "no_colon"}, "kernel must be a callable or 'module:function'"),
    ({"bias": "diagonal"}, "bias must be None or one of"),
    ({"activations": ("swish",)}, "unknown activations \\['swish'\\]"),
    ({"attrs": {"alpha": 1.0}}, "attribute 'alpha' needs a kind"),
    ({"activations": ("relu",), "attrs": {"activation": attrs.flag}}, "'activation' is set by the variant"),
    ({"dtypes": ("uint8",)}, "dtypes must be"),
    ({"out_dtype": "complex64"}, "out_dtype 'complex64' is not one of"),
    ({"inputs": ("data", "w"), "pattern": relax_op("relax.add", relax_tuple("data"), "w")},
     "a tuple role \\(\\['data'\\]\\) must be the family's only input"),
    ({"pattern": relax_op("relax.nn.relu", relax_op("relax.concat", relax_tuple("data")))}, "an argument of the outermost call"),
    ({"pattern": relax_op("relax.concat", relax_tuple("data")), "bias": "row"}, "no fused bias"),
    ({"pattern": relax_op("relax.concat", relax_tuple("data")), "fuzz": lambda shape, draw: None}, "does not draw families"),
])
def test_malformed_declarations_are_refused_with_the_reason(changes, message):
    with pytest.raises(OpDeclarationError, match=message):
        declare(family(**changes))


def test_a_taken_name_is_refused():
    with pytest.raises(OpDeclarationError, match="already declared"):
        declare(family(name="simaccel.relu"))
    with pytest.raises(OpDeclarationError, match="already declared"):  # a variant's name
        declare(family(name="simaccel.conv2d_relu"))


def test_user_ops_from_the_environment(tmp_path, monkeypatch):
    module = tmp_path / "env_op.py"
    module.write_text(
        "from simaccel.ops import OpFamily, declare, relax_op\n"
        "declare(OpFamily(name='envaccel.tanh', inputs=('data',), pattern=relax_op('relax.tanh', 'data'),\n"
        "    infer=lambda shapes: shapes[0], reference=lambda data: data, kernel='m:f'))\n"
    )
    monkeypatch.setenv("SIMACCEL_OPS", str(module))
    assert get_op("envaccel.tanh").family.name == "envaccel.tanh"
    monkeypatch.setenv("SIMACCEL_OPS", str(tmp_path / "missing.py"))
    for _ in range(2):  # every read says so, not only the first
        with pytest.raises(OpDeclarationError, match="SIMACCEL_OPS: cannot load .*missing.py"):
            list_ops()
    monkeypatch.delenv("SIMACCEL_OPS")


def test_an_unknown_op_says_how_to_load_it():
    from simaccel import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match="name it in \\$SIMACCEL_OPS"):
        get_op("otheraccel.fft")


# -- layering ------------------------------------------------------------------------------------------
LAYERS = {  # folder -> the package it is installed as, and the layers it may import
    "kernels": ("simaccel.kernels", set()),
    "simaccel": ("simaccel", {"simaccel.kernels"}),
    "tvm_integration/rewrites": ("simaccel.tvm_integration.rewrites", set()),
    "tvm_integration/backend": ("simaccel.tvm_integration.backend", {"simaccel", "simaccel.kernels", "simaccel.tvm_integration.rewrites"}),
    "tvm_integration/tools": ("simaccel.tvm_integration.tools", {"simaccel", "simaccel.kernels", "simaccel.tvm_integration.backend",
                                                                 "simaccel.tvm_integration.rewrites"}),
}


def _imports(path: pathlib.Path, package: str) -> set[str]:
    """Absolute names of the simaccel modules `path` (in `package`) imports, wherever and however
    written (tests/import_graph.py: inside functions and by string too)."""
    module = package if path.name == "__init__.py" else f"{package}.{path.stem}"
    return {name for name, _, _ in import_graph.imported_names(path.read_text(), module, path.name == "__init__.py",
                                                               KNOWN_MODULES)}


KNOWN_MODULES = set(import_graph.module_files())


def _layer(module: str) -> str:
    for _, (package, _) in sorted(LAYERS.items(), key=lambda kv: -len(kv[1][0])):
        if module == package or module.startswith(package + "."):
            return package
    return module


@pytest.mark.parametrize("folder", list(LAYERS))
def test_no_layer_imports_a_layer_above_it(folder):
    package, allowed = LAYERS[folder]
    for path in (ROOT / folder).rglob("*.py"):
        inner = path.relative_to(ROOT / folder).parent.parts  # the sub-package the file is in
        for name in _imports(path, ".".join((package, *inner))):
            layer = _layer(name)
            assert layer == package or layer in allowed, f"{path.relative_to(ROOT)} imports {name} (layer {layer})"


def _floor_plan_violations(sources) -> list[str]:
    return import_graph.floor_plan_violations(sources, KNOWN_MODULES)


def test_the_core_keeps_its_floor_plan():
    """docs/design.md's floor plan of simaccel/: every module in a layer, importing only its own
    and lower layers (never the TVM layer), with no cycle, imports inside functions and by
    string counted."""
    sources, _ = import_graph.core_sources()
    assert _floor_plan_violations(sources) == []


PLANTED = [  # (module, code added to it, its line "# planted" the import, what the floor plan test must say)
    ("simaccel.errors", "from .runtime import Runtime  # planted", "simaccel.errors:{line} imports simaccel.runtime (statement)"),
    ("simaccel.errors", "def planted():\n    from .runtime import get_runtime  # planted\n    return get_runtime",
     "simaccel.errors:{line} imports simaccel.runtime (function)"),
    ("simaccel.errors", "import importlib\nPLANTED = importlib.import_module('simaccel.runtime')  # planted",
     "simaccel.errors:{line} imports simaccel.runtime (string)"),
    ("simaccel.ops.registry", "def planted():\n    return __import__('simaccel.runtime')  # planted",
     "simaccel.ops.registry:{line} imports simaccel.runtime (string)"),
    ("simaccel.ops.registry", "PLANTED = importlib.import_module('..runtime', __package__)  # planted",
     "simaccel.ops.registry:{line} imports simaccel.runtime (string)"),
    ("simaccel.launch_plan", "LAUNCHER = 'simaccel.debug.timeline:start'  # planted",
     "simaccel.launch_plan:{line} imports simaccel.debug.timeline (string)"),
    ("simaccel.debug.bisection", "IMPLEMENTATION = 'simaccel.tvm_integration.tools.bisect'  # planted",
     "simaccel.debug.bisection:{line} imports the TVM layer (simaccel.tvm_integration.tools.bisect, string)"),
    ("simaccel.timing", "def planted():\n    from .ledger import Ledger  # planted\n    return Ledger",
     "import cycle: simaccel.timing -> simaccel.ledger -> simaccel.timing"),
]


@pytest.mark.parametrize("module, code, message", PLANTED, ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(PLANTED)])
def test_a_planted_import_breaks_the_floor_plan(module, code, message):
    """The floor plan test catches an upward import at the top, inside a function and by string
    (importlib, __import__, a "module:function" name, the TVM layer named anywhere), and a cycle."""
    sources, _ = import_graph.core_sources()
    text, is_package = sources[module]
    planted = f"{text}\n{code}\n"
    line = next(n for n, text in enumerate(planted.splitlines(), 1) if text.endswith("# planted"))
    sources[module] = (planted, is_package)
    problems = _floor_plan_violations(sources)  # an upward import closes cycles too: those are said after it
    assert problems and problems[0].startswith(message.format(line=line)), problems


def test_an_op_family_is_one_declaration_in_the_isa():
    """The backend holds no per-op knowledge: no op name appears in its source."""
    source = "".join(p.read_text() for p in (ROOT / "tvm_integration" / "backend").glob("*.py"))
    for op in ("conv2d", "matmul", "pool2d", "softmax", "layer_norm", "dense"):
        assert op not in source, f"the backend mentions {op}"


@pytest.mark.parametrize("hook, message", [
    ({"from_relax": lambda match: match.attrs["no_such_attribute"]}, "testaccel.broken: from_relax failed .*KeyError"),
    ({"from_relax": lambda match: ["not", "a", "dict"]}, "from_relax returned list, not a dict"),
    ({"infer": lambda shapes: shapes[5]}, "testaccel.broken: its shape rule \\(infer\\) failed .*IndexError"),
    ({"from_relax": lambda match: {"alpha": 0.5}}, "from_relax returned attributes \\['alpha'\\], which has unknown attributes"),
    ({"out_dtype": lambda dtypes: {"float16": "float32"}[dtypes[0]]},
     "testaccel.broken: its out_dtype rule failed for inputs data=float32: KeyError"),
    ({"out_dtype": lambda dtypes: None}, "testaccel.broken: its out_dtype rule gave None for inputs data=float32, which is no dtype"),
    ({"out_dtype": lambda dtypes: "floot32"}, "its out_dtype rule gave 'floot32' .*which is no dtype"),
])
def test_a_bug_in_a_declaration_is_named_not_hidden(hook, message):
    """A user's hook that crashes stops partitioning with an error naming the family and the hook."""
    declare(family(name="testaccel.broken", pattern=relax_op("relax.tanh", "data"), **hook))
    with pytest.raises(OpDeclarationError, match=message):
        partition_report(single_op(lambda x: relax.op.tanh(x), [((4, 8), F32)]))


@pytest.mark.parametrize("hook, reason", [
    ({"out_dtype": lambda dtypes: "float64"},
     "testaccel.wide rejected: testaccel.wide: its out_dtype rule gave float64 for inputs data=float32, a dtype the ISA "
     "does not compute in (float32, float16, bfloat16, int64, int32, int8, bool)"),
    ({"attrs": {"slope": attrs.positive_float}, "from_relax": lambda match: {"slope": -1.0}},
     "testaccel.wide rejected: testaccel.wide: attribute slope read from the Relax call must be a finite number > 0, "
     "got -1.0"),
])
def test_a_rule_s_answer_the_isa_cannot_take_keeps_the_op_on_tvm_saying_what_it_gave(hook, reason):
    """For an input the family takes, a rule giving what the accelerator cannot compute (a dtype
    outside the ISA, an attribute its kind refuses) is the op's limit, not a broken declaration:
    the match stays on TVM with the rule's answer in the reason (the built-in tanh is not in the
    profile, so the reason is the kept op's)."""
    from simaccel.profile import DeviceProfile

    declare(family(name="testaccel.wide", pattern=relax_op("relax.tanh", "data"), **hook))
    mod = single_op(lambda x: relax.op.tanh(x), [((4, 8), F32)])
    _, report = partition_report(mod, DeviceProfile(name="wide-only", ops={"testaccel.wide"}))
    assert report.regions == {} and [r for _, op, r in report.kept if op == "relax.tanh"] == [reason], report.format()


def test_a_family_s_rules_never_see_a_dtype_it_does_not_take():
    """A float32-only family whose from_relax would fail on float16 (its author's rules assume
    its dtypes): a float16 match stays on TVM for its dtype, before from_relax runs."""
    from simaccel.profile import DeviceProfile

    def from_relax(match):
        assert match.dtypes["data"] == F32, "from_relax ran on a dtype the family does not take"
        return {}

    declare(family(name="testaccel.f32only", pattern=relax_op("relax.tanh", "data"), dtypes=(F32,), from_relax=from_relax))
    only = DeviceProfile(name="f32only", ops={"testaccel.f32only"})
    _, report = partition_report(single_op(lambda x: relax.op.tanh(x), [((4, 8), "float16")]), only)
    assert [r for _, _, r in report.kept] == ["testaccel.f32only rejected: testaccel.f32only: data has dtype float16; "
                                              "it takes float32"], report.format()
    _, report = partition_report(single_op(lambda x: relax.op.tanh(x), [((4, 8), F32)]), only)
    assert list(report.regions.values()) == [["testaccel.f32only"]]


# -- a user family with fused variants (bias and activation flags) --------------------------------
def scale_kernel(out, x, w, b, rows, cols, has_bias, relu):
    i = cuda.grid(1)
    if i < rows * cols:
        c = i % cols
        v = x[i // cols, c] * w[c]
        if has_bias:
            v += b[c]
        if relu and not v > 0:
            v = 0.0
        out[i // cols, c] = v


def launch_scale(target, out, data, weight, bias=None, *, activation):
    *lead, cols = data.shape
    rows = math.prod(lead)
    if rows * cols == 0:
        return 0
    view = (rows, cols)
    target.launch(scale_kernel, (rows * cols + 63) // 64, 64, target.reshape(out, view), target.reshape(data, view),
                  weight, weight if bias is None else target.reshape(bias, (cols,)), rows, cols,
                  int(bias is not None), int(activation == "relu"))
    return 1


def infer_scale(shapes):
    if tuple(shapes[1]) != shapes[0][-1:]:
        raise ShapeError(f"weight {shapes[1]} is not one value per column of {shapes[0]}")
    return shapes[0]


def scale_family():
    return OpFamily(
        name="testaccel.scale", inputs=("data", "weight"), pattern=relax_op("relax.multiply", "data", "weight"),
        infer=infer_scale,
        reference=lambda data, weight: data.astype(np.float32) * weight.astype(np.float32),
        kernel=launch_scale, bias="row", activations=("relu",), dtypes=(F32,),
    )


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_a_user_family_s_fused_variants_partition_and_run(engine):
    declare(scale_family())
    assert [op for op in list_ops() if op.startswith("testaccel.scale")] == [
        "testaccel.scale", "testaccel.scale_bias", "testaccel.scale_bias_relu", "testaccel.scale_relu"]
    make = lambda x, w, b: relax.op.nn.relu(relax.op.add(relax.op.multiply(x, w), b))  # noqa: E731
    mod = single_op(make, [((3, 5), F32), ((5,), F32), ((5,), F32)])
    _, report = partition_report(mod)
    assert list(report.regions.values()) == [["testaccel.scale_bias_relu"]]
    _, _, ledger = compare_with_tvm(mod, engine)
    assert ledger["ops"] == {"testaccel.scale_bias_relu": 1}
    wrong_bias = single_op(make, [((3, 5), F32), ((5,), F32), ((3, 1), F32)])  # one value per row: not fused
    assert ["testaccel.scale_bias_relu"] not in partition_report(wrong_bias)[1].regions.values()
    compare_with_tvm(wrong_bias, engine)


# -- a user family with a tuple of inputs: rows stacked (concat along axis 0, float32 only) -----
def stack_rows_kernel(out, x, offset, total):
    i = cuda.grid(1)
    if i < total:
        out[offset + i] = x[i]


def launch_stack_rows(target, out, *rows):
    flat_out, offset, launches = target.reshape(out, (math.prod(out.shape),)), 0, 0
    for x in rows:
        total = math.prod(x.shape)
        if total:
            target.launch(stack_rows_kernel, (total + 63) // 64, 64, flat_out, target.reshape(x, (total,)), offset, total)
            launches += 1
        offset += total
    return launches


def stack_rows_from_relax(match):
    if match.attrs["axis"] not in (0, -len(match.shapes["rows"][0])) or "float16" in match.dtypes["rows"]:
        raise Reject("testaccel.stack_rows joins float32 tensors along axis 0 only")
    return {}


def infer_stack_rows(shapes):
    if any(tuple(s[1:]) != tuple(shapes[0][1:]) for s in shapes):
        raise ShapeError(f"rows {list(shapes)} differ beyond axis 0")
    return (sum(s[0] for s in shapes), *shapes[0][1:])


def stack_rows_family():
    return OpFamily(
        name="testaccel.stack_rows", inputs=("rows",), pattern=relax_op("relax.concat", relax_tuple("rows")),
        from_relax=stack_rows_from_relax, infer=infer_stack_rows,
        reference=lambda *rows: np.concatenate(rows, axis=0), kernel=launch_stack_rows, dtypes=(F32,),
    )


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_a_user_family_with_a_tuple_of_inputs_partitions_and_runs(engine):
    family = declare(stack_rows_family())
    assert family.variadic and get_op("testaccel.stack_rows").roles(3) == ("rows[0]", "rows[1]", "rows[2]")
    make = lambda x, y: relax.op.concat([relax.op.nn.relu(x), y, x], axis=0)  # noqa: E731
    mod = single_op(make, [((2, 3), F32), ((1, 3), F32)])
    _, report = partition_report(mod)
    assert list(report.regions.values()) == [["simaccel.relu", "testaccel.stack_rows"]]  # the user's op first
    _, _, ledger = compare_with_tvm(mod, engine)
    assert ledger["ops"] == {"simaccel.relu": 1, "testaccel.stack_rows": 1}
    # Along another axis the user's op refuses and the built-in concat takes it.
    other = single_op(lambda x, y: relax.op.concat([x, y], axis=1), [((2, 3), F32), ((2, 1), F32)])
    assert list(partition_report(other)[1].regions.values()) == [["simaccel.concat"]]
    compare_with_tvm(other, engine)
