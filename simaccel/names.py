"""Names and numbers that simaccel's Python and its C++ both spell: each is written here once.

Where it sits: below everything else; it imports only simaccel.errors. The TVM registration
(simaccel.tvm_integration.backend.autoload) registers the global functions under these
names, the region functions (backend.forwarder) call them, and the native region source
(simaccel.native.source) writes them into the generated C++ as constants
(`cpp_constants`) that region.h uses, so the C++ holds no copy of its own. The error kinds
the C++ raises are the class names of simaccel.errors, written in the same way.
"""

from __future__ import annotations

from . import errors

PACKAGE = "simaccel"
INSTALL = "pip install simaccel"  # or `pip install .` in a checkout of the project
AUTOLOAD_ENV = "TVM_DEVICE_BACKEND_AUTOLOAD"  # TVM's switch for entry-point backends; "0" turns them off

# Global functions (tvm-ffi registry).
CODEGEN_FUNC = "relax.ext.simaccel"  # the BYOC codegen, called by relax.transform.RunCodegen
INVOKE_FUNC = "simaccel.runtime.invoke"  # a region's tensors to the Python runtime
NATIVE_REGION_FUNC = "simaccel.runtime.native_region"  # a native region's ledger counters
NATIVE_ROUTE_FUNC = "simaccel.runtime.native_route"  # the flag that routes native regions to Python
NATIVE_DEBUG_FUNC = "simaccel.runtime.native_debug"  # the word of debugging tools on (simaccel.debug.flags)
NATIVE_TRACE_FUNC = "simaccel.runtime.native_trace"  # a traced native call's launches, as JSON (simaccel.debug.native_events)

# Environment variables read by the C++.
CUDA_DRIVER_ENV = "SIMACCEL_CUDA_DRIVER"  # the CUDA driver a native region opens (tests: a stand-in)
NATIVE_LOG_ENV = "SIMACCEL_NATIVE_LOG"  # "1": a native library says which kernel images it loaded

# The oldest NVIDIA driver a library must run on; its PTX is no newer than this driver JITs
# (simaccel.aot.MAX_PTX_VERSION), and a region whose PTX it refuses says so.
MIN_DRIVER = "580 (CUDA 13.0)"

# The debug word's bits (simaccel.switches.DEBUG, read by native regions on every call): the
# sanitize bit makes a call check itself as the sanitizer does (simaccel.debug.sanitize), the
# trace bit makes it record CUDA events for the timeline trace (simaccel.debug.trace).
DEBUG_SANITIZE = 1
DEBUG_TRACE = 2

# The sanitizer's poison, as native regions write it (region.h): the same patterns as the
# Python engines' (simaccel.debug.sanitizer). Floats: a signalling NaN with a payload (GPUs and
# numpy make quiet NaNs, so no written element matches); every other dtype: bytes of
# BYTE_POISON[0], and where any bit pattern is a value (not bool) the op runs again over
# BYTE_POISON[1] and only elements that kept both count as unwritten.
FLOAT_POISON = {"float16": 0x7D5A, "bfloat16": 0x7FA5, "float32": 0x7FA5A5A5, "float64": 0x7FF5A5A5A5A5A5A5}
BYTE_POISON = (0xA5, 0x5A)
# The bytes of the guard bands around native regions' sanitized scratch.
CANARY = 0xCB

# The constants of the generated C++: (C++ name, value).
CPP_NAMES = (
    ("kInvokeFunc", INVOKE_FUNC),
    ("kNativeRegionFunc", NATIVE_REGION_FUNC),
    ("kNativeRouteFunc", NATIVE_ROUTE_FUNC),
    ("kNativeDebugFunc", NATIVE_DEBUG_FUNC),
    ("kNativeTraceFunc", NATIVE_TRACE_FUNC),
    ("kCudaDriverEnv", CUDA_DRIVER_ENV),
    ("kNativeLogEnv", NATIVE_LOG_ENV),
    ("kMinDriver", MIN_DRIVER),
)


def error_kind_constant(kind: str) -> str:
    """The C++ name of an error kind: "DeviceError" -> "kDeviceError"."""
    return f"k{kind}"


def sanitizer_kind_constant(kind: str) -> str:
    """The C++ name of a sanitizer finding's kind: "out_of_bounds" -> "kSanitizeOutOfBounds"."""
    return "kSanitize" + "".join(part.capitalize() for part in kind.split("_"))


def cpp_numbers() -> list[tuple[str, str, int]]:
    """(C++ name, type, value) of the debug word's bits and the sanitizer's patterns."""
    f64 = FLOAT_POISON["float64"]
    return [("kDebugSanitize", "int32_t", DEBUG_SANITIZE), ("kDebugTrace", "int32_t", DEBUG_TRACE),
            ("kPoisonFloat16", "uint16_t", FLOAT_POISON["float16"]),
            ("kPoisonBfloat16", "uint16_t", FLOAT_POISON["bfloat16"]), ("kPoisonFloat32", "uint32_t", FLOAT_POISON["float32"]),
            ("kPoisonFloat64Low", "uint32_t", f64 & 0xFFFFFFFF), ("kPoisonFloat64High", "uint32_t", f64 >> 32),
            ("kPoisonByte", "uint8_t", BYTE_POISON[0]), ("kPoisonByteAgain", "uint8_t", BYTE_POISON[1]),
            ("kCanary", "uint8_t", CANARY)]


def cpp_constants() -> list[str]:
    """C++ lines defining every shared name, every error kind (simaccel.errors.__all__), the
    sanitizer's kinds (errors.SanitizerError.KINDS) and the debug word's bits and patterns."""
    pairs = [*CPP_NAMES, *((error_kind_constant(kind), kind) for kind in errors.__all__),
             *((sanitizer_kind_constant(kind), kind) for kind in errors.SanitizerError.KINDS)]
    return [f'constexpr const char {name}[] = "{value}";' for name, value in pairs] + [
        f"constexpr const {ctype} {name} = {value:#x};" for name, ctype, value in cpp_numbers()]
