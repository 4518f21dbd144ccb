"""Loading and running exported libraries, also with a runtime-only TVM.

A library built elsewhere (e.g. on a CPU machine for ``nvidia/nvidia-h100``) is deployed
where TVM may have only its runtime (``TVM_USE_RUNTIME_LIB=1``, no compiler). Such a TVM
has three quirks, handled here so users do not have to:

1. ``tvm.relax`` cannot be imported: the VM comes from ``tvm.runtime.vm``;
2. the CUDA runtime sidecar ``libtvm_runtime_cuda.so`` is not loaded: it is loaded here,
   after ``libcudart`` (global symbols), so CUDA modules in the library can be created;
3. the callback that compiles the library's CUDA source at load time cannot pick an
   architecture by itself: one is registered that compiles with NVRTC for the GPU present.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

from ..errors import DeviceError, SimAccelError

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
            raise DeviceError(f"cannot load TVM's CUDA runtime (libtvm_runtime_cuda.so): {e}") from e
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

    arch = cuda_arch(0)

    def compile_cuda(code, *_):
        from tvm.support import nvcc

        return nvcc.compile_cuda(code, target_format="cubin", compiler="nvrtc", arch=arch)

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", compile_cuda, override=True)


def load(path: str | os.PathLike, device: str = "cpu"):
    """Load an exported library and return a VM on `device` ("cpu" or "cuda", "cuda:1", ...)."""
    import tvm
    from tvm.runtime.vm import VirtualMachine  # not tvm.relax: absent from a runtime-only TVM

    kind, _, index = device.partition(":")
    if kind == "cuda":
        prepare_cuda()
    elif kind != "cpu":
        raise DeviceError(f"unknown device {device!r}; expected cpu or cuda[:N]")
    if not Path(path).is_file():
        raise SimAccelError(f"no library at {path}")
    dev = tvm.device(kind, int(index or 0))
    if not dev.exist:
        raise DeviceError(f"device {device} is not present on this machine")
    return VirtualMachine(tvm.runtime.load_module(str(path)), dev), dev


def read_arrays(path: str | os.PathLike) -> list[np.ndarray]:
    """Arrays of an .npz in argument order: keys arg0, arg1, ... or numpy's arr_0, arr_1, ..."""
    with np.load(path) as data:
        def position(key: str) -> int:
            digits = key.rsplit("_", 1)[-1].removeprefix("arg")
            if not digits.isdigit():
                raise SimAccelError(f"{path}: array name {key!r} is not argN or arr_N")
            return int(digits)

        return [data[key] for key in sorted(data.files, key=position)]


def outputs_as_list(result) -> list:
    """A VM result (one tensor or a tuple of them) as a flat list of tensors."""
    if hasattr(result, "numpy"):
        return [result]
    return [t for item in result for t in outputs_as_list(item)]


def run_library(path, inputs, device: str = "cpu", func: str = "main") -> list[np.ndarray]:
    """Load `path`, run `func` on numpy `inputs` placed on `device`, return numpy outputs."""
    import tvm

    vm, dev = load(path, device)
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    try:
        return [t.numpy() for t in outputs_as_list(vm[func](*args))]
    except SimAccelError:
        raise
    except Exception as e:  # TVM's own errors (e.g. wrong argument count or shapes)
        shapes = ", ".join(f"{a.shape} {a.dtype}" for a in inputs)
        raise SimAccelError(
            f"running {func} of {path} on {device} with {len(inputs)} inputs ({shapes}) failed: "
            f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
        ) from e
