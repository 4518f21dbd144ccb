"""The debug word native regions read on every call: which debugging tools are on now.

Where it sits: beside the route flag of simaccel.runtime. A native region (simaccel.native,
region.h) asks once, through the global function `names.NATIVE_DEBUG_FUNC`, for the address
of this int32 and reads it on every call: bit `SANITIZE` on makes it check each call as the
sanitizer does (simaccel.debug.sanitize), bit `TRACE` on makes it record CUDA events for the
timeline trace (simaccel.debug.trace). Zero, the default, costs one load per call.
"""

from __future__ import annotations

import ctypes
import threading

SANITIZE = 1
TRACE = 2

_WORD = ctypes.c_int32(0)
_lock = threading.Lock()


def address() -> int:
    """The address of the debug word (handed to native regions)."""
    return ctypes.addressof(_WORD)


def value() -> int:
    return _WORD.value


def set_bit(bit: int, on: bool) -> None:
    with _lock:
        _WORD.value = (_WORD.value | bit) if on else (_WORD.value & ~bit)
