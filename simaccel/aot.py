"""Ahead-of-time kernels: a Program's launch plan compiled to GPU code on a machine without a GPU.

Every launch of a Program's plan (simaccel.launch_plan) names a module-level Numba kernel and
its arguments: tensor views (whose shapes and dtypes the Program fixes) and numbers. That gives
each kernel a static Numba signature, so it can be compiled for a target architecture with
NVVM (numba-cuda's front end once, NVVM per architecture: `_frontend`) and linked into a
cubin with nvJitLink, with no GPU and no driver. A kernel that calls CUDA C++ (its `link`
files: the matmul main loops) is compiled to LTO-IR instead, its C++ by NVRTC to LTO-IR too,
and nvJitLink links both with `-lto`, so the C++ is inlined as it is when numba-cuda links
at run time. This is the build side of native regions: the region launcher loads the cubins
and launches them with the plan's grids, blocks and argument layout.

Any NVIDIA GPU: a build names the architectures its library carries cubins for
(`cuda_archs`, e.g. ``["sm_75", "sm_80", "sm_90"]``; default the target's), and the PTX of
the lowest of them rides along, so a GPU with no fitting cubin JITs it. The PTX must be one
the oldest supported driver can JIT (`MAX_PTX_VERSION`, `MIN_DRIVER`): the toolchain is
pinned to one CUDA line, and a kernel whose PTX is newer is refused at build time.

Needs the toolchain extra (`pip install ".[aot]"`: NVVM, NVRTC and nvJitLink from pip);
`toolchain_missing()` says what is absent.

With $SIMACCEL_LINEINFO=1 (kernels.target.lineinfo, set by `simaccel sanitize`) kernels are
compiled with line information (NVVM `lineinfo`, nvJitLink `-lineinfo`), except kernels that
call CUDA C++ (see `_compile`); unset, the compile is the one without it (cached apart), so
cubins do not change.

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
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np

from .errors import EngineError
from .names import MIN_DRIVER
from .launch_plan import Launch, LaunchPlan, View
from .launch_plan import signature  # noqa: F401  (a launch's Numba signature: simaccel.aot.signature too)
from .program import Program

_LOCK = threading.Lock()

ARCHS_ENV = "SIMACCEL_CUDA_ARCHS"
# The newest PTX ISA the oldest supported driver (names.MIN_DRIVER, 580 = CUDA 13.0) JITs:
# CUDA 13.0's NVVM and nvJitLink emit 9.0; nvJitLink 13.5's LTO output is 9.5.
MAX_PTX_VERSION = (9, 0)
_PTX_VERSION = re.compile(r"^\.version (\d+)\.(\d+)", re.MULTILINE)
_RESOURCES = {"registers": r"Used (\d+) registers", "stack": r"(\d+) bytes stack frame",
              "spill_stores": r"(\d+) bytes spill stores", "spill_loads": r"(\d+) bytes spill loads"}


@dataclass(frozen=True)
class CompiledKernel:
    """One kernel compiled for one signature and architecture."""

    kernel: object  # the module-level kernel function
    signature: tuple  # Numba types, one per argument
    arch: tuple[int, int]  # compute capability, e.g. (9, 0)
    ptx: str
    cubin: bytes
    link_log: str = ""  # nvJitLink's verbose log of the link that made `cubin`

    @property
    def ptx_version(self) -> tuple[int, int]:
        """The PTX ISA version of `ptx` (its `.version` line)."""
        found = _PTX_VERSION.search(self.ptx)
        if not found:
            raise EngineError(f"kernel {self.kernel.__name__}: its PTX has no .version line")
        return int(found.group(1)), int(found.group(2))

    @property
    def resources(self) -> dict[str, int]:
        """Registers, stack frame and spill bytes of the shipped cubin, as its own link reported them."""
        found = {key: re.search(pattern, self.link_log) for key, pattern in _RESOURCES.items()}
        if not all(found.values()):
            raise EngineError(f"kernel {self.kernel.__name__}: no resource usage in its link log")
        return {key: int(m.group(1)) for key, m in found.items()}

    @property
    def cubin_target(self) -> tuple:
        """The target `cubin` was linked for: `arch`, or its arch-specific form (sm_90a) for a
        kernel that links CUDA C++ (see `_compile`)."""
        from .kernels.target import link_sources

        return arch_specific(self.arch) if link_sources(self.kernel) else tuple(self.arch)

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory the cubin's code needs besides a launch's own (kernels.target.dynamic_shared)."""
        from .kernels.target import dynamic_shared

        return dynamic_shared(self.kernel, self.cubin_target)

    @property
    def ptx_shared_bytes(self) -> int:
        """The same for the PTX's code (portable: no arch-specific instructions)."""
        from .kernels.target import dynamic_shared

        return dynamic_shared(self.kernel, tuple(self.arch))

    @property
    def entry(self) -> str:
        """The mangled name of the kernel's entry in the PTX and the cubin."""
        for line in self.ptx.splitlines():
            if line.startswith(".visible .entry") or line.startswith(".entry"):
                return line.split()[-1].split("(")[0]
        raise EngineError(f"kernel {self.kernel.__name__}: no entry in its PTX")


def toolchain_missing() -> str | None:
    """None when NVVM, NVRTC and nvJitLink load here, else which one does not and why.

    Each library is loaded, not only its binding module imported: a toolkit can be partial
    (NVVM present, NVRTC absent), and an import succeeds without the library behind it.
    """
    def nvvm():
        from numba.cuda.cudadrv.nvvm import NVVM

        NVVM()

    def nvrtc():
        from cuda.bindings import nvrtc as binding

        binding.nvrtcVersion()

    def nvjitlink():
        from cuda.bindings import nvjitlink as binding

        binding.version()

    for name, load in (("NVVM", nvvm), ("NVRTC", nvrtc), ("nvJitLink", nvjitlink)):
        try:
            load()
        except Exception as e:  # what is missing, as the loader says it
            return (f"the CUDA compiler toolchain is not installed (pip install '.[aot]'): {name} does not load: "
                    f"{type(e).__name__}: {e}")
    return None


def supported_archs() -> tuple[tuple[int, int], ...]:
    """The compute capabilities the installed toolchain compiles for (CUDA 13: sm_75 ... sm_121)."""
    from numba.cuda.cudadrv import nvrtc

    return tuple(sorted(tuple(cc) for cc in nvrtc.get_supported_ccs()))


def arch_name(arch: tuple) -> str:
    """"sm_90" for (9, 0); "sm_90a" for the arch-specific (9, 0, "a")."""
    return f"sm_{arch[0]}{arch[1]}{''.join(arch[2:])}"


def parse_archs(value, default: tuple[int, int] | None = None) -> tuple[tuple[int, int], ...]:
    """A build's list of architectures, sorted and unique, each one the toolchain compiles for.

    `value`: None (then ``$SIMACCEL_CUDA_ARCHS``, else ``(default,)``), a string of entries
    separated by commas, semicolons or spaces, or a list; an entry is ``"sm_80"``, ``"80"``,
    ``"8.0"``, ``80`` or ``(8, 0)``.
    """
    where = "cuda_archs"
    if value is None:
        value = os.environ.get(ARCHS_ENV, "").strip() or None
        where = f"${ARCHS_ENV}"
    if value is None:
        if default is None:
            raise EngineError("no CUDA architecture given: pass cuda_archs or a CUDA target")
        value = [default]
    entries = [e for e in re.split(r"[,;\s]+", value) if e] if isinstance(value, str) else list(value)
    supported = supported_archs()
    archs = set()
    for entry in entries:
        arch = _one_arch(entry)
        if arch is None or arch not in supported:
            raise EngineError(f"{where}: {entry!r} is not a CUDA architecture this toolchain compiles for "
                              f"(one of {', '.join(map(arch_name, supported))})")
        archs.add(arch)
    if not archs:
        raise EngineError(f"{where} is empty: name at least one architecture, e.g. sm_90")
    return tuple(sorted(archs))


def _one_arch(entry) -> tuple[int, int] | None:
    if isinstance(entry, tuple) and len(entry) == 2 and all(isinstance(v, int) for v in entry):
        return entry
    if isinstance(entry, bool) or not isinstance(entry, (int, str)):
        return None
    text = str(entry).strip().lower().removeprefix("sm_").removeprefix("compute_").removesuffix("a")
    if re.fullmatch(r"\d+\.\d", text):
        major, minor = text.split(".")
        return int(major), int(minor)
    if re.fullmatch(r"\d{2,3}", text):
        return int(text[:-1]), int(text[-1])
    return None


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
    signature share one compile. A PTX newer than `MAX_PTX_VERSION` (a toolchain from a
    later CUDA line than the one pinned) is refused: the oldest supported driver could not JIT it.
    """
    reason = toolchain_missing()
    if reason:
        raise EngineError(reason)
    from .kernels.target import lineinfo

    compiled = _compile(kernel, sig, tuple(arch), lineinfo() and not links_cpp(kernel, sig))
    if compiled.ptx_version > MAX_PTX_VERSION:
        from cuda.bindings import nvjitlink

        raise EngineError(
            f"kernel {kernel.__name__}: its PTX for {arch_name(arch)} is version {'.'.join(map(str, compiled.ptx_version))}, "
            f"newer than a driver {MIN_DRIVER} JITs ({'.'.join(map(str, MAX_PTX_VERSION))}); nvJitLink "
            f"{'.'.join(map(str, nvjitlink.version()))} and NVVM must come from CUDA 13.0: pip install '.[aot]'")
    return compiled


@functools.lru_cache(maxsize=1024)
def _compile(kernel, sig: tuple, arch: tuple[int, int], lineinfo: bool = False) -> CompiledKernel:
    from numba.cuda.core.compiler_lock import global_compiler_lock

    from .kernels.target import launch_bounds

    lto = links_cpp(kernel, sig)
    library = _frontend(kernel, sig, launch_bounds(kernel, arch), lineinfo, lto, arch)
    if not lto:
        with global_compiler_lock:
            [ptx] = library.get_asm_strs(cc=arch)  # NVVM, for this architecture
        return _without_spills(CompiledKernel(kernel, sig, arch, ptx, b""), [(ptx.encode(), "PTX")], lineinfo)
    # Calls into CUDA C++: both sides as LTO-IR, linked (and inlined) by nvJitLink. No line
    # information: NVVM's fails that link ("linking module flags 'Debug Info Version': IDs
    # have conflicting behaviors", NVVM and NVRTC 13.0), and NVRTC's alone reaches no cubin.
    # The PTX is the portable one, any GPU of `arch` or newer JITs it; the cubin may use the
    # architecture's own instructions (sm_90a: wgmma), which the C++ selects on
    # __CUDA_ARCH_FEAT_SM90_ALL and which run on that architecture alone.
    with global_compiler_lock:
        ltoir = library.get_ltoir(cc=arch)
    sources = _cpp_sources(library)
    inputs = [(bytes(ltoir), "LTOIR")] + [(_nvrtc_compile(name, text, arch), "LTOIR") for name, text in sources]
    ptx, _ = _link(inputs, arch, kernel.__name__, ptx=True)
    specific = arch_specific(arch)
    if specific != arch:
        inputs = inputs[:1] + [(_nvrtc_compile(name, text, specific), "LTOIR") for name, text in sources]
    return _without_spills(CompiledKernel(kernel, sig, arch, ptx.decode(), b""), inputs, cubin_arch=specific)


def links_cpp(kernel, sig) -> bool:
    """Whether `kernel` at `sig` calls CUDA C++: its own files (`link`: the matmul main loops),
    or numba-cuda's bfloat16 conversions, which a bfloat16 array argument brings (numba-cuda
    0.30 lowers them to calls into cuda_bf16.h, compiled beside the kernel)."""
    from numba.cuda.types import bfloat16

    from .kernels.target import link_sources

    return bool(link_sources(kernel)) or any(getattr(t, "dtype", None) == bfloat16 for t in sig)


def _cpp_sources(library) -> list[tuple[str, str]]:
    """(name, text) of every CUDA C++ source numba-cuda's front end linked into `library`: the
    kernel's own files (named by their paths, kernels.target.cpp_link) and the shims of
    cuda_bf16.h it generated. numba-cuda keeps them in the library's `_linking_files` and
    compiles them itself when it links at run time; here NVRTC compiles each to LTO-IR."""
    files = [f for f in library._linking_files if hasattr(f, "data")]
    sources = {(f.name, f.data.decode() if isinstance(f.data, bytes) else f.data) for f in files}
    return sorted(sources)


# Architectures whose cubins carry arch-specific instructions of CUDA C++ main loops: the
# 'a' targets (sm_90a: wgmma, setmaxnreg), whose code runs on that compute capability only.
_ARCH_SPECIFIC = {(9, 0): (9, 0, "a")}


def arch_specific(arch: tuple) -> tuple:
    """The target a cubin for `arch` is linked for: `arch`, or its 'a' form where it has one."""
    return _ARCH_SPECIFIC.get(tuple(arch), tuple(arch))


def _frontend(kernel, sig: tuple, bounds, lineinfo: bool, lto: bool, arch: tuple[int, int]):
    """numba-cuda's front end for `kernel` at `sig` (typing, lowering to NVVM IR, the launch
    bounds set): a code library that NVVM then compiles for any architecture, as numba-cuda's
    own dispatcher does (`library.get_asm_strs(cc=...)`). It is run once per kernel, signature
    and launch bounds, not once per architecture: it is four fifths of a compile, and numba's
    lowering asks the architecture only below sm_75 (f64 atomics, fast-math tanh), which CUDA
    13 no longer builds for."""
    from numba.cuda.compiler import _compile_pyfunc_with_fixup

    key = (kernel, sig, bounds, lineinfo, lto)
    with _FRONTEND_LOCK:
        if key in _FRONTENDS:
            _FRONTENDS.move_to_end(key)
        else:
            with compile_for(arch):
                _FRONTENDS[key], _ = _compile_pyfunc_with_fixup(kernel, sig, device=False, abi="numba", cc=arch,
                                                                lineinfo=lineinfo, launch_bounds=bounds, lto=lto)
            if len(_FRONTENDS) > _FRONTENDS_KEPT:  # a long fuzz campaign draws many signatures
                _FRONTENDS.popitem(last=False)
        return _FRONTENDS[key]


# (kernel, signature, launch bounds, lineinfo, lto) -> code library, the most recently used kept.
_FRONTENDS: OrderedDict = OrderedDict()
_FRONTENDS_KEPT = 256
_FRONTEND_LOCK = threading.Lock()


# ptxas's register heuristics differ by architecture: at the same launch bounds a kernel that
# keeps its values in registers on one spills a few bytes on another (the 128x128 matmuls on
# sm_80 ... sm_89 at 128 registers). A link whose cubin spills is tried again with these
# options, in order, and the first cubin that spills nothing is shipped (else the last).
_REGISTER_RETRIES = ((), ("-Xptxas=--register-usage-level=10",), ("-maxrregcount=255",),
                     ("-Xptxas=--register-usage-level=10", "-maxrregcount=255"))


_LINEINFO = ("-lineinfo",)  # nvJitLink: keep line information in the linked code


def _without_spills(kernel: CompiledKernel, inputs: list, lineinfo: bool = False, cubin_arch=None) -> CompiledKernel:
    """`kernel` with the cubin of `inputs` linked for its arch (or `cubin_arch`, e.g. (9, 0, "a")),
    the first of `_REGISTER_RETRIES` that spills nothing."""
    for extra in _REGISTER_RETRIES:
        if lineinfo:
            extra = extra + _LINEINFO
        cubin, log = _link(inputs, cubin_arch or kernel.arch, kernel.kernel.__name__, extra=extra)
        linked = replace(kernel, cubin=cubin, link_log=log)
        spills = [re.search(_RESOURCES[key], log) for key in ("spill_stores", "spill_loads")]
        if not all(spills) or not any(int(m.group(1)) for m in spills):
            break  # no spills, or a linker whose log does not say (then its first cubin ships)
    return linked


def _nvrtc_ltoir(path: str, arch: tuple[int, int]) -> bytes:
    """CUDA C++ file `path` compiled by NVRTC to LTO-IR for `arch` (numba-cuda's include paths)."""
    with open(path) as f:
        return _nvrtc_compile(path, f.read(), tuple(arch))


@functools.lru_cache(maxsize=256)
def _nvrtc_compile(path: str, source: str, arch: tuple[int, int]) -> bytes:
    """One NVRTC compile per file text and architecture, shared by the kernels that link it."""
    from numba.cuda.cudadrv import nvrtc

    try:
        ltoir, _ = nvrtc.compile(source, path, arch, ltoir=True)
    except Exception as e:  # NVRTC's log, as numba-cuda raises it
        raise EngineError(f"{path}: NVRTC could not compile it for {arch_name(arch)}: {e}") from e
    return bytes(ltoir.code)


def compile_program(program: Program, arch: tuple[int, int]) -> list[CompiledKernel]:
    """Every distinct (kernel, signature) of `program`'s launch plan, compiled for `arch`."""
    return [compile_kernel(kernel, sig, arch) for kernel, sig in LaunchPlan.of(program).kernels]


def _link(inputs: list, arch: tuple[int, int], name: str, ptx: bool = False, extra=()) -> tuple[bytes, str]:
    """(A cubin, or with `ptx` the linked PTX, and nvJitLink's verbose log) of `inputs`,
    (code, "PTX" or "LTOIR") pairs, for `arch`; `extra`: more nvJitLink options."""
    from cuda.bindings import nvjitlink

    options = [f"-arch={arch_name(arch)}", "-verbose", *extra]
    if any(kind == "LTOIR" for _, kind in inputs):
        options.append("-lto")
    if ptx:
        options.append("-ptx")
    handle = nvjitlink.create(len(options), options)
    try:
        for code, kind in inputs:
            nvjitlink.add_data(handle, getattr(nvjitlink.InputType, kind), code, len(code), name)
        nvjitlink.complete(handle)
        log = bytearray(nvjitlink.get_info_log_size(handle))
        nvjitlink.get_info_log(handle, log)
        if ptx:
            out = bytearray(nvjitlink.get_linked_ptx_size(handle))
            nvjitlink.get_linked_ptx(handle, out)
        else:
            out = bytearray(nvjitlink.get_linked_cubin_size(handle))
            nvjitlink.get_linked_cubin(handle, out)
    except nvjitlink.nvJitLinkError as e:
        raise EngineError(f"kernel {name}: nvJitLink could not make a cubin for {arch_name(arch)}: {e}") from e
    finally:
        nvjitlink.destroy(handle)
    return bytes(out).rstrip(b"\0") if ptx else bytes(out), bytes(log).rstrip(b"\0").decode(errors="replace")
