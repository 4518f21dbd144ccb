"""Regions that fit the scratchpad: splitting merged regions to the profile's region size.

A device profile may say how many bytes one region's tensors (inputs, outputs,
intermediates) can take together (`max_region_bytes`, the accelerator's scratchpad).
MergeCompositeFunctions knows no such limit, so after merging, a region that needs more is
cut, in its own execution order, into consecutive parts that each fit: a part's inputs are
the region's inputs or earlier parts' results, and its outputs whatever later parts or the
caller read. Consecutive parts of a topological order cannot form a cycle. One op too large
on its own never gets here: the pattern check already kept it on TVM.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..rewrites import tensor_info
from .patterns import tensor_bytes


def nbytes(var) -> int:
    shape, dtype = tensor_info(var)
    return tensor_bytes(shape, dtype) if shape is not None and dtype else 0


def region_bytes(region: relax.Function) -> int:
    """Bytes of every tensor the region touches: its parameters and every op's result."""
    _, calls, _ = _parse(region)
    return sum(nbytes(p) for p in region.params) + sum(nbytes(var) for var, _, _ in calls)


def split_regions(mod: tvm.IRModule, limit: int | None) -> tuple[tvm.IRModule, list[str]]:
    """`mod` with every region over `limit` bytes cut into parts that fit, and a line per cut."""
    if limit is None:
        return mod, []
    notes = []
    replacements = {}
    builder = relax.BlockBuilder(mod)
    for gvar, func in list(mod.functions.items()):
        if not (isinstance(func, relax.Function) and func.attrs and func.attrs.get("Codegen") == "simaccel"):
            continue
        total = region_bytes(func)
        if total <= limit:
            continue
        functions, calls, outputs = _parse(func)
        parts = _cut(calls, outputs, limit)
        if len(parts) < 2:
            continue
        new = []
        for k, part in enumerate(parts):
            function = relax.utils.copy_with_new_vars(_part_function(func, functions, part))
            part_gvar = builder.add_func(function, f"{gvar.name_hint}_part{k}")
            builder.update_func(part_gvar, function.with_attr("global_symbol", part_gvar.name_hint))
            new.append((part_gvar, part))
        replacements[gvar] = (func, outputs, new)
        notes.append(f"{gvar.name_hint} needs {total} bytes: split into {len(parts)} regions of at most {limit} bytes")
    if not replacements:
        return mod, []
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and not (func.attrs and func.attrs.get("Codegen")):
            builder.update_func(gvar, _ReplaceCalls(replacements, builder.get()).visit_expr(func))
    done = builder.get()
    kept = {gv: f for gv, f in done.functions.items() if gv not in replacements}
    return tvm.IRModule(kept, attrs=done.attrs, global_infos=done.global_infos), notes


def _parse(region: relax.Function):
    """(local functions by var, calls as (var, callee var, args) in order, output vars).

    A binding of one var to another (``gv = lv``, which MergeCompositeFunctions leaves at the
    end of a region) is followed to the var it names.
    """
    functions, calls, aliases = {}, [], {}

    def resolve(expr):
        while isinstance(expr, relax.Var) and expr in aliases:
            expr = aliases[expr]
        return expr

    for block in region.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                functions[binding.var] = value
            elif isinstance(value, relax.Call):
                calls.append((binding.var, value.op, [resolve(a) for a in value.args]))
            elif isinstance(value, relax.Var):
                aliases[binding.var] = value
    body = region.body.body
    outputs = [resolve(f) for f in (body.fields if isinstance(body, relax.Tuple) else [body])]
    return functions, calls, outputs


def _cut(calls, outputs, limit: int) -> list[dict]:
    """Consecutive groups of `calls` within `limit` bytes: each {"calls", "inputs", "outputs"}."""
    groups, current, seen, size = [], [], set(), 0
    for call in calls:
        var, _, args = call
        new = [a for a in args if isinstance(a, relax.Var) and a not in seen] + [var]
        extra = sum(nbytes(v) for v in new)
        if current and size + extra > limit:
            groups.append(current)
            current, seen, size = [], set(), 0
            new = [a for a in args if isinstance(a, relax.Var)] + [var]
            extra = sum(nbytes(v) for v in new)
        current.append(call)
        seen.update(new)
        size += extra
    groups.append(current)
    parts = []
    for k, group in enumerate(groups):
        defined = [var for var, _, _ in group]
        inputs = []
        for _, _, args in group:
            for a in args:
                if isinstance(a, relax.Var) and a not in defined and a not in inputs:
                    inputs.append(a)
        later = {a for g in groups[k + 1:] for _, _, args in g for a in args} | set(outputs)
        parts.append({"calls": group, "inputs": inputs, "outputs": [v for v in defined if v in later]})
    return parts


def _part_function(region: relax.Function, functions: dict, part: dict) -> relax.Function:
    bindings = []
    used = []
    for _, callee, _ in part["calls"]:
        if callee in functions and callee not in used:
            used.append(callee)
            bindings.append(relax.VarBinding(callee, functions[callee]))
    bindings += [relax.VarBinding(var, relax.Call(callee, args)) for var, callee, args in part["calls"]]
    outs = part["outputs"]
    result = outs[0] if len(outs) == 1 else relax.Tuple(outs)
    params = list(part["inputs"])
    body = relax.SeqExpr([relax.BindingBlock(bindings)], result)
    ret = outs[0].ty if len(outs) == 1 else relax.TupleType([v.ty for v in outs])
    return relax.Function(params, body, ret, attrs=region.attrs)


@relax.expr_functor.mutator
class _ReplaceCalls(relax.PyExprMutator):
    """Replaces each call of a split region by calls of its parts, in order."""

    def __init__(self, replacements: dict, mod: tvm.IRModule):
        super().__init__(mod)
        self.replacements = replacements

    def visit_call_(self, call):
        call = super().visit_call_(call)
        entry = self.replacements.get(call.op) if isinstance(call.op, tvm.ir.GlobalVar) else None
        if entry is None:
            return call
        region, outputs, parts = entry
        env = dict(zip(region.params, call.args))
        for part_gvar, part in parts:
            result = self.builder_.emit(relax.Call(part_gvar, [env[v] for v in part["inputs"]]))
            if len(part["outputs"]) == 1:
                env[part["outputs"][0]] = result
            else:
                for i, var in enumerate(part["outputs"]):
                    env[var] = self.builder_.emit(relax.TupleGetItem(result, i))
        body = region.body.body
        return relax.Tuple([env[v] for v in outputs]) if isinstance(body, relax.Tuple) else env[outputs[0]]
