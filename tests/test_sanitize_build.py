"""The sanitizer through TVM: `build(..., sanitize=True)` and `simaccel run --sanitize` on a CPU (LLVM) build.

The planted defects are tests/user_ops/planted_defects.py; a clean build is compared with the
same model built by TVM alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

import forks
import simaccel
from harness import run_vm, tvm_alone
from simaccel.errors import CodegenError, SanitizerError
from simaccel.tvm_integration import build

PLANTED = str(Path(__file__).resolve().parent / "user_ops" / "planted_defects.py")


@pytest.fixture
def planted(isolated_isa, monkeypatch):
    monkeypatch.setenv("SIMACCEL_OPS", PLANTED)
    monkeypatch.delenv("SIMACCEL_SANITIZE", raising=False)
    isolated_isa.get_op("planted.skip_last")
    yield isolated_isa
    for name in [n for n, m in sys.modules.items() if getattr(m, "__file__", "") == PLANTED]:
        del sys.modules[name]


def model(first, shape=(2, 5), dtype="float32") -> tvm.IRModule:
    """main(x) = tanh(first(x)), one region: the op `first` maps to, then simaccel.tanh."""
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with builder.function("main", [x]):
        with builder.dataflow():
            y = builder.emit(relax.op.tanh(builder.emit(first(x))))
            out = builder.emit_output(y)
        builder.emit_func_output(out)
    return builder.get()


def inputs(shape=(2, 5)):
    return [(np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 4.5) / 3]


def test_build_with_sanitize_catches_a_defect_with_the_switch_off(planted, clean_runtime):
    mod = model(relax.op.negative)
    clean_runtime.set_engine("sim")
    with pytest.raises(SanitizerError) as info:
        run_vm(build(mod, "llvm", sanitize=True), inputs())
    error = info.value  # through TVM's FFI: the attributes come back from the message's tag
    assert (error.kind, error.op, error.tensor) == ("unwritten", "planted.skip_last", "lv")
    assert error.region and error.region.endswith("_simaccel")
    assert f"region {error.region}: op 0 (planted.skip_last) left 1 of 10 elements of its output 'lv' (2, 5)" in str(error)
    # built without it, the same defect gives a wrong answer and no error
    got = run_vm(build(mod, "llvm"), inputs())
    want = tvm_alone(mod, inputs())
    assert not np.allclose(got, want, equal_nan=True)
    np.testing.assert_allclose(got.reshape(-1)[:-1], want.reshape(-1)[:-1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_a_clean_sanitized_build_matches_tvm_alone(clean_runtime, engine):
    mod = model(relax.op.exp, shape=(2, 3, 4))
    arrays = inputs((2, 3, 4))
    want = tvm_alone(mod, arrays)
    clean_runtime.set_engine(engine)
    got = run_vm(build(mod, "llvm", sanitize=True), arrays)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert clean_runtime.ledger.snapshot()["ops"]  # it did run on simaccel


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_a_sanitized_build_with_a_scalar_constant_matches_tvm_alone(clean_runtime, engine):
    mod = model(lambda x: relax.op.multiply(x, relax.const(0.5, "float32")))  # the constant is the Program's own
    want = tvm_alone(mod, inputs())
    clean_runtime.set_engine(engine)
    np.testing.assert_allclose(run_vm(build(mod, "llvm", sanitize=True), inputs()), want, rtol=1e-5, atol=1e-6)


def test_build_refuses_a_sanitize_that_is_not_a_bool():
    with pytest.raises(CodegenError, match="build: sanitize must be True or False, got 'yes'"):
        build(model(relax.op.exp), "llvm", sanitize="yes")


def simaccel_cli(*args, env):
    return forks.cli(*args, env=env)


def test_simaccel_run_sanitize(planted, tmp_path):
    build(model(relax.op.negative), "llvm").export_library(str(tmp_path / "lib.so"))
    np.savez(tmp_path / "in.npz", arg0=inputs()[0])
    env = {"SIMACCEL_OPS": PLANTED, "SIMACCEL_ENGINE": "sim"}
    plain = simaccel_cli("run", str(tmp_path / "lib.so"), "--inputs", str(tmp_path / "in.npz"), env=env)
    assert plain.returncode == 0, plain.stderr
    sanitized = simaccel_cli("run", str(tmp_path / "lib.so"), "--inputs", str(tmp_path / "in.npz"), "--sanitize", env=env)
    assert sanitized.returncode == 2, sanitized.stderr
    assert "simaccel: error: SanitizerError: region " in sanitized.stderr
    assert "op 0 (planted.skip_last) left 1 of 10 elements of its output 'lv'" in sanitized.stderr
    env_switch = simaccel_cli("run", str(tmp_path / "lib.so"), "--inputs", str(tmp_path / "in.npz"),
                              env={**env, "SIMACCEL_SANITIZE": "1"})
    assert env_switch.returncode == 2 and "planted.skip_last" in env_switch.stderr
    bad = simaccel_cli("run", str(tmp_path / "lib.so"), "--inputs", str(tmp_path / "in.npz"),
                       env={**env, "SIMACCEL_SANITIZE": "maybe"})
    assert bad.returncode == 2 and "SIMACCEL_SANITIZE='maybe' is not a boolean" in bad.stderr
