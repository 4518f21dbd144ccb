"""Ahead-of-time kernels: a Program's launch plan compiled to GPU code on a machine without a GPU.

Every launch of a Program's plan (simaccel.launch_plan) names a module-level Numba kernel and
its arguments: tensor views (whose shapes and dtypes the Program fixes) and numbers. That gives
each kernel a static Numba signature, so it can be compiled for a target architecture with
NVVM (`numba.cuda.compile_ptx`) and linked into a cubin with nvJitLink, with no GPU and no
driver. A kernel that calls CUDA C++ (its `link` files: the matmul main loops) is compiled
to LTO-IR instead, its C++ by NVRTC to LTO-IR too, and nvJitLink links both with `-lto`, so
the C++ is inlined as it is when numba-cuda links at run time. This is the build side of native regions: the region launcher loads the cubins and
launches them with the plan's grids, blocks and argument layout.

Needs the toolchain extra (`pip install ".[aot]"`: NVVM, NVRTC and nvJitLink from pip);
`toolchain_missing()` says what is absent.

Two facts of numba-cuda 0.30 this rests on (checked by the tests):
- a device function called from a kernel (e.g. the activation helper) is compiled for the
  *current device's* compute capability, which needs a driver; `compile_for` stands in a
  device of the target's capability while it compiles;
- an array argument is passed as meminfo, parent, nitems, itemsize, data, shape[ndim] and
  strides[ndim] (8 bytes each), a number as one 8-byte value (`abi_params`).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import dataclass

import numpy as np

from .errors import EngineError
from .launch_plan import Launch, View, plan_launches
from .program import Program

_LOCK = threading.Lock()


@dataclass(frozen=True)
class CompiledKernel:
    """One kernel compiled for one signature and architecture."""

    kernel: object  # the module-level kernel function
    signature: tuple  # Numba types, one per argument
    arch: tuple[int, int]  # compute capability, e.g. (9, 0)
    ptx: str
    cubin: bytes

    @property
    def entry(self) -> str:
        """The mangled name of the kernel's entry in the PTX and the cubin."""
        for line in self.ptx.splitlines():
            if line.startswith(".visible .entry") or line.startswith(".entry"):
                return line.split()[-1].split("(")[0]
        raise EngineError(f"kernel {self.kernel.__name__}: no entry in its PTX")


def toolchain_missing() -> str | None:
    """None when NVVM, NVRTC and nvJitLink can be loaded here, else what is missing."""
    try:
        from cuda.bindings import nvjitlink  # noqa: F401
        from numba.cuda.cudadrv.nvvm import NVVM

        NVVM()
    except Exception as e:  # what is missing, as the loader says it
        return f"the CUDA compiler toolchain is not installed (pip install '.[aot]'): {type(e).__name__}: {e}"
    return None


def signature(launch: Launch, program: Program) -> tuple:
    """The Numba signature `launch`'s kernel is called with: arrays C-contiguous, ints int64, floats float64."""
    from numba import types
    from numba.np.numpy_support import from_dtype

    typed = []
    for arg in launch.args:
        if isinstance(arg, View):
            dtype = np.dtype(program.tensors[arg.tensor].dtype)
            typed.append(types.Array(from_dtype(dtype), len(arg.shape), "C"))
        elif isinstance(arg, bool) or isinstance(arg, int):
            typed.append(types.int64)
        else:
            typed.append(types.float64)
    return tuple(typed)


def abi_params(launch: Launch) -> int:
    """How many 8-byte parameters the kernel's entry takes for `launch`'s arguments."""
    return sum(5 + 2 * len(a.shape) if isinstance(a, View) else 1 for a in launch.args)


@contextlib.contextmanager
def compile_for(arch: tuple[int, int]):
    """Within the block, Numba compiles device functions for `arch` instead of asking a driver."""
    import numba.cuda.dispatcher as dispatcher

    class _Device:
        compute_capability = tuple(arch)

    with _LOCK:
        real = dispatcher.get_current_device
        dispatcher.get_current_device = _Device
        try:
            yield
        finally:
            dispatcher.get_current_device = real


def compile_kernel(kernel, sig: tuple, arch: tuple[int, int]) -> CompiledKernel:
    """`kernel` compiled for `sig` to PTX (NVVM) and to a cubin for `arch` (nvJitLink).

    Cached per process: regions and libraries that launch the same kernel with the same
    signature share one compile.
    """
    reason = toolchain_missing()
    if reason:
        raise EngineError(reason)
    return _compile(kernel, sig, tuple(arch))


@functools.lru_cache(maxsize=1024)
def _compile(kernel, sig: tuple, arch: tuple[int, int]) -> CompiledKernel:
    from numba import cuda

    from .kernels.target import launch_bounds, link_sources

    sources = link_sources(kernel)
    with compile_for(arch):
        if not sources:
            ptx, _ = cuda.compile_ptx(kernel, sig, cc=arch, launch_bounds=launch_bounds(kernel))
            return CompiledKernel(kernel, sig, arch, ptx, _link([(ptx.encode(), "PTX")], arch, kernel.__name__))
        # Calls into CUDA C++: both sides as LTO-IR, linked (and inlined) by nvJitLink.
        ltoir, _ = cuda.compile(kernel, sig, device=False, abi="numba", cc=arch, output="ltoir",
                                launch_bounds=launch_bounds(kernel))
    inputs = [(bytes(ltoir), "LTOIR")] + [(_nvrtc_ltoir(path, arch), "LTOIR") for path in sources]
    ptx = _link(inputs, arch, kernel.__name__, ptx=True).decode()
    return CompiledKernel(kernel, sig, arch, ptx, _link(inputs, arch, kernel.__name__))


def _nvrtc_ltoir(path: str, arch: tuple[int, int]) -> bytes:
    """CUDA C++ file `path` compiled by NVRTC to LTO-IR for `arch` (numba-cuda's include paths)."""
    from numba.cuda.cudadrv import nvrtc

    with open(path) as f:
        source = f.read()
    try:
        ltoir, _ = nvrtc.compile(source, path, arch, ltoir=True)
    except Exception as e:  # NVRTC's log, as numba-cuda raises it
        raise EngineError(f"{path}: NVRTC could not compile it for sm_{arch[0]}{arch[1]}: {e}") from e
    return bytes(ltoir.code)


def compile_program(program: Program, arch: tuple[int, int]) -> list[CompiledKernel]:
    """Every distinct (kernel, signature) of `program`'s launch plan, compiled for `arch`."""
    compiled: dict[tuple, CompiledKernel] = {}
    for launch in plan_launches(program):
        sig = signature(launch, program)
        key = (launch.kernel, sig)
        if key not in compiled:
            compiled[key] = compile_kernel(launch.kernel, sig, arch)
    return list(compiled.values())


def _link(inputs: list, arch: tuple[int, int], name: str, ptx: bool = False) -> bytes:
    """A cubin (or, with `ptx`, the linked PTX) of `inputs`, (code, "PTX" or "LTOIR") pairs, for `arch`."""
    from cuda.bindings import nvjitlink

    options = [f"-arch=sm_{arch[0]}{arch[1]}"]
    if any(kind == "LTOIR" for _, kind in inputs):
        options.append("-lto")
    if ptx:
        options.append("-ptx")
    handle = nvjitlink.create(len(options), options)
    try:
        for code, kind in inputs:
            nvjitlink.add_data(handle, getattr(nvjitlink.InputType, kind), code, len(code), name)
        nvjitlink.complete(handle)
        if ptx:
            out = bytearray(nvjitlink.get_linked_ptx_size(handle))
            nvjitlink.get_linked_ptx(handle, out)
            return bytes(out).rstrip(b"\0")
        out = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, out)
    except nvjitlink.nvJitLinkError as e:
        raise EngineError(f"kernel {name}: nvJitLink could not make a cubin for sm_{arch[0]}{arch[1]}: {e}") from e
    finally:
        nvjitlink.destroy(handle)
    return bytes(out)
