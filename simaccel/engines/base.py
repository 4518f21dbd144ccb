"""Engine interface: how the runtime binds tensors, allocates intermediates and runs one op.

An engine is chosen per call (simaccel.runtime); engines never copy the caller's tensors.
"""

from __future__ import annotations

import numpy as np

from ..ops.registry import OpDef
from ..program import OpNode, TensorSpec
from ..tensors import host_view


class Engine:
    """Base class. Subclasses set `name` and `device_type` and implement `execute`."""

    name = "base"
    device_type = "cpu"
    description = ""

    def available(self) -> str | None:
        """None if this engine can run here, else a one-line reason."""
        return None

    def bind(self, tensor, spec: TensorSpec, region: str, role: str, ledger=None):
        """The engine's view of a caller tensor (validated, never a copy)."""
        return host_view(tensor, spec, region, role)

    def allocate(self, spec: TensorSpec, device_id: int = 0):
        """Memory for an intermediate tensor, owned by a plan and reused across calls."""
        return np.empty(spec.shape, dtype=spec.dtype)

    def execute(self, node: OpNode, op: OpDef, inputs: list, output) -> int:
        """Run one op, writing `output` in place; return the number of kernels launched."""
        raise NotImplementedError

    def finish(self, outputs, ledger=None) -> None:
        """Called after the last op of a region (hook for engines that stage data)."""
