"""Program: JSON round trip, versioning and validation errors."""

import json

import pytest

from simaccel import DtypeError, ProgramError, ShapeError, UnsupportedOpError
from simaccel.profile import DeviceProfile
from simaccel.program import OpNode, Program, TensorSpec


def mlp_program():
    return Program(
        name="mlp",
        tensors=(
            TensorSpec("x", (4, 8), "float32"),
            TensorSpec("w", (6, 8), "float32"),
            TensorSpec("b", (6,), "float32"),
            TensorSpec("h", (4, 6), "float32"),
            TensorSpec("y", (4, 6), "float32"),
        ),
        inputs=(0, 1, 2),
        outputs=(4,),
        ops=(OpNode("simaccel.dense_bias_relu", (0, 1, 2), 3), OpNode("simaccel.softmax", (3,), 4)),
    )


def edit(program, **changes):
    data = program.to_dict()
    data.update(changes)
    return Program.from_dict(data)


def test_json_round_trip_and_fingerprint():
    program = mlp_program().validate()
    again = Program.from_json(program.to_json())
    assert again == program
    assert again.fingerprint() == program.fingerprint()
    assert program.intermediates == (3,)
    other = edit(program, name="other")
    assert other.fingerprint() != program.fingerprint()


def test_unknown_version_is_refused_with_advice():
    data = mlp_program().to_dict()
    data["version"] = 99
    with pytest.raises(ProgramError, match="version 99.*rebuild"):
        Program.from_json(json.dumps(data))


@pytest.mark.parametrize("text", ["not json", "[]", '{"format": "other"}'])
def test_garbage_is_a_program_error(text):
    with pytest.raises(ProgramError):
        Program.from_json(text)


def test_malformed_fields_are_a_program_error():
    data = mlp_program().to_dict()
    del data["ops"][0]["output"]
    with pytest.raises(ProgramError, match="ops\\[0\\] lacks \\['output'\\]"):
        Program.from_dict(data)


def test_unknown_op_names_the_isa():
    program = mlp_program()
    bad = edit(program, ops=[{"op": "simaccel.fft", "inputs": [0], "output": 4, "attrs": {}}])
    with pytest.raises(UnsupportedOpError, match="simaccel.fft.*known ops: .*simaccel.add"):
        bad.validate()


def test_out_of_range_tensor_id():
    bad = edit(mlp_program(), outputs=[9])
    with pytest.raises(ProgramError, match="refers to tensor 9"):
        bad.validate()


def test_read_before_write():
    data = mlp_program().to_dict()
    data["ops"].reverse()
    with pytest.raises(ProgramError, match="reads \\['h'\\] before"):
        Program.from_dict(data).validate()


def test_declared_output_shape_must_match_rule():
    data = mlp_program().to_dict()
    data["tensors"][3]["shape"] = [4, 7]
    data["tensors"][4]["shape"] = [4, 7]
    with pytest.raises(ProgramError, match="produces \\(4, 6\\) float32"):
        Program.from_dict(data).validate()


def test_op_rule_errors_name_op_and_shapes():
    data = mlp_program().to_dict()
    data["tensors"][1]["shape"] = [6, 5]
    with pytest.raises(ShapeError, match="simaccel.dense_bias_relu: reduction sizes differ.*\\(4, 8\\).*\\(6, 5\\)"):
        Program.from_dict(data).validate()


def test_missing_attribute():
    program = Program(
        "pool",
        (TensorSpec("x", (1, 1, 4, 4), "float32"), TensorSpec("y", (1, 1, 2, 2), "float32")),
        (0,),
        (1,),
        (OpNode("simaccel.max_pool2d", (0,), 1, {"pool_size": [2, 2]}),),
    )
    with pytest.raises(ProgramError, match="lacks attributes \\['strides', 'padding', 'dilation'\\]"):
        program.validate()


def test_profile_limits_are_enforced():
    program = mlp_program()
    with pytest.raises(DtypeError, match="float32 is not supported"):
        program.validate(DeviceProfile(name="fp16-only", dtypes=("float16",)))
    with pytest.raises(ShapeError, match="more than the profile's 16"):
        program.validate(DeviceProfile(name="tiny", max_elements=16))
    with pytest.raises(ProgramError, match="not enabled in profile"):
        program.validate(DeviceProfile(name="softmax-only", ops=frozenset({"simaccel.softmax"})))
