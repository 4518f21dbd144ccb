"""Switches: the settings chosen in code or in the environment, and the words native regions read.

Where it sits: above the engines, below the runtime, which reads the switches on every call
(simaccel.runtime: the engine, host staging; simaccel.debug.sanitize: the sanitizer).

One rule for every switch, first match wins: an open `with` block (a context variable, so per
thread / task), then the value set in code (`set_engine`, `set_staged`, `set_sanitize`), then
the environment variable. A boolean variable reads one way (`boolean`): 1/true/yes/on or
0/false/no/off, unset or empty: off.

Native regions (simaccel.native) cannot read context variables: they read two process-wide
int32 words (`Word`), whose addresses they ask for once. `ROUTE` is nonzero while native
regions must forward to the Python runtime; `DEBUG` holds a bit per debugging tool on
(`names.DEBUG_SANITIZE`, `names.DEBUG_TRACE`). A word follows its switches process-wide: on
while a block that turns the setting on is open in any thread, else as set in code, else as
the environment says, an unreadable value counting as on (the Python call then says what is
wrong). What sets them: simaccel.runtime (`route_flag`), `update_sanitize_bit` here, the
timeline trace (simaccel.debug.timeline).
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import os
import threading

from .errors import EngineError
from .names import DEBUG_SANITIZE

ENGINE_ENV = "SIMACCEL_ENGINE"
STAGED_ENV = "SIMACCEL_STAGED"
SANITIZE_ENV = "SIMACCEL_SANITIZE"
NATIVE_ENV = "SIMACCEL_NATIVE"  # read at build time by the TVM layer's codegen (native_from_env)
AUTO = "auto"
TRUE = ("1", "true", "yes", "on")
FALSE = ("", "0", "false", "no", "off")

_lock = threading.Lock()


def boolean(env: str, text: str) -> bool:
    """`text`, the value of $`env`, as a boolean; EngineError if it is none."""
    value = text.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise EngineError(f"{env}={text!r} is not a boolean; use 1/true/yes/on or 0/false/no/off")


def boolean_or_auto(env: str, text: str):
    """`text`, the value of $`env`, as True, False or AUTO (unset, empty or "auto"); EngineError
    if it is none of these."""
    if text.strip().lower() in ("", AUTO):
        return AUTO
    try:
        return boolean(env, text)
    except EngineError:
        raise EngineError(f"{env}={text!r}: use 1/0/auto (or true/false, yes/no, on/off)") from None


def native_from_env():
    """$SIMACCEL_NATIVE: whether builds make native regions (True, False or AUTO)."""
    return boolean_or_auto(NATIVE_ENV, os.environ.get(NATIVE_ENV, ""))


class Switch:
    """One setting: an open `scope(value)` block, then a value set in code, then $`env`.

    `parse(env, text)` reads the variable's text; `on(value)` says whether a value turns on
    what native regions follow (the word's bit or the route flag).
    """

    def __init__(self, name: str, env: str, parse, on=bool):
        self.env, self.parse, self.on = env, parse, on
        self._scoped: contextvars.ContextVar = contextvars.ContextVar(f"simaccel_{name}", default=None)
        self.opened = 0  # blocks open now, in any thread, whose value is on

    def from_env(self):
        return self.parse(self.env, os.environ.get(self.env, ""))

    def value(self, assigned=None):
        """The value for a call made now in this thread / task; `assigned`: the value set in code."""
        scoped = self._scoped.get()
        if scoped is not None:
            return scoped
        if assigned is not None:
            return assigned
        return self.from_env()

    def process_wide(self, assigned=None) -> bool:
        """Whether the setting is on for native regions: a block that turns it on is open in any
        thread, else the value set in code, else the environment's (unreadable: on)."""
        if self.opened > 0:
            return True
        if assigned is None:
            try:
                assigned = self.from_env()
            except EngineError:
                return True
        return bool(self.on(assigned))

    @contextlib.contextmanager
    def scope(self, value, changed=None):
        """`value` inside a `with` block (per thread / task); `changed()` runs after the count of
        open blocks that are on changes (on entering and on leaving such a block)."""
        token = self._scoped.set(value)
        counted = bool(self.on(value))
        if counted:
            self._count(1, changed)
        try:
            yield
        finally:
            self._scoped.reset(token)
            if counted:
                self._count(-1, changed)

    def _count(self, step: int, changed) -> None:
        with _lock:
            self.opened += step
        if changed is not None:
            changed()


class Word:
    """A process-wide int32 that native regions read on every call (its address asked once)."""

    def __init__(self):
        self._word = ctypes.c_int32(0)
        self._lock = threading.Lock()

    def address(self) -> int:
        return ctypes.addressof(self._word)

    def value(self) -> int:
        return self._word.value

    def set(self, value: int) -> int:
        """Set the word; returns its address."""
        self._word.value = int(value)
        return self.address()

    def set_bit(self, bit: int, on: bool) -> None:
        with self._lock:
            self._word.value = (self._word.value | bit) if on else (self._word.value & ~bit)


ROUTE = Word()  # nonzero: native regions forward every call to the Python runtime (simaccel.runtime)
DEBUG = Word()  # the debugging tools on: names.DEBUG_SANITIZE, names.DEBUG_TRACE

ENGINE = Switch("engine", ENGINE_ENV, lambda env, text: text or AUTO, on=lambda name: name != AUTO)
STAGED = Switch("staged", STAGED_ENV, boolean)
SANITIZE = Switch("sanitize", SANITIZE_ENV, boolean)
_sanitize_set: bool | None = None  # set_sanitize's value


# -- the sanitizer's switch ------------------------------------------------------------------------
def sanitizing() -> bool:
    """Whether a region call made now (in this thread / task) is sanitized."""
    return SANITIZE.value(_sanitize_set)


def set_sanitize(on: bool | None) -> None:
    """Sanitize every later region call in this process (True), none (False), or back to
    $SIMACCEL_SANITIZE (None)."""
    global _sanitize_set
    if on is not None and not isinstance(on, bool):
        raise EngineError(f"set_sanitize takes True, False or None, got {on!r}")
    _sanitize_set = on
    update_sanitize_bit()


@contextlib.contextmanager
def sanitize(enabled: bool = True):
    """Sanitize the region calls made inside a `with` block (per thread / task; False: none).

    While any enabling block is open, native regions sanitize too (the debug word is
    process-wide, so a `sanitize(False)` block inside does not turn theirs off).
    """
    if not isinstance(enabled, bool):
        raise EngineError(f"sanitize takes True or False, got {enabled!r}")
    with SANITIZE.scope(enabled, update_sanitize_bit):
        yield


def update_sanitize_bit() -> None:
    """Set the debug word's sanitize bit from the switch (native regions read it per call)."""
    DEBUG.set_bit(DEBUG_SANITIZE, SANITIZE.process_wide(_sanitize_set))


update_sanitize_bit()  # $SIMACCEL_SANITIZE as it is when simaccel is first imported
