"""Scalar constants a region holds itself (`TensorSpec.value`), from partition to export.

An op's 0-d constant (``x * 0.5``) is bound into its composite (partition.bind_scalar_constants)
and becomes a constant of the region's Program, not an argument: as an argument it would be a
tensor constant of TVM's VM, which logs a memory scope for it on export and load ("Scope
Saving:", "Scope Loaded:") where TVM alone, which inlines the constant into its kernel, logs
nothing.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import numpy as np
import pytest
from tvm import relax
from tvm.script import relax as R

import forks
from simaccel import ProgramError
from simaccel.program import OpNode, Program, TensorSpec
from simaccel.tvm_integration import partition_for_simaccel
from harness import compare_with_tvm


def scaled_program(dtype="float32", half=0.5, shift=-1.25) -> Program:
    t = (TensorSpec("x", (4, 6), dtype), TensorSpec("half", (), dtype, half), TensorSpec("h", (4, 6), dtype),
         TensorSpec("shift", (), dtype, shift), TensorSpec("y", (4, 6), dtype))
    ops = (OpNode("simaccel.multiply", (0, 1), 2), OpNode("simaccel.add", (2, 3), 4))
    return Program("scaled", t, (0,), (4,), ops)


# -- the Program format -------------------------------------------------------------------
@pytest.mark.parametrize("dtype, value", [("float32", 0.1), ("float16", -3.0), ("float32", float("inf")),
                                          ("float32", float("-inf")), ("int32", -7), ("int8", 127), ("bool", True)])
def test_a_constant_survives_json_exactly(dtype, value):
    spec = TensorSpec("c", (), dtype, value)
    program = Program("p", (TensorSpec("x", (2,), "float32"), spec), (0,), (0,), ())
    data = json.loads(program.to_json())
    back = Program.from_dict(data).tensors[1]
    assert back.value_array().tobytes() == spec.value_array().tobytes()
    assert "value" not in data["tensors"][0]  # only constants carry one: other fingerprints stay


def test_a_nan_constant_is_written_as_text_and_read_back():
    program = scaled_program(half=float("nan")).validate()
    text = program.to_json()
    assert '"value":"nan"' in text
    assert np.isnan(Program.from_json(text).validate().tensors[1].value)


@pytest.mark.parametrize("value, dtype, match", [
    ("0.5", "float32", "is not a float32 value"), (1.5, "int32", "is not a int32 value"), (300, "int8", "300 does not fit int8"),
    (1e6, "float16", "1000000.0 does not fit float16"), (True, "float32", "is not a float32 value"), ("nan", "int32", "is not a int32"),
])
def test_a_bad_constant_value_is_refused_naming_the_tensor(value, dtype, match):
    data = json.loads(scaled_program().to_json())
    data["tensors"][1]["dtype"] = dtype
    data["tensors"][1]["value"] = value
    with pytest.raises(ProgramError, match=rf"tensors\[1\]\.value {match}"):
        Program.from_dict(data)


def test_a_constant_must_be_a_scalar_and_not_a_boundary_tensor():
    program = scaled_program()
    tensors = list(program.tensors)
    tensors[1] = TensorSpec("half", (2,), "float32", 0.5)
    with pytest.raises(ProgramError, match="constant half must be 0-d"):
        Program("p", tuple(tensors), (0,), (4,), program.ops).validate()
    with pytest.raises(ProgramError, match="constant half cannot be an input or output"):
        Program("p", program.tensors, (0, 1), (4,), program.ops).validate()
    written = (OpNode("simaccel.multiply", (0, 0), 1),) + program.ops[1:]
    with pytest.raises(ProgramError, match="writes half, already written"):
        Program("p", program.tensors, (0,), (4,), written).validate()


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_runtime_fills_a_programs_constants(clean_runtime, engine, dtype):
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(dtype)
    y = np.zeros((4, 6), dtype)
    with clean_runtime.use_engine(engine):
        clean_runtime.run(scaled_program(dtype).validate(), x, y)
        clean_runtime.run(scaled_program(dtype).validate(), x, y)  # the plan's constants are reused
    np.testing.assert_allclose(y, (x.astype(np.float32) * 0.5 - 1.25).astype(dtype), rtol=1e-3 if dtype == "float16" else 1e-6)


# -- from Relax ---------------------------------------------------------------------------
def scalar_model(dtype: str):
    @R.function
    def main(x: R.Tensor((4, 8), dtype), w: R.Tensor((8, 8), dtype), s: R.Tensor((), dtype)):
        with R.dataflow():
            a = R.multiply(x, R.const(0.5, dtype))
            b = R.matmul(a, w)
            c = R.add(R.const(1.5, dtype), b)
            d = R.nn.relu(c)
            e = R.multiply(d, s)  # a 0-d input, not a constant: stays an argument
            f = R.subtract(e, R.const(0.25, dtype))
            R.output(f)
        return f

    return tvm_module(main)


def tvm_module(func):
    import tvm

    return tvm.IRModule({"main": func})


def region_params_and_programs(mod):
    from simaccel.tvm_integration.backend.codegen import region_program
    from simaccel.tvm_integration.backend.patterns import sync_patterns

    partitioned = partition_for_simaccel(mod)
    out = []
    for gvar, func in partitioned.functions.items():
        if isinstance(func, relax.Function) and func.attrs and "Codegen" in func.attrs:
            out.append(([p.name for p in func.params], region_program(gvar.name_hint, func, sync_patterns())))
    return out


def test_scalar_constants_are_the_regions_own_and_a_scalar_input_stays_an_argument():
    (params, program), = region_params_and_programs(scalar_model("float32"))
    assert params == ["x", "w", "s"]
    assert sorted(program.tensors[i].value for i in program.constants) == [0.25, 0.5, 1.5]
    assert [program.tensors[i].name for i in program.inputs] == ["x", "w", "s"]


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_model_with_scalar_constants_matches_tvm_alone(clean_runtime, engine, dtype):
    mod = scalar_model(dtype)
    arrays = [np.random.default_rng(1).standard_normal(s).astype(dtype) for s in ((4, 8), (8, 8), ())]
    compare_with_tvm(mod, engine, arrays=arrays)


EXPORT_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import tvm
    from tvm import relax
    sys.path.insert(0, {tests!r})
    from test_constants import scalar_model
    from simaccel.tvm_integration import build, build_tvm_only

    mod = scalar_model("float32")
    executable = build(mod) if sys.argv[1] == "simaccel" else build_tvm_only(mod)
    arrays = [np.random.default_rng(1).standard_normal(s).astype("float32") for s in ((4, 8), (8, 8), ())]
    dev = tvm.cpu()
    def run(ex):
        return relax.VirtualMachine(ex, dev)["main"](*[tvm.runtime.tensor(a, dev) for a in arrays]).numpy()
    before = run(executable)  # a VM before export: what made TVM log a scope per tensor constant
    path = sys.argv[2]
    executable.export_library(path)
    after = run(tvm.runtime.load_module(path))
    np.save(sys.argv[3], np.stack([before, after]))
""")


def test_export_and_load_log_nothing_as_with_tvm_alone(tmp_path):
    script = tmp_path / "export.py"
    script.write_text(EXPORT_SCRIPT.format(tests=str(__import__("pathlib").Path(__file__).parent)))
    results = {}
    for flow in ("simaccel", "tvm"):
        done = forks.run([sys.executable, str(script), flow, str(tmp_path / f"lib_{flow}.so"), str(tmp_path / f"out_{flow}.npy")],
                         timeout=600, cwd=os.getcwd())
        assert done.returncode == 0, done.stderr
        assert "Scope" not in done.stderr + done.stdout, f"{flow}: {done.stderr}"
        results[flow] = np.load(tmp_path / f"out_{flow}.npy")
    np.testing.assert_allclose(results["simaccel"], results["tvm"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(results["simaccel"][0], results["simaccel"][1])


@pytest.mark.gpu
@pytest.mark.parametrize("sanitize", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_native_regions_hold_their_scalar_constants_on_the_gpu(clean_runtime, dtype, sanitize):
    """The constants a native region writes with a memset per device and stream, on real memory:
    the model matches TVM alone, and the region's only arguments are the model's tensors."""
    import tvm

    from simaccel import debug
    from simaccel.compare import assert_same
    from simaccel.tvm_integration import build, build_tvm_only, default_target
    from simaccel.tvm_integration.backend.native import has_native_regions

    mod, target, dev = scalar_model(dtype), default_target("cuda"), tvm.cuda(0)
    arrays = [np.random.default_rng(1).standard_normal(s).astype(dtype) for s in ((4, 8), (8, 8), ())]
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    executable = build(mod, target)
    assert has_native_regions(executable)
    want = relax.VirtualMachine(build_tvm_only(mod, target), dev)["main"](*tensors).numpy()
    vm = relax.VirtualMachine(executable, dev)
    with debug.sanitize(sanitize):
        for _ in range(2):  # the second call reuses the constants written by the first
            got = vm["main"](*tensors).numpy()
            assert_same(got, want, dtype)
    assert clean_runtime.ledger.snapshot()["offloaded_calls"] == 2
