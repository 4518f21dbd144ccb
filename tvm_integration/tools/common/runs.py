"""Running a build: in this process (`run_vm`), or exported libraries in a fresh process
(`run_fresh`); a lost GPU context; the device a campaign runs on.

Where it sits: `simaccel fuzz` (fuzz/check.py), `simaccel conformance` (conformance/check.py)
and `simaccel bisect` run builds of simaccel and of TVM alone the same way, and check a sample
again after export, in a process that imports only TVM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from ....errors import SimAccelError
from .arrays import npz_array
from .error_line import error_line


def outputs_as_list(result) -> list:
    """A VM result (one tensor or a tuple of them) as a flat list of tensors."""
    if hasattr(result, "numpy"):
        return [result]
    return [t for item in result for t in outputs_as_list(item)]


def run_vm(executable, arrays, dev) -> list[np.ndarray]:
    """main's outputs as numpy arrays, run on `dev` with `arrays` as its arguments (a
    tvm.runtime.ShapeTuple among them, for a shape parameter, as it is)."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, dev)
    args = [a if isinstance(a, tvm.runtime.ShapeTuple) else tvm.runtime.tensor(a, dev) for a in arrays]
    return [t.numpy() for t in outputs_as_list(vm["main"](*args))]


def run_fresh(jobs: list, workdir: Path, device: str = "cpu"):
    """Run exported libraries in one fresh process that imports TVM only: each job is (library,
    inputs .npz, outputs .npz to write), on `device` ("cpu": simaccel's regions on the ref
    engine; "cuda": native regions). A job whose library fails writes no outputs and says why
    on stderr (the completed process is returned)."""
    from .settings import user_ops_environ

    (Path(workdir) / "jobs.json").write_text(json.dumps(jobs))
    env = user_ops_environ()  # the libraries' user ops, found from workdir
    if device == "cpu":
        env["SIMACCEL_ENGINE"] = "ref"
    return subprocess.run([sys.executable, "-c", _FRESH_PROCESS, str(Path(workdir) / "jobs.json"), device],
                          capture_output=True, text=True, env=env, timeout=1800, cwd=workdir)


_FRESH_PROCESS = """
import json, sys
import numpy as np
sys.modules["torch"] = None  # tvm-ffi imports torch where installed (2 s a process); loading a library needs none
import tvm
del sys.modules["torch"]  # a user op's code that imports torch still can
import ml_dtypes
def npz_array(a):  # common/arrays.py's rule, here without importing simaccel: V2 is bfloat16
    return a.view(ml_dtypes.bfloat16) if a.dtype == np.dtype("V2") else a
device = tvm.device(sys.argv[2], 0)
for lib, inputs, out in json.load(open(sys.argv[1])):
    try:
        vm = tvm.runtime.vm.VirtualMachine(tvm.runtime.load_module(lib), device)
        with np.load(inputs) as data:
            args = [tvm.runtime.tensor(npz_array(data[f"arr_{i}"]), device) for i in range(len(data.files))]
        result = vm["main"](*args)
        results = [result] if hasattr(result, "numpy") else list(result)
        np.savez(out, *[r.numpy() for r in results])
    except Exception as e:
        print(lib, type(e).__name__, str(e).strip().splitlines()[-1:], file=sys.stderr)
"""


def read_outputs(path) -> list[np.ndarray]:
    """The outputs a fresh process wrote (arr_0, arr_1, ... of an .npz), in order."""
    with np.load(path) as data:
        return [npz_array(data[f"arr_{k}"]) for k in range(len(data.files))]


class ContextLost(SimAccelError):
    """A CUDA error that leaves the process's GPU context unusable: no later case could run."""


_STICKY_CUDA_ERRORS = ("cudaErrorIllegalAddress", "illegal memory access", "cudaErrorLaunchFailure",
                       "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED")


def stop_if_context_lost(error: BaseException, phase: str, what: str) -> None:
    """End the run, naming the phase and `what` ran (the case, the model), after an error no
    later CUDA call survives."""
    if any(marker in str(error) for marker in _STICKY_CUDA_ERRORS):
        raise ContextLost(f"the GPU context was lost while running {phase} ({error_line(error)}); every later "
                          f"case would fail. {what}") from error


def device_name(engines) -> str:
    """What a campaign on `engines` runs on: the GPU's name, or the CPU's kind and cores."""
    from ..backends import engine_device

    if any(engine_device(e) == "cuda" for e in engines):
        from ..deploy import gpu_name

        return gpu_name()
    import platform

    return f"CPU ({platform.machine()}, {os.cpu_count()} cores)"
