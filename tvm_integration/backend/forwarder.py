"""The region functions: the piece of each offloaded region that lives inside TVM's library.

For every region symbol the codegen asks for one host function, written in TVM's TIR and
compiled by TVM's own LLVM backend. It takes the tensors TVM passes (inputs, then DPS
outputs) and forwards them, as `DLTensor*`, to the global function
``simaccel.runtime.invoke`` together with the region key, its Program (JSON, a string
constant in the library) and the build's advice for GPU calls (`gpu_hint`, empty or why
this region is not native).

An LLVM module is both runnable in-process and exportable, like TVM's own host code, so an
executable with simaccel regions needs no C++ compiler until it is exported and no
just-in-time compile when a VM is created (which TVM does without a lock: threads that create
their first VMs at once would race in it). Where the simaccel runtime is not registered
(simaccel not installed, or TVM's backend autoload off), the function first looks the
runtime up itself and raises an error that says which package to install and how.
"""

from __future__ import annotations

from ...names import AUTOLOAD_ENV, INSTALL, INVOKE_FUNC, PACKAGE

HOST_TARGET = "llvm"
# Fields of TVM's TIR struct access (tvm_struct_get/set on a DLTensor): data pointer at
# offset 0, device type and id (two int32) at offset 8.
_DATA, _DEVICE_ID, _DEVICE_TYPE = 1, 9, 10


def missing_runtime_message(symbol: str) -> str:
    return (f"region {symbol}: {INVOKE_FUNC} is not registered in this process. The regions of this library run on "
            f"the {PACKAGE} package's runtime: install it where the library runs ({INSTALL}) and leave TVM's backend "
            f"autoload on ({AUTOLOAD_ENV} unset or 1), or import simaccel.tvm_integration before running the model")


def _runtime_check(symbol: str) -> list:
    """TIR statements that raise `missing_runtime_message` unless INVOKE_FUNC is registered.

    They call TVMFFIFunctionGetGlobal(&name, &found), which takes the name as a
    TVMFFIByteArray {const char* data; size_t size}: TIR writes one into the first 16 bytes
    of a stack DLTensor (its data pointer, then device type = size and device id = 0, the
    two halves of a little-endian size_t). `found` comes back null where nothing is registered.
    Per call this costs one registry look-up, next to a call into Python.
    """
    import tvm
    from tvm import tirx

    name, found = tirx.Var("runtime_name", "handle"), tirx.Var("runtime_found", "handle")
    status = tirx.Var("runtime_status", "int32")
    function = tirx.tvm_struct_get(found, 0, _DATA, "handle")
    return [
        tirx.Bind(name, tirx.tvm_stack_alloca("array", 1)),
        tirx.Bind(found, tirx.tvm_stack_alloca("array", 1)),
        tirx.Evaluate(tirx.tvm_struct_set(name, 0, _DATA, tvm.ir.StringImm(INVOKE_FUNC))),
        tirx.Evaluate(tirx.tvm_struct_set(name, 0, _DEVICE_TYPE, tirx.IntImm("int32", len(INVOKE_FUNC.encode())))),
        tirx.Evaluate(tirx.tvm_struct_set(name, 0, _DEVICE_ID, tirx.IntImm("int32", 0))),
        tirx.Bind(status, tirx.call_extern("int32", "TVMFFIFunctionGetGlobal", name, found)),
        tirx.AssertStmt(tirx.And(status == 0, tirx.Not(tirx.isnullptr(function))), tvm.ir.StringImm("RuntimeError"),
                        [tvm.ir.StringImm(missing_runtime_message(symbol))]),
        tirx.Evaluate(tirx.call_extern("int32", "TVMFFIObjectDecRef", function)),
    ]


def region_function(symbol: str, key: str, program_json: str, arity: int, gpu_hint: str = ""):
    """The TIR PrimFunc `symbol(t0, ..., tN-1)` that calls the runtime with its tensors."""
    import tvm
    from tvm import tirx

    handles = [tirx.Var(f"t{i}", "handle") for i in range(arity)]
    strings = [tvm.ir.StringImm(s) for s in (key, program_json, gpu_hint)]
    call = tirx.Evaluate(tirx.call_packed(INVOKE_FUNC, *strings, *handles))
    return tirx.PrimFunc(handles, tirx.SeqStmt([*_runtime_check(symbol), call])).with_attr("global_symbol", symbol)


def forwarder_module(regions: list[tuple[str, str, str, int]], host=HOST_TARGET, gpu_hint: str = ""):
    """One LLVM runtime module exporting a function per region: (symbol, key, program_json, arity)."""
    import tvm

    functions = {symbol: region_function(symbol, key, text, arity, gpu_hint) for symbol, key, text, arity in regions}
    return tvm.tirx.build(tvm.IRModule(functions), target=tvm.target.Target(host))
