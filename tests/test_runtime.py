"""The runtime boundary without TVM: any DLPack producer (here numpy) feeds a Program.

Covers tensor validation (shape, dtype, device, layout, alignment, count), engine choice,
the ledger, and plan reuse.
"""

import numpy as np
import pytest

import simaccel
from simaccel import DeviceError, DtypeError, EngineError, LayoutError, ProgramError, ShapeError
from simaccel.program import OpNode, Program, TensorSpec


def mlp_program(dtype="float32"):
    return Program(
        name="mlp",
        tensors=(
            TensorSpec("x", (4, 8), dtype),
            TensorSpec("w", (6, 8), dtype),
            TensorSpec("b", (6,), dtype),
            TensorSpec("h", (4, 6), dtype),
            TensorSpec("y", (4, 6), dtype),
        ),
        inputs=(0, 1, 2),
        outputs=(4,),
        ops=(OpNode("simaccel.dense_bias_relu", (0, 1, 2), 3), OpNode("simaccel.softmax", (3,), 4)),
    )


def mlp_inputs(dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in ((4, 8), (6, 8), (6,))]


def mlp_expected(x, w, b):
    h = np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + b, 0)
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


class FakeGpuTensor:
    """A DLPack-shaped object that claims to live on a CUDA device."""

    def __init__(self, shape, dtype="float32", device_id=0):
        self.shape, self.dtype, self.device_id = shape, dtype, device_id

    def __dlpack_device__(self):
        return (2, self.device_id)


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_run_writes_outputs_in_place(clean_runtime, engine):
    x, w, b = mlp_inputs()
    y = np.full((4, 6), np.nan, np.float32)
    with clean_runtime.use_engine(engine):
        clean_runtime.run(mlp_program(), x, w, b, y)
    np.testing.assert_allclose(y, mlp_expected(x, w, b), rtol=1e-5, atol=1e-6)
    snap = clean_runtime.ledger.snapshot()
    assert snap["offloaded_calls"] == 1
    assert snap["ops"] == {"simaccel.dense_bias_relu": 1, "simaccel.softmax": 1}
    launched = sum(snap["kernel_launches"].values())
    assert launched == (0 if engine == "ref" else 2)
    assert snap["bytes"] == {"host_to_device": 0, "device_to_host": 0, "device_to_device": 0}


def test_ledger_reset_and_snapshot_is_a_copy(clean_runtime):
    x, w, b = mlp_inputs()
    y = np.zeros((4, 6), np.float32)
    clean_runtime.run(mlp_program(), x, w, b, y)
    before = clean_runtime.ledger.snapshot()
    clean_runtime.run(mlp_program(), x, w, b, y)
    assert before["offloaded_calls"] == 1
    assert clean_runtime.ledger.snapshot()["offloaded_calls"] == 2
    assert clean_runtime.ledger.snapshot()["regions"]["mlp"]["calls"] == 2
    clean_runtime.ledger.reset()
    assert clean_runtime.ledger.snapshot()["offloaded_calls"] == 0
    assert clean_runtime.ledger.snapshot()["ops"] == {}


def test_intermediates_are_allocated_once_per_plan(clean_runtime):
    program = mlp_program()
    y = np.zeros((4, 6), np.float32)
    clean_runtime.run(program, *mlp_inputs(seed=1), y)
    plans = [p for key, p in clean_runtime._plans.items() if key == (program.fingerprint(), "ref", key[2], key[3])]
    assert len(plans) == 1
    scratch = plans[0].slots[3]
    assert isinstance(scratch, np.ndarray) and scratch.shape == (4, 6)
    x, w, b = mlp_inputs(seed=2)
    clean_runtime.run(program, x, w, b, y)
    assert plans[0].slots[3] is scratch
    np.testing.assert_allclose(y, mlp_expected(x, w, b), rtol=1e-5, atol=1e-6)


def test_float16_program(clean_runtime):
    x, w, b = mlp_inputs("float16")
    y = np.zeros((4, 6), np.float16)
    clean_runtime.run(mlp_program("float16"), x, w, b, y)
    np.testing.assert_allclose(y, mlp_expected(x, w, b), rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize(
    "index, bad, error, message",
    [
        (0, np.zeros((4, 7), np.float32), ShapeError, "input 'x' expects shape \\(4, 8\\), got \\(4, 7\\)"),
        (1, np.zeros((6, 8), np.float64), DtypeError, "input 'w' expects dtype float32, got float64"),
        (3, np.zeros((4, 6), np.float16), DtypeError, "output 'y' expects dtype float32, got float16"),
        (0, np.zeros((4, 16), np.float32)[:, ::2], LayoutError, "'x' \\(4, 8\\) must be compact row-major"),
        (2, np.frombuffer(np.zeros(40, np.uint8).data, np.float32, 6, offset=2), LayoutError, "not aligned"),
        (3, np.broadcast_to(np.zeros(6, np.float32), (4, 6)), LayoutError, "output 'y'"),
        (1, FakeGpuTensor((6, 8)), DeviceError, "mixed devices"),
        (0, [[1.0] * 8] * 4, DeviceError, "not a DLPack tensor"),
    ],
)
def test_bad_tensors_get_clear_errors(clean_runtime, index, bad, error, message):
    tensors = mlp_inputs() + [np.zeros((4, 6), np.float32)]
    tensors[index] = bad
    with pytest.raises(error, match=message):
        clean_runtime.run(mlp_program(), *tensors)


def test_wrong_tensor_count(clean_runtime):
    with pytest.raises(ProgramError, match="takes 3 inputs and 1 outputs, got 3 tensors"):
        clean_runtime.run(mlp_program(), *mlp_inputs())


def test_gpu_tensors_get_a_clear_error_without_a_gpu_engine(clean_runtime):
    tensors = [FakeGpuTensor(s) for s in ((4, 8), (6, 8), (6,), (4, 6))]
    with pytest.raises(simaccel.SimAccelError, match="cuda"):
        clean_runtime.run(mlp_program(), *tensors)
    with clean_runtime.use_engine("ref"), pytest.raises(DeviceError, match="engine 'ref' runs on cpu memory.*cuda:0"):
        clean_runtime.run(mlp_program(), *tensors)


def test_engine_choice_order(clean_runtime, monkeypatch):
    assert clean_runtime.engine_name("cpu") == "ref"
    monkeypatch.setenv("SIMACCEL_ENGINE", "sim")
    assert clean_runtime.engine_name("cpu") == "sim"
    clean_runtime.set_engine("ref")
    assert clean_runtime.engine_name("cpu") == "ref"
    with clean_runtime.use_engine("sim"):
        assert clean_runtime.engine_name("cpu") == "sim"
    assert clean_runtime.engine_name("cpu") == "ref"


def test_unknown_engine_names(clean_runtime, monkeypatch):
    with pytest.raises(EngineError, match="unknown engine value 'tpu'"):
        clean_runtime.set_engine("tpu")
    monkeypatch.setenv("SIMACCEL_ENGINE", "gpu!")
    with pytest.raises(EngineError, match="SIMACCEL_ENGINE value 'gpu!'"):
        clean_runtime.run(mlp_program(), *mlp_inputs(), np.zeros((4, 6), np.float32))


def test_kernel_failure_names_op_and_tensors(clean_runtime, monkeypatch):
    import dataclasses

    from simaccel.ops import get_op, registry

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    op = get_op("simaccel.softmax")
    family = dataclasses.replace(op.family, reference=broken)
    monkeypatch.setitem(registry._OPS, op.name, dataclasses.replace(op, family=family))
    program = dataclasses.replace(mlp_program(), name="broken_softmax")
    with pytest.raises(simaccel.SimAccelError, match="op simaccel.softmax failed on engine 'ref'.*h: \\(4, 6\\) float32.*boom"):
        clean_runtime.run(program, *mlp_inputs(), np.zeros((4, 6), np.float32))
