"""Events: what the core's layers announce, and who listens (as numba.core.event is for numba's compiler).

Where it sits: at the bottom of simaccel, beside errors and names; it imports nothing of it.
A layer announces an event here and a layer above listens to it, so no layer imports the one
above it to tell it something. Every listener of every kind is process-wide; a listener is
added once (again is a no-op) and removed by identity or equality.

Kinds, and what their listeners are:

- `WATCH`: `Watcher`s, shown every region call the Python runtime makes (`RegionRun`);
  simaccel.debug.hooks installs them, simaccel.runtime calls them.
- `SANITIZE`: the watcher a sanitized call runs first (simaccel.debug.sanitizer registers it).
- `OP_FAILED`: `explain(program, index, inputs, output, launches, error)`, called when an op's
  kernel or reference raised; returns a SimAccelError that says better what went wrong, or None.
- `COPY`: `callback(direction, nbytes)` for every byte count simaccel copied (simaccel.ledger).
- `NATIVE_CALL`: `callback(record)` for every traced native region call (simaccel.debug.native_events).
- `RUNTIME`: `callback(runtime)` once, when the process's runtime is created (simaccel.runtime).

The timeline trace (simaccel.debug.timeline) listens to WATCH, COPY and NATIVE_CALL, and to
RUNTIME for $SIMACCEL_TRACE: one trace fed by one mechanism.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

WATCH = "watch"
SANITIZE = "sanitize"
OP_FAILED = "op_failed"
COPY = "copy"
NATIVE_CALL = "native_call"
RUNTIME = "runtime"
KINDS = (WATCH, SANITIZE, OP_FAILED, COPY, NATIVE_CALL, RUNTIME)

_lock = threading.Lock()
_listeners: dict[str, tuple] = {kind: () for kind in KINDS}


def listen(kind: str, listener) -> None:
    """Add `listener` to the listeners of `kind` (once: one already there is not added again)."""
    global _listeners
    with _lock:
        present = _listeners[kind]
        if not any(other is listener or other == listener for other in present):
            _listeners = {**_listeners, kind: present + (listener,)}


def unlisten(kind: str, listener) -> None:
    """Remove `listener` from the listeners of `kind` (nothing if it is not one)."""
    global _listeners
    with _lock:
        kept = tuple(other for other in _listeners[kind] if other is not listener and other != listener)
        _listeners = {**_listeners, kind: kept}


def listeners(kind: str) -> tuple:
    """The listeners of `kind` now (an empty tuple, the common case, costs a dict read)."""
    return _listeners[kind]


def announce(kind: str, *args) -> None:
    """Call every listener of `kind` with `args` (a listener that raises stops the announcement)."""
    for listener in _listeners[kind]:
        listener(*args)


class Watcher:
    """A listener of WATCH events. Every method is optional; override the ones you need.

    The runtime calls `region_start` after a call's boundary tensors are bound and before the
    first op, `op_start` / `op_end` around every op (views included: their `launches` is 0),
    `region_end` after the last op and any aliased-output copy.
    """

    python_regions = False  # True: native regions forward to the Python runtime while installed

    def region_start(self, run: "RegionRun") -> None:
        pass

    def op_start(self, run: "RegionRun", index: int) -> None:
        pass

    def op_end(self, run: "RegionRun", index: int) -> None:
        pass

    def region_end(self, run: "RegionRun") -> None:
        pass


def python_regions_wanted() -> bool:
    """Whether an installed watcher wants every region call made through the Python runtime."""
    return any(w.python_regions for w in _listeners[WATCH])


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
    sizes: dict = field(default_factory=dict)  # a symbolic region's size var values in this call (`program` is bound to them)

    def to_host(self, index: int) -> np.ndarray:
        """Tensor `index` of this call, copied to host memory."""
        return self.engine.to_host(self.call, self.slots[index])

    def op_name(self, index: int) -> str:
        return self.program.ops[index].op
