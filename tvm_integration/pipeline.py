"""The build pipeline: partition, codegen, compile.

`build` is the whole BYOC flow in one call; `build_tvm_only` compiles the same module with
TVM alone, the reference every simaccel result is checked against.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..profile import DeviceProfile
from .partition import partition_for_simaccel


def default_target(device: str = "cpu") -> tvm.target.Target:
    if device == "cpu":
        return tvm.target.Target("llvm")
    if device == "cuda":
        return tvm.target.Target("nvidia/nvidia-h100", host="llvm")
    raise ValueError(f"unknown device {device!r}; expected 'cpu' or 'cuda'")


def build(mod: tvm.IRModule, target=None, profile: DeviceProfile | None = None):
    """Partition `mod` for simaccel, run the codegen and compile the rest with TVM."""
    mod = partition_for_simaccel(mod, profile)
    mod = relax.transform.RunCodegen()(mod)
    return tvm.compile(mod, target=target or default_target())


def build_tvm_only(mod: tvm.IRModule, target=None):
    """Compile `mod` with TVM alone (no simaccel), as the reference."""
    return tvm.compile(mod, target=target or default_target())
