"""Mask and index ops (simaccel/ops/builtin/masks.py, discrete.py; kernels/masks.py), the
split and constant-mask rewrites, ceil-mode max pooling, and the models they let offload.

Kernels run on the Numba CUDA simulator at tiny shapes against their numpy references,
twice over outputs prefilled with two patterns, so an element a kernel leaves unwritten
shows (integer and bool outputs have no NaN). Every kernel family compiles for sm_90
without spills. End to end, each op and model is compared with TVM alone; the torch.export
models (a GPT-style causal block, a padding mask from lengths, nn.TransformerDecoderLayer
with a causal mask, squeezenet1_1) also with torch, and must leave nothing on TVM.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from simaccel.ops import get_op
from kernel_cases import RecordingTarget

rng = np.random.default_rng(0)


def ints(shape, dtype="int64", low=-(1 << 40), high=1 << 40):
    return rng.integers(low, high, size=shape, dtype=dtype)


def floats(shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


def bools(shape):
    return rng.random(shape) < 0.5


def run_sim(name, arrays, attrs=None):
    """(kernel output, reference) of op `name` on the simulator; every element must be written."""
    op = get_op(name)
    attrs = op.all_attrs(attrs or {})
    shape, dtype = op.infer([a.shape for a in arrays], [str(a.dtype) for a in arrays], **attrs)
    originals = [a.copy() for a in arrays]
    outs = []
    for fill in (0, 1):
        out = np.full(shape, fill, dtype=dtype) if dtype != "bool" else np.full(shape, bool(fill))
        target = RecordingTarget()
        launches = op.kernel(target, FakeCUDAArray(out), *[FakeCUDAArray(a) for a in arrays], **attrs)
        assert launches == len(target.launches) == (1 if out.size else 0)
        outs.append(out)
    for a, orig in zip(arrays, originals):
        np.testing.assert_array_equal(a, orig)
    ref = op.reference(*arrays, **attrs)
    assert ref.shape == tuple(shape) and str(ref.dtype) == dtype, (ref.shape, ref.dtype, shape, dtype)
    np.testing.assert_array_equal(outs[0], outs[1], err_msg=f"{name}: elements left unwritten")
    return outs[0], ref


def exact(name, arrays, attrs=None):
    out, ref = run_sim(name, arrays, attrs)
    np.testing.assert_array_equal(out, ref)
    return out


COMPARISONS = ["less", "less_equal", "greater", "greater_equal", "equal", "not_equal"]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "int32"])
@pytest.mark.parametrize("name", COMPARISONS)
def test_comparisons_on_sim(name, dtype):
    a = ints((2, 3, 4), dtype, -3, 3) if dtype.startswith("int") else floats((2, 3, 4), dtype)
    b = ints((3, 1), dtype, -3, 3) if dtype.startswith("int") else floats((3, 1), dtype)
    b[0, 0] = a[0, 0, 0]  # ties, which tell < from <=
    out = exact(f"simaccel.{name}", [a, b])
    assert out.dtype == bool and 0 < out.sum() < out.size


def test_comparisons_are_exact_for_large_integers_and_nan():
    a = np.array([1 << 40, (1 << 40) + 1, -5], dtype="int64")
    b = np.array([(1 << 40) + 1, (1 << 40) + 1, -5], dtype="int64")  # equal in float32, not in int64
    assert list(exact("simaccel.less", [a, b])) == [True, False, False]
    assert list(exact("simaccel.equal", [a, b])) == [False, True, True]
    x = np.array([np.nan, 1.0, np.inf], dtype="float32")
    assert list(exact("simaccel.not_equal", [x, x])) == [True, False, False]
    assert list(exact("simaccel.equal", [x, np.array(np.inf, dtype="float32")])) == [False, False, True]
    flags = np.array([True, False, True, False])
    assert list(exact("simaccel.equal", [flags, np.array([True, True, False, False])])) == [True, False, False, True]


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_not", "bitwise_not", "bitwise_and", "bitwise_or"])
def test_logical_ops_on_sim(name):
    arrays = [bools((2, 1, 5))] + ([bools((3, 1))] if name.endswith(("_and", "_or")) else [])
    exact(f"simaccel.{name}", arrays)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64"])
def test_where_on_sim(dtype):
    cond = bools((3, 1))
    lhs = ints((2, 3, 4), dtype) if dtype == "int64" else floats((2, 3, 4), dtype)
    rhs = np.array(-np.inf if dtype != "int64" else -(1 << 50), dtype=dtype)
    exact("simaccel.where", [cond, lhs, rhs])


@pytest.mark.parametrize("name", ["integer_add", "integer_subtract", "integer_multiply"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "int8"])
def test_integer_arithmetic_is_exact_and_wraps(name, dtype):
    info = np.iinfo(dtype)
    a = ints((2, 1, 4), dtype, info.min, info.max)
    b = ints((3, 1), dtype, info.min, info.max)
    with np.errstate(over="ignore"):
        exact(f"simaccel.{name}", [a, b])


def test_integer_max_on_sim():
    exact("simaccel.integer_max", [ints((2, 3, 4), "int8", -128, 127)], {"axes": [2], "keepdims": True})
    exact("simaccel.integer_max", [ints((2, 3, 4), "int64")], {"axes": [0, 1], "keepdims": False})
    out = exact("simaccel.integer_max", [np.zeros((3, 0), "int32")], {"axes": [1], "keepdims": False})
    assert (out == np.iinfo("int32").min).all()  # TVM's initial value


@pytest.mark.parametrize("src, dst", [("float32", "int64"), ("float32", "bool"), ("bool", "float32"),
                                      ("int8", "bool"), ("float16", "float32"), ("int64", "float32"),
                                      ("bool", "int8")])
def test_astype_on_sim(src, dst):
    x = bools((4, 5)) if src == "bool" else ints((4, 5), src, -100, 100) if src.startswith("int") else (
        floats((4, 5), src) * 10)
    if src.startswith("float"):
        x[0, :3] = [0.0, -0.0, 2.75]
    out = exact("simaccel.astype", [x], {"dtype": dst})
    assert str(out.dtype) == dst


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
def test_fills_on_sim(dtype):
    fill = np.array(2.5, dtype="float32")
    out = exact("simaccel.full", [fill], {"shape": [2, 3], "dtype": dtype})
    assert out.dtype == np.dtype(dtype) and out.shape == (2, 3)
    data = floats((3, 1, 2))
    assert (exact("simaccel.full_like", [data, fill], {"dtype": dtype}) == np.asarray(2.5).astype(dtype)).all()
    assert (exact("simaccel.zeros_like", [data], {"dtype": dtype}) == 0).all()
    assert (exact("simaccel.ones_like", [data], {"dtype": dtype}) == 1).all()


@pytest.mark.parametrize("name, attrs", [("simaccel.expand_dims", {"shape": [1, 3, 4]}),
                                         ("simaccel.reshape", {"shape": [4, 3]}),
                                         ("simaccel.permute_dims", {"axes": [1, 0]}),
                                         ("simaccel.strided_slice", {"begin": [1, 0], "end": [3, 4], "strides": [1, 2]})])
@pytest.mark.parametrize("dtype", ["int64", "bool"])
def test_layout_ops_move_integers_and_bools_exactly(name, attrs, dtype):
    x = ints((3, 4)) if dtype == "int64" else bools((3, 4))
    if dtype == "int64":
        x[0, 0] = (1 << 60) + 1  # lost by a float32 round trip
    exact(name, [x], attrs)


def test_declarations_say_what_they_take():
    from simaccel.errors import DtypeError

    with pytest.raises(DtypeError, match="simaccel.where: condition has dtype float32; it takes bool"):
        get_op("simaccel.where").infer([(2,), (2,), (2,)], ["float32", "float32", "float32"])
    with pytest.raises(DtypeError, match="inputs must share one dtype, got lhs=float32, rhs=float16"):
        get_op("simaccel.where").infer([(2,), (2,), (2,)], ["bool", "float32", "float16"])
    with pytest.raises(DtypeError, match="simaccel.add: lhs has dtype int64"):
        get_op("simaccel.add").infer([(2,), (2,)], ["int64", "int64"])
    assert get_op("simaccel.less").infer([(2, 1), (3,)], ["int64", "int64"]) == ((2, 3), "bool")
    assert get_op("simaccel.astype").infer([(2,)], ["bool"], dtype="float16") == ((2,), "float16")


def test_a_declaration_with_a_bad_dtype_is_refused():
    from simaccel.errors import OpDeclarationError
    from simaccel.ops import OpFamily, relax_op

    base = dict(name="testaccel.cmp", inputs=("a",), pattern=relax_op("relax.abs", "a"), infer=lambda s: s[0],
                reference=lambda a: a, kernel="m:f")
    with pytest.raises(OpDeclarationError, match="out_dtype 'complex64'"):
        OpFamily(**base, out_dtype="complex64").check()
    with pytest.raises(OpDeclarationError, match="role_dtypes"):
        OpFamily(**base, role_dtypes={"b": ("bool",)}).check()
    with pytest.raises(OpDeclarationError, match="say the output's dtype"):
        OpFamily(**base, role_dtypes={"a": ("bool",)}).check()
    with pytest.raises(OpDeclarationError, match="fused bias or activation computes in float"):
        OpFamily(**base, dtypes=("int64",), activations=("relu",)).check()


# -- AOT: every mask kernel compiles for sm_90 and spills nothing ------------------------------
MASK_FAMILY_CASES = [  # (op, input shapes, input dtypes, attrs)
    *[(f"simaccel.{n}", [(4, 1, 8), (3, 1)], d, {}) for n in COMPARISONS
      for d in (["float32"] * 2, ["float16"] * 2, ["int64"] * 2)],
    *[(f"simaccel.{n}", [(4, 8), (8,)], ["bool"] * 2, {}) for n in ("logical_and", "logical_or", "bitwise_and", "bitwise_or")],
    *[(f"simaccel.{n}", [(4, 8)], ["bool"], {}) for n in ("logical_not", "bitwise_not")],
    ("simaccel.where", [(4, 1), (4, 8), ()], ["bool", "float32", "float32"], {}),
    ("simaccel.where", [(4, 1), (4, 8), ()], ["bool", "float16", "float16"], {}),
    ("simaccel.where", [(4, 1), (4, 8), ()], ["bool", "int64", "int64"], {}),
    *[("simaccel.take", [(11, 8), (2, 5)], d, {"axis": 0, "mode": "fast"})  # an embedding lookup (tests/test_kernels_layout.py)
      for d in (["float32", "int32"], ["float16", "int64"], ["int64", "int64"], ["bool", "int32"])],
    *[(f"simaccel.integer_{n}", [(4, 8), (8,)], [d] * 2, {}) for n in ("add", "subtract", "multiply")
      for d in ("int64", "int32")],
    ("simaccel.integer_max", [(4, 5, 6)], ["int8"], {"axes": [2], "keepdims": True}),
    ("simaccel.astype", [(4, 8)], ["float32"], {"dtype": "int64"}),
    ("simaccel.astype", [(4, 8)], ["bool"], {"dtype": "float16"}),
    ("simaccel.astype", [(4, 8)], ["float16"], {"dtype": "bool"}),
    ("simaccel.full", [()], ["float32"], {"shape": [4, 8], "dtype": "bool"}),
    ("simaccel.full_like", [(4, 8), ()], ["float32", "float32"], {"dtype": "float16"}),
    ("simaccel.zeros_like", [(4, 8)], ["float32"], {"dtype": "float32"}),
    ("simaccel.ones_like", [(4, 8)], ["float16"], {"dtype": "int64"}),
    ("simaccel.expand_dims", [(4, 8)], ["int64"], {"shape": [1, 4, 8]}),
]


def mask_program(name, shapes, dtypes, attrs):
    from simaccel.program import OpNode, Program, TensorSpec

    op = get_op(name)
    shape, dtype = op.infer(shapes, dtypes, **op.all_attrs(attrs))
    tensors = tuple(TensorSpec(f"t{i}", tuple(s), d) for i, (s, d) in enumerate(zip(shapes, dtypes)))
    n = len(shapes)
    return Program(name, tensors + (TensorSpec("out", shape, dtype),), tuple(range(n)), (n,),
                   (OpNode(name, tuple(range(n)), n, dict(attrs)),)).validate()


@pytest.mark.parametrize("name, shapes, dtypes, attrs", MASK_FAMILY_CASES,
                         ids=[f"{c[0]}-{'-'.join(c[2])}" for c in MASK_FAMILY_CASES])
def test_mask_kernels_compile_for_sm90_without_spills(name, shapes, dtypes, attrs):
    from simaccel.aot import compile_program, toolchain_missing

    if toolchain_missing() is not None:
        pytest.skip(toolchain_missing())
    from test_aot import SM90, no_spills

    program = mask_program(name, shapes, dtypes, attrs)
    kernels = compile_program(program, SM90)
    assert kernels
    for kernel in kernels:
        assert ".target sm_90" in kernel.ptx and kernel.cubin[:4] == b"\x7fELF"
        no_spills(kernel)


def mask_families() -> set[str]:
    """The families MASK_FAMILY_CASES covers (test_aot's coverage check adds them)."""
    return {get_op(name).family.name for name, *_ in MASK_FAMILY_CASES} - {"simaccel.expand_dims"}


def mask_kernel_ops() -> set[str]:
    """The ops this file's simulator tests cover (test_kernels_launchers' coverage check adds them)."""
    return {f"simaccel.{n}" for n in COMPARISONS + ["logical_and", "logical_or", "logical_not", "bitwise_not",
                                                     "bitwise_and", "bitwise_or",
                                                     "where", "integer_add", "integer_subtract", "integer_multiply",
                                                     "integer_max", "astype", "full", "full_like", "zeros_like",
                                                     "ones_like"]}
