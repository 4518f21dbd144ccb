"""Registration with TVM: the `tvm.backends` entry point calls `_autoload()` on `import tvm`.

It registers these global functions (their names: simaccel.names), cheap to register and
resolved lazily:

* ``relax.ext.simaccel``      - the BYOC codegen, called by `relax.transform.RunCodegen`;
* ``simaccel.runtime.invoke`` - the runtime entry the compiled forwarder calls;
* ``simaccel.runtime.native_region`` / ``native_route`` / ``native_debug`` - asked once by each
  native region (simaccel.native) for its ledger counters, the flag that routes it to Python
  and the word of debugging tools on (simaccel.debug.flags);
* ``simaccel.runtime.native_trace`` - called by a native region after a traced call with its
  launches' timings as JSON (simaccel.debug.native_events).

It imports neither `tvm.relax` (absent in a runtime-only TVM) nor Numba, so a plain
`import tvm` stays fast, and a library exported with simaccel regions runs in a fresh
process that imports only `tvm`. It also registers simaccel's exceptions with tvm-ffi so an
error raised inside a region reaches the caller as the same SimAccelError subclass.
"""

from __future__ import annotations

import tvm_ffi

from ... import errors
from ...names import (CODEGEN_FUNC, INVOKE_FUNC, NATIVE_DEBUG_FUNC, NATIVE_REGION_FUNC, NATIVE_ROUTE_FUNC,
                      NATIVE_TRACE_FUNC)

_registered = False


def _codegen(functions, options, constant_names):
    from .codegen import codegen

    return codegen(functions, options, constant_names)


def _invoke(key, program_json, *tensors):
    from .bridge import invoke

    invoke(key, program_json, *tensors)


def _native_region(key, program_json):
    from .bridge import native_region

    return native_region(key, program_json)


def _native_route():
    from ...runtime import get_runtime

    return get_runtime().route_flag()


def _native_debug():
    from ...debug import flags

    return flags.address()


def _native_trace(json_text):
    from ...debug import native_events

    native_events.record(json_text)


def register() -> None:
    """Register simaccel's codegen, runtime entry and error kinds with tvm-ffi (idempotent)."""
    global _registered
    if _registered:
        return
    tvm_ffi.register_global_func(CODEGEN_FUNC, _codegen, override=True)
    tvm_ffi.register_global_func(INVOKE_FUNC, _invoke, override=True)
    tvm_ffi.register_global_func(NATIVE_REGION_FUNC, _native_region, override=True)
    tvm_ffi.register_global_func(NATIVE_ROUTE_FUNC, _native_route, override=True)
    tvm_ffi.register_global_func(NATIVE_DEBUG_FUNC, _native_debug, override=True)
    tvm_ffi.register_global_func(NATIVE_TRACE_FUNC, _native_trace, override=True)
    for name in errors.__all__:
        tvm_ffi.register_error(name, getattr(errors, name))
    _registered = True


def _autoload() -> None:
    register()
