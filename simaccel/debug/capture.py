"""Capture: host copies of every region call's tensors, for bisection (`simaccel.debug.bisect`).

Where it sits: a `Capture` is a watcher (simaccel.debug.hooks). While it is installed, every
region call goes through the Python runtime (native regions forward there, `python_regions`),
and for each call it keeps, in call order, a `RegionCapture`: the region's Program (its
name, its ops with their names, attributes and TensorSpecs), a host copy of each boundary
input taken before the first op, of each op's output taken right after the op, and of each
boundary output taken after the last op. An op's inputs are region inputs or earlier ops'
outputs, so every tensor of the call is copied once (a view is its owner's copy reshaped),
and `op_inputs(i)` / `op_output(i)` give exactly what op `i` read and wrote.

Memory is bounded by `max_bytes` (default 1 GiB, or $SIMACCEL_CAPTURE_MAX_BYTES): the copy
that would pass it raises a SimAccelError naming the region, the op and the tensor, so a
capture never quietly drops data. `regions` keeps only the calls of the regions named.
No TVM here: the core's runtime calls the watcher.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

import numpy as np

from ..errors import SimAccelError
from ..program import OpNode, Program, TensorSpec
from .hooks import RegionRun, Watcher

MAX_BYTES_ENV = "SIMACCEL_CAPTURE_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 30


@dataclass
class RegionCapture:
    """One region call: its Program and host copies of its tensors (by tensor id)."""

    call: int  # the call's place among all captured calls, from 0
    program: Program
    engine: str
    tensors: dict = field(default_factory=dict)  # tensor id -> host array (inputs and op outputs)
    outputs: dict = field(default_factory=dict)  # output tensor id -> host array after the last op
    ops_done: int = 0  # ops whose output was captured (fewer than the Program's when a call failed)
    sizes: dict = field(default_factory=dict)  # a symbolic region's size var values in this call

    @property
    def region(self) -> str:
        return self.program.name

    @property
    def ops(self) -> tuple[OpNode, ...]:
        return self.program.ops

    def spec(self, tensor: int) -> TensorSpec:
        return self.program.tensors[tensor]

    def inputs(self) -> list[np.ndarray]:
        """The region's inputs, in call order."""
        return [self.tensors[i] for i in self.program.inputs]

    def region_outputs(self) -> list[np.ndarray]:
        """The region's outputs as the caller got them, in call order."""
        return [self.outputs[i] for i in self.program.outputs]

    def op_inputs(self, index: int) -> list[np.ndarray]:
        """What op `index` read, in its Program order (the op's roles)."""
        return [self.tensors[i] for i in self.program.ops[index].inputs]

    def op_output(self, index: int) -> np.ndarray:
        return self.tensors[self.program.ops[index].output]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.tensors.values()) + sum(a.nbytes for a in self.outputs.values())


class Capture(Watcher):
    """Records every region call (see the module docstring). Use with `simaccel.debug.watching`."""

    python_regions = True

    def __init__(self, max_bytes: int | None = None, regions=None):
        if max_bytes is None:
            text = os.environ.get(MAX_BYTES_ENV, "").strip()
            try:
                max_bytes = int(text) if text else DEFAULT_MAX_BYTES
            except ValueError:
                raise SimAccelError(f"${MAX_BYTES_ENV}={text!r}: must be a whole number of bytes") from None
        if not isinstance(max_bytes, int) or max_bytes < 0:
            raise SimAccelError(f"capture max_bytes {max_bytes!r}: must be a whole number of bytes >= 0")
        self.max_bytes = max_bytes
        self.only = None if regions is None else set(regions)
        self.calls: list[RegionCapture] = []
        self.nbytes = 0
        self._lock = threading.Lock()

    # -- the watcher -----------------------------------------------------------------------------
    def region_start(self, run: RegionRun) -> None:
        if self.only is not None and run.program.name not in self.only:
            return
        with self._lock:
            capture = RegionCapture(len(self.calls), run.program, run.engine.name, sizes=dict(run.sizes))
            self.calls.append(capture)
        run.notes[self] = capture
        for i in run.program.inputs:
            self._keep(capture, capture.tensors, i, run, "input")
        for i in run.program.constants:  # the region's own scalars: what its ops read besides inputs
            capture.tensors[i] = run.program.tensors[i].value_array()

    def op_end(self, run: RegionRun, index: int) -> None:
        capture = run.notes.get(self)
        if capture is None:
            return
        node = run.program.ops[index]
        owner = run.program.views.get(node.output)
        if owner is not None and owner in capture.tensors:  # a view: the owner's copy, reshaped
            capture.tensors[node.output] = capture.tensors[owner].reshape(capture.spec(node.output).shape)
        else:
            self._keep(capture, capture.tensors, node.output, run, f"op {index} ({node.op}) output")
        capture.ops_done = index + 1

    def region_end(self, run: RegionRun) -> None:
        capture = run.notes.get(self)
        if capture is None:
            return
        for i in run.program.outputs:
            self._keep(capture, capture.outputs, i, run, "output")

    # -- memory ----------------------------------------------------------------------------------
    def _keep(self, capture: RegionCapture, where: dict, tensor: int, run: RegionRun, what: str) -> None:
        spec = run.program.tensors[tensor]
        with self._lock:
            if self.nbytes + spec.nbytes > self.max_bytes:
                raise SimAccelError(
                    f"capture: region {run.program.name} (call {capture.call + 1}): keeping {what} {spec} "
                    f"({spec.nbytes} bytes) would hold {self.nbytes + spec.nbytes} bytes, over the limit of "
                    f"{self.max_bytes}; raise max_bytes (or ${MAX_BYTES_ENV}) or capture fewer regions"
                )
            self.nbytes += spec.nbytes
        where[tensor] = run.to_host(tensor)

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()
            self.nbytes = 0
