"""The fuzzer's built-in ops: for each, its Relax builder, its output shape and its float64
numpy semantics (`OPS`, name -> `FuzzOp`).

Where it sits: the bottom of `simaccel fuzz`'s models. A drawn model (fuzz/case.py) names its
ops by these names, or by a user family's (fuzz/user_ops.py); the builder (fuzz/build.py)
draws nodes of them. The semantics are written independently of simaccel's own op references,
in float64, as TVM computes them (its clip and max as selects, its pooling's padding and ceil
mode, TVM's min_value of the dtype as the start of a max); `FuzzOp.exact` says where they
are not known to be TVM's (ceil-mode pooling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class FuzzOp:
    """A built-in op of the fuzzer: how to build it, its output shape, its float64 semantics."""

    relax: Callable  # (exprs, attrs, dtype) -> Relax expression
    shape: Callable  # (input shapes, attrs) -> output shape
    numpy: Callable  # (float64 arrays, attrs, dtype) -> float64 array
    exact: Callable = lambda attrs: True  # whether `numpy` is known to be TVM's semantics


def window_out(hw, window, attrs) -> tuple[int, int]:
    """The output (height, width) of a window of size `window` sliding over `hw` (conv2d,
    pooling): strides, padding, dilation and ceil mode from `attrs`."""
    (h, w), (kh, kw) = hw, window
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = attrs["strides"], attrs["padding"], attrs["dilation"]
    ceil = attrs.get("ceil_mode", False)

    def extent(size, k, s, lo, hi, d):
        span = size + lo + hi - d * (k - 1) - 1
        if span < 0:
            return 0
        if not ceil:
            return span // s + 1
        out = -(-span // s) + 1
        return out - 1 if (out - 1) * s >= size + lo else out  # no window may start in the end padding

    return extent(h, kh, sh, pt, pb, dh), extent(w, kw, sw, pl, pr, dw)


def _same_shape(shapes, attrs):
    return shapes[0]


def _broadcast_shape(shapes, attrs):
    return tuple(np.broadcast_shapes(*shapes))


def _unary(relax_name: str, fn) -> FuzzOp:
    def make(exprs, attrs, dtype):
        from tvm import relax

        return resolve(relax.op, relax_name)(exprs[0])

    return FuzzOp(make, _same_shape, lambda xs, attrs, dtype: fn(xs[0]))


def _binary(relax_name: str, fn) -> FuzzOp:
    def make(exprs, attrs, dtype):
        from tvm import relax

        return getattr(relax.op, relax_name)(exprs[0], exprs[1])

    return FuzzOp(make, _broadcast_shape, lambda xs, attrs, dtype: fn(xs[0], xs[1]))


def resolve(module, dotted: str):
    """The attribute at a dotted path: ``resolve(relax.op, "nn.relu")`` is relax.op.nn.relu."""
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _softmax(xs, attrs, dtype):
    x, axis = xs[0], attrs["axis"]
    if x.size == 0:
        return x
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _layer_norm(xs, attrs, dtype):
    x, gamma, beta = xs
    axes = tuple(attrs["axes"])
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + attrs["epsilon"]) * gamma + beta


def _rms_norm(xs, attrs, dtype):
    x, weight = xs
    return x / np.sqrt((x * x).mean(axis=tuple(attrs["axes"]), keepdims=True) + attrs["epsilon"]) * weight


def _conv2d(xs, attrs, dtype):
    x, w = xs
    (sh, sw), (pt, pl, pb, pr), (dh, dw), groups = attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"]
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if c != cg * groups:  # slicing below would quietly read part of x, or broadcast one channel
        raise ValueError(f"conv2d: data has {c} channels, weight {w.shape} with {groups} group(s) takes {cg * groups}")
    if o % groups:  # the slices below would quietly drop output channels (and TVM alone's build
        # divides by o // groups: SIGFPE where it is 0), so a symbolic twin whose size var is the
        # output channels stays static (Case.sizes_consistent)
        raise ValueError(f"conv2d: {o} output channels are not a multiple of {groups} group(s)")
    oh, ow = window_out((h, wd), (kh, kw), attrs)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    out = np.zeros((n, o, oh, ow))
    og = o // groups if groups else 0
    for g in range(groups):
        xs_g = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                tap = xs_g[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", tap, w[g * og:(g + 1) * og, :, i, j])
    return out


def _pool_taps(x, attrs, pad_value):
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = attrs["pool_size"], attrs["strides"], attrs["padding"], attrs["dilation"]
    oh, ow = window_out(x.shape[2:], (kh, kw), attrs)
    # ceil mode: the last windows may reach past the padding; they read more padding
    extra_h = max(0, (kh - 1) * dh + sh * (oh - 1) + 1 - (x.shape[2] + pt + pb))
    extra_w = max(0, (kw - 1) * dw + sw * (ow - 1) + 1 - (x.shape[3] + pl + pr))
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb + extra_h), (pl, pr + extra_w)), constant_values=pad_value)
    for i in range(kh):
        for j in range(kw):
            yield xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]


def _min_value(dtype) -> float:
    """TVM's te.min_value of float `dtype`: its lowest finite value, float32's for bfloat16
    (which rounds to -inf when stored)."""
    return float(ml_dtypes.finfo("float32" if str(dtype) == "bfloat16" else dtype).min)


def _max_pool(xs, attrs, dtype):
    """TVM starts (and pads) the max from the dtype's `te.min_value` (_min_value)."""
    taps = list(_pool_taps(xs[0], attrs, -np.inf))
    return np.maximum(np.max(taps, axis=0), _min_value(dtype)) if taps[0].size else taps[0]


def _avg_pool(xs, attrs, dtype):
    x = xs[0]
    total = sum(_pool_taps(x, attrs, 0.0))
    if attrs["count_include_pad"]:
        return total / (attrs["pool_size"][0] * attrs["pool_size"][1])
    count = sum(_pool_taps(np.ones((1, 1) + x.shape[2:]), attrs, 0.0))
    return np.where(count > 0, total / np.maximum(count, 1), 0.0)


def _conv_make(exprs, attrs, dtype):
    from tvm import relax

    return relax.op.nn.conv2d(exprs[0], exprs[1], strides=attrs["strides"], padding=attrs["padding"],
                              dilation=attrs["dilation"], groups=attrs["groups"])


def _conv_shape(shapes, attrs):
    (n, c, h, w), (o, _, kh, kw) = shapes
    return (n, o) + window_out((h, w), (kh, kw), attrs)


def _pool_make(name):
    def make(exprs, attrs, dtype):
        from tvm import relax

        kwargs = {k: attrs[k] for k in ("pool_size", "strides", "padding", "dilation", "ceil_mode")}
        if name == "avg_pool2d":
            kwargs["count_include_pad"] = attrs["count_include_pad"]
        return getattr(relax.op.nn, name)(exprs[0], **kwargs)

    return make


def _pool_shape(shapes, attrs):
    return shapes[0][:2] + window_out(shapes[0][2:], attrs["pool_size"], attrs)


def _matmul_shape(shapes, attrs):
    a, b = shapes
    return tuple(np.broadcast_shapes(a[:-2], b[:-2])) + a[-2:-1] + b[-1:] if len(b) > 1 else a[:-1]


def _permute_shape(shapes, attrs):
    axes = attrs["axes"] if attrs["axes"] is not None else list(range(len(shapes[0])))[::-1]
    return tuple(shapes[0][a] for a in axes)


def _relax_op(name, *arg_names):
    def make(exprs, attrs, dtype):
        from tvm import relax

        return resolve(relax.op, name)(*exprs, **{k: attrs[k] for k in arg_names})

    return make


def _clip(x, attrs):
    """TVM's clip: max(min(x, hi), lo) as selects (NaN gives hi)."""
    x = np.where(x < attrs["max"], x, attrs["max"])
    return np.where(x > attrs["min"], x, attrs["min"])


def _reduced_shape(shape, attrs):
    axes = {a % len(shape) for a in attrs["axis"]}
    if attrs["keepdims"]:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _running_max(xs, attrs, dtype):
    """TVM's max: `acc if acc > v else v` in index order from the dtype's lowest finite value."""
    x = xs[0]
    axes = sorted(a % x.ndim for a in attrs["axis"])
    moved = np.moveaxis(x, axes, list(range(x.ndim - len(axes), x.ndim)))
    rows = moved.reshape(moved.shape[: x.ndim - len(axes)] + (-1,))
    acc = np.full(rows.shape[:-1], _min_value(dtype))
    for r in range(rows.shape[-1]):
        acc = np.where(acc > rows[..., r], acc, rows[..., r])
    return acc.reshape(_reduced_shape(x.shape, attrs))


def _sliced(x, attrs):
    index = [slice(None)] * x.ndim
    for a, b, e, step in zip(attrs["axes"], attrs["begin"], attrs["end"], attrs["strides"]):
        index[a] = slice(b, e, step)
    return x[tuple(index)]


def _concat_make(exprs, attrs, dtype):
    from tvm import relax

    return relax.op.concat(list(exprs), axis=attrs["axis"])


def _take_make(exprs, attrs, dtype):
    from tvm import relax

    return relax.op.take(exprs[0], relax.const(np.array(attrs["index"], "int64")), axis=attrs["axis"])


def _take_shape(shapes, attrs):
    """x[i] (one index: the axis goes) or x[[i, j, ...]] (a list: the axis is that long)."""
    index, axis, shape = attrs["index"], attrs["axis"], shapes[0]
    return shape[:axis] + ((len(index),) if isinstance(index, list) else ()) + shape[axis + 1:]


def _attention_make(exprs, attrs, dtype):
    from tvm import relax

    bias = exprs[3] if len(exprs) > 3 else None
    return relax.op.nn.attention(*exprs[:3], bias=bias, scale=attrs["scale"], causal_mask=attrs["causal_mask"])


def _attention(xs, attrs, dtype):
    """TVM's relax.nn.attention in float64, BSNH: softmax over the keys each query row keeps
    (TopLeft: key j <= row i; BottomRight: j <= i + |S - T|, TVM's offset), scale 1 / sqrt(D)
    where none is given, a bias (B, H, S, T broadcast) added to the scaled scores; a row that
    keeps no key is 0 (only where there are no keys)."""
    q, k, v = (np.transpose(x, (0, 2, 1, 3)) for x in xs[:3])  # (B, H, rows, D)
    s, t, d = q.shape[2], k.shape[2], q.shape[3]
    scale = attrs["scale"] if attrs["scale"] is not None else 1.0 / math.sqrt(d)
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if len(xs) > 3:
        scores = scores + xs[3]
    mask = attrs["causal_mask"]
    if mask:
        offset = abs(s - t) if mask == "BottomRight" else 0
        scores = np.where(np.arange(t)[None, :] <= np.arange(s)[:, None] + offset, scores, -np.inf)
    if t == 0:
        return np.zeros(q.shape[:3] + (v.shape[3],)).transpose(0, 2, 1, 3)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return np.transpose(e @ v / e.sum(axis=-1, keepdims=True), (0, 2, 1, 3))


OPS: dict[str, FuzzOp] = {
    "relu": _unary("nn.relu", lambda x: np.where(x > 0, x, 0.0)),
    "gelu": _unary("nn.gelu", lambda x: 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0)))),
    "tanh": _unary("tanh", np.tanh),
    "sigmoid": _unary("sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x))),
    "exp": _unary("exp", np.exp),
    "silu": _unary("nn.silu", lambda x: x / (1.0 + np.exp(-x))),
    "sqrt": _unary("sqrt", np.sqrt),
    "rsqrt": _unary("rsqrt", lambda x: 1.0 / np.sqrt(x)),
    "negative": _unary("negative", np.negative),
    "sin": _unary("sin", np.sin),
    "cos": _unary("cos", np.cos),
    "clip": FuzzOp(_relax_op("clip", "min", "max"), _same_shape, lambda xs, attrs, dtype: _clip(xs[0], attrs)),
    "leakyrelu": FuzzOp(_relax_op("nn.leakyrelu", "alpha"), _same_shape,
                        lambda xs, attrs, dtype: np.where(xs[0] > 0, xs[0], xs[0] * attrs["alpha"])),
    "divide": _binary("divide", np.divide),
    "sum": FuzzOp(_relax_op("sum", "axis", "keepdims"), lambda s, a: _reduced_shape(s[0], a),
                  lambda xs, attrs, dtype: np.sum(xs[0], axis=tuple(attrs["axis"]), keepdims=attrs["keepdims"])),
    "mean": FuzzOp(_relax_op("mean", "axis", "keepdims"), lambda s, a: _reduced_shape(s[0], a),
                   lambda xs, attrs, dtype: np.mean(xs[0], axis=tuple(attrs["axis"]), keepdims=attrs["keepdims"])),
    "max": FuzzOp(_relax_op("max", "axis", "keepdims"), lambda s, a: _reduced_shape(s[0], a), _running_max),
    "strided_slice": FuzzOp(_relax_op("strided_slice", "axes", "begin", "end", "strides"), lambda s, a: _sliced(np.empty(s[0], np.int8), a).shape,
                            lambda xs, attrs, dtype: _sliced(xs[0], attrs)),
    "take": FuzzOp(_take_make, _take_shape,
                   lambda xs, attrs, dtype: np.take(xs[0], attrs["index"], axis=attrs["axis"])),
    "concat": FuzzOp(_concat_make, lambda s, a: np.concatenate([np.empty(x, np.int8) for x in s], a["axis"]).shape,
                     lambda xs, attrs, dtype: np.concatenate(xs, axis=attrs["axis"])),
    "broadcast_to": FuzzOp(_relax_op("broadcast_to", "shape"), lambda s, a: tuple(a["shape"]),
                           lambda xs, attrs, dtype: np.broadcast_to(xs[0], attrs["shape"])),
    "add": _binary("add", np.add),
    "multiply": _binary("multiply", np.multiply),
    "subtract": _binary("subtract", np.subtract),
    "softmax": FuzzOp(_relax_op("nn.softmax", "axis"), _same_shape, _softmax),
    "layer_norm": FuzzOp(_relax_op("nn.layer_norm", "axes", "epsilon"), _same_shape, _layer_norm),
    "rms_norm": FuzzOp(_relax_op("nn.rms_norm", "axes", "epsilon"), _same_shape, _rms_norm),
    "matmul": FuzzOp(_relax_op("matmul"), _matmul_shape, lambda xs, attrs, dtype: np.matmul(xs[0], xs[1])),
    "permute_dims": FuzzOp(_relax_op("permute_dims", "axes"), _permute_shape,
                           lambda xs, attrs, dtype: np.transpose(xs[0], attrs["axes"])),
    "reshape": FuzzOp(_relax_op("reshape", "shape"), lambda shapes, attrs: tuple(attrs["shape"]),
                      lambda xs, attrs, dtype: xs[0].reshape(attrs["shape"])),
    "conv2d": FuzzOp(_conv_make, _conv_shape, _conv2d),
    "max_pool2d": FuzzOp(_pool_make("max_pool2d"), _pool_shape, _max_pool, lambda attrs: not attrs["ceil_mode"]),
    "avg_pool2d": FuzzOp(_pool_make("avg_pool2d"), _pool_shape, _avg_pool, lambda attrs: not attrs["ceil_mode"]),
    "repeat": FuzzOp(_relax_op("repeat", "repeats", "axis"),
                     lambda s, a: s[0][:a["axis"]] + (s[0][a["axis"]] * a["repeats"],) + s[0][a["axis"] + 1:],
                     lambda xs, attrs, dtype: np.repeat(xs[0], attrs["repeats"], axis=attrs["axis"])),
    "attention": FuzzOp(_attention_make, lambda s, a: s[0][:3] + s[2][3:], _attention),
}

