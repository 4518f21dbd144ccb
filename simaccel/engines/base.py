"""Engine interface: how the runtime binds tensors, allocates intermediates and runs ops.

An engine is chosen per call (simaccel.runtime). For each region call the runtime checks
every boundary tensor (simaccel.tensors), makes a `Call` (device, stream, staging choice,
ledger), enters `engine.activate(call)`, binds every boundary tensor, executes the ops in
order and calls `engine.finish(call)`. In the default zero-copy mode no engine copies the
caller's tensors.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import EngineError
from ..ledger import Ledger
from ..ops.declare import OpDef
from ..program import OpNode, TensorSpec
from ..tensors import TensorRef, describe, host_array


@dataclass
class Call:
    """One region call as an engine sees it."""

    region: str
    device: tuple[str, int]
    stream: int | None  # the caller's raw stream handle on `device` (None: default)
    staged: bool  # copy through host memory instead of zero-copy (comparison mode)
    ledger: Ledger
    scratch: dict  # plan-owned buffers (staging copies), reused across calls
    target: Any = None  # engine-specific launch target, set by activate()
    workspace: Any = None  # the plan's workspace bytes (simaccel.launch_plan.WORKSPACE), where its launches view it
    writebacks: list = field(default_factory=list)  # staged outputs to copy back in finish()


class Engine:
    """Base class: a host-memory engine. Subclasses set `name` and implement `execute`."""

    name = "base"
    device_type = "cpu"
    description = ""
    launches_kernels = False  # True: plans record each op's kernel launches for `execute`

    def available(self) -> str | None:
        """None if this engine can run here, else a one-line reason."""
        return None

    @contextlib.contextmanager
    def activate(self, call: Call):
        """Make the call's device current for the duration of the call."""
        if call.staged:
            raise EngineError(
                f"region {call.region}: host-staged mode applies to GPU tensors (engine 'cuda'); "
                f"engine {self.name!r} already works on host memory"
            )
        yield

    def bind(self, call: Call, ref: TensorRef, index: int, spec: TensorSpec, role: str):
        """The engine's view of a checked caller tensor (never a copy in zero-copy mode)."""
        if call.ledger.tracing:
            call.ledger.record_tensor(call.region, role, spec.name, describe(call.device), ref.address)
        return host_array(ref)

    def allocate(self, spec: TensorSpec, device_id: int = 0):
        """Memory for an intermediate tensor, owned by a plan and reused across calls."""
        return np.empty(spec.shape, dtype=spec.dtype)

    def constant(self, spec: TensorSpec, device_id: int = 0):
        """Memory holding a Program constant (`spec.value`), owned by a plan, never written."""
        return spec.value_array().copy()

    def view(self, array, spec: TensorSpec):
        """`array` (C-contiguous, of spec's element count) under spec's shape: same memory."""
        return array.reshape(spec.shape)

    def copy(self, call: Call, destination, source) -> None:
        """Copy one bound tensor into another of the same shape and dtype (on the call's stream)."""
        np.copyto(destination, source)

    def to_host(self, call: Call, array) -> np.ndarray:
        """A host copy of `array` (an engine array of this call), after the work queued so far."""
        return np.array(array, copy=True)

    def from_host(self, call: Call, array, host: np.ndarray) -> None:
        """Write host data `host` (same shape and dtype) into the engine array `array`."""
        np.copyto(array, host)

    def capturing(self, device_id: int, stream: int | None) -> str | None:
        """Why work cannot be synchronised or memory allocated on `stream` now (it is being
        captured into a CUDA graph), else None. Host engines have no streams: None."""
        return None

    def free(self, arrays: list, device_id: int) -> None:
        """Give back the memory of plan-owned `arrays` (an evicted plan's buffers); empties the list."""
        arrays.clear()

    def execute(self, call: Call, node: OpNode, op: OpDef, inputs: list, output, launches: tuple = ()) -> int:
        """Run one op, writing `output` in place; return the number of kernels launched.

        `launches` are the op's recorded kernel launches (simaccel.launch_plan) for engines
        that set `launches_kernels`; the others get none.
        """
        raise NotImplementedError

    def finish(self, call: Call) -> None:
        """Called after the last op of a region."""
