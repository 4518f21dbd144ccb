"""Programs with symbolic shapes (size vars): the JSON form (version 2, and a static Program still
version 1 byte for byte), validation on the expressions and at the vars' upper bounds, binding
a call's tensors (`bind_tensors`, the errors naming var, values and tensors), and running one
symbolic Program at many shapes on the "ref" and "sim" engines, against numpy, through the
runtime's LRU of bound Programs.
"""

import json
import re

import numpy as np
import pytest

from compare import assert_same
from simaccel import ProgramError, ShapeError, shapes
from simaccel.profile import DeviceProfile
from simaccel.program import OpNode, Program, SizeVar, TensorSpec
from simaccel.runtime import Runtime
from simaccel.shapes import Dim

n, s, k, j, h = (Dim.var(name) for name in "nskjh")
CONV_ATTRS = {"strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1}


def dim_text(text: str) -> str:
    """A regex for a dim in a message: its text, or its repr (a shape rule's message formats a
    tuple, which shows each Dim as Dim('n'))."""
    return rf"(?:{re.escape(text)}|Dim\('{re.escape(text)}'\))"


def make(name, tensors, inputs, outputs, ops, vars=()):
    return Program(name, tuple(TensorSpec(*t) for t in tensors), inputs, outputs, tuple(OpNode(*o) for o in ops),
                   vars=tuple(vars))


# -- models -----------------------------------------------------------------------------------------
def matmul_model(n_upper=8, s_upper=64, lower=1):
    """x (n, s, 16) -> reshape (n*s, 16) -> matmul_relu with w (16, 8) -> reshape (n, s, 8)."""
    return make("sym_matmul", [("x", (n, s, 16), "float32"), ("w", (16, 8), "float32"),
                               ("h", (n * s, 16), "float32"), ("y", (n * s, 8), "float32"),
                               ("out", (n, s, 8), "float32")], (0, 1), (4,),
                [("simaccel.reshape", (0,), 2, {"shape": [n * s, 16]}), ("simaccel.matmul_relu", (2, 1), 3, {}),
                 ("simaccel.reshape", (3,), 4, {"shape": [n, s, 8]})],
                [SizeVar("n", lower, n_upper), SizeVar("s", lower, s_upper)])


def matmul_inputs(rng, n_, s_):
    return [rng.standard_normal((n_, s_, 16)).astype(np.float32), rng.standard_normal((16, 8)).astype(np.float32)]


def matmul_want(x, w):
    return np.maximum(x.astype(np.float64) @ w.astype(np.float64), 0).astype(np.float32)


def unary_chain_model(upper=8):
    """relu -> sigmoid -> tanh of an (n, 16) tensor."""
    return make("sym_chain", [("x", (n, 16), "float32"), ("a", (n, 16), "float32"), ("b", (n, 16), "float32"),
                              ("y", (n, 16), "float32")], (0,), (3,),
                [("simaccel.relu", (0,), 1, {}), ("simaccel.sigmoid", (1,), 2, {}), ("simaccel.tanh", (2,), 3, {})],
                [SizeVar("n", 1, upper)])


def unary_chain_want(x):
    return np.tanh(1 / (1 + np.exp(-np.maximum(x.astype(np.float64), 0)))).astype(np.float32)


def broadcast_chain_model(upper=8):
    """(x (n, 16) + bias (16,)) * x -> relu: the bias add of a dynamic batch."""
    return make("sym_bias", [("x", (n, 16), "float32"), ("bias", (16,), "float32"), ("a", (n, 16), "float32"),
                             ("b", (n, 16), "float32"), ("y", (n, 16), "float32")], (0, 1), (4,),
                [("simaccel.add", (0, 1), 2, {}), ("simaccel.multiply", (2, 0), 3, {}), ("simaccel.relu", (3,), 4, {})],
                [SizeVar("n", 1, upper)])


def softmax_model(upper=8):
    return make("sym_softmax", [("x", (n, 32), "float32"), ("y", (n, 32), "float32")], (0,), (1,),
                [("simaccel.softmax", (0,), 1, {})], [SizeVar("n", 1, upper)])


def softmax_want(x):
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def layer_norm_model(upper=8):
    return make("sym_layer_norm", [("x", (n, 32), "float32"), ("gamma", (32,), "float32"), ("beta", (32,), "float32"),
                                   ("y", (n, 32), "float32")], (0, 1, 2), (3,),
                [("simaccel.layer_norm", (0, 1, 2), 3, {"epsilon": 1e-5})], [SizeVar("n", 1, upper)])


def layer_norm_want(x, gamma, beta):
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return ((x - mean) / np.sqrt(var + 1e-5) * gamma + beta).astype(np.float32)


def conv_model(upper=4, lower=1):
    """conv2d of a (n, 3, 8, 8) batch by a (4, 3, 3, 3) weight: (n, 4, 6, 6)."""
    return make("sym_conv", [("x", (n, 3, 8, 8), "float32"), ("w", (4, 3, 3, 3), "float32"),
                             ("y", (n, 4, 6, 6), "float32")], (0, 1), (2,),
                [("simaccel.conv2d", (0, 1), 2, CONV_ATTRS)], [SizeVar("n", lower, upper)])


def conv_want(x, w):
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3), axis=(2, 3))  # n c oh ow kh kw
    return np.einsum("nchwij,ocij->nohw", windows, w.astype(np.float64)).astype(np.float32)


def concat_model(upper=8, lower=0):
    """a (n, 8) and b (1, 8) concatenated on axis 0: the output's dim is n + 1."""
    return make("sym_concat", [("a", (n, 8), "float32"), ("b", (1, 8), "float32"), ("c", (n + 1, 8), "float32")],
                (0, 1), (2,), [("simaccel.concat", (0, 1), 2, {"axis": 0})], [SizeVar("n", lower, upper)])


def double_concat_model():
    """x (n, 4) and y (2*n, 4): an input dim that is an expression, bound from x's n."""
    return make("sym_concat2", [("x", (n, 4), "float32"), ("y", (2 * n, 4), "float32"),
                                ("z", (3 * n, 4), "float32")], (0, 1), (2,),
                [("simaccel.concat", (0, 1), 2, {"axis": 0})], [SizeVar("n", 1, 8)])


def relu_model(vars, shape=(n, 8)):
    return make("sym_relu", [("x", shape, "float32"), ("y", shape, "float32")], (0,), (1,),
                [("simaccel.relu", (0,), 1, {})], vars)


def run_numpy(runtime, program, inputs, out_shape):
    out = np.full(out_shape, np.nan, np.float32)
    runtime.run(program, *inputs, out)
    return out


# -- JSON ---------------------------------------------------------------------------------------------
def test_symbolic_program_round_trips_as_version_2():
    program = matmul_model().validate()
    text = program.to_json()
    data = json.loads(text)
    assert '"version":2' in text and data["version"] == 2
    assert data["vars"] == [{"name": "n", "lower": 1, "upper": 8}, {"name": "s", "lower": 1, "upper": 64}]
    assert data["tensors"][0]["shape"] == ["n", "s", 16] and data["tensors"][2]["shape"] == ["n*s", 16]
    assert data["ops"][0]["attrs"] == {"shape": ["n*s", 16]}
    again = Program.from_json(text)
    assert again == program
    assert again.fingerprint() == program.fingerprint() and again.to_json() == text
    assert again.tensors[2].shape == (n * s, 16) and again.ops[2].attrs["shape"] == [n, s, 8]
    assert again.validate() is again


def test_derived_dims_and_unbounded_vars_round_trip():
    program = make("d", [("a", (n, 8), "float32"), ("b", (1, 8), "float32"), ("c", (n + 1, (k + 1) // 2), "float32")],
                   (0, 1), (2,), [], [SizeVar("n", 0), SizeVar("k", 2, 9)])
    data = json.loads(program.to_json())
    assert data["tensors"][2]["shape"] == ["n + 1", "(k + 1)//2"]
    assert data["vars"] == [{"name": "n", "lower": 0}, {"name": "k", "lower": 2, "upper": 9}]
    again = Program.from_json(program.to_json())
    assert again == program and again.fingerprint() == program.fingerprint()
    assert again.vars[0].upper is None


# Fingerprints of these Programs as simaccel wrote them before symbolic shapes (8214d4a, the
# parent of 5c00d87): a static Program's JSON is still version 1, byte for byte.
STATIC_FINGERPRINTS = {"mlp": "e4669fe0779e5885", "rs": "f506f5aa6f63ffc4"}


def static_programs():
    mlp = make("mlp", [("x", (4, 8), "float32"), ("w", (6, 8), "float32"), ("b", (6,), "float32"),
                       ("h", (4, 6), "float32"), ("y", (4, 6), "float32")], (0, 1, 2), (4,),
               [("simaccel.dense_bias_relu", (0, 1, 2), 3, {}), ("simaccel.softmax", (3,), 4, {})])
    rs = make("rs", [("x", (2, 3, 16), "float32"), ("h", (6, 16), "float32")], (0,), (1,),
              [("simaccel.reshape", (0,), 1, {"shape": [6, 16]})])
    return [mlp, rs]


@pytest.mark.parametrize("program", static_programs(), ids=lambda p: p.name)
def test_static_program_is_still_version_1_byte_for_byte(program):
    text = program.validate().to_json()
    assert '"version":1' in text
    assert '"vars"' not in text and "vars" not in json.loads(text)
    assert program.fingerprint() == STATIC_FINGERPRINTS[program.name]
    assert Program.from_json(text).fingerprint() == program.fingerprint()
    assert program.bind({}) is program  # nothing to bind


def symbolic_dict():
    return json.loads(relu_model([SizeVar("n", 1, 8)]).to_json())


def test_version_1_refuses_symbolic_fields():
    data = symbolic_dict()
    data["version"] = 1
    with pytest.raises(ProgramError, match=r"unknown fields \['vars'\]"):
        Program.from_dict(data)
    del data["vars"]
    with pytest.raises(ProgramError, match=r"tensors\[0\]\.shape\[0\] must be an integer, got 'n' \(str\)"):
        Program.from_dict(data)


@pytest.mark.parametrize("vars, match", [
    ("n", r"vars must be a list"),
    ([3], r"vars\[0\] must be an object"),
    ([{"lower": 1}], r"vars\[0\] lacks \['name'\]"),
    ([{"name": "n"}], r"vars\[0\] lacks \['lower'\]"),
    ([{"name": "n", "lower": 1, "step": 2}], r"vars\[0\] has unknown fields \['step'\]"),
    ([{"name": "1n", "lower": 1}], r"vars\[0\]\.name must be an identifier, got '1n'"),
    ([{"name": "", "lower": 1}], r"vars\[0\]\.name must be a non-empty string"),
    ([{"name": 7, "lower": 1}], r"vars\[0\]\.name must be a non-empty string, got 7"),
    ([{"name": "n", "lower": True}], r"vars\[0\]\.lower must be an integer, got True \(bool\)"),
    ([{"name": "n", "lower": 0, "upper": False}], r"vars\[0\]\.upper must be an integer, got False \(bool\)"),
    ([{"name": "n", "lower": 1.0}], r"vars\[0\]\.lower must be an integer, got 1\.0 \(float\)"),
    ([{"name": "n", "lower": 0, "upper": "8"}], r"vars\[0\]\.upper must be an integer, got '8' \(str\)"),
], ids=["not-a-list", "not-an-object", "no-name", "no-lower", "unknown-field", "non-identifier", "empty-name",
        "int-name", "bool-lower", "bool-upper", "float-lower", "string-upper"])
def test_malformed_vars_are_refused_naming_the_field(vars, match):
    data = symbolic_dict()
    data["vars"] = vars
    with pytest.raises(ProgramError, match=match):
        Program.from_json(json.dumps(data))


@pytest.mark.parametrize("vars, match", [
    ([{"name": "n", "lower": 5, "upper": 2}], r"size var n in \[5, 2\] has bounds that are not 0 <= lower <= upper"),
    ([{"name": "n", "lower": -1, "upper": 8}], r"size var n in \[-1, 8\] has bounds"),
    ([{"name": "n", "lower": 1, "upper": 8}, {"name": "n", "lower": 1, "upper": 4}],
     r"a size var is declared twice \(\['n', 'n'\]\)"),
], ids=["lower>upper", "negative-lower", "duplicate"])
def test_inconsistent_vars_are_refused_by_validation_naming_the_var(vars, match):
    """from_json reads each var's fields; the bounds' order and the names' uniqueness are the
    validation's (which the runtime runs on every Program it loads)."""
    data = symbolic_dict()
    data["vars"] = vars
    with pytest.raises(ProgramError, match=match):
        Program.from_json(json.dumps(data)).validate()
    with pytest.raises(ProgramError, match=match):
        Runtime().program("key", json.dumps(data))


@pytest.mark.parametrize("bad", ["n ** 2", "f(n)", "1.5", "", "n +", "n // 0", "n // m", "True", "n.x"], ids=repr)
@pytest.mark.parametrize("where", ["tensor", "attr"])
def test_bad_dim_text_is_refused_naming_the_field(bad, where):
    data = json.loads(matmul_model().to_json())
    if where == "tensor":
        data["tensors"][0]["shape"][1] = bad
        field = r"tensors\[0\]\.shape\[1\]"
    else:
        data["ops"][0]["attrs"]["shape"][0] = bad
        field = r"ops\[0\]\.attrs\.shape\[0\]"
    with pytest.raises(ProgramError, match=field) as raised:
        Program.from_json(json.dumps(data))
    assert repr(bad) in str(raised.value)


@pytest.mark.parametrize("dim, match", [(-3, "must be between 0 and 2\\*\\*63-1"), (True, "must be an integer"),
                                        (2.0, "must be an integer"), (None, "must be an integer")], ids=repr)
def test_non_text_dims_keep_version_1_rules(dim, match):
    data = symbolic_dict()
    data["tensors"][0]["shape"][1] = dim
    with pytest.raises(ProgramError, match=r"tensors\[0\]\.shape\[1\] " + match):
        Program.from_dict(data)


@pytest.mark.parametrize("bad", ["4//0", "2 % 0", "(n - n)//0"])
def test_int_divided_by_zero_in_dim_text_is_a_program_error(bad):
    data = symbolic_dict()
    data["tensors"][0]["shape"][1] = bad
    with pytest.raises(ProgramError, match=r"tensors\[0\]\.shape\[1\]"):
        Program.from_dict(data)


# -- validation --------------------------------------------------------------------------------------
@pytest.mark.parametrize("program", [
    relu_model([]),  # no vars at all
    make("p", [("x", (s, 8), "float32"), ("y", (s, 8), "float32"), ("h", (n, 8), "float32")], (0,), (1,),
         [("simaccel.relu", (0,), 1, {})], [SizeVar("s", 1, 4)]),  # n in an unused tensor
    make("p", [("x", (s, 8), "float32"), ("y", (s, 8), "float32")], (0,), (1,),
         [("simaccel.reshape", (0,), 1, {"shape": [n, 8]})], [SizeVar("s", 1, 4)]),  # n in a shape attribute
], ids=["no-vars", "other-var", "attr"])
def test_undeclared_var_is_refused(program):
    with pytest.raises(ProgramError, match=r"dims read size vars \['n'\], which it does not declare"):
        program.validate()


@pytest.mark.parametrize("program", [
    # n only in an intermediate, as n + 1
    make("p", [("x", (s, 8), "float32"), ("h", (n + 1, 8), "float32"), ("y", (s, 8), "float32")], (0,), (2,),
         [("simaccel.relu", (0,), 2, {})], [SizeVar("s", 1, 4), SizeVar("n", 1, 4)]),
    # n on the boundary, but only as n + 1 and 2*n
    make("p", [("x", (n + 1, 8), "float32"), ("y", (2 * n, 8), "float32")], (0,), (1,),
         [("simaccel.relu", (0,), 1, {})], [SizeVar("n", 1, 4)]),
], ids=["intermediate-only", "boundary-expressions-only"])
def test_var_that_no_call_can_bind_is_refused(program):
    with pytest.raises(ProgramError, match="size var n is no dim of an input or output, so no call can bind it"):
        program.validate()


def test_shape_rule_that_cannot_be_decided_is_a_shape_error():
    # reduction sizes k and j that no size within the bounds makes equal
    matmul = make("p", [("a", (4, k), "float32"), ("b", (j, 8), "float32"), ("c", (4, 8), "float32")], (0, 1), (2,),
                  [("simaccel.matmul", (0, 1), 2, {})], [SizeVar("k", 1, 8), SizeVar("j", 9, 16)])
    with pytest.raises(ShapeError, match=rf"reduction sizes differ: data \(4, {dim_text('k')}\) has K=k, "
                                         rf"weight \({dim_text('j')}, 8\) has K=j"):
        matmul.validate()
    # a symbolic image height: conv2d's rule checks its output height h - 2 is at least 0 (empty,
    # as TVM alone gives), which the bounds decide where h is at least 2, and a call's size must
    # where h may be 1
    def conv(lower, upper=16):
        return make("p", [("x", (1, 3, h, 8), "float32"), ("w", (4, 3, 3, 3), "float32"),
                          ("y", (1, 4, h - 2, 6), "float32")],
                    (0, 1), (2,), [("simaccel.conv2d", (0, 1), 2, CONV_ATTRS)], [SizeVar("h", lower, upper)])

    assert conv(2).validate().requires == ()
    with pytest.raises(ShapeError, match=r"op 0 \(simaccel.conv2d\)'s shape rule holds only where h - 2 >= 0"):
        conv(1).validate()
    assert [str(r) for r in conv(1).requiring().requires] == ["h - 2 >= 0"]
    with pytest.raises(ShapeError, match="kernel 3x3 does not fit"):  # no height within the bounds fits
        conv(0, 1).validate()
    # a reshape whose element counts are different polynomials
    reshape = make("p", [("x", (n, s), "float32"), ("y", (n * s + 1,), "float32")], (0,), (1,),
                   [("simaccel.reshape", (0,), 1, {"shape": [n * s + 1]})], [SizeVar("n", 1, 4), SizeVar("s", 1, 4)])
    with pytest.raises(ShapeError, match=rf"cannot view data \({dim_text('n')}, {dim_text('s')}\)"):
        reshape.validate()


def test_declared_output_shape_must_be_the_rules_expression():
    wrong = make("p", [("a", (n, 8), "float32"), ("b", (1, 8), "float32"), ("c", (n, 8), "float32")], (0, 1), (2,),
                 [("simaccel.concat", (0, 1), 2, {"axis": 0})], [SizeVar("n", 0, 8)])
    with pytest.raises(ProgramError, match=rf"produces \({dim_text('n + 1')}, 8\) float32, but its output c"):
        wrong.validate()
    assert concat_model().validate().tensors[2].shape == (n + 1, 8)


@pytest.mark.parametrize("profile, upper, error, match", [
    (DeviceProfile(name="small", max_tensor_bytes=256), 8, None, None),  # 8 * 8 * 4 bytes: fits
    (DeviceProfile(name="small", max_tensor_bytes=256), 9, ShapeError, r"\(9, 8\) float32 takes 288 bytes"),
    (DeviceProfile(name="small", max_tensor_bytes=256), None, ShapeError,
     r"size var n has no upper bound, and profile small limits the bytes of tensors or regions"),
    (DeviceProfile(name="pad", max_region_bytes=512), 8, None, None),  # x and y at n = 8: 512 bytes
    (DeviceProfile(name="pad", max_region_bytes=512), 9, ProgramError, r"needs 576 bytes, more than profile pad's"),
    (DeviceProfile(name="few", max_elements=64), 8, None, None),
    (DeviceProfile(name="few", max_elements=64), 9, ShapeError, r"has 72 elements, more than the profile's 64"),
], ids=["bytes-fit", "bytes-exceed", "bytes-unbounded", "region-fit", "region-exceed", "elements-fit",
        "elements-exceed"])
def test_profile_limits_are_checked_at_the_upper_bounds(profile, upper, error, match):
    program = relu_model([SizeVar("n", 1, upper)])
    if error is None:
        assert program.validate(profile) is program
    else:
        with pytest.raises(error, match=match):
            program.validate(profile)


def test_a_var_without_upper_bound_is_checked_per_call_where_the_profile_limits_no_bytes():
    """The default profile limits elements only (max_elements, 2**31 - 1): a var with no upper
    bound validates, and each call's sizes meet the limit when the call binds them."""
    import simaccel

    program = relu_model([SizeVar("n", 1)]).validate()
    runtime = simaccel.get_runtime()
    x = np.arange(-3, 5, dtype="float32").reshape(1, 8)
    out = np.zeros_like(x)
    runtime.run(program, x, out)
    assert (out == np.maximum(x, 0)).all()
    few = Runtime(simaccel.DeviceProfile(name="few", max_elements=16))
    with pytest.raises(ShapeError, match="n = 3: .*24 elements, more than the profile's 16"):
        few.run(program, np.zeros((3, 8), "float32"), np.zeros((3, 8), "float32"))


# -- bind_tensors and bind -----------------------------------------------------------------------------
def test_bind_tensors_binds_plain_var_dims():
    program = matmul_model().validate()
    assert program.bind_tensors([(3, 7, 16), (16, 8), (3, 7, 8)]) == {"n": 3, "s": 7}
    assert program.bind_tensors([(1, 1, 16), (16, 8), (1, 1, 8)]) == {"n": 1, "s": 1}
    assert double_concat_model().validate().bind_tensors([(3, 4), (6, 4), (9, 4)]) == {"n": 3}
    assert concat_model().validate().bind_tensors([(0, 8), (1, 8), (1, 8)]) == {"n": 0}


def test_bind_gives_the_static_program():
    program = matmul_model().validate()
    static = program.bind({"n": 3, "s": 7})
    assert static.vars == () and static.name == program.name
    assert [t.shape for t in static.tensors] == [(3, 7, 16), (16, 8), (21, 16), (21, 8), (3, 7, 8)]
    assert static.ops[0].attrs["shape"] == (21, 16) and static.ops[2].attrs["shape"] == (3, 7, 8)
    assert static.validate() is static
    assert '"version":1' in static.to_json()


def test_disagreeing_tensors_name_the_var_values_and_tensors():
    program = matmul_model().validate()
    with pytest.raises(ShapeError, match=r"region sym_matmul: size var s is 5 in x \(dim 1 of \(2, 5, 16\)\) "
                                         r"but 6 in out \(dim 1 of \(2, 6, 8\)\)"):
        program.bind_tensors([(2, 5, 16), (16, 8), (2, 6, 8)])
    square = relu_model([SizeVar("n", 1, 8)], shape=(n, n))
    with pytest.raises(ShapeError,
                       match=r"size var n is 3 in x \(dim 0 of \(3, 4\)\) but 4 in x \(dim 1 of \(3, 4\)\)"):
        square.validate().bind_tensors([(3, 4), (3, 4)])


@pytest.mark.parametrize("shapes, match", [
    ([(9, 5, 16), (16, 8), (9, 5, 8)],
     r"size var n = 9 \(from x \(dim 0 of \(9, 5, 16\)\)\) is outside its bounds \[1, 8\]"),
    ([(2, 0, 16), (16, 8), (2, 0, 8)],
     r"size var s = 0 \(from x \(dim 1 of \(2, 0, 16\)\)\) is outside its bounds \[1, 64\]"),
    ([(2, 65, 16), (16, 8), (2, 65, 8)], r"size var s = 65 .* outside its bounds \[1, 64\]"),
], ids=["above", "below", "above-s"])
def test_value_outside_bounds_names_var_value_and_bounds(shapes, match):
    with pytest.raises(ShapeError, match=match):
        matmul_model().validate().bind_tensors(shapes)


@pytest.mark.parametrize("program, shapes, match", [
    (concat_model(), [(3, 8), (1, 8), (5, 8)], r"c has shape \(5, 8\), but \(n \+ 1, 8\) is \(4, 8\) where n = 3"),
    (double_concat_model(), [(3, 4), (5, 4), (9, 4)], r"y has shape \(5, 4\), but \(2\*n, 4\) is \(6, 4\) where n = 3"),
    (matmul_model(), [(3, 5, 17), (16, 8), (3, 5, 8)], r"x has shape \(3, 5, 17\), but \(n, s, 16\) is \(3, 5, 16\) "
                                                        r"where n = 3, s = 5"),
    (matmul_model(), [(3, 5, 16), (8, 16), (3, 5, 8)], r"w has shape \(8, 16\), but \(16, 8\) is \(16, 8\)"),
], ids=["derived-output", "derived-input", "static-dim", "static-tensor"])
def test_dim_that_is_not_its_expression_names_the_tensor(program, shapes, match):
    with pytest.raises(ShapeError, match=match):
        program.validate().bind_tensors(shapes)


@pytest.mark.parametrize("shapes, match", [
    ([(3, 5), (16, 8), (3, 5, 8)], r"x has shape \(3, 5\), expected rank 3 \(\(n, s, 16\)\)"),
    ([(3, 5, 16), (16, 8), (3, 5, 8, 1)], r"out has shape \(3, 5, 8, 1\), expected rank 3 \(\(n, s, 8\)\)"),
], ids=["input", "output"])
def test_wrong_rank_names_the_tensor_and_its_shape(shapes, match):
    with pytest.raises(ShapeError, match=match):
        matmul_model().validate().bind_tensors(shapes)


# -- running, ref and sim -----------------------------------------------------------------------------
def check_matmul(runtime, program, shapes, rng):
    for n_, s_ in shapes:
        x, w = matmul_inputs(rng, n_, s_)
        got = run_numpy(runtime, program, [x, w], (n_, s_, 8))
        assert_same(got, matmul_want(x, w), scaled=True, name=f"n={n_}, s={s_}")


def check_rows(runtime, model, shapes, rng):
    """`model` ('chain', 'softmax', 'layer_norm', 'conv', 'concat') at each batch size, in order."""
    program = {"chain": unary_chain_model, "softmax": softmax_model, "layer_norm": layer_norm_model,
               "conv": conv_model, "concat": concat_model}[model]()
    for size in shapes:
        if model == "chain":
            x = rng.standard_normal((size, 16)).astype(np.float32)
            inputs, want = [x], unary_chain_want(x)
        elif model == "softmax":
            x = (3 * rng.standard_normal((size, 32))).astype(np.float32)
            inputs, want = [x], softmax_want(x)
        elif model == "layer_norm":
            x, gamma, beta = (rng.standard_normal(shape).astype(np.float32) for shape in ((size, 32), (32,), (32,)))
            inputs, want = [x, gamma, beta], layer_norm_want(x, gamma, beta)
        elif model == "conv":
            x, w = (rng.standard_normal(shape).astype(np.float32) for shape in ((size, 3, 8, 8), (4, 3, 3, 3)))
            inputs, want = [x, w], conv_want(x, w)
        else:
            a, b = rng.standard_normal((size, 8)).astype(np.float32), rng.standard_normal((1, 8)).astype(np.float32)
            inputs, want = [a, b], np.concatenate([a, b])
        got = run_numpy(runtime, program, inputs, want.shape)
        assert_same(got, want, scaled=True, name=f"{model} at n={size}")


def test_matmul_model_at_many_shapes_ref(clean_runtime):
    program = matmul_model()
    with clean_runtime.use_engine("ref"):
        shapes = [(1, 1), (8, 64), (3, 7), (5, 1), (1, 33), (3, 7)]  # all vars 1, the upper bounds, odd ones
        check_matmul(clean_runtime, program, shapes, np.random.default_rng(0))
    assert clean_runtime.ledger.snapshot()["offloaded_calls"] == 6


def test_matmul_model_at_several_shapes_sim(clean_runtime):
    program = matmul_model(n_upper=3, s_upper=5)
    with clean_runtime.use_engine("sim"):
        check_matmul(clean_runtime, program, [(1, 1), (3, 5), (3, 1)], np.random.default_rng(1))


@pytest.mark.parametrize("engine, model, shapes", [
    ("ref", "chain", [1, 8, 5]),
    ("ref", "softmax", [1, 8, 3]),
    ("ref", "layer_norm", [1, 8, 7]),
    ("ref", "conv", [1, 4, 3]),
    ("ref", "concat", [0, 1, 8, 5]),
    ("sim", "chain", [1, 8, 3]),
    ("sim", "softmax", [1, 8, 3]),
    ("sim", "layer_norm", [1, 8, 3]),
    ("sim", "conv", [1, 4, 3]),
    ("sim", "concat", [0, 1, 5]),
])
def test_row_models_at_several_batch_sizes(clean_runtime, engine, model, shapes):
    with clean_runtime.use_engine(engine):
        check_rows(clean_runtime, model, shapes, np.random.default_rng(len(shapes)))


@pytest.mark.parametrize("engine, sizes", [("ref", (1, 8, 3)), ("sim", (1, 8, 3))])
def test_broadcast_chain_at_several_batch_sizes(clean_runtime, engine, sizes):
    program = broadcast_chain_model()
    rng = np.random.default_rng(2)
    with clean_runtime.use_engine(engine):
        for size in sizes:
            x, bias = rng.standard_normal((size, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
            got = run_numpy(clean_runtime, program, [x, bias], (size, 16))
            want = np.maximum((x.astype(np.float64) + bias) * x, 0).astype(np.float32)
            assert_same(got, want, scaled=True, name=f"n={size}")


def test_same_program_alternates_between_shapes_and_engines(clean_runtime):
    program = matmul_model(n_upper=4, s_upper=4)
    rng = np.random.default_rng(3)
    for engine, shape in [("ref", (2, 3)), ("sim", (1, 4)), ("ref", (4, 4)), ("sim", (2, 3)), ("ref", (1, 4))]:
        with clean_runtime.use_engine(engine):
            check_matmul(clean_runtime, program, [shape], rng)


def test_runtime_refuses_a_call_whose_shapes_do_not_bind(clean_runtime):
    program = matmul_model()
    x, w = matmul_inputs(np.random.default_rng(4), 9, 2)
    out = np.full((9, 2, 8), 7.0, np.float32)
    with pytest.raises(ShapeError, match=r"size var n = 9 .* outside its bounds \[1, 8\]"):
        clean_runtime.run(program, x, w, out)
    with pytest.raises(ShapeError, match=r"size var s is 2 in x .* but 3 in out"):
        clean_runtime.run(program, x[:2], w, np.zeros((2, 3, 8), np.float32))
    assert (out == 7.0).all()  # nothing written


def test_runtime_checks_the_profile_per_bound_shape():
    runtime = Runtime(profile=DeviceProfile(name="small", max_tensor_bytes=256))
    ok = relu_model([SizeVar("n", 1, 8)])
    x = np.arange(-8, 8, dtype=np.float32).reshape(2, 8)
    y = np.zeros((2, 8), np.float32)
    with runtime.use_engine("ref"):
        runtime.run(ok, x, y)
        assert (y == np.maximum(x, 0)).all()
        with pytest.raises(ShapeError, match="more than profile small's 256 per tensor"):
            runtime.run(relu_model([SizeVar("n", 1, 9)]), x, y)


def test_plan_cache_keeps_max_plans_and_rebinds_evicted_shapes():
    runtime = Runtime(max_plans=2)
    program = matmul_model()
    rng = np.random.default_rng(5)
    shapes = [(1, 1), (2, 3), (3, 5), (4, 7), (5, 2)]
    with runtime.use_engine("ref"):
        for shape in shapes:
            check_matmul(runtime, program, [shape], rng)
            assert len(runtime._programs) <= 2 and len(runtime._plans) <= 2
        bound = [dict(key[2]) for key in runtime._programs if isinstance(key, tuple) and key[0] == "bound"]
        assert {"n": 1, "s": 1} not in bound  # the first shape was evicted
        for shape in [shapes[0], shapes[1], shapes[0]]:
            check_matmul(runtime, program, [shape], rng)
            assert len(runtime._programs) <= 2 and len(runtime._plans) <= 2
    assert runtime.ledger.snapshot()["offloaded_calls"] == 8


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_zero_sized_var_runs(clean_runtime, engine):
    """A var with lower bound 0 bound to 0 runs: empty outputs, and a concat of nothing and b is b."""
    program = matmul_model(n_upper=3, s_upper=3, lower=0)
    rng = np.random.default_rng(6)
    with clean_runtime.use_engine(engine):
        check_matmul(clean_runtime, program, [(0, 3), (2, 0), (0, 0), (2, 3)], rng)
        conv = conv_model(lower=0)
        out = run_numpy(clean_runtime, conv, [np.zeros((0, 3, 8, 8), np.float32), np.ones((4, 3, 3, 3), np.float32)],
                        (0, 4, 6, 6))
        assert out.shape == (0, 4, 6, 6)
        b = rng.standard_normal((1, 8)).astype(np.float32)
        got = run_numpy(clean_runtime, concat_model(), [np.zeros((0, 8), np.float32), b], (1, 8))
        assert (got == b).all()
