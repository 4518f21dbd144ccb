"""Inference rewrites applied before partitioning: ops that are arithmetic the ISA already has.

Where it sits: `partition_for_simaccel` (simaccel.tvm_integration.backend.partition) runs
`prepare_for_inference` on the module before matching patterns. Each rewrite gives exactly the same values, done once at build time:

* ``relax.nn.batch_norm`` in inference mode (``training=False``) whose four statistics are
  constants becomes ``x * scale + shift`` with constant `scale = gamma / sqrt(var + eps)` and
  `shift = beta - mean * scale` (computed in float64, stored in the tensor's dtype), so a
  conv -> batch_norm -> relu chain of a torch.export model stays in one region.

* ``relax.broadcast_to`` of a tensor to its own shape is dropped, and so is a broadcast of a
  matmul operand to batch dims the matmul would broadcast it to anyway (torch.export writes
  both around every batched linear layer): the matmul then takes a 2-D weight.

A batch_norm that does not qualify (training mode, statistics that are inputs) is left as
it is and stays on TVM with its reason in the partition report.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, is_tuple_get_item, rewrite_call, wildcard

from .types import tensor_info

BATCH_NORM = "relax.nn.batch_norm"


def prepare_for_inference(mod: tvm.IRModule) -> tuple[tvm.IRModule, list[str]]:
    """`mod` with the rewrites above applied to every Relax function, and a note per rewrite kind."""
    data = wildcard()
    stats = [is_const() for _ in range(4)]
    norm = is_op(BATCH_NORM)(data, *stats)
    pattern = is_tuple_get_item(norm, 0)
    folded = 0

    def rewrite(expr, matches):
        nonlocal folded
        call = matches[norm]
        replacement = _affine(matches[data], call)
        if replacement is None:
            return expr
        folded += 1
        return replacement

    counts = {"broadcast": 0, "take": 0}
    rewrites = [(pattern, rewrite), *_broadcast_rewrites(counts), *_slice_rewrites(counts)]
    out = tvm.IRModule({}, attrs=mod.attrs)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            for found, replace in rewrites:
                func = rewrite_call(found, replace, func)
            func = relax.analysis.remove_all_unused(func)
        out[gvar] = func
    notes = [f"{folded} {BATCH_NORM} (inference, constant statistics) rewritten as multiply + add"] if folded else []
    if counts["broadcast"]:
        notes.append(f"{counts['broadcast']} relax.broadcast_to dropped (to its own shape, or into a matmul, "
                     "which broadcasts itself)")
    if counts["take"]:
        notes.append(f"{counts['take']} relax.take of one constant index rewritten as strided_slice + squeeze")
    return out, notes


def _slice_rewrites(counts: dict) -> list:
    """`take(x, i, axis)` with one constant index -> `squeeze(strided_slice(x, axis, i, i + 1), axis)`
    (torch.export's ``x[i]``); every strided_slice gets its steps written out (1s where it
    has none), so that one pattern matches them all."""
    data, index = wildcard(), is_const()
    take = is_op("relax.take")(data, index)

    def take_one(expr, matches):
        shape = tensor_info(matches[data])[0]
        value = matches[index].value.numpy()
        if shape is None or value.ndim != 0 or value.dtype.kind not in "iu":
            return expr
        axis = int(expr.attrs.axis) % len(shape) if expr.attrs.axis is not None else None
        if axis is None or not -shape[axis] <= int(value) < shape[axis]:
            return expr  # a flattened take, or an index TVM would clip or wrap: leave it to TVM
        i = int(value) % shape[axis]
        counts["take"] += 1
        return relax.op.squeeze(relax.op.strided_slice(matches[data], [axis], [i], [i + 1], [1]), [axis])

    sliced = is_op("relax.strided_slice")(wildcard(), wildcard(), wildcard(), wildcard())

    def with_steps(expr, matches):
        axes = expr.args[1]
        steps = relax.Tuple([tvm.tirx.IntImm("int64", 1) for _ in axes.fields]) if isinstance(axes, relax.Tuple) else None
        if steps is None:
            return expr
        return relax.Call(expr.op, [*expr.args, steps], expr.attrs)

    return [(take, take_one), (sliced, with_steps)]


def _broadcast_rewrites(counts: dict) -> list:
    """`broadcast_to(x, x.shape)` -> x, and a matmul operand broadcast only to batch dims that
    the matmul broadcasts anyway -> the operand itself (torch.export writes both for every
    batched linear layer and attention product)."""
    data, shape = wildcard(), wildcard()
    broadcast = is_op("relax.broadcast_to")(data, shape)

    def identity(expr, matches):
        if tensor_info(matches[data])[0] is None or tensor_info(matches[data]) != tensor_info(expr):
            return expr
        counts["broadcast"] += 1
        return matches[data]

    rewrites = [(broadcast, identity)]
    for side in (0, 1):
        operand, other = wildcard(), wildcard()
        wide = is_op("relax.broadcast_to")(operand, wildcard())
        matmul = is_op("relax.matmul")(*((wide, other) if side == 0 else (other, wide)))

        def into_matmul(expr, matches, side=side, operand=operand, other=other):
            args = (matches[operand], matches[other]) if side == 0 else (matches[other], matches[operand])
            (a, _), (b, _) = tensor_info(args[0]), tensor_info(args[1])
            if a is None or b is None or len(a) < 2 or len(b) < 2:
                return expr
            try:
                batch = np.broadcast_shapes(a[:-2], b[:-2])
            except ValueError:
                return expr
            if tuple(batch) + (a[-2], b[-1]) != tensor_info(expr)[0]:  # the broadcast shaped the result
                return expr
            counts["broadcast"] += 1
            return relax.op.matmul(*args, out_dtype=expr.attrs.out_dtype)
        rewrites.append((matmul, into_matmul))
    return rewrites


def _affine(data: relax.Expr, call: relax.Call) -> relax.Expr | None:
    """x * scale + shift for an inference batch_norm `call` of `data`, or None if it does not qualify."""
    attrs = call.attrs
    if bool(attrs.training):
        return None
    shape, dtype = tensor_info(data)
    if shape is None or not shape or dtype not in ("float16", "float32", "float64"):
        return None
    ndim = len(shape)
    axis = int(attrs.axis) % ndim
    gamma, beta, mean, var = (arg.value.numpy().astype(np.float64) for arg in call.args[1:])
    channels = mean.shape[0] if mean.ndim == 1 else -1
    if any(a.shape != (channels,) for a in (gamma, beta, mean, var)):
        return None
    scale = 1.0 / np.sqrt(var + float(attrs.epsilon))
    if bool(attrs.scale):
        scale = scale * gamma
    shift = -mean * scale + (beta if bool(attrs.center) else 0.0)
    if shape[axis] != channels:
        return None
    along = [1] * ndim
    along[axis] = channels
    return relax.op.add(relax.op.multiply(data, relax.const(scale.reshape(along).astype(dtype))),
                        relax.const(shift.reshape(along).astype(dtype)))
