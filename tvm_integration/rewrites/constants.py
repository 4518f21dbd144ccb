"""Mask expressions of constants, computed once at build time, as TVM alone does.

Where it sits: an inference rewrite (`prepare_for_inference`), below the backend. A causal
mask in a model with static shapes reads no input: ``torch.ones(T, T).tril()`` exports as
``arange``, ``expand_dims``, ``subtract``, ``less_equal``, ``full`` and ``logical_and`` of
constants, and ``generate_square_subsequent_mask`` as ``full`` and ``triu``. TVM alone
legalizes them and folds every call of constants (its pipeline's FoldConstant); a region
that computed them would do per call what TVM did once. So each such call is evaluated here
by TVM's own FoldConstant (the same TIR TVM alone would have folded, run on the CPU) and
replaced by its constant; what reads the mask then offloads (``where``, ``add``).

Only mask arithmetic is folded: a call whose arguments are all constants (or shapes and
numbers) and that creates a tensor (arange, full, zeros, ones, ..._like), is tril, triu or
where, has an integer or bool input or result, or reads only tensors folded here and 0-d
constants (swin's shifted-window mask: zeros, slice_scatter, reshapes, subtract, compare). Float arithmetic on weights
(``permute_dims(W)``) stays as it is, as the patterns expect it. The calls TVM 0.27 cannot
fold are computed here in numpy: a ``cumsum`` of bools that stays bool (transformers' mask code
through torch's frontend), as the running count, nonzero as True, and ``equal`` / ``not_equal``
of two bool tensors.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .types import tensor_info

CREATION = {"relax.arange", "relax.full", "relax.zeros", "relax.ones", "relax.full_like", "relax.zeros_like",
            "relax.ones_like", "relax.tril", "relax.triu", "relax.where"}


# Calls of bools that TVM 0.27's FoldConstant leaves unevaluated (transformers' mask code: a
# comparison of two bool masks), computed in numpy.
BOOL_COMPARISONS = {"relax.equal": np.equal, "relax.not_equal": np.not_equal}


def fold_constant_masks(func: relax.Function) -> tuple[relax.Function, int]:
    """`func` with every foldable call of constants (above) replaced by its value; the count."""
    if not isinstance(func.body, relax.SeqExpr):
        return func, 0
    known: dict = {}  # var -> the constant it is bound to
    derived: set = set()  # vars folded here: computed from shapes and numbers, not weights
    count = 0
    blocks = []
    for block in func.body.blocks:
        bindings = []
        for binding in block.bindings:
            value = binding.value
            if isinstance(binding, relax.VarBinding) and isinstance(value, tvm.ir.GenericConst):
                known[binding.var] = value
            elif isinstance(binding, relax.VarBinding) and _foldable(value, known, derived):
                folded = _evaluate(relax.Call(value.op, [_substitute(a, known) for a in value.args], value.attrs,
                                              value.ty_args))
                if folded is not None:
                    known[binding.var] = folded
                    derived.add(binding.var)
                    binding = relax.VarBinding(binding.var, folded)
                    count += 1
            bindings.append(binding)
        blocks.append(relax.DataflowBlock(bindings) if isinstance(block, relax.DataflowBlock) else relax.BindingBlock(bindings))
    if not count:
        return func, 0
    body = relax.SeqExpr(blocks, func.body.body)
    return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs), count


def _substitute(arg, known):
    """`arg` with each var folded here replaced by its constant, inside tuples too (``concat``'s)."""
    if isinstance(arg, relax.Tuple):
        return relax.Tuple([_substitute(f, known) for f in arg.fields])
    return known.get(arg, arg)


def _constant_arg(arg, known) -> bool:
    from tvm import tirx

    if isinstance(arg, relax.Var):
        return arg in known
    values = tuple(getattr(relax, name) for name in ("DataTypeImm", "StringImm") if hasattr(relax, name))
    return isinstance(arg, (tvm.ir.GenericConst, relax.ShapeExpr, tirx.IntImm, tirx.FloatImm, *values)) or (
        isinstance(arg, relax.Tuple) and all(_constant_arg(f, known) for f in arg.fields))


def _foldable(value, known, derived) -> bool:
    if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
        return False
    if not value.op.name.startswith("relax.") or not all(_constant_arg(a, known) for a in value.args):
        return False
    if _sub_byte_float(value) or any(_sub_byte_float(known[a]) for a in value.args if a in known):
        return False  # TVM's FoldConstant crashes the process (not an exception) on float6/float4 data
    if value.op.name in CREATION:
        return True
    tensors = [a for a in value.args if isinstance(a, relax.Var) or isinstance(a, tvm.ir.GenericConst)]
    if all((isinstance(a, relax.Var) and a in derived) or _is_scalar(known.get(a, a)) for a in tensors):
        return True  # computed from folded masks and scalars only (swin's window mask: slice_scatter, ...)
    dtypes = [tensor_info(value)[1]] + [tensor_info(known[a])[1] for a in value.args if a in known]
    dtypes += [str(a.ty.dtype) for a in value.args if isinstance(a, tvm.ir.GenericConst)]
    return any(d is not None and not d.startswith(("float", "bfloat")) for d in dtypes)


def _sub_byte_float(expr) -> bool:
    """Whether `expr` is a tensor of a float type narrower than a byte (float6_*, float4_*)."""
    dtype = tensor_info(expr)[1]
    return dtype is not None and dtype.startswith(("float6_", "float4_"))


def _is_scalar(expr) -> bool:
    return isinstance(expr, tvm.ir.GenericConst) and expr.value.numpy().ndim == 0


def _evaluate(call: relax.Call):
    """The constant TVM's FoldConstant makes of `call` (all of whose arguments are constants), or None."""
    if all(tensor_info(a)[1] == "bool" for a in call.args if isinstance(a, tvm.ir.GenericConst)):
        if call.op.name == "relax.cumsum":
            return _bool_cumsum(call)
        if call.op.name in BOOL_COMPARISONS:
            lhs, rhs = (a.value.numpy() for a in call.args)
            return relax.const(BOOL_COMPARISONS[call.op.name](lhs, rhs), "bool")
    bb = relax.BlockBuilder()
    try:
        with bb.function("fold", []):
            with bb.dataflow():
                out = bb.emit_output(call)
            bb.emit_func_output(out)
        mod = relax.transform.LegalizeOps()(bb.get())  # TVM's pipeline: legalize, then fold
        folded = relax.transform.FoldConstant()(mod)["fold"]
    except Exception:  # an op FoldConstant cannot evaluate: leave the call as it was
        return None
    for block in folded.body.blocks:
        for binding in block.bindings:
            if binding.var.same_as(folded.body.body) or binding is block.bindings[-1]:
                return binding.value if isinstance(binding.value, tvm.ir.GenericConst) else None
    value = folded.body.body
    return value if isinstance(value, tvm.ir.GenericConst) else None


def _bool_cumsum(call: relax.Call):
    """A running sum of bools that stays bool (torch's frontend writes ``mask.cumsum(-1)`` so, its
    dtype left to the input's), which TVM 0.27 cannot legalize: the running count, nonzero as
    True (a running OR), the one value a bool result can hold of it."""
    attrs = call.attrs
    if attrs.dtype is not None and str(attrs.dtype) not in ("", "void", "bool"):
        return None
    data = call.args[0].value.numpy()
    axis = None if attrs.axis is None else int(attrs.axis)
    if data.ndim == 0 or axis is None and data.ndim != 1:
        return None
    counts = np.cumsum(data.astype(np.int64), axis=0 if axis is None else axis)
    if bool(attrs.exclusive):
        counts = counts - data.astype(np.int64)
    return relax.const(counts != 0, "bool")
