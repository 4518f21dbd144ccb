"""Watchers: the one hook the debugging tools (sanitizer, capture for bisection, trace) use.

Where it sits: `simaccel.runtime.Runtime` runs a region's ops in order (`_run_plan`). While a
watcher is installed (`watching(w)`), each region call made through the Python runtime is
shown to it as a `RegionRun`: `region_start` after the boundary tensors are bound and before
the first op, `op_start` / `op_end` around every op (views included: their `launches` is 0),
`region_end` after the last op and any aliased-output copy. With no watcher installed the
runtime does no extra work per call.

A watcher whose `python_regions` is True also sends native regions' calls to the Python
runtime while it is installed (through the same route flag a Python engine sets), so it sees
every region; the others leave native regions native.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_lock = threading.Lock()
_watchers: tuple = ()


class Watcher:
    """Base class: every method is optional; override the ones you need."""

    python_regions = False  # True: native regions forward to the Python runtime while installed

    def region_start(self, run: "RegionRun") -> None:
        pass

    def op_start(self, run: "RegionRun", index: int) -> None:
        pass

    def op_end(self, run: "RegionRun", index: int) -> None:
        pass

    def region_end(self, run: "RegionRun") -> None:
        pass


@dataclass
class RegionRun:
    """One region call as watchers see it.

    `slots[i]` is the engine's array for tensor id `i` of `program` (a numpy array on ref and
    sim, a Numba device array on cuda); `boundary` lists (tensor id, role, TensorRef) of the
    caller's tensors, inputs then outputs. `engine.to_host(call, array)` reads any slot into
    host memory (after the work queued so far), `engine.from_host(call, array, host)` writes one.
    In `op_start` a watcher may put another array of the same shape and dtype in the op's
    output slot (the op then writes there); it must put the real one back in `op_end` (the
    sanitizer computes each op into guarded scratch this way).
    """

    program: Any
    engine: Any
    call: Any
    slots: list
    boundary: list
    launches: list = field(default_factory=list)  # per op: its recorded launches (kernel engines)
    notes: dict = field(default_factory=dict)  # per-watcher state for this call, keyed by watcher
    scratch: dict = field(default_factory=dict)  # buffers watchers keep with the plan (freed with it)

    def to_host(self, index: int) -> np.ndarray:
        """Tensor `index` of this call, copied to host memory."""
        return self.engine.to_host(self.call, self.slots[index])

    def op_name(self, index: int) -> str:
        return self.program.ops[index].op


def active() -> tuple:
    """The watchers installed now (an empty tuple, the common case, costs one global read)."""
    return _watchers


def wants_python_regions() -> bool:
    return any(w.python_regions for w in _watchers)


def install(watcher: Watcher) -> None:
    global _watchers
    with _lock:
        _watchers = _watchers + (watcher,)
    _update_route()


def uninstall(watcher: Watcher) -> None:
    global _watchers
    with _lock:
        _watchers = tuple(w for w in _watchers if w is not watcher)
    _update_route()


@contextlib.contextmanager
def watching(watcher: Watcher):
    """Install `watcher` for the duration of a `with` block (process-wide, every thread)."""
    install(watcher)
    try:
        yield watcher
    finally:
        uninstall(watcher)


def _update_route() -> None:
    from ..runtime import get_runtime

    get_runtime().route_flag()
