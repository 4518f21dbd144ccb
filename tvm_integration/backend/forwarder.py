"""The region functions: the piece of each offloaded region that lives inside TVM's library.

For every region symbol the codegen asks for one host function, written in TVM's TIR and
compiled by TVM's own LLVM backend. It takes the tensors TVM passes (inputs, then DPS
outputs) and forwards them, as `DLTensor*`, to the global function
``simaccel.runtime.invoke`` together with the region key and its Program (JSON, a string
constant in the library).

An LLVM module is both runnable in-process and exportable, like TVM's own host code, so an
executable with simaccel regions needs no C++ compiler until it is exported and no
just-in-time compile when a VM is created (which TVM does without a lock: threads that create
their first VMs at once would race in it). Where the simaccel runtime is not installed, the
call fails with TVM's "Cannot find function simaccel.runtime.invoke".
"""

from __future__ import annotations

from ...names import INVOKE_FUNC

HOST_TARGET = "llvm"


def region_function(symbol: str, key: str, program_json: str, arity: int):
    """The TIR PrimFunc `symbol(t0, ..., tN-1)` that calls the runtime with its tensors."""
    import tvm
    from tvm import tirx

    handles = [tirx.Var(f"t{i}", "handle") for i in range(arity)]
    call = tirx.call_packed(INVOKE_FUNC, tvm.ir.StringImm(key), tvm.ir.StringImm(program_json), *handles)
    return tirx.PrimFunc(handles, tirx.Evaluate(call)).with_attr("global_symbol", symbol)


def forwarder_module(regions: list[tuple[str, str, str, int]], host=HOST_TARGET):
    """One LLVM runtime module exporting a function per region: (symbol, key, program_json, arity)."""
    import tvm

    functions = {symbol: region_function(symbol, key, text, arity) for symbol, key, text, arity in regions}
    return tvm.tirx.build(tvm.IRModule(functions), target=tvm.target.Target(host))
