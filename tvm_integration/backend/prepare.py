"""Inference rewrites applied before partitioning: ops that are arithmetic the ISA already has.

Where it sits: `partition_for_simaccel` runs `prepare_for_inference` on the module before
matching patterns. Each rewrite is exact algebra on constants, done once at build time:

* ``relax.nn.batch_norm`` in inference mode (``training=False``) whose four statistics are
  constants becomes ``x * scale + shift`` with constant `scale = gamma / sqrt(var + eps)` and
  `shift = beta - mean * scale` (computed in float64, stored in the tensor's dtype), so a
  conv -> batch_norm -> relu chain of a torch.export model stays in one region.

A batch_norm that does not qualify (training mode, statistics that are inputs) is left as
it is and stays on TVM with its reason in the partition report.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, is_tuple_get_item, rewrite_call, wildcard

from .patterns import tensor_info

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

    out = tvm.IRModule({}, attrs=mod.attrs)
    for gvar, func in mod.functions.items():
        out[gvar] = rewrite_call(pattern, rewrite, func) if isinstance(func, relax.Function) else func
    notes = [f"{folded} {BATCH_NORM} (inference, constant statistics) rewritten as multiply + add"] if folded else []
    return out, notes


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
