"""Loading and running exported libraries, also with a runtime-only TVM.

A library built elsewhere (e.g. on a CPU machine for ``nvidia/nvidia-h100``) is deployed
where TVM may have only its runtime (``TVM_USE_RUNTIME_LIB=1``, no compiler). Such a TVM
has three quirks, handled here so users do not have to:

1. ``tvm.relax`` cannot be imported: the VM comes from ``tvm.runtime.vm``;
2. the CUDA runtime sidecar ``libtvm_runtime_cuda.so`` is not loaded: it is loaded here,
   after ``libcudart`` (global symbols), so CUDA modules in the library can be created;
3. the callback that compiles the library's CUDA source at load time cannot pick an
   architecture by itself: one is registered that compiles with NVRTC for the GPU present.

Every problem with what the user gives (a path that is not a TVM library; a malformed or
absent device) is raised as a SimAccelError naming it; the .npz files of inputs and outputs
are read and written by common/arrays.py.
"""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

import numpy as np

from ...errors import DeviceError, SimAccelError
from .common.arrays import check_readable
from .common.error_line import error_line
from .common.runs import outputs_as_list

_cuda_ready = False


def runtime_only() -> bool:
    from tvm import base

    return bool(base._RUNTIME_ONLY)


def prepare_cuda() -> None:
    """Make this process's TVM able to load and run CUDA code (idempotent)."""
    global _cuda_ready
    if _cuda_ready:
        return
    from tvm import base

    if "tvm_runtime_cuda" not in base._LOADED_LIBS:
        _load_cudart()
        from tvm_ffi.libinfo import load_lib_ctypes

        runtime_dir = Path(base._LOADED_LIBS["tvm_runtime"]._name).resolve().parent
        try:
            base._LOADED_LIBS["tvm_runtime_cuda"] = load_lib_ctypes(
                package="tvm", target_name="tvm_runtime_cuda", extra_lib_paths=[runtime_dir], mode="RTLD_LOCAL"
            )
        except (OSError, FileNotFoundError, RuntimeError) as e:
            raise DeviceError(
                f"cannot load TVM's CUDA runtime (libtvm_runtime_cuda.so): {e}; it needs an NVIDIA GPU and its driver"
            ) from e
    if runtime_only():
        _register_cuda_compile()
    _cuda_ready = True


def _load_cudart() -> None:
    """Load libcudart with global symbols (libtvm_runtime_cuda links against it)."""
    errors = []
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        ctypes.CDLL(load_nvidia_dynamic_lib("cudart").abs_path, mode=ctypes.RTLD_GLOBAL)
        return
    except Exception as e:  # fall back to the loader's search path
        errors.append(f"cuda.pathfinder: {e}")
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
            return
        except OSError as e:
            errors.append(str(e))
    raise DeviceError("cannot load the CUDA runtime library (libcudart): " + "; ".join(errors))


def cuda_arch(device_id: int = 0) -> str:
    """The NVRTC architecture of a GPU, e.g. "sm_90a" for an H100/H200."""
    from numba import cuda

    major, minor = cuda.gpus[device_id].compute_capability
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


def _register_cuda_compile() -> None:
    import tvm_ffi

    try:
        arch = cuda_arch(0)
    except Exception as e:  # numba's own errors: no driver, no GPU
        raise DeviceError(f"cannot query the GPU's architecture through numba: {type(e).__name__}: {e}") from e

    def compile_cuda(code, *_):
        from tvm.support import nvcc

        return nvcc.compile_cuda(code, target_format="cubin", compiler="nvrtc", arch=arch)

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", compile_cuda, override=True)


DEVICE_FORM = re.compile(r"cpu|cuda(?::(?:0|[1-9][0-9]*))?")


def parse_device(device: str) -> tuple[str, int]:
    """("cuda", 1) for "cuda:1"; refuses anything but cpu, cuda and cuda:N."""
    if not DEVICE_FORM.fullmatch(device):
        raise DeviceError(f"unknown device {device!r}: expected cpu, cuda or cuda:N (N = 0, 1, ...)")
    kind, _, index = device.partition(":")
    return kind, int(index or 0)


def load(path: str | os.PathLike, device: str = "cpu"):
    """Load an exported library and return a VM on `device` ("cpu" or "cuda", "cuda:1", ...)."""
    kind, index = parse_device(device)
    check_readable(path, "library")
    import tvm
    from tvm.runtime.vm import VirtualMachine  # not tvm.relax: absent from a runtime-only TVM

    if kind == "cuda":
        try:
            prepare_cuda()
        except DeviceError as e:
            raise DeviceError(f"device {device}: {e}") from e
    dev = tvm.device(kind, index)
    if not dev.exist:
        raise DeviceError(f"device {device} is not present on this machine")
    try:
        return VirtualMachine(tvm.runtime.load_module(str(path)), dev), dev
    except Exception as e:  # TVM's loader errors: not a TVM library, no VM inside, built for another device
        raise SimAccelError(
            f"library {path}: TVM cannot load it on {device} ({error_line(e)}); "
            "expected a library made by export_library for this device"
        ) from e


def gpu_name() -> str:
    """The name of the current CUDA device, as numba reports it (e.g. "NVIDIA H200")."""
    from numba import cuda

    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def _raised_by_simaccel(e: BaseException) -> bool:
    """Whether `e` passed through simaccel's code below the caller (TVM keeps the frames of callbacks)."""
    import importlib.util

    roots = [os.path.dirname(importlib.util.find_spec(name).origin) + os.sep
             for name in ("simaccel", "simaccel.kernels", "simaccel.tvm_integration")]
    tb = e.__traceback__.tb_next if e.__traceback__ else None  # skip the caller's own frame
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(tuple(roots)):
            return True
        tb = tb.tb_next
    return False


def run_library(path, inputs, device: str = "cpu", func: str = "main", sanitize: bool = False) -> list[np.ndarray]:
    """Load `path`, run `func` on numpy `inputs` placed on `device`, return numpy outputs.

    sanitize: run every region call under the sanitizer (simaccel.debug.sanitize), native
    regions included.
    """
    import contextlib

    from ...debug import sanitize as sanitizing

    vm, dev = load(path, device)
    import tvm

    from ...debug.timeline import current

    if current() is not None:  # a timeline trace is on (`simaccel run --trace`): TVM's VM calls too
        from .trace_tvm import instrument_vm

        instrument_vm(vm, dev)

    try:
        args = [tvm.runtime.tensor(a, dev) for a in inputs]
        with sanitizing() if sanitize else contextlib.nullcontext():  # else: the process's switch
            results = vm[func](*args)
            outputs = [t.numpy() for t in outputs_as_list(results)]  # waits for the regions' work
        return outputs
    except SimAccelError:
        raise
    except Exception as e:  # TVM's own errors (e.g. wrong argument count, shapes or dtypes)
        if _raised_by_simaccel(e):
            raise  # any other exception from simaccel's own code is a bug, not a user mistake
        shapes = ", ".join(f"{a.shape} {a.dtype}" for a in inputs)
        raise SimAccelError(
            f"running {func} of {path} on {device} with {len(inputs)} inputs ({shapes}) failed: {error_line(e)}"
        ) from e
