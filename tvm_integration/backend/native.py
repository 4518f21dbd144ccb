"""Native region functions: the regions of a CUDA build as compiled C++, no Python on the hot path.

Where it sits: the codegen (simaccel.tvm_integration.backend.codegen) calls `native_module`
for a CUDA target. Each region's kernels are compiled ahead of time from the same Numba
kernel functions (simaccel.aot) for the build's architectures, its launch plan becomes
tables in one generated C++ file (simaccel.native.source), and the object compiled from it
is a TVM `static_library` module: `export_library` links it into the model's library, and
`Executable.jit()` into a shared library for use in the same process.

`native_choice` reads the switch: the codegen options (`native`: True / False / "auto"),
else $SIMACCEL_NATIVE, else "auto" = native for a CUDA target when the CUDA compiler
toolchain and a C++ compiler are present. The architectures: the codegen option
`cuda_archs`, else $SIMACCEL_CUDA_ARCHS, else the target's (simaccel.aot.parse_archs).
"""

from __future__ import annotations

import os
import tempfile
import warnings

from ...aot import parse_archs, toolchain_missing
from ...errors import CodegenError, EngineError, SimAccelError
from ...native.build import compile_object, compiler_missing
from ...native.source import NativeRegion, library_source
from ...switches import native_from_env



def target_arch(target) -> tuple[int, int] | None:
    """(major, minor) of a CUDA target's architecture ("sm_90" -> (9, 0)); None for other targets."""
    if target is None or target.kind.name != "cuda":
        return None
    arch = str(target.attrs.get("arch", ""))
    digits = arch.removeprefix("sm_").rstrip("a")
    if not arch.startswith("sm_") or not digits.isdigit():
        raise CodegenError(f"CUDA target {target} has arch {arch!r}; native regions need one like 'sm_90'")
    return int(digits[:-1]), int(digits[-1])


def _choice(options: dict):
    choice = options.get("native")
    if choice is None:
        try:
            return native_from_env()
        except EngineError as e:
            raise CodegenError(str(e)) from None
    if choice not in (True, False, "auto"):
        raise CodegenError(f"codegen option native={choice!r}: use True, False or 'auto'")
    return choice


def _target(options: dict):
    """The build's target: the codegen option `target`, else the current `with target:`, else None."""
    import tvm

    target = options.get("target") or tvm.target.Target.current(allow_none=True)
    return tvm.target.Target(target) if isinstance(target, str) else target


def gpu_hint(options) -> str:
    """What Python region functions say at their first call on a GPU (empty: nothing).

    A build whose codegen saw no target (a bare `RunCodegen()`) may be a CUDA build that
    meant to get native regions; one that chose Python regions (`native=False`) did so knowingly.
    """
    options = dict(options or {})
    if _choice(options) is False or _target(options) is not None:
        return ""
    return ('RunCodegen() saw no target when this model was built, so its regions were not compiled natively; pass '
            'RunCodegen({"simaccel": {"target": target}}) or build with simaccel.tvm_integration.build(mod, target) '
            "for native regions (docs/native-regions.md)")


def native_choice(options) -> tuple[tuple[int, int], ...] | None:
    """The architectures to compile native regions for, or None for Python region functions."""
    options = dict(options or {})
    choice = _choice(options)
    if choice is False:
        return None
    target = _target(options)
    arch = target_arch(target)
    if arch is None:
        if choice is True:
            raise CodegenError(f"native regions need a CUDA target, got {target}")
        return None
    missing = toolchain_missing() or compiler_missing()
    if missing:
        if choice is True:
            raise CodegenError(f"native regions cannot be built here: {missing}")
        warnings.warn(f"simaccel: regions of this CUDA build run through Python: {missing}", stacklevel=2)
        return None
    archs = options.get("cuda_archs")
    if archs is not None:  # through RunCodegen's options a list arrives as a TVM array of strings
        archs = str(archs) if isinstance(archs, str) else [str(a) for a in archs]
    try:
        return parse_archs(archs, default=arch)
    except SimAccelError as e:
        raise CodegenError(str(e)) from e


def native_module(regions: list[NativeRegion], archs: tuple[tuple[int, int], ...]):
    """One TVM static_library module exporting a native function per region."""
    import tvm

    obj = compile_object(library_source(regions, archs))
    with tempfile.TemporaryDirectory(prefix="simaccel-native-") as tmp:
        path = os.path.join(tmp, "simaccel_regions.o")
        with open(path, "wb") as f:
            f.write(obj)
        return tvm.runtime.load_static_library(path, [r.symbol for r in regions])


def has_native_regions(executable) -> bool:
    """Whether `executable` (from `build`/`tvm.compile`) holds native region functions."""
    return bool(executable.mod._collect_from_import_tree(lambda m: m.kind == "static_library"))
