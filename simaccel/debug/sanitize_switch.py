"""The sanitizer's switches: whether region calls are checked for memory and stream defects.

Where it sits: read by simaccel.runtime on every Python region call (ref, sim, cuda engines),
which then runs the call under the sanitizer's watcher (simaccel.debug.sanitizer); native
regions read the SANITIZE bit of the debug word (simaccel.debug.flags), which is kept set
whenever sanitizing is on anywhere in the process. What the checks are: docs/debugging.md.

The switch, first match wins: an open `sanitize(...)` block (per thread / task), then
`set_sanitize(True | False)`, then $SIMACCEL_SANITIZE (1/true/yes/on or 0/false/no/off; unset
or empty: off). A Program built with `build(..., sanitize=True)` (`Program.sanitize`) is
sanitized on every call whatever the switch says.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading

from ..errors import EngineError
from . import flags

SANITIZE_ENV = "SIMACCEL_SANITIZE"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")

_scoped: contextvars.ContextVar[bool | None] = contextvars.ContextVar("simaccel_sanitize", default=None)
_global: bool | None = None
_open_enabling = 0  # `sanitize(True)` blocks open now, in any thread (the native bit follows them)
_lock = threading.Lock()


def _from_env() -> bool:
    text = os.environ.get(SANITIZE_ENV, "")
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise EngineError(f"{SANITIZE_ENV}={text!r} is not a boolean; use 1/true/yes/on or 0/false/no/off")


def sanitizing() -> bool:
    """Whether a region call made now (in this thread / task) is sanitized."""
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    if _global is not None:
        return _global
    return _from_env()


def set_sanitize(on: bool | None) -> None:
    """Sanitize every later region call in this process (True), none (False), or back to
    $SIMACCEL_SANITIZE (None)."""
    global _global
    if on is not None and not isinstance(on, bool):
        raise EngineError(f"set_sanitize takes True, False or None, got {on!r}")
    _global = on
    update_flag()


@contextlib.contextmanager
def sanitize(enabled: bool = True):
    """Sanitize the region calls made inside a `with` block (per thread / task; False: none).

    While any enabling block is open, native regions sanitize too (the debug word is
    process-wide, so a `sanitize(False)` block inside does not turn theirs off).
    """
    global _open_enabling
    if not isinstance(enabled, bool):
        raise EngineError(f"sanitize takes True or False, got {enabled!r}")
    token = _scoped.set(enabled)
    if enabled:
        with _lock:
            _open_enabling += 1
        update_flag()
    try:
        yield
    finally:
        _scoped.reset(token)
        if enabled:
            with _lock:
                _open_enabling -= 1
            update_flag()


def update_flag() -> None:
    """Set the debug word's SANITIZE bit from the switches (native regions read it per call)."""
    if _open_enabling > 0 or _global is True:
        on = True
    elif _global is False:
        on = False
    else:
        try:
            on = _from_env()
        except EngineError:
            on = True  # an unreadable value sanitizes natives; Python calls say what is wrong
    flags.set_bit(flags.SANITIZE, on)


update_flag()  # $SIMACCEL_SANITIZE as it is when simaccel.debug is first imported
