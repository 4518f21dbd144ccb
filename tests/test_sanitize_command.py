"""`simaccel sanitize` (tvm_integration/tools/gpu_sanitizer.py) and the line information it asks
kernels for ($SIMACCEL_LINEINFO), on a machine without a GPU: the command it builds, where it
finds compute-sanitizer, the error when it is missing; kernels compiled with and without it."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from simaccel import EngineError
from simaccel.kernels import target
from simaccel.tvm_integration.tools import gpu_sanitizer
from simaccel.tvm_integration.tools.cli import USER_ERROR, main


def fake_tool(folder, status=3):
    """A stand-in compute-sanitizer that prints its arguments and the line-information switch."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "compute-sanitizer"
    path.write_text(f'#!/bin/sh\necho "args: $*"\necho "lineinfo: $SIMACCEL_LINEINFO"\nexit {status}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def nowhere(monkeypatch, tmp_path):
    """No compute-sanitizer anywhere: empty PATH, no CUDA_HOME, no wheels, no /usr/local/cuda."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "no-site")])
    monkeypatch.setattr(gpu_sanitizer, "SYSTEM_DIR", str(tmp_path / "no-cuda" / "bin"))


def test_the_command_runs_the_script_under_the_tool_and_fails_on_its_errors():
    assert gpu_sanitizer.sanitizer_command("/x/compute-sanitizer", "racecheck", ["python", "s.py", "-v"],
                                           ["--leak-check=full"]) == [
        "/x/compute-sanitizer", "--tool", "racecheck", "--error-exitcode", "1", "--leak-check=full", "python", "s.py", "-v"]
    with pytest.raises(EngineError, match="sanitize --tool 'leakcheck': choose one of memcheck, racecheck, initcheck, synccheck"):
        gpu_sanitizer.sanitizer_command("/x/compute-sanitizer", "leakcheck", ["python"])
    assert gpu_sanitizer.sanitizer_env({"A": "1"}) == {"A": "1", "SIMACCEL_LINEINFO": "1"}


def test_it_is_looked_for_on_path_then_cuda_home_then_the_wheels_then_usr_local(nowhere, tmp_path):
    on_path, home, site = fake_tool(tmp_path / "bin"), fake_tool(tmp_path / "cuda" / "bin"), tmp_path / "site"
    wheel = fake_tool(site / "nvidia" / "cu13" / "bin")
    env = {"PATH": f"/nonexistent:{tmp_path / 'bin'}", "CUDA_HOME": str(tmp_path / "cuda")}
    assert gpu_sanitizer.find_compute_sanitizer(env, [str(site)]) == str(on_path)
    assert gpu_sanitizer.find_compute_sanitizer({"CUDA_HOME": env["CUDA_HOME"]}, [str(site)]) == str(home)
    assert gpu_sanitizer.find_compute_sanitizer({}, [str(site)]) == str(wheel)
    assert gpu_sanitizer.find_compute_sanitizer({}, []) is None
    system = fake_tool(tmp_path / "no-cuda" / "bin")
    assert gpu_sanitizer.find_compute_sanitizer({}, []) == str(system)


def test_simaccel_sanitize_runs_the_script_with_line_information(monkeypatch, nowhere, tmp_path, capfd):
    fake_tool(tmp_path / "bin", status=3)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("SIMACCEL_LINEINFO", raising=False)
    status = main(["sanitize", "--tool", "racecheck", "--option=--print-limit=5", "--", "python", "script.py", "--flag"])
    out, err = capfd.readouterr()
    assert status == 3  # the tool's own status
    assert out.splitlines() == ["args: --tool racecheck --error-exitcode 1 --print-limit=5 python script.py --flag", "lineinfo: 1"]
    assert "SIMACCEL_LINEINFO=1" in err and "SIMACCEL_LINEINFO" not in os.environ


def test_without_compute_sanitizer_the_command_says_how_to_get_it_and_exits_2(nowhere, capfd):
    assert main(["sanitize", "--", "python", "script.py"]) == USER_ERROR == 2
    err = capfd.readouterr().err
    assert "EngineError: sanitize: compute-sanitizer was not found (looked on $PATH, in $CUDA_HOME/bin" in err
    assert 'pip install "nvidia-cuda-sanitizer-api==13.0.*"' in err


def test_without_a_command_it_says_what_to_give(nowhere, capfd):
    assert main(["sanitize"]) == USER_ERROR
    assert "give the command to run after --" in capfd.readouterr().err


# -- line information in kernels --------------------------------------------------------------
def test_the_cuda_engine_compiles_with_line_information_only_when_asked(monkeypatch):
    """numba's cuda.jit gets lineinfo=True with $SIMACCEL_LINEINFO=1 and exactly the default
    arguments without it; never for a kernel that links CUDA C++ (NVVM's line information
    fails that LTO link)."""
    from numba import cuda

    from simaccel.kernels import elementwise, matmul

    calls = []

    class Device:
        compute_capability = (9, 0)

    monkeypatch.setattr(cuda, "get_current_device", lambda: Device)
    monkeypatch.setattr(cuda, "jit", lambda fn, **kwargs: calls.append((fn, kwargs)) or object())
    monkeypatch.setattr(target, "_COMPILED", {})
    plain, linking = elementwise._unary_kernel, next(iter(matmul._KERNELS.values()))
    assert target.link_sources(linking) and not target.link_sources(plain)
    monkeypatch.delenv("SIMACCEL_LINEINFO", raising=False)
    target.compile_kernel(plain, "cuda")
    monkeypatch.setenv("SIMACCEL_LINEINFO", "1")
    target.compile_kernel(plain, "cuda")
    target.compile_kernel(plain, "cuda")  # cached
    target.compile_kernel(linking, "cuda")
    assert [("lineinfo" in kw, kw.get("lineinfo")) for _, kw in calls] == [(False, None), (True, True), (False, None)]
    assert "lineinfo" not in calls[0][1] and set(calls[0][1]) == {"launch_bounds", "link"}
    monkeypatch.setenv("SIMACCEL_LINEINFO", "0")
    assert not target.lineinfo()


def test_ahead_of_time_kernels_carry_line_information_only_when_asked(monkeypatch):
    """Unset: the cubin is the one compiled without the option (the same cached object);
    set: the PTX has .loc lines and the cubin names the kernel's source file."""
    from simaccel.aot import compile_kernel, signature
    from simaccel.launch_plan import plan_launches
    from gpu_cases import one_op_program

    program = one_op_program("simaccel.relu", [(3, 5)], "float32")
    [launch] = plan_launches(program)
    sig = signature(launch, program)
    monkeypatch.delenv("SIMACCEL_LINEINFO", raising=False)
    plain = compile_kernel(launch.kernel, sig, (9, 0))
    monkeypatch.setenv("SIMACCEL_LINEINFO", "1")
    lined = compile_kernel(launch.kernel, sig, (9, 0))
    monkeypatch.delenv("SIMACCEL_LINEINFO")
    assert compile_kernel(launch.kernel, sig, (9, 0)) is plain
    assert ".loc" not in plain.ptx and b"elementwise.py" not in plain.cubin
    assert ".loc" in lined.ptx and b"elementwise.py" in lined.cubin and lined.cubin != plain.cubin
    assert lined.resources["spill_stores"] == plain.resources["spill_stores"] == 0
    # A kernel that calls CUDA C++ compiles as without the switch (NVVM's line information fails its LTO link).
    matmul = one_op_program("simaccel.matmul", [(16, 16), (16, 16)], "float32")
    [launch] = plan_launches(matmul)
    sig = signature(launch, matmul)
    plain = compile_kernel(launch.kernel, sig, (9, 0))
    monkeypatch.setenv("SIMACCEL_LINEINFO", "1")
    assert compile_kernel(launch.kernel, sig, (9, 0)) is plain
