"""The build pipeline: partition, codegen, compile.

`build` is the whole BYOC flow in one call; `build_tvm_only` compiles the same module with
TVM alone, the reference every simaccel result is checked against.
"""

from __future__ import annotations

import tvm
from tvm import relax

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


def build(mod: tvm.IRModule, target=None, profile: DeviceProfile | None = None):
    """Partition `mod` for simaccel, run the codegen and compile the rest with TVM."""
    mod = partition_for_simaccel(mod, profile)
    mod = relax.transform.RunCodegen()(mod)
    return tvm.compile(mod, target=target or default_target())


def build_tvm_only(mod: tvm.IRModule, target=None):
    """Compile `mod` with TVM alone (no simaccel), as the reference."""
    return tvm.compile(mod, target=target or default_target())
