"""Export and load: a compiled model runs in a fresh process that imports only `tvm`."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from harness import run_vm, tvm_alone
from model_zoo import random_model
from simaccel.tvm_integration import build
from simaccel.tvm_integration.tools.models import demo_cnn, random_inputs

LOAD_AND_RUN = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tvm

    lib = tvm.runtime.load_module(sys.argv[1])
    vm = tvm.runtime.vm.VirtualMachine(lib, tvm.cpu())
    data = np.load(sys.argv[2])
    args = [tvm.runtime.tensor(data[f"arg{i}"]) for i in range(len(data.files))]
    np.save(sys.argv[3], vm["main"](*args).numpy())
    print("simaccel modules loaded:", sorted(m for m in sys.modules if m.startswith("simaccel")))
    """
)


def export_and_run(tmp_path, mod, seed=0, env=None):
    lib = tmp_path / "model.so"
    build(mod).export_library(str(lib))
    arrays = random_inputs(mod, seed)
    np.savez(tmp_path / "inputs.npz", **{f"arg{i}": a for i, a in enumerate(arrays)})
    script = tmp_path / "load_and_run.py"
    script.write_text(LOAD_AND_RUN)
    result = subprocess.run(
        [sys.executable, str(script), str(lib), str(tmp_path / "inputs.npz"), str(tmp_path / "out.npy")],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, **(env or {})}, timeout=300,
    )
    return result, arrays


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_exported_demo_runs_in_a_fresh_process(tmp_path, engine):
    mod = demo_cnn(batch=1)
    result, arrays = export_and_run(tmp_path, mod, env={"SIMACCEL_ENGINE": engine})
    assert result.returncode == 0, result.stderr
    assert "simaccel.runtime" in result.stdout  # the regions really ran through simaccel
    got = np.load(tmp_path / "out.npy")
    want = tvm_alone(mod, arrays)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", [7, 8])
def test_exported_random_model(tmp_path, seed):
    mod = random_model(seed)
    result, arrays = export_and_run(tmp_path, mod, seed)
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), tvm_alone(mod, arrays), rtol=1e-4, atol=1e-5)


def test_missing_runtime_is_a_clear_error(tmp_path):
    """A process where simaccel is not registered fails the call, naming the package and how to get it
    (tests/test_packaging.py: also where it is not installed)."""
    result, _ = export_and_run(tmp_path, demo_cnn(batch=1), env={"TVM_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert result.returncode == 1
    assert "simaccel.runtime.invoke is not registered in this process" in result.stderr
    assert "(pip install simaccel)" in result.stderr and "TVM_DEVICE_BACKEND_AUTOLOAD" in result.stderr
    assert "Segmentation fault" not in result.stderr


def test_codegen_writes_nothing_into_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    executable = build(demo_cnn(batch=1))
    assert list(tmp_path.iterdir()) == []
    assert run_vm(executable, random_inputs(demo_cnn(batch=1))).shape == (1, 10)


def test_build_and_run_need_no_cpp_compiler(tmp_path, monkeypatch):
    """Region functions are compiled by TVM's LLVM backend: only export_library links with one."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("CC", raising=False)
    mod = demo_cnn(batch=1)
    arrays = random_inputs(mod)
    np.testing.assert_allclose(run_vm(build(mod), arrays), tvm_alone(mod, arrays), rtol=1e-4, atol=1e-5)


def test_tensor_objects_from_older_libraries_are_accepted(clean_runtime):
    """simaccel 0.1.0 libraries passed TVM tensor objects, not DLTensor pointers: both work."""
    import tvm

    from simaccel.program import OpNode, Program, TensorSpec
    from simaccel.tvm_integration.backend.bridge import invoke

    program = Program("old", (TensorSpec("x", (2, 3), "float32"), TensorSpec("y", (2, 3), "float32")), (0,), (1,),
                      (OpNode("simaccel.relu", (0,), 1),))
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    y = tvm.runtime.tensor(np.zeros_like(x))
    invoke("old:1", program.to_json(), tvm.runtime.tensor(x), y)
    np.testing.assert_array_equal(y.numpy(), np.maximum(x, 0))
