"""What a user of a built library reads: without simaccel, and for Python regions on a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

from harness import run_vm, tvm_alone
from native_support import cuda_tensor
from simaccel.names import AUTOLOAD_ENV, INSTALL, INVOKE_FUNC
from simaccel.tvm_integration import build, partition_for_simaccel
from simaccel.tvm_integration.backend import bridge
from simaccel.tvm_integration.backend.native import gpu_hint
from simaccel.tvm_integration.tools.models import demo_cnn, matmul_relu, random_inputs

RUN = textwrap.dedent(
    """
    import sys
    if sys.argv[3] == "hidden":
        sys.modules["simaccel"] = None  # not installed: any import of it fails
    import numpy as np
    import tvm

    lib = tvm.runtime.load_module(sys.argv[1])
    vm = tvm.runtime.vm.VirtualMachine(lib, tvm.cpu())
    data = np.load(sys.argv[2])
    vm["main"](*[tvm.runtime.tensor(data[f"arg{i}"]) for i in range(len(data.files))])
    """
)
MODELS = {"demo_cnn": lambda: demo_cnn(batch=1), "matmul_relu": lambda: matmul_relu(4)}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{model: (library, inputs)}: CPU builds exported with simaccel regions."""
    out = {}
    for name, make in MODELS.items():
        directory = tmp_path_factory.mktemp(name)
        mod = make()
        build(mod, "llvm").export_library(str(directory / "model.so"))
        np.savez(directory / "inputs.npz", **{f"arg{i}": a for i, a in enumerate(random_inputs(mod))})
        out[name] = (directory / "model.so", directory / "inputs.npz")
    return out


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("how", ["autoload-off", "hidden"])
def test_a_library_run_without_simaccel_says_which_package_is_missing(exported, tmp_path, model, how):
    library, inputs = exported[model]
    script = tmp_path / "run.py"
    script.write_text(RUN)
    env = {**os.environ, **({AUTOLOAD_ENV: "0"} if how == "autoload-off" else {})}
    done = subprocess.run([sys.executable, str(script), str(library), str(inputs), how],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: region fused_"), last
    assert f"{INVOKE_FUNC} is not registered in this process" in last
    assert f"({INSTALL})" in last and AUTOLOAD_ENV in last
    assert "Cannot find function" not in done.stderr and "Segmentation fault" not in done.stderr


# -- Python regions on a GPU from a build that saw no target -------------------------------------
class Recorder:
    def __init__(self):
        self.calls = []

    def invoke(self, key, program_json, *tensors, stream=None):
        self.calls.append((key, len(tensors), stream))


@pytest.fixture
def seam(monkeypatch):
    """bridge.invoke with the runtime and TVM's stream look-up replaced: no GPU needed."""
    recorder = Recorder()
    monkeypatch.setattr(bridge, "get_runtime", lambda: recorder)
    monkeypatch.setattr(bridge, "_warned", set())
    monkeypatch.setattr(bridge.tvm_ffi, "get_raw_stream", lambda device: 0x5EED)
    return recorder


def gpu_warnings(record):
    return [str(w.message) for w in record if "runs through Python on" in str(w.message)]


@pytest.mark.parametrize("shape, dtype", [((2, 3), "float32"), ((0, 4), "float16"), ((1,), "int32")])
def test_the_first_gpu_call_of_an_untargeted_region_warns_once(seam, shape, dtype):
    hint = gpu_hint({})
    tensors = [cuda_tensor(np.zeros(shape, dtype)), cuda_tensor(np.zeros(shape, dtype), device_id=1)]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        bridge.invoke("r_a:fp1", "{}", hint, tensors[0], tensors[0])
        bridge.invoke("r_a:fp1", "{}", hint, tensors[0], tensors[0])
        bridge.invoke("r_a:fp1", "{}", hint, tensors[1], tensors[1])  # once per region, not per device
        bridge.invoke("r_b:fp2", "{}", hint, tensors[1], tensors[1])
    got = gpu_warnings(record)
    assert len(got) == 2
    assert got[0].startswith("simaccel: region r_a runs through Python on cuda:0: RunCodegen() saw no target")
    assert got[1].startswith("simaccel: region r_b runs through Python on cuda:1:")
    assert all('RunCodegen({"simaccel": {"target": target}})' in m and "build(mod, target)" in m for m in got)
    assert seam.calls == [("r_a:fp1", 2, 0x5EED)] * 3 + [("r_b:fp2", 2, 0x5EED)]  # the hint is not a tensor


def test_no_warning_on_a_cpu_device_for_a_knowing_build_or_from_an_older_library(seam):
    cpu = tvm.runtime.tensor(np.zeros((2, 3), np.float32))
    gpu = cuda_tensor(np.zeros((2, 3), np.float32))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        bridge.invoke("r_cpu:fp", "{}", gpu_hint({}), cpu, cpu)  # an untargeted build, on the CPU
        bridge.invoke("r_gpu:fp", "{}", "", gpu, gpu)  # a build that chose Python regions
        bridge.invoke("r_old:fp", "{}", gpu, gpu)  # a library without the hint (0.1.0, a native region's route)
    assert gpu_warnings(record) == []
    assert [(key, n) for key, n, _ in seam.calls] == [("r_cpu:fp", 2), ("r_gpu:fp", 2), ("r_old:fp", 2)]


def test_only_a_build_that_saw_no_target_carries_the_hint(monkeypatch):
    cuda = tvm.target.Target("nvidia/nvidia-h100", host="llvm")
    assert "saw no target" in gpu_hint({}) and "saw no target" in gpu_hint(None)
    assert gpu_hint({"target": cuda}) == gpu_hint({"target": "llvm"}) == ""
    assert gpu_hint({"native": False}) == ""
    with cuda:
        assert gpu_hint({}) == ""
    monkeypatch.setenv("SIMACCEL_NATIVE", "0")
    assert gpu_hint({}) == ""


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("bare", [True, False])
def test_region_functions_pass_the_hint_of_their_build(monkeypatch, model, bare):
    """End to end on the CPU: a bare RunCodegen() build's regions pass the hint (and do not warn
    on the CPU), a targeted build's pass an empty one; both compute what TVM alone does."""
    mod = MODELS[model]()
    seen = []
    real = bridge.invoke

    def recording(key, program_json, *args):
        seen.append(args[0])
        real(key, program_json, *args)

    monkeypatch.setattr(bridge, "invoke", recording)
    if bare:
        executable = tvm.compile(relax.transform.RunCodegen()(partition_for_simaccel(mod)), target="llvm")
    else:
        executable = build(mod, "llvm")
    arrays = random_inputs(mod)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = run_vm(executable, arrays)
    assert seen and set(seen) == {gpu_hint({}) if bare else ""}
    assert gpu_warnings(record) == []
    np.testing.assert_allclose(got, tvm_alone(mod, arrays), rtol=1e-4, atol=1e-5)


def test_an_install_holds_every_module_and_kernel_source_of_the_checkout(tmp_path):
    """`pip install .` (not editable, as CI and users do) must carry every subpackage."""
    root = Path(__file__).resolve().parent.parent
    built = tmp_path / "lib"
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(built)],
                   cwd=root, check=True, capture_output=True)
    sources = (".py", ".cu", ".cuh", ".h")
    installed = {p.relative_to(built) for p in built.rglob("*") if p.suffix in sources}
    wanted = {Path(package, p.relative_to(root / folder))
              for folder, package in (("simaccel", "simaccel"), ("kernels", "simaccel/kernels"),
                                      ("tvm_integration", "simaccel/tvm_integration"))
              for p in (root / folder).rglob("*") if p.suffix in sources and "__pycache__" not in p.parts}
    assert not wanted - installed, f"left out of an install: {sorted(map(str, wanted - installed))}"
