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

# The sanitizer's poison: the bits every op output and intermediate holds before its op runs;
# an element that still holds them afterwards was never written. Per element size, a NaN with
# a payload no arithmetic produces (a signalling NaN: GPUs and numpy make quiet ones), so a
# written float never matches; an integer tensor could hold the value, which no op's output
# here is. 8-byte elements repeat the 4-byte word (0x7ff4a5a5_7ff4a5a5 is a float64 NaN).
POISON = {8: 0x7FF4A5A57FF4A5A5, 4: 0x7FA5A5A5, 2: 0x7D5A, 1: 0xA5}
POISON_BFLOAT16 = 0x7FA5  # bfloat16's 2 bytes: float32's high half
# The bytes of the guard bands around native regions' sanitized scratch (region.h).
CANARY = 0xCB


def poison(dtype) -> int:
    """The poison bits of one element of `dtype` (a numpy dtype or its name; "bfloat16" too)."""
    if str(dtype) == "bfloat16":
        return POISON_BFLOAT16
    import numpy as np

    return POISON[np.dtype(dtype).itemsize]


def cpp_numbers() -> list[tuple[str, str, int]]:
    """(C++ name, type, value) of the numbers above that native regions use (simaccel.names.cpp_constants)."""
    return [("kDebugSanitize", "int32_t", SANITIZE), ("kDebugTrace", "int32_t", TRACE),
            ("kPoison64", "uint32_t", POISON[8] & 0xFFFFFFFF), ("kPoison32", "uint32_t", POISON[4]),
            ("kPoison16", "uint16_t", POISON[2]), ("kPoisonBfloat16", "uint16_t", POISON_BFLOAT16),
            ("kPoison8", "uint8_t", POISON[1]), ("kCanary", "uint8_t", CANARY)]

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
