"""Watchers: the one hook the debugging tools (sanitizer, capture for bisection, trace) use.

Where it sits: a debugging tool's view of the WATCH events of simaccel.events, which the
runtime (`simaccel.runtime.Runtime._run_plan`) announces. While a watcher is installed
(`watching(w)`), each region call made through the Python runtime is shown to it as a
`RegionRun`: `region_start` after the boundary tensors are bound and before the first op,
`op_start` / `op_end` around every op (views included: their `launches` is 0), `region_end`
after the last op and any aliased-output copy. With no watcher installed the runtime does no
extra work per call.

A watcher whose `python_regions` is True also sends native regions' calls to the Python
runtime while it is installed (through the same route flag a Python engine sets), so it sees
every region; the others leave native regions native.
"""

from __future__ import annotations

import contextlib

from .. import events
from ..events import RegionRun, Watcher
from ..runtime import get_runtime

__all__ = ["RegionRun", "Watcher", "active", "install", "uninstall", "wants_python_regions", "watching"]


def active() -> tuple:
    """The watchers installed now (an empty tuple, the common case)."""
    return events.listeners(events.WATCH)


def wants_python_regions() -> bool:
    return events.python_regions_wanted()


def install(watcher: Watcher) -> None:
    events.listen(events.WATCH, watcher)
    get_runtime().route_flag()


def uninstall(watcher: Watcher) -> None:
    events.unlisten(events.WATCH, watcher)
    get_runtime().route_flag()


@contextlib.contextmanager
def watching(watcher: Watcher):
    """Install `watcher` for the duration of a `with` block (process-wide, every thread)."""
    install(watcher)
    try:
        yield watcher
    finally:
        uninstall(watcher)
