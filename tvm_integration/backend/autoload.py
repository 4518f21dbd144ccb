"""Registration with TVM: the `tvm.backends` entry point calls `_autoload()` on `import tvm`.

It registers two global functions, both cheap to register and resolved lazily:

* ``relax.ext.simaccel``      - the BYOC codegen, called by `relax.transform.RunCodegen`;
* ``simaccel.runtime.invoke`` - the runtime entry the compiled forwarder calls.

It imports neither `tvm.relax` (absent in a runtime-only TVM) nor Numba, so a plain
`import tvm` stays fast, and a library exported with simaccel regions runs in a fresh
process that imports only `tvm`. It also registers simaccel's exceptions with tvm-ffi so an
error raised inside a region reaches the caller as the same SimAccelError subclass.
"""

from __future__ import annotations

import tvm_ffi

from ... import errors

CODEGEN_FUNC = "relax.ext.simaccel"
INVOKE_FUNC = "simaccel.runtime.invoke"

_registered = False


def _codegen(functions, options, constant_names):
    from .codegen import codegen

    return codegen(functions, options, constant_names)


def _invoke(key, program_json, *tensors):
    from .bridge import invoke

    invoke(key, program_json, *tensors)


def register() -> None:
    """Register simaccel's codegen, runtime entry and error kinds with tvm-ffi (idempotent)."""
    global _registered
    if _registered:
        return
    tvm_ffi.register_global_func(CODEGEN_FUNC, _codegen, override=True)
    tvm_ffi.register_global_func(INVOKE_FUNC, _invoke, override=True)
    for name in errors.__all__:
        tvm_ffi.register_error(name, getattr(errors, name))
    _registered = True


def _autoload() -> None:
    register()
