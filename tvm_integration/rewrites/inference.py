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
  its steps written out and its axes counted from 0;
* dims that the size bounds decide (``min(1, s)`` where s >= 1) are cast to their simplified
  shape first (bounded_dims.py);
* ``relax.nn.conv1d`` (NCW data, OIW weight) becomes ``conv2d`` of the data and weight
  viewed with a height of 1 (reshapes), the window along the width, then a reshape back: the
  same sums, so a conv1d feature extractor offloads as convolutions;
* ``relax.nn.group_norm`` over the channel axis 1 and every axis after it becomes a
  ``layer_norm`` of the data viewed as (N, groups, the rest) with weights of 1 and 0, then the
  per-channel scale and shift: the same statistics over the same elements;
* ``relax.nn.adaptive_avg_pool2d`` (NCHW) whose output size divides the input's becomes
  ``avg_pool2d`` with a window and stride of the quotient: its bins are those windows;
* ``relax.index_tensor`` (``data[i0, i1, ...]``, index tensors: torch's
  ``logits[arange(B), last]``) whose indexed dims are static becomes a ``take`` along the
  first axis of the data viewed with those dims as one, at the flat index ``i0 * (d1 ...) +
  i1 * (...) + ...`` (the index tensors broadcast as index_tensor broadcasts them), each
  index first made non-negative as torch reads it (``i + d`` for an ``i`` in ``[-d, 0)``);
  indices TVM alone reads in range are the same elements;
* last, the matmul-softmax-matmul chain torch's frontend writes for attention (eager, or SDPA
  with a mask), with a constant causal mask or none, becomes one ``relax.nn.attention``
  (attention.py: its own conditions), after the mask folding runs once more on what the
  rewrites above made of constants;
* first of all, a field of a tuple written out is that field, each piece of a
  ``relax.split`` a strided_slice (tuples.py), and mask expressions of constants only (a
  causal mask's arange, full, tril, comparisons; what only they and scalars feed) are
  computed by TVM's own legalization and FoldConstant, as TVM alone would (constants.py;
  the few calls of bools FoldConstant leaves are computed there in numpy).

Each rewrite checks the shapes (and values) under which it is the same function; what does
not qualify (a training-mode batch_norm, statistics that are inputs or give a scale that is
not finite, a scale that is not one value per channel, a broadcast that widens a matrix dim,
an index that is a tensor) is left as it is and stays on TVM with its reason in the
partition report.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.dpl import is_const, is_op, is_tuple_get_item, rewrite_call, wildcard

from .attention import fuse_attention_chains
from .bounded_dims import bound_dims
from .constants import fold_constant_masks
from .tuples import forward_tuple_fields, split_rewrites
from .types import axis_length, relax_dims, tensor_info

BATCH_NORM = "relax.nn.batch_norm"
GROUP_NORM_MAX_ROW = 1 << 20  # elements of a group a group_norm rewrite takes (its constant weights' length)


NOTES = {  # what each rewrite's count means, in the partition report
    "bounded_dims": "min/max dim(s) that the size bounds decide cast to their simplified shape (bounded_dims.py)",
    "batch_norm": f"{BATCH_NORM} (inference, constant statistics) rewritten as multiply + add",
    "conv_scale": "multiply by a per-channel constant folded into the weights of the conv2d before it",
    "broadcast": "relax.broadcast_to dropped (to its own shape, or of batch dims into a matmul, which broadcasts them itself)",
    "take": "relax.take of one constant index rewritten as strided_slice + squeeze",
    "conv1d": "relax.nn.conv1d rewritten as conv2d of height 1 (reshapes around it)",
    "group_norm": "relax.nn.group_norm rewritten as layer_norm per group, then its per-channel scale and shift",
    "adaptive_pool": "relax.nn.adaptive_avg_pool2d rewritten as avg_pool2d (an output size that divides the input's)",
    "split": "relax.split piece(s) rewritten as strided_slice (tuples.py)",
    "index_tensor": "relax.index_tensor rewritten as take of a flat index (integer ops) from the data viewed as one indexed axis",
    "masks": "mask expression(s) of constants computed at build time, as TVM alone does (constants.py)",
    "attention": "matmul-softmax-matmul chain(s) rewritten as relax.nn.attention (attention.py)",
}


def prepare_for_inference(mod: tvm.IRModule, takes_attention=lambda probe: False) -> tuple[tvm.IRModule, list[str]]:
    """`mod` with the rewrites above applied to every Relax function, and a note per rewrite kind.
    `takes_attention(probe)`: whether the accelerator runs the relax.nn.attention that would
    replace an attention chain, given as a module of that op alone (attention.py); by default
    none is made."""
    counts = dict.fromkeys(NOTES, 0)
    rewrites = [*_index_tensor_rewrites(counts), *_conv1d_rewrites(counts), *_group_norm_rewrites(counts), *_adaptive_pool_rewrites(counts), *_batch_norm_rewrites(counts), *_conv_scale_rewrites(counts),
                *_broadcast_rewrites(counts), *split_rewrites(counts), *_slice_rewrites(counts)]
    out = tvm.IRModule({}, attrs=mod.attrs)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            func, cast = bound_dims(func)
            counts["bounded_dims"] += cast
            func = forward_tuple_fields(func)
            func, folded = fold_constant_masks(func)
            counts["masks"] += folded
            for found, replace in rewrites:
                func = rewrite_call(found, replace, func)
            func, folded = fold_constant_masks(func)  # what the rewrites made of constants (index_tensor's indices)
            counts["masks"] += folded
            func, fused = fuse_attention_chains(func, takes_attention)
            counts["attention"] += fused
            func = relax.analysis.remove_all_unused(func)
        out[gvar] = func
    return out, [f"{count} {NOTES[kind]}" for kind, count in counts.items() if count]


def _index_tensor_rewrites(counts: dict) -> list:
    """`index_tensor(x, (i0, ..., ik-1))` -> `take(reshape(x, (d0 * ... * dk-1, rest...)), flat,
    axis=0, mode="fast")` with `flat = sum_j nonneg(ij) * (dj+1 * ... * dk-1)` in int64, for k >= 1
    index tensors of int32 or int64 over static dims d0 .. dk-1 (the rest may be symbolic).
    `nonneg(i) = where(i < 0, i + d, i)`: torch's reading of a negative index; an index out
    of [-d, d) TVM alone reads outside the tensor, simaccel's take clamps it."""
    data, indices = wildcard(), wildcard()
    index = is_op("relax.index_tensor")(data, indices)

    def rewrite(expr, matches):
        x, given = matches[data], matches[indices]
        dims = relax_dims(x)
        if not isinstance(given, relax.Tuple) or dims is None or not 1 <= len(given.fields) <= len(dims):
            return expr
        k = len(given.fields)
        if not all(hasattr(d, "value") for d in dims[:k]):
            return expr  # a symbolic indexed dim
        if any(tensor_info(i)[1] not in ("int32", "int64") for i in given.fields):
            return expr
        sizes = [int(d.value) for d in dims[:k]]
        flat = None
        for j, i in enumerate(given.fields):
            i = i if tensor_info(i)[1] == "int64" else relax.op.astype(i, "int64")
            d = relax.const(sizes[j], "int64")
            i = relax.op.where(relax.op.less(i, relax.const(0, "int64")), relax.op.add(i, d), i)
            stride = int(np.prod(sizes[j + 1:], dtype=np.int64))
            term = i if stride == 1 else relax.op.multiply(i, relax.const(stride, "int64"))
            flat = term if flat is None else relax.op.add(flat, term)
        view = relax.op.reshape(x, [int(np.prod(sizes, dtype=np.int64)), *dims[k:]])
        counts["index_tensor"] += 1
        return relax.op.take(view, flat, axis=0, mode="fast")

    return [(index, rewrite)]


def _conv1d_rewrites(counts: dict) -> list:
    """`conv1d(x, W)` (NCW, OIW) -> `reshape(conv2d(x as (N, C, 1, W), W as (O, I, 1, K)), (N, O, W'))`,
    strides, padding and dilation along the width, the groups and out_dtype as they are. Runs
    first, so that a batch_norm after it folds into the conv2d as after any other."""
    data, weight = wildcard(), wildcard()
    conv = is_op("relax.nn.conv1d")(data, weight)

    def rewrite(expr, matches):
        call = matches[conv]
        a = call.attrs
        if (str(a.data_layout), str(a.kernel_layout), str(a.out_layout)) != ("NCW", "OIW", "NCW"):
            return expr
        x, w = matches[data], matches[weight]
        dims = [relax_dims(e) for e in (x, w, call)]
        if any(d is None or len(d) != 3 for d in dims):
            return expr
        (n, c, width), (o, i, k), out = dims
        (left, right), (stride,), (dilation,) = a.padding, a.strides, a.dilation
        y = relax.op.nn.conv2d(relax.op.reshape(x, [n, c, 1, width]), relax.op.reshape(w, [o, i, 1, k]),
                               strides=(1, int(stride)), padding=(0, int(left), 0, int(right)),
                               dilation=(1, int(dilation)), groups=int(a.groups), out_dtype=a.out_dtype)
        counts["conv1d"] += 1
        return relax.op.reshape(y, out)

    return [(conv, rewrite)]


def _group_norm_rewrites(counts: dict) -> list:
    """`group_norm(x, gamma, beta)` (channels on axis 1, normalised over the rest of each group)
    -> `reshape(layer_norm(x as (N, G, C / G * rest), 1, 0), x's shape) * gamma + beta` (gamma
    and beta one value per channel): layer_norm's mean and variance over the last axis are the
    group's. Only with static channels and the rest of the dims (the viewed row's length)."""
    data, gamma, beta = wildcard(), wildcard(), wildcard()
    norm = is_op("relax.nn.group_norm")(data, gamma, beta)

    def rewrite(expr, matches):
        call = matches[norm]
        a = call.attrs
        x = matches[data]
        dims = relax_dims(x)
        if dims is None or int(a.channel_axis) != 1 or not (a.center and a.scale) or len(dims) < 3:
            return expr
        if sorted(int(axis) % len(dims) for axis in a.axes) != list(range(2, len(dims))):
            return expr
        static = [int(d.value) for d in dims[1:] if hasattr(d, "value")]
        groups = int(a.num_groups)
        if len(static) != len(dims) - 1 or groups < 1 or static[0] % groups:
            return expr  # a symbolic channel or spatial dim, or channels the groups do not divide
        channels, row = static[0], int(np.prod(static)) // groups
        if row > GROUP_NORM_MAX_ROW:
            return expr  # its weights of 1 and 0 would be constants of `row` elements each
        dtype = tensor_info(x)[1]
        ones, zeros = (relax.const(np.full(row, v, dtype=dtype)) for v in (1, 0))
        rows = relax.op.nn.layer_norm(relax.op.reshape(x, [dims[0], groups, row]), ones, zeros, axes=[-1],
                                      epsilon=float(a.epsilon))
        per_channel = [1, channels] + [1] * (len(dims) - 2)
        scaled = relax.op.multiply(relax.op.reshape(rows, dims), relax.op.reshape(matches[gamma], per_channel))
        counts["group_norm"] += 1
        return relax.op.add(scaled, relax.op.reshape(matches[beta], per_channel))

    return [(norm, rewrite)]


def _adaptive_pool_rewrites(counts: dict) -> list:
    """`adaptive_avg_pool2d(x, (oh, ow))` (NCHW, static H and W divisible by oh and ow) ->
    `avg_pool2d(x, (H / oh, W / ow), strides alike)`: TVM's bin i spans [floor(i H / oh),
    ceil((i + 1) H / oh)), which is window i where oh divides H."""
    data = wildcard()
    pool = is_op("relax.nn.adaptive_avg_pool2d")(data)

    def rewrite(expr, matches):
        call = matches[pool]
        a = call.attrs
        shape = tensor_info(matches[data])[0]
        if shape is None or len(shape) != 4 or (str(a.layout), str(a.out_layout)) != ("NCHW", "NCHW"):
            return expr
        size = tuple(int(v) for v in a.output_size) if a.output_size is not None else shape[2:]
        if len(size) != 2 or 0 in size or 0 in shape[2:] or shape[2] % size[0] or shape[3] % size[1]:
            return expr
        window = (shape[2] // size[0], shape[3] // size[1])
        counts["adaptive_pool"] += 1
        return relax.op.nn.avg_pool2d(matches[data], pool_size=window, strides=window, padding=(0, 0, 0, 0))

    return [(pool, rewrite)]


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
    has none), so that one pattern matches them all, and its axes counted from 0 (TVM 0.27
    cannot legalize a slice with a symbolic end on a negative axis: "axis < src_tensor_dim")."""
    data, index = wildcard(), is_const()
    take = is_op("relax.take")(data, index)

    def take_one(expr, matches):
        call = matches[take]  # `expr` may be the var the call is bound to
        value = matches[index].value.numpy()
        if call.attrs.axis is None or value.ndim != 0 or value.dtype.kind not in "iu":
            return expr  # a flattened take, or not one index: leave it to TVM
        axis, length = axis_length(matches[data], int(call.attrs.axis))
        if axis is None or length == 0:
            return expr  # nothing to take from
        if length is None:  # a symbolic axis: an index from the end reads what torch's x[-1] means
            i, mode = int(value), str(call.attrs.mode)
            if not (mode == "fast" or (mode == "wrap" and i == -1)):
                return expr  # which element depends on the length: leave it to TVM
            begin = i if i >= 0 else i + matches[data].ty.shape.values[axis]
            # in the axis (a region checks it per call, a requirement of its slice's shape rule)
            sliced = relax.op.strided_slice(matches[data], [axis], [begin], [begin + 1], [1], assume_inbound=True)
        else:
            begin = _take_index(int(value), length, str(call.attrs.mode))
            if begin is None:
                return expr
            sliced = relax.op.strided_slice(matches[data], [axis], [begin], [begin + 1], [1])
        counts["take"] += 1
        return relax.op.squeeze(sliced, [axis])

    sliced = is_op("relax.strided_slice")(wildcard(), wildcard(), wildcard(), wildcard())

    def with_steps(expr, matches):
        call = matches[sliced]  # `expr` may be the var the call is bound to
        axes = call.args[1]
        steps = relax.Tuple([tvm.tirx.IntImm("int64", 1) for _ in axes.fields]) if isinstance(axes, relax.Tuple) else None
        if steps is None:
            return expr
        return relax.Call(call.op, [*call.args, steps], call.attrs)

    stepped = is_op("relax.strided_slice")(wildcard(), wildcard(), wildcard(), wildcard(), wildcard())

    def counted_from_zero(expr, matches):
        call = matches[stepped]
        axes, dims = call.args[1], relax_dims(call.args[0])
        if not isinstance(axes, relax.Tuple) or dims is None or all(int(a) >= 0 for a in axes.fields):
            return expr
        fields = [tvm.tirx.IntImm("int64", int(a) % len(dims)) for a in axes.fields]
        return relax.Call(call.op, [call.args[0], relax.Tuple(fields), *call.args[2:]], call.attrs)

    return [(take, take_one), (sliced, with_steps), (stepped, counted_from_zero)]


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
        if not _same_type(matches[data], matches[broadcast]):
            return expr
        counts["broadcast"] += 1
        return matches[data]

    rewrites = [(broadcast, identity)]
    for side in (0, 1):
        operand, other = wildcard(), wildcard()
        wide = is_op("relax.broadcast_to")(operand, wildcard())
        matmul = is_op("relax.matmul")(*((wide, other) if side == 0 else (other, wide)))

        def into_matmul(expr, matches, side=side, operand=operand, other=other, wide=wide, matmul=matmul):
            call = matches[matmul]  # `expr` may be the var the call is bound to
            args = (matches[operand], matches[other]) if side == 0 else (matches[other], matches[operand])
            source, target = (relax_dims(matches[k]) for k in (operand, wide))
            if source is None or target is None or len(source) < 2 or len(target) < 2 or \
                    not all(_same_dim(x, y) for x, y in zip(source[-2:], target[-2:])):
                return expr  # the broadcast widened a matrix dim (M, K or N), or the shapes are unknown
            try:  # the matmul's type without the broadcast, inferred by Relax on stand-ins of the operands
                stand_ins = [relax.Var(f"operand{k}", arg.ty) for k, arg in enumerate(args)]
                narrow = relax.BlockBuilder().normalize(relax.op.matmul(*stand_ins, out_dtype=call.attrs.out_dtype))
            except Exception:  # noqa: BLE001 - Relax refuses the operands' shapes without the broadcast
                return expr
            if not _same_type(narrow, call):  # the broadcast shaped the result
                return expr
            counts["broadcast"] += 1
            return relax.op.matmul(*args, out_dtype=call.attrs.out_dtype)
        rewrites.append((matmul, into_matmul))
    return rewrites


def _same_dim(a, b) -> bool:
    """The same dim: equal ints, or TIR expressions over the same size vars that TVM's
    arithmetic analyzer proves equal (`s65 + 1` and `1 + s65`)."""
    from tvm.sym.analyzer import Analyzer

    return tvm_ffi.structural_equal(a, b, map_free_vars=False) or bool(Analyzer().can_prove_equal(a, b))


def _same_type(a, b) -> bool:
    """Two tensor expressions of one dtype and one known shape (symbolic dims the same expressions)."""
    dims_a, dims_b = relax_dims(a), relax_dims(b)
    return dims_a is not None and dims_b is not None and len(dims_a) == len(dims_b) and \
        str(a.ty.dtype) == str(b.ty.dtype) and all(_same_dim(x, y) for x, y in zip(dims_a, dims_b))


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
