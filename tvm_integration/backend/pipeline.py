"""The build pipeline: partition, codegen, compile.

`build` is the whole BYOC flow in one call; `build_tvm_only` compiles the same module with
TVM alone, the reference every simaccel result is checked against.
"""

from __future__ import annotations

import json

import tvm
from tvm import relax

from ...errors import CodegenError
from ...profile import DeviceProfile
from .partition import partition_for_simaccel


CROSS_COMPILE_GPU = "nvidia/nvidia-h100"  # used when no GPU is present to read the target from


def default_target(device: str = "cpu") -> tvm.target.Target:
    """The target for `device`: "cpu" (llvm), or "cuda" (the GPU present, else an H100)."""
    if device == "cpu":
        return tvm.target.Target("llvm")
    if device == "cuda":
        gpu = tvm.cuda(0)
        if gpu.exist:
            return tvm.target.Target(tvm.target.Target.from_device(gpu), host="llvm")
        return tvm.target.Target(CROSS_COMPILE_GPU, host="llvm")
    raise ValueError(f"unknown device {device!r}; expected 'cpu' or 'cuda'")


def build(mod: tvm.IRModule, target=None, profile: DeviceProfile | None = None, native=None, cuda_archs=None,
          sanitize: bool = False):
    """Partition `mod` for simaccel, run the codegen and compile the rest with TVM.

    native: for a CUDA target, compile the regions to native code (True), keep them on the
    Python runtime (False), or None: $SIMACCEL_NATIVE, else native where the toolchain is
    installed (simaccel.tvm_integration.backend.native).
    cuda_archs: the GPU architectures native regions carry cubins for (e.g. ``["sm_75",
    "sm_80", "sm_90"]``), plus the PTX of the lowest; None: $SIMACCEL_CUDA_ARCHS, else the
    target's architecture.
    sanitize: True bakes the sanitizer into the library: every call of every region checks
    itself (docs/debugging.md, "Sanitizer"), whatever simaccel.debug.sanitize says.
    """
    if not isinstance(sanitize, bool):
        raise CodegenError(f"build: sanitize must be True or False, got {sanitize!r}")
    target = tvm.target.Target(target) if isinstance(target, str) else (target or default_target())
    mod = partition_for_simaccel(mod, profile)
    options = {"target": target}
    if native is not None:
        options["native"] = native
    if cuda_archs is not None:
        # As strings ("sm_80", "8.0", (8, 0) -> "8.0"): RunCodegen's options are TVM objects.
        options["cuda_archs"] = cuda_archs if isinstance(cuda_archs, str) else [
            ".".join(map(str, a)) if isinstance(a, tuple) else str(a) for a in cuda_archs]
    if profile is not None:
        options["profile"] = json.dumps(profile.to_dict())
    if sanitize:
        options["sanitize"] = True
    mod = relax.transform.RunCodegen({"simaccel": options})(mod)
    executable = tvm.compile(mod, target=target)
    if target.kind.name == "cuda" and tvm.cuda(0).exist:
        # Link native regions now, once: creating VMs from several threads would race in it.
        executable.jit()
    return executable


def build_tvm_only(mod: tvm.IRModule, target=None):
    """Compile `mod` with TVM alone (no simaccel), as the reference."""
    return tvm.compile(mod, target=target or default_target())
