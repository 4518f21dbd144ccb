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

# The sanitizer's poison, as native regions write it (region.h): the same patterns as the
# Python engines' (simaccel.debug.sanitizer). Floats: a signalling NaN with a payload (GPUs and
# numpy make quiet NaNs, so no written element matches); every other dtype: bytes of
# BYTE_POISON[0], and where any bit pattern is a value (not bool) the op runs again over
# BYTE_POISON[1] and only elements that kept both count as unwritten.
FLOAT_POISON = {"float16": 0x7D5A, "float32": 0x7FA5A5A5, "float64": 0x7FF5A5A5A5A5A5A5}
BYTE_POISON = (0xA5, 0x5A)
# The bytes of the guard bands around native regions' sanitized scratch.
CANARY = 0xCB


def cpp_numbers() -> list[tuple[str, str, int]]:
    """(C++ name, type, value) of the numbers above that native regions use (simaccel.names.cpp_constants)."""
    f64 = FLOAT_POISON["float64"]
    return [("kDebugSanitize", "int32_t", SANITIZE), ("kDebugTrace", "int32_t", TRACE),
            ("kPoisonFloat16", "uint16_t", FLOAT_POISON["float16"]), ("kPoisonFloat32", "uint32_t", FLOAT_POISON["float32"]),
            ("kPoisonFloat64Low", "uint32_t", f64 & 0xFFFFFFFF), ("kPoisonFloat64High", "uint32_t", f64 >> 32),
            ("kPoisonByte", "uint8_t", BYTE_POISON[0]), ("kPoisonByteAgain", "uint8_t", BYTE_POISON[1]),
            ("kCanary", "uint8_t", CANARY)]


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
