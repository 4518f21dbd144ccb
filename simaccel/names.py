"""Names that simaccel's Python and its C++ both spell: each is written here once.

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


def cpp_constants() -> list[str]:
    """C++ lines defining every shared name, every error kind (simaccel.errors.__all__), the
    sanitizer's kinds (errors.SanitizerError.KINDS) and the debug word's bits and patterns
    (simaccel.debug.flags)."""
    from .debug import flags  # only when C++ is written: flags sits above this module

    pairs = [*CPP_NAMES, *((error_kind_constant(kind), kind) for kind in errors.__all__),
             *((sanitizer_kind_constant(kind), kind) for kind in errors.SanitizerError.KINDS)]
    return [f'constexpr const char {name}[] = "{value}";' for name, value in pairs] + [
        f"constexpr const {ctype} {name} = {value:#x};" for name, ctype, value in flags.cpp_numbers()]
