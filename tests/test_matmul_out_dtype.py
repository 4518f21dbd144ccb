"""simaccel.matmul's and simaccel.dense's `out_dtype`: int8 operands summed exactly in int32
(kernels/matmul_int8.py) and 16-bit operands widened to float32, on the simulator against the
references, and the ISA's rules around them (an optional attribute, the dtypes each variant takes)."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_cases import _random, run_op
from simaccel.errors import DtypeError, ProgramError
from simaccel.ops import get_op
from simaccel.program import OpNode, Program, TensorSpec

# (op, data shape, weight shape): tails of the 64 x 64 tile and the 32-deep K stage, K not a
# multiple of 4, batch dims folded into rows, batched and broadcast weights, K = 1, a GEMV
INT8_CASES = [
    ("simaccel.dense", (70, 37), (67, 37)),
    ("simaccel.matmul", (70, 37), (37, 67)),
    ("simaccel.matmul", (2, 3, 5, 33), (3, 33, 9)),
    ("simaccel.matmul", (4, 3, 17), (1, 17, 2)),
    ("simaccel.dense", (2, 9, 65), (5, 65)),
    ("simaccel.matmul", (3, 1), (1, 66)),
    ("simaccel.dense", (1, 100), (3, 100)),
]


def int8s(rng, shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


@pytest.mark.parametrize("name, data_shape, weight_shape", INT8_CASES, ids=str)
def test_int8_matmuls_sum_exactly_in_int32(name, data_shape, weight_shape):
    rng = np.random.default_rng(len(data_shape) * 100 + data_shape[-1])
    data, weight = int8s(rng, data_shape), int8s(rng, weight_shape)
    out, ref = run_op(name, [data, weight], {"out_dtype": "int32"})
    w = weight.astype(np.int64)
    np.testing.assert_array_equal(out, np.matmul(data.astype(np.int64), w.T if name.endswith("dense") else w))
    np.testing.assert_array_equal(out, ref)


def test_int8_extremes_and_an_empty_k():
    """-128 * -128 summed (the products' largest) and a K of 0 (every sum 0)."""
    data, weight = np.full((3, 40), -128, np.int8), np.full((40, 5), -128, np.int8)
    out, _ = run_op("simaccel.matmul", [data, weight], {"out_dtype": "int32"})
    assert (out == 40 * 16384).all()
    out, _ = run_op("simaccel.matmul", [np.zeros((3, 0), np.int8), np.zeros((0, 4), np.int8)], {"out_dtype": "int32"})
    assert (out == 0).all()


def test_int32_sums_wrap_as_int32_arithmetic_does():
    """The simulator's dp4a wraps at 2^31, as the instruction and numpy's int32 matmul do (a
    sum that large needs K > 2^17, more than the simulator runs in a test)."""
    from simaccel.kernels.matmul_int8 import _simulated_dp4a, _word

    word = int(_word(-128, -128, -128, -128))
    assert _simulated_dp4a(word, word, 2**31 - 65536) == 2**31 - 65536 + 65536 - 2**32
    assert _simulated_dp4a(int(_word(1, -2, 3, -4)), int(_word(5, 6, -7, 8)), 10) == 10 + 5 - 12 - 21 - 32
    many = np.full((1, 2**17 + 8), -128, np.int8)
    want = np.matmul(many.astype(np.int32), many.T.astype(np.int32))  # numpy's own int32 wraps
    dense = get_op("simaccel.dense")
    assert dense.reference(many, many, **dense.all_attrs({"out_dtype": "int32"}))[0, 0] == want[0, 0] < 0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name, data_shape, weight_shape", [("simaccel.matmul", (33, 20), (20, 17)),
                                                            ("simaccel.dense", (2, 130, 9), (131, 9)),
                                                            ("simaccel.matmul", (3, 2, 17), (1, 3, 17, 5))], ids=str)
def test_16_bit_matmuls_widen_to_float32_unrounded(name, data_shape, weight_shape, dtype):
    rng = np.random.default_rng(3)
    arrays = [_random(rng, data_shape, dtype), _random(rng, weight_shape, dtype)]
    out, ref = run_op(name, arrays, {"out_dtype": "float32"})
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    rounded, _ = run_op(name, arrays, {})  # the same sums rounded to the operands' dtype
    assert rounded.dtype == np.dtype(dtype) and not np.array_equal(out, rounded.astype(np.float32))


def test_widened_float32_keeps_what_float16_would_round_away():
    data = np.ones((1, 64), np.float16)
    weight = np.ones((64, 1), np.float16)
    weight[0, 0] = 2048  # 2048 + 63: 2111 in float32, 2112 in float16
    out, _ = run_op("simaccel.matmul", [data, weight], {"out_dtype": "float32"})
    assert out[0, 0] == 2111


@pytest.mark.parametrize("dtypes, attrs, message", [
    (("int8", "int8"), {}, "int8 operands need out_dtype int32"),
    (("int8", "int8"), {"out_dtype": "int8"}, "out_dtype int8 for int8 operands; it takes int32"),
    (("float32", "float32"), {"out_dtype": "float16"}, "out_dtype float16 for float32 operands; it takes float32"),
    (("bfloat16", "bfloat16"), {"out_dtype": "float16"}, "it takes float32 or bfloat16"),
    (("int8", "float16"), {"out_dtype": "int32"}, "inputs must share one dtype"),
])
def test_out_dtypes_the_op_does_not_give_are_dtype_errors(dtypes, attrs, message):
    op = get_op("simaccel.matmul")
    with pytest.raises(DtypeError, match=f"simaccel.matmul: .*{message}"):
        op.infer([(4, 8), (8, 3)], list(dtypes), **op.all_attrs(attrs))


@pytest.mark.parametrize("name", ["simaccel.matmul_bias", "simaccel.dense_relu", "simaccel.matmul_bias_gelu"])
def test_fused_bias_and_activation_variants_take_float_operands_only(name):
    op = get_op(name)
    shapes = [(4, 8), (3, 8) if "dense" in name else (8, 3)] + ([(3,)] if "_bias" in name else [])
    with pytest.raises(DtypeError, match=f"{name}: data has dtype int8; it takes float32 or float16 or bfloat16 "
                                         r"\(a fused bias or activation computes in float\)"):
        op.infer(shapes, ["int8"] * len(shapes), **op.all_attrs({"out_dtype": "int32"}))


def _matmul_program(attrs, dtype="int8", out_dtype="int32"):
    tensors = (TensorSpec("x", (4, 8), dtype), TensorSpec("w", (8, 3), dtype), TensorSpec("y", (4, 3), out_dtype))
    return Program("p", tensors, (0, 1), (2,), (OpNode("simaccel.matmul", (0, 1), 2, attrs),))


def test_a_program_may_leave_out_an_attribute_with_a_default():
    """out_dtype left out is the operands' dtype; given, it is checked by its kind and by the
    op's rule; the default is never written into the Program."""
    _matmul_program({}, "float16", "float16").validate()
    _matmul_program({"out_dtype": "float32"}, "float16", "float32").validate()
    program = _matmul_program({"out_dtype": "int32"}).validate()
    assert Program.from_json(program.to_json()).ops[0].attrs == {"out_dtype": "int32"}
    assert Program.from_json(_matmul_program({}, "float32", "float32").to_json()).ops[0].attrs == {}
    with pytest.raises(ProgramError, match="attribute out_dtype must be one of .*, got 'int16'"):
        _matmul_program({"out_dtype": "int16"}).validate()
    with pytest.raises(DtypeError, match="simaccel.matmul: int8 operands need out_dtype int32"):
        _matmul_program({}).validate()
    with pytest.raises(ProgramError, match=r"has unknown attributes \['scale'\]"):
        _matmul_program({"out_dtype": "int32", "scale": 2}).validate()
