"""Every dtype TVM has through every op's pattern check: offloaded and right, or kept on TVM with a reason.

For each op family of the ISA (one minimal Relax model per family, the fused variants through
a conv2d + bias + relu and a dense + bias + gelu) and each element type of TVM 0.27 (float64
down to the float8, float6 and float4 ones, the integers, bool), and for every cast
``R.astype(x, T)`` and ``full``/``*_like`` of dtype T from every source dtype: where Relax takes the
model, partitioning never raises. Each op either stays on TVM with a reason that names a dtype
of the model the op does not compute in, or is offloaded, and then runs on the `ref` engine
(and, for a few, on `sim`) to what TVM alone gives. `simaccel build` of the reported
one-op models (a cast to float64, int16, uint8, bfloat16; a bfloat16 model) exits 0.

The offloaded models of one dtype are run together, as one model of independent ops, so the
whole sweep costs two TVM builds per ISA dtype (a one-op model per op and dtype would be
hundreds).
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import tvm
from tvm import relax

import forks
import simaccel
from compare import assert_same
from harness import run_vm, tvm_alone
from model_zoo import ModelBuilder
from simaccel.ops import families
from simaccel.ops.rules import ISA_DTYPES
from simaccel.tvm_integration import build, partition_report

op = relax.op

# TVM 0.27's element types (tvm_ffi's dtype table), each as wide as a scalar gets.
TVM_DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint64", "uint32",
              "uint16", "uint8", "bool", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
              "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn",
              "float4_e2m1fn")
# Targets of the casts and of full / *_like's dtype attribute.
CAST_DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
               "float8_e4m3fn", "float8_e5m2")


class Fixed(tuple):
    """An input shape whose dtype is its own, not the swept one (where's bool condition)."""

    def __new__(cls, shape, dtype):
        self = super().__new__(cls, shape)
        self.dtype = dtype
        return self


def dense(x, w):
    return op.matmul(x, op.permute_dims(w))


# (id, Relax body, input shapes): one minimal model per family of the ISA, every input in the
# swept dtype unless `Fixed`. The integer families match the same Relax ops as the float ones
# (add, subtract, multiply, max): the int dtypes of those cases are theirs.
CASES = [
    ("conv2d", lambda x, w: op.nn.conv2d(x, w, padding=1), [(1, 2, 4, 4), (3, 2, 3, 3)]),
    ("conv2d_bias_relu", lambda x, w, b: op.nn.relu(op.add(op.nn.conv2d(x, w), b)), [(1, 2, 4, 4), (3, 2, 3, 3), (1, 3, 1, 1)]),
    ("conv2d_transpose", lambda x, w: op.nn.conv2d_transpose(x, w, strides=2, padding=1, output_padding=1), [(1, 2, 3, 4), (2, 3, 3, 3)]),
    ("matmul", lambda x, w: op.matmul(x, w), [(2, 3), (3, 4)]),
    ("dense_bias_gelu", lambda x, w, b: op.nn.gelu(op.add(dense(x, w), b)), [(2, 3), (4, 3), (4,)]),
    *[(name, lambda x, y, name=name: getattr(op, name)(x, y), [(2, 3), (3,)])
      for name in ("add", "subtract", "multiply", "divide", "power", "less", "less_equal", "greater", "greater_equal",
                   "equal", "not_equal", "logical_and", "logical_or", "bitwise_and", "bitwise_or")],
    *[(name, lambda x, name=name: getattr(op, name)(x), [(2, 3)])
      for name in ("sigmoid", "tanh", "exp", "sqrt", "rsqrt", "logical_not", "bitwise_not")],
    *[(name, lambda x, name=name: getattr(op.nn, name)(x), [(2, 3)]) for name in ("relu", "gelu", "gelu_tanh", "silu")],
    ("where", lambda c, x, y: op.where(c, x, y), [Fixed((2, 3), "bool"), (2, 3), (3,)]),
    ("full", lambda v: op.full((2, 3), v), [()]),
    ("full_like", lambda x, v: op.full_like(x, v), [(2, 3), ()]),
    ("zeros_like", lambda x: op.zeros_like(x), [(2, 3)]),
    ("ones_like", lambda x: op.ones_like(x), [(2, 3)]),
    ("clip", lambda x: op.clip(x, 0, 2), [(2, 3)]),
    ("broadcast_to", lambda x: op.broadcast_to(x, (2, 3)), [(1, 3)]),
    ("reshape", lambda x: op.reshape(x, (3, 2)), [(2, 3)]),
    ("expand_dims", lambda x: op.expand_dims(x, 1), [(2, 3)]),
    ("squeeze", lambda x: op.squeeze(x, [1]), [(2, 1, 3)]),
    ("flatten", lambda x: op.flatten(x), [(2, 1, 3)]),
    ("permute_dims", lambda x: op.permute_dims(x, [1, 0]), [(2, 3)]),
    ("strided_slice", lambda x: op.strided_slice(x, [1], [0], [3], [2]), [(2, 4)]),
    ("concat", lambda x, y: op.concat([x, y], axis=1), [(2, 3), (2, 1)]),
    ("softmax", lambda x: op.nn.softmax(x), [(2, 3)]),
    ("layer_norm", lambda x, g, b: op.nn.layer_norm(x, g, b, axes=[-1]), [(2, 3), (3,), (3,)]),
    ("max_pool2d", lambda x: op.nn.max_pool2d(x, 2), [(1, 2, 4, 4)]),
    ("avg_pool2d", lambda x: op.nn.avg_pool2d(x, 2), [(1, 2, 4, 4)]),
    *[(name, lambda x, name=name: getattr(op, name)(x, axis=[1]), [(2, 3)]) for name in ("sum", "mean", "max")],
    ("cumsum", lambda x: op.cumsum(x, axis=1), [(2, 3)]),
    # the casts, and the ops whose output dtype is an attribute: to every target from the swept dtype
    *[(f"astype_to_{t}", lambda x, t=t: op.astype(x, t), [(2, 3)]) for t in CAST_DTYPES],
    *[(f"full_of_{t}", lambda v, t=t: op.full((2, 3), v, t), [()]) for t in CAST_DTYPES],
    *[(f"{name}_of_{t}", lambda x, t=t, name=name: getattr(op, name)(x, t), [(2, 3)])
      for name in ("zeros_like", "ones_like") for t in CAST_DTYPES],
    *[(f"full_like_of_{t}", lambda x, v, t=t: op.full_like(x, v, t), [(2, 3), ()]) for t in CAST_DTYPES],
    *[(f"matmul_out_{t}", lambda x, w, t=t: op.matmul(x, w, out_dtype=t), [(2, 3), (3, 4)]) for t in CAST_DTYPES],
    *[(f"conv2d_out_{t}", lambda x, w, t=t: op.nn.conv2d(x, w, out_dtype=t), [(1, 2, 4, 4), (3, 2, 3, 3)])
      for t in CAST_DTYPES],
    # A decoder's ops, last so that the inputs drawn for the cases above stay those of before.
    *[(name, lambda x, name=name: getattr(op, name)(x), [(2, 3)]) for name in ("negative", "sin", "cos")],
    ("rms_norm", lambda x, w: op.nn.rms_norm(x, w, axes=[-1]), [(2, 3), (3,)]),
    # indices from -5 to 5 (`values`) of a table of 4 rows: clip's answer is TVM's for each
    *[(f"take_by_{t}", lambda x, i: op.take(x, i, axis=0, mode="clip"), [(4, 3), Fixed((2, 2), t)]) for t in ("int32", "int64")],
    ("attention", lambda q, k, v: op.nn.attention(q, k, v, causal_mask="BottomRight"), [(1, 2, 2, 4), (1, 3, 2, 4), (1, 3, 2, 4)]),
    ("grouped_attention", lambda q, k, v: op.nn.attention(q, op.repeat(k, 2, axis=2), op.repeat(v, 2, axis=2), causal_mask="TopLeft"),
     [(1, 3, 4, 4), (1, 3, 2, 4), (1, 3, 2, 4)]),
    ("attention_bias", lambda q, k, v, b: op.nn.attention(q, k, v, b, causal_mask="BottomRight"),
     [(1, 2, 2, 4), (1, 3, 2, 4), (1, 3, 2, 4), (1, 1, 2, 3)]),
    ("grouped_attention_bias", lambda q, k, v, b: op.nn.attention(q, op.repeat(k, 2, axis=2), op.repeat(v, 2, axis=2), b),
     [(1, 3, 4, 4), (1, 3, 2, 4), (1, 3, 2, 4), (1, 4, 1, 3)]),
]
BY_ID = {case[0]: case for case in CASES}


@functools.lru_cache(maxsize=None)
def model(case_id: str, dtype: str) -> tvm.IRModule | None:
    """The case's one-op model with its inputs in `dtype`; None where Relax refuses it (its
    type inference rejects the dtype: sigmoid of int32, logical_and of float32)."""
    _, make, shapes = BY_ID[case_id]
    builder = ModelBuilder(dtype)
    try:
        return builder.module(lambda: make(*[builder.param("p", s, getattr(s, "dtype", dtype)) for s in shapes]))
    except (TypeError, ValueError):  # how TVM's FFI raises a type inference's refusal
        return None


def dtypes_of(mod: tvm.IRModule) -> set[str]:
    """The dtypes of `main`'s parameters and result."""
    func = mod["main"]
    return {str(p.ty.dtype) for p in func.params} | {str(func.ret_ty.dtype)}


def names(reason: str, dtype: str) -> bool:
    """Whether `reason` names `dtype` as a word (float8_e4m3 is not named by float8_e4m3fn)."""
    return re.search(rf"(?<![\w]){re.escape(dtype)}(?![\w])", reason) is not None


@functools.lru_cache(maxsize=None)
def sweep(dtype: str) -> dict:
    """Every case in `dtype`, partitioned: case id -> (ops offloaded, reasons of the ops kept on
    TVM), or None where Relax refuses the model. Partitioning must not raise."""
    outcome = {}
    for case_id, _, _ in CASES:
        mod = model(case_id, dtype)
        if mod is None:
            outcome[case_id] = None
            continue
        try:
            _, report = partition_report(mod)
        except Exception as e:  # the defect this file is about: say which model
            raise AssertionError(f"partitioning {case_id} in {dtype} raised {type(e).__name__}: {e}") from e
        outcome[case_id] = ([o for region in report.regions.values() for o in region], [r for _, _, r in report.kept])
    return outcome


def offloaded(dtype: str) -> list[str]:
    """The cases of `dtype` whose every op is offloaded."""
    return [c for c, found in sweep(dtype).items() if found is not None and found[0] and not found[1]]


@pytest.mark.parametrize("dtype", TVM_DTYPES)
def test_every_op_offloads_or_stays_on_tvm_naming_the_dtype(dtype):
    """No model raises out of partitioning; an op kept on TVM says which of its dtypes the
    accelerator lacks (the input's, or the output's where an attribute sets it); an offloaded
    op reads and writes only the ISA's dtypes. In a dtype the ISA lacks nothing is offloaded,
    and the reasons name that dtype (where's, the one of its branches)."""
    outcome = sweep(dtype)
    for case_id, found in outcome.items():
        if found is None:
            continue
        ops, reasons = found
        mod = model(case_id, dtype)
        assert ops or reasons, f"{case_id} in {dtype}: neither offloaded nor kept"
        for reason in reasons:
            assert any(names(reason, d) for d in dtypes_of(mod)), f"{case_id} in {dtype}: the reason names no dtype: {reason}"
        if ops:
            assert dtypes_of(mod) <= set(ISA_DTYPES), f"{case_id} in {dtype}: offloaded {ops} with dtypes {dtypes_of(mod)}"
    taken = [found for found in outcome.values() if found is not None]
    assert taken, f"Relax takes no model in {dtype}"
    if dtype not in ISA_DTYPES:
        assert not any(ops for ops, _ in taken)
        assert all(names(r, dtype) for _, reasons in taken for r in reasons)


def test_the_sweep_covers_every_family_of_the_isa():
    """Every family's Relax ops appear in the cases, and every built-in family is offloaded in
    some dtype of the sweep: a family declared later without a case here fails this test."""
    swept_ops = set()
    for case_id, _, _ in CASES:
        mod = model(case_id, "float32") or model(case_id, "bool")
        swept_ops |= {str(e.op.name) for e in _calls(mod["main"])}
    done = {o for d in ISA_DTYPES for found in sweep(d).values() if found is not None for o in found[0]}
    for family in families():
        if family.namespace != "simaccel":
            continue
        assert {n.op for n in family.pattern.nodes()} <= swept_ops, f"no case for {family.name}"
        assert any(o == family.name or o.startswith(family.name + "_") for o in done), \
            f"{family.name} is offloaded in no dtype of the sweep"


def _calls(func) -> list:
    found = []
    relax.analysis.post_order_visit(func, lambda e: found.append(e) if isinstance(e, relax.Call)
                                    and isinstance(e.op, tvm.ir.Op) else None)
    return found


def values(shape, dtype: str, rng) -> np.ndarray:
    """Inputs in `dtype`: floats around 0 (negative ones too: sqrt's NaN is compared), small
    integers (casts and products stay in range), bools both ways."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-5 if np.dtype(dtype).kind == "i" else 0, 6, size=shape).astype(dtype)
    return (rng.standard_normal(shape) * 2).astype(dtype)


def together(case_ids, dtype) -> tuple[tvm.IRModule, list[np.ndarray]]:
    """The cases' bodies side by side in one model returning each result, with seeded inputs."""
    builder = ModelBuilder(dtype)
    shapes = []

    def body():
        results = []
        for case_id in case_ids:
            _, make, inputs = BY_ID[case_id]
            params = [builder.param("p", s, getattr(s, "dtype", dtype)) for s in inputs]
            shapes.extend((tuple(s), getattr(s, "dtype", dtype)) for s in inputs)
            results.append(make(*params))
        return relax.Tuple(results)

    mod = builder.module(body)
    rng = np.random.default_rng(0)
    return mod, [values(s, d, rng) for s, d in shapes]


def run_together(case_ids, dtype, engine) -> dict:
    """Build the cases together with simaccel (run on `engine`) and with TVM alone; compare each result."""
    mod, arrays = together(case_ids, dtype)
    _, report = partition_report(mod)
    assert report.kept == [], report.format()
    want = tvm_alone(mod, arrays)
    runtime = simaccel.get_runtime()
    runtime.ledger.reset()
    with runtime.use_engine(engine):
        got = run_vm(build(mod), arrays)
    for case_id, g, w in zip(case_ids, got, want, strict=True):
        assert_same(g, w, name=f"{case_id} in {dtype} on {engine}")
    return runtime.ledger.snapshot()


COMPARISONS = {"less": np.less, "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
               "equal": np.equal, "not_equal": np.not_equal}
# numpy's bool results of the cases TVM alone cannot build for bool (a cumsum of bools is a
# running or, numpy's bool sum)
BOOL_NUMPY = {**COMPARISONS, "cumsum": lambda x: np.cumsum(x, axis=1, dtype=bool)}
# Models TVM alone cannot build (TVM 0.27's LLVM code generator fails on a comparison of bools
# and on a bool cumsum: "Check failed: t.MatchesCode(kDLFloat)", "LLVM module verification
# failed"; its power and layer_norm refuse bfloat16: "power only applies to float", "layer_norm:
# only support float32 and float16"); simaccel's result is compared with numpy's there, or with
# TVM alone's float32 model rounded to bfloat16.
TVM_ALONE_FAILS = {"bool": set(BOOL_NUMPY), "bfloat16": {"power", "layer_norm"}}


@pytest.mark.parametrize("dtype", ISA_DTYPES)
def test_offloaded_ops_match_tvm_alone_on_ref(dtype):
    cases = offloaded(dtype)
    assert cases
    snapshot = run_together([c for c in cases if c not in TVM_ALONE_FAILS.get(dtype, ())], dtype, "ref")
    assert snapshot["offloaded_calls"] >= 1


def test_bool_ops_tvm_alone_cannot_build_match_numpy_on_ref():
    cases = sorted(TVM_ALONE_FAILS["bool"])
    assert set(cases) <= set(offloaded("bool"))
    mod, arrays = together(cases, "bool")
    with simaccel.get_runtime().use_engine("ref"):
        got = run_vm(build(mod), arrays)
    inputs = iter(arrays)
    for case_id, g in zip(cases, got, strict=True):
        given = [next(inputs) for _ in BY_ID[case_id][2]]
        np.testing.assert_array_equal(g, BOOL_NUMPY[case_id](*given), err_msg=case_id)


@pytest.mark.parametrize("case_id", sorted(TVM_ALONE_FAILS["bfloat16"]))
def test_bfloat16_ops_tvm_alone_cannot_build_match_its_float32_model(case_id):
    assert case_id in offloaded("bfloat16")
    mod, arrays = together([case_id], "bfloat16")
    with pytest.raises(Exception, match="float"):  # TVM alone refuses the bfloat16 model
        tvm_alone(mod, arrays)
    wide, _ = together([case_id], "float32")
    [want] = tvm_alone(wide, [a.astype(np.float32) for a in arrays])
    with simaccel.get_runtime().use_engine("ref"):
        [got] = run_vm(build(mod), arrays)
    assert got.dtype == np.dtype("bfloat16")
    assert_same(got, want.astype("bfloat16"), name=f"{case_id} in bfloat16 on ref")


# A few offloaded ops of each kind of dtype on the simulator (the real kernels, slowly).
SIM_SAMPLE = {"float16": ["astype_to_int8", "less", "where"], "bfloat16": ["astype_to_float16", "greater", "matmul", "softmax"], "int8": ["add", "astype_to_float32", "max"],
              "int64": ["full_like_of_bool", "concat"], "bool": ["logical_and", "astype_to_float16"]}


@pytest.mark.parametrize("dtype", sorted(SIM_SAMPLE))
def test_offloaded_ops_match_tvm_alone_on_sim(dtype):
    cases = SIM_SAMPLE[dtype]
    assert set(cases) <= set(offloaded(dtype)), {c: sweep(dtype)[c] for c in cases}
    snapshot = run_together(cases, dtype, "sim")
    assert sum(snapshot["kernel_launches"].values()) >= 1


MODEL_FILE = """from tvm import relax
builder = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType((2, 3), {source!r}))
with builder.function("main", [x]):
    with builder.dataflow():
        out = builder.emit_output({body})
    builder.emit_func_output(out)
mod = builder.get()
"""


@pytest.mark.parametrize("source, body, dtype", [
    ("float32", "relax.op.astype(x, 'float64')", "float64"),
    ("float32", "relax.op.astype(x, 'uint8')", "uint8"),
    ("int16", "relax.op.nn.relu(relax.op.astype(x, 'float32'))", "int16"),
], ids=["astype_float64", "astype_uint8", "int16_model"])
def test_simaccel_build_of_a_model_in_a_dtype_the_isa_lacks_exits_0(tmp_path, source, body, dtype):
    """The command line builds what TVM alone builds, the op kept on TVM with its reason."""
    (tmp_path / "model.py").write_text(MODEL_FILE.format(source=source, body=body))
    built = forks.cli("build", tmp_path / "model.py", "-o", tmp_path / "lib.so")
    assert built.returncode == 0, built.stdout + built.stderr
    kept = [line for line in built.stdout.splitlines() if "rejected:" in line]
    assert kept and names(kept[0], dtype), built.stdout


@pytest.mark.parametrize("dtype", ["float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"])
def test_constants_narrower_than_a_byte_are_left_to_tvm_not_folded(dtype):
    """TVM's FoldConstant ends the process (a segfault, no exception) on float6/float4 data, so
    partitioning must not hand it such constants: a model that creates and casts them partitions
    in a process of its own (a crash would only show there) and keeps those ops on TVM."""
    code = f"""
import tvm
from tvm import relax
from simaccel.tvm_integration import partition_report
op = relax.op
bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType((2, 3), "float32"))
with bb.function("main", [x]):
    with bb.dataflow():
        z = bb.emit(op.zeros((2, 3), "{dtype}"))
        y = bb.emit(op.add(x, op.astype(z, "float32")))
        out = bb.emit_output(op.nn.relu(y))
    bb.emit_func_output(out)
_, report = partition_report(bb.get())
print("kept", len(report.kept))
"""
    import sys

    result = forks.run([sys.executable, "-c", code], timeout=300)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.startswith("kept ")
