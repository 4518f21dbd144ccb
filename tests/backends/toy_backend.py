"""A second BYOC backend, built for the tests: "toy" offloads single elementwise ops and matmuls.

It shares nothing with simaccel. `partition_for_toy` follows TVM's `partition_for_<x>`
convention (patterns fused with annotate_codegen=True: one region per matched op), and its
codegen, ``relax.ext.toy``, compiles each region with TVM's own lowering of the op (LegalizeOps
to a TIR function, built for the CPU with LLVM) under the region's symbol, so the library
calls it as an external function with DLTensors, as any BYOC runtime module is called.

$TOY_FAULT=add plants a defect: its add computes a - b, which a conformance run or a fuzz
campaign against TVM alone must find.
"""

from __future__ import annotations

import os

import tvm
import tvm_ffi
from tvm import relax, tirx  # noqa: F401 - tvm.tirx.PrimFunc
from tvm.relax.dpl import is_op, wildcard

OPS = ("relax.nn.relu", "relax.add", "relax.multiply", "relax.matmul", "relax.sigmoid")


def partition_for_toy(mod: tvm.IRModule) -> tvm.IRModule:
    arity = {"relax.nn.relu": 1, "relax.sigmoid": 1}
    patterns = [(f"toy.{op.split('.')[-1]}", is_op(op)(*[wildcard() for _ in range(arity.get(op, 2))])) for op in OPS]
    return relax.transform.FuseOpsByPattern(patterns, bind_constants=False, annotate_codegen=True)(mod)


def _composite(region: relax.Function) -> relax.Function:
    for block in region.body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.Function):
                return binding.value
    raise ValueError("toy codegen: a region with no composite function")


def _lowered(symbol: str, composite: relax.Function) -> tvm.tirx.PrimFunc:
    """The composite's one op as a TIR function of (inputs..., output), named `symbol`."""
    params = [relax.Var(p.name, p.ty) for p in composite.params]
    call = composite.body.blocks[0].bindings[0].value if composite.body.blocks else composite.body.body
    op = call.op
    if os.environ.get("TOY_FAULT") == "add" and op.name == "relax.add":
        op = tvm.ir.Op.get("relax.subtract")
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        out = bb.emit(relax.Call(op, params, call.attrs))
        bb.emit_func_output(out)
    lowered = relax.transform.LegalizeOps()(bb.get())
    prim = [f for f in lowered.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    if len(prim) != 1:
        raise ValueError(f"toy codegen: {op.name} lowers to {len(prim)} TIR functions")
    return prim[0].with_attr("global_symbol", symbol)


@tvm_ffi.register_global_func("relax.ext.toy", override=True)
def toy_codegen(functions, options=None, constant_names=None):
    modules = []
    for region in functions:
        symbol = str(region.attrs["global_symbol"])
        modules.append(tvm.tirx.build(tvm.IRModule({symbol: _lowered(symbol, _composite(region))}), target="llvm"))
    return modules
