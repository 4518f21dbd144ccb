"""The debug word native regions read on every call: which debugging tools are on now.

Where it sits: a debugging tool's view of `simaccel.switches.DEBUG` (the word) and of the
numbers in simaccel.names (its bits, the sanitizer's poison and canary). A native region
(simaccel.native, region.h) asks once, through the global function `names.NATIVE_DEBUG_FUNC`,
for the address of this int32 and reads it on every call: bit `SANITIZE` on makes it check
each call as the sanitizer does (simaccel.debug.sanitize), bit `TRACE` on makes it record CUDA
events for the timeline trace (simaccel.debug.trace). Zero, the default, costs one load per call.
"""

from __future__ import annotations

from ..names import BYTE_POISON, CANARY, FLOAT_POISON, cpp_numbers
from ..names import DEBUG_SANITIZE as SANITIZE
from ..names import DEBUG_TRACE as TRACE
from ..switches import DEBUG

__all__ = ["BYTE_POISON", "CANARY", "FLOAT_POISON", "SANITIZE", "TRACE", "address", "cpp_numbers", "set_bit", "value"]

address = DEBUG.address  # the word's address (handed to native regions)
value = DEBUG.value
set_bit = DEBUG.set_bit
