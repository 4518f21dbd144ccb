"""The `simaccel` command line."""

import subprocess
import sys

import pytest


def simaccel(*args, env=None):
    """Run the installed `simaccel` command (from outside the source tree)."""
    import os

    return subprocess.run(
        [sys.executable, "-m", "simaccel.cli", *args], capture_output=True, text=True, timeout=600,
        env={**os.environ, **(env or {})}, cwd="/",
    )


def test_help_lists_commands():
    result = simaccel("--help")
    assert result.returncode == 0
    assert "demo" in result.stdout
    demo = simaccel("demo", "--help")
    assert "--engine" in demo.stdout and "--seed" in demo.stdout


@pytest.mark.parametrize("args", [("demo",), ("demo", "--seed", "3", "--dtype", "float16")])
def test_demo_verifies_against_tvm(args):
    result = simaccel(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "offloaded to simaccel: 2 region(s)" in out
    assert "relax.tanh: simaccel has no pattern for relax.tanh" in out
    assert "max abs error vs TVM alone" in out
    assert "bytes copied by simaccel: host->device 0" in out
    assert out.strip().endswith("RESULT: match")


def test_demo_rejects_a_bad_engine_from_the_environment():
    result = simaccel("demo", env={"SIMACCEL_ENGINE": "warp-drive"})
    assert result.returncode == 2
    assert "EngineError" in result.stderr and "warp-drive" in result.stderr


def test_ops_lists_the_isa():
    result = simaccel("ops")
    assert result.returncode == 0
    assert "simaccel.conv2d_bias_relu(data, weight, bias)  attrs: strides, padding, dilation" in result.stdout
    assert len(result.stdout.strip().splitlines()) == 24


def test_demo_exits_1_on_a_mismatch(monkeypatch):
    """A wrong accelerator result must fail the demo, not pass silently."""
    import dataclasses

    import simaccel
    from simaccel.ops import get_op, registry
    from simaccel.tvm_integration.demo import run_demo

    softmax = get_op("simaccel.softmax")
    wrong = dataclasses.replace(softmax, reference=lambda data: softmax.reference(data)[..., ::-1])
    monkeypatch.setitem(registry._OPS, softmax.name, wrong)
    simaccel.get_runtime().clear()  # plans hold resolved ops
    lines = []
    try:
        assert run_demo(engine="ref", out=lines.append) == 1
    finally:
        simaccel.get_runtime().clear()
    assert lines[-1] == "RESULT: MISMATCH"


def test_run_checks_an_exported_library(tmp_path):
    import numpy as np

    from harness import run_vm
    from simaccel.tvm_integration import build, build_tvm_only
    from simaccel.tvm_integration.models import demo_cnn, random_inputs

    mod = demo_cnn(batch=1)
    build(mod).export_library(str(tmp_path / "demo.so"))
    inputs = random_inputs(mod, 5)
    want = run_vm(build_tvm_only(mod), inputs)
    np.savez(tmp_path / "in.npz", **{f"arg{i}": a for i, a in enumerate(inputs)})
    np.savez(tmp_path / "good.npz", arg0=want)
    np.savez(tmp_path / "bad.npz", arg0=want[:, ::-1])

    ok = simaccel("run", str(tmp_path / "demo.so"), "--inputs", str(tmp_path / "in.npz"),
                  "--expect", str(tmp_path / "good.npz"), "--save", str(tmp_path / "out.npz"))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip().endswith("RESULT: match")
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["arg0"], want, rtol=1e-4, atol=1e-5)

    mismatch = simaccel("run", str(tmp_path / "demo.so"), "--inputs", str(tmp_path / "in.npz"),
                        "--expect", str(tmp_path / "bad.npz"))
    assert mismatch.returncode == 1 and "RESULT: MISMATCH" in mismatch.stdout

    np.savez(tmp_path / "short.npz", arg0=inputs[0])
    wrong = simaccel("run", str(tmp_path / "demo.so"), "--inputs", str(tmp_path / "short.npz"))
    assert wrong.returncode == 2
    assert "expects 11 arguments" in wrong.stderr and "Traceback" not in wrong.stderr


@pytest.mark.parametrize(
    "args, message",
    [(("--staged",), "needs --device cuda"), (("--engine", "cuda", "--device", "cpu"), "cuda engine works on GPU tensors")],
)
def test_demo_rejects_impossible_combinations_before_compiling(args, message):
    result = simaccel("demo", *args)
    assert result.returncode == 2
    assert message in result.stderr and "[2] compile" not in result.stdout
