"""Inference rewrites applied before partitioning: ops that are arithmetic the ISA already has.

Where it sits: `partition_for_simaccel` (simaccel.tvm_integration.backend.partition) runs
`prepare_for_inference` on the module before matching patterns. Each rewrite computes the
same function, once at build time; where constants are folded, only float rounding differs
(folded constants are computed in float64 and stored in the tensor's dtype):

* ``relax.nn.batch_norm`` in inference mode (``training=False``) whose four statistics are
  constants becomes ``x * scale + shift`` with constant `scale = gamma / sqrt(var + eps)` and
  `shift = beta - mean * scale`;
* then ``conv2d(x, W) * scale`` with a constant weight and one scale per output channel
  becomes ``conv2d(x, W * scale)``, so conv -> batch_norm -> relu of a torch.export CNN is
  one ``conv2d_bias_relu``;
* ``relax.broadcast_to`` of a tensor to its own shape is dropped, and so is a broadcast of a
  matmul operand that widens only batch dims, to those the matmul would broadcast it to
  anyway (torch.export writes both around every batched linear layer): the matmul then takes
  a 2-D weight. A broadcast that widens a matrix dim (M, K or N) stays;
* ``relax.take`` of one constant index (torch's ``x[i]``) becomes strided_slice + squeeze of
  the element TVM's take reads in its mode (clip, wrap or fast), and every strided_slice gets
  its steps written out;
* first of all, a field of a tuple written out is that field, each piece of a
  ``relax.split`` a strided_slice (tuples.py), and mask expressions of constants only (a
  causal mask's arange, full, tril, comparisons; what only they and scalars feed) are
  computed by TVM's own legalization and FoldConstant, as TVM alone would (constants.py).

Each rewrite checks the shapes (and values) under which it is the same function; what does
not qualify (a training-mode batch_norm, statistics that are inputs or give a scale that is
not finite, a scale that is not one value per channel, a broadcast that widens a matrix dim,
an index that is a tensor) is left as it is and stays on TVM with its reason in the
partition report.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, is_tuple_get_item, rewrite_call, wildcard

from .constants import fold_constant_masks
from .tuples import forward_tuple_fields, split_rewrites
from .types import tensor_info

BATCH_NORM = "relax.nn.batch_norm"


NOTES = {  # what each rewrite's count means, in the partition report
    "batch_norm": f"{BATCH_NORM} (inference, constant statistics) rewritten as multiply + add",
    "conv_scale": "multiply by a per-channel constant folded into the weights of the conv2d before it",
    "broadcast": "relax.broadcast_to dropped (to its own shape, or of batch dims into a matmul, which broadcasts them itself)",
    "take": "relax.take of one constant index rewritten as strided_slice + squeeze",
    "split": "relax.split piece(s) rewritten as strided_slice (tuples.py)",
    "masks": "mask expression(s) of constants computed at build time, as TVM alone does (constants.py)",
}


def prepare_for_inference(mod: tvm.IRModule) -> tuple[tvm.IRModule, list[str]]:
    """`mod` with the rewrites above applied to every Relax function, and a note per rewrite kind."""
    counts = dict.fromkeys(NOTES, 0)
    rewrites = [*_batch_norm_rewrites(counts), *_conv_scale_rewrites(counts), *_broadcast_rewrites(counts),
                *split_rewrites(counts), *_slice_rewrites(counts)]
    out = tvm.IRModule({}, attrs=mod.attrs)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            func = forward_tuple_fields(func)
            func, folded = fold_constant_masks(func)
            counts["masks"] += folded
            for found, replace in rewrites:
                func = rewrite_call(found, replace, func)
            func = relax.analysis.remove_all_unused(func)
        out[gvar] = func
    return out, [f"{count} {NOTES[kind]}" for kind, count in counts.items() if count]


def _batch_norm_rewrites(counts: dict) -> list:
    data = wildcard()
    norm = is_op(BATCH_NORM)(data, *(is_const() for _ in range(4)))

    def rewrite(expr, matches):
        replacement = _affine(matches[data], matches[norm])
        if replacement is None:
            return expr
        counts["batch_norm"] += 1
        return replacement

    return [(is_tuple_get_item(norm, 0), rewrite)]


def _conv_scale_rewrites(counts: dict) -> list:
    """`conv2d(x, W) * s` with constant W (OIHW) and a constant s of one value per output channel
    -> `conv2d(x, W * s)`: what a batch_norm folds into, so conv -> bias -> relu stays one op."""
    data, weight, scale = wildcard(), is_const(), is_const()
    conv = is_op("relax.nn.conv2d")(data, weight)
    scaled = is_op("relax.multiply")(conv, scale)

    def rewrite(expr, matches):
        call = matches[conv]
        w = matches[weight].value.numpy()
        s = matches[scale].value.numpy()
        out_shape = tensor_info(call)[0]
        layouts = (str(call.attrs.data_layout), str(call.attrs.kernel_layout), str(call.attrs.out_layout))
        if out_shape is None or layouts != ("NCHW", "OIHW", "NCHW") or s.dtype != w.dtype or w.ndim != 4:
            return expr
        channels = w.shape[0]
        if s.ndim > 4 or s.size != channels or (1,) * (4 - s.ndim) + s.shape != (1, channels, 1, 1):
            return expr  # not one value per output channel
        with np.errstate(invalid="ignore", over="ignore"):  # a fold that is not finite is refused below
            folded = (w.astype(np.float64) * s.astype(np.float64).reshape(channels, 1, 1, 1)).astype(w.dtype)
        if not (np.isfinite(s).all() and np.isfinite(folded).all()):
            return expr  # inf * a zero weight is NaN where conv(x, W) * inf is not: only finite scales fold
        counts["conv_scale"] += 1
        return relax.Call(call.op, [matches[data], relax.const(folded)], call.attrs, call.ty_args)

    return [(scaled, rewrite)]


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
        if axis is None or shape[axis] == 0:
            return expr  # a flattened take, or nothing to take from: leave it to TVM
        i = _take_index(int(value), shape[axis], str(expr.attrs.mode))
        if i is None:
            return expr
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


def _take_index(index: int, length: int, mode: str) -> int | None:
    """The element of an axis of `length` that TVM's take reads for `index` in `mode`, or None
    where that is not one element of the axis."""
    if mode == "clip":  # TVM clamps, negative indices too: -1 reads element 0
        return min(max(index, 0), length - 1)
    if mode == "wrap":
        return index % length
    if mode == "fast" and -length <= index < length:  # TVM reads out of bounds below 0; take what torch's x[-1] means
        return index % length
    return None


def _broadcast_rewrites(counts: dict) -> list:
    """`broadcast_to(x, x.shape)` -> x, and a matmul operand broadcast only to batch dims that
    the matmul broadcasts anyway -> the operand itself (torch.export writes both for every
    batched linear layer and attention product). The operand's last two dims (its matrix)
    must be the broadcast's: a broadcast of M or N changes the result's shape, one of K its
    sums."""
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

        def into_matmul(expr, matches, side=side, operand=operand, other=other, wide=wide):
            args = (matches[operand], matches[other]) if side == 0 else (matches[other], matches[operand])
            (a, _), (b, _) = tensor_info(args[0]), tensor_info(args[1])
            if a is None or b is None or len(a) < 2 or len(b) < 2:
                return expr
            source, target = tensor_info(matches[operand])[0], tensor_info(matches[wide])[0]
            if target is None or source[-2:] != target[-2:]:  # the broadcast widened a matrix dim (M, K or N)
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
    if shape[axis] != channels:
        return None
    along = [1] * ndim
    along[axis] = channels
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a scale that is not finite is refused below
        scale = 1.0 / np.sqrt(var + float(attrs.epsilon))
        if bool(attrs.scale):
            scale = scale * gamma
        shift = -mean * scale + (beta if bool(attrs.center) else 0.0)
        scale, shift = scale.reshape(along).astype(dtype), shift.reshape(along).astype(dtype)
    if not (np.isfinite(scale).all() and np.isfinite(shift).all()):
        return None  # var + eps == 0 (or an overflow in dtype): x * inf - mean * inf is NaN where (x - mean) * inf is not
    return relax.op.add(relax.op.multiply(data, relax.const(scale)), relax.const(shift))
