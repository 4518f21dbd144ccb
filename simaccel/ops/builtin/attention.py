"""``simaccel.attention``: Relax's fused multi-head attention, ``relax.nn.attention``.

softmax(Q K^T * scale [causal mask]) V per batch and head, in BSNH layout as Relax's op:
query (B, S, H, D), key (B, T, HKV, D), value (B, T, HKV, Dv) -> (B, S, H, Dv); the default
scale 1 / sqrt(D). HKV < H is grouped-query attention: query head h reads key/value head
h // (H // HKV) (Relax's op itself has HKV = H; `simaccel.grouped_attention`'s pattern folds
a repeat of the keys and values into it). A causal mask keeps key j for query i where j <= i + offset: 0 for "TopLeft",
|S - T| for "BottomRight" (TVM's legalization's own definition, abs included). TVM's torch and
ONNX frontends and `relax.frontend.nn` emit it (torch's scaled_dot_product_attention).
`simaccel.attention_bias` is Relax's `attention_bias`, the same with an additive bias (torch's
float `attn_mask`): a 4-D tensor broadcast to (B, H, S, T), float32 or the operands' dtype,
added to the scaled scores (in float32) before the causal mask. Sliding windows stay on TVM. Computed in float32 with an online softmax
(one pass over the keys), rounded once to the output's dtype. A key a query row's mask
excludes takes no part in that row, so a NaN or inf in its value row is not read there (TVM's
legalization and the numpy reference multiply it by 0, which gives NaN: the kernels are
checked against the reference with finite values behind the mask).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ...errors import ShapeError
from ...shapes import SymbolicError, broadcast_shapes
from .. import attrs as kinds
from ..declare import OpFamily, Reject, relax_op
from ..registry import declare
from ..rules import check_rank, f32

MAX_HEAD_DIM = 256  # the kernel keeps a row of Q and of the output in registers: 8 values a lane


def attention_from_relax(match):
    a = match.attrs  # read by key: the matched call's attributes, each read on first use
    if a["window_size"] is not None:
        raise Reject(f"sliding-window attention (window_size {a['window_size']})")
    mask = a["causal_mask"]
    if mask not in (None, "", "TopLeft", "BottomRight"):
        raise Reject(f"causal_mask {mask!r}")
    d = match.shapes["query"][-1]
    scale = a["scale"]
    if scale is None:
        if not isinstance(d, int):
            raise Reject("the default scale of a symbolic head dim")
        scale = 1.0 / math.sqrt(d)
    return {"scale": float(scale), "causal": bool(mask), "bottom_right": mask == "BottomRight"}


def infer_attention(shapes, *, scale, causal, bottom_right):
    q, k, v = (tuple(s) for s in shapes[:3])
    for role, shape in (("query", q), ("key", k), ("value", v)):
        check_rank(role, shape, 4, 4)
    if not (q[0] == k[0] == v[0] and k[2] == v[2]):
        raise ShapeError(f"batch or key/value heads differ: query {q}, key {k}, value {v}")
    if q[2] != k[2] and not (isinstance(q[2], int) and isinstance(k[2], int) and k[2] > 0 and q[2] % k[2] == 0):
        raise ShapeError(f"query heads {q[2]} are not a multiple of key/value heads {k[2]}: query {q}, key {k}")
    if k[1] != v[1] or q[3] != k[3]:
        raise ShapeError(f"key {k} and value {v} must share their length, query {q} and key their head dim")
    for role, d in (("query", q[3]), ("value", v[3])):
        # a limit of the kernel, not of the op: decided by the bounds, never required per call
        # (TVM alone runs larger heads), so a symbolic head dim the bounds allow past it stays on TVM
        try:
            within = d <= MAX_HEAD_DIM
        except SymbolicError:
            raise ShapeError(f"{role} head dim {d} may be over {MAX_HEAD_DIM} within its bounds") from None
        if not within:
            raise ShapeError(f"{role} head dim {d} is over {MAX_HEAD_DIM}")
    if len(shapes) == 4:
        check_bias(tuple(shapes[3]), (q[0], q[2], q[1], k[1]))
    return (q[0], q[1], q[2], v[3])


def check_bias(bias, scores) -> None:
    """`bias` must broadcast to the scores' (B, H, S, T): rank 4, each dim 1 or the scores'
    (a symbolic one the same var), the last the key length (Relax's rule)."""
    check_rank("bias", bias, 4, 4)
    try:
        fits = broadcast_shapes(bias, scores) == tuple(scores) and bias[3] == scores[3]
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(f"bias {bias} does not broadcast to the scores (batch, heads, queries, keys) {scores} "
                         "ending with the keys")


def causal_offset(s: int, t: int, bottom_right: bool) -> int:
    """The key a query row may see past its own index: j <= i + offset."""
    return abs(s - t) if bottom_right else 0


def attention(query, key, value, bias=None, *, scale, causal, bottom_right):
    """The numpy reference (float32): the bias added to the scaled scores, then masked entries
    take no part in the softmax."""
    group = query.shape[2] // max(key.shape[2], 1)
    q, k, v = (np.transpose(f32(a), (0, 2, 1, 3)) for a in (query, key, value))  # (B, H, ., .)
    k, v = (np.repeat(a, group, axis=1) for a in (k, v))  # grouped-query: each key/value head G times
    s, t = q.shape[2], k.shape[2]
    with np.errstate(all="ignore"):
        scores = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(scale)
        if bias is not None:
            scores = scores + f32(bias)
        if causal:
            keep = np.arange(t)[None, :] <= np.arange(s)[:, None] + causal_offset(s, t, bottom_right)
            scores = np.where(keep, scores, -np.inf)
        top = scores.max(axis=-1, keepdims=True, initial=-np.inf)
        e = np.exp(scores - np.where(np.isfinite(top), top, 0))
        total = e.sum(axis=-1, keepdims=True)
        out = np.where(total == 0, 0, np.matmul(e, v) / np.where(total == 0, 1, total))  # no key seen: 0
    return np.transpose(out, (0, 2, 1, 3)).astype(np.float32)


def attention_flops(shapes, out_shape, **attrs):
    """Q K^T and P V: two multiply-adds per query, key and head dim."""
    (b, s, h, d), (_, t, _, _) = shapes[0], shapes[1]
    return 2 * b * h * s * t * (d + out_shape[-1])


def grouped_attention_from_relax(match):
    """relax.nn.attention of keys and values repeated along the head axis, each head G times
    in a row (`R.repeat(k, G, axis=2)`: Relax's own op needs equal heads): the op reads the
    unrepeated ones, query head h taking key/value head h // G, which is what the repeat gave it."""
    heads = match.shapes["query"][2]
    repeats = {role: (match.nodes[f"{role}_repeat"], match.shapes[role]) for role in ("key", "value")}
    grouped = all(a["axis"] is not None and a["axis"] % len(shape) == 2 and isinstance(shape[2], int)
                  and isinstance(heads, int) and shape[2] * a["repeats"] == heads for a, shape in repeats.values())
    if not grouped:  # one reason for both repeats: the report gives it to each
        said = "; ".join(f"{role} {shape} repeated {a['repeats']} times along axis {a['axis']}"
                         for role, (a, shape) in repeats.items())
        raise Reject(f"not a repeat of each key/value head per group of the query's {heads} heads along the head "
                     f"axis ({said})")
    return attention_from_relax(match)


ATTENTION = declare(OpFamily(
    name="simaccel.attention",
    inputs=("query", "key", "value"),
    pattern=relax_op("relax.nn.attention", "query", "key", "value"),
    attrs={"scale": kinds.number, "causal": kinds.flag, "bottom_right": kinds.flag},
    from_relax=attention_from_relax,
    infer=infer_attention,
    reference=attention,
    kernel="simaccel.kernels.attention:launch_attention",
    flops=attention_flops,
    doc="softmax(Q K^T * scale [causal]) V, BSNH (relax.nn.attention)",
))

# The same op where Relax repeats the keys and values per query-head group: its own pattern and
# check, everything else attention's.
declare(dataclasses.replace(
    ATTENTION,
    name="simaccel.grouped_attention",
    pattern=relax_op("relax.nn.attention", "query", relax_op("relax.repeat", "key", name="key_repeat"),
                     relax_op("relax.repeat", "value", name="value_repeat")),
    from_relax=grouped_attention_from_relax,
    doc="grouped-query attention: relax.nn.attention of keys and values repeated per query-head group (GQA)",
))


# Relax's attention with an additive bias (torch's float attn_mask), and the same over keys and
# values repeated per query-head group: the same kernels, which read the bias per score.
ATTENTION_BIAS = declare(dataclasses.replace(
    ATTENTION,
    name="simaccel.attention_bias",
    inputs=("query", "key", "value", "bias"),
    pattern=relax_op("relax.nn.attention_bias", "query", "key", "value", "bias"),
    role_dtypes={"bias": ("float32", "float16", "bfloat16")},
    doc="softmax(Q K^T * scale + bias [causal]) V, BSNH (relax.nn.attention_bias)",
))

declare(dataclasses.replace(
    ATTENTION_BIAS,
    name="simaccel.grouped_attention_bias",
    pattern=relax_op("relax.nn.attention_bias", "query", relax_op("relax.repeat", "key", name="key_repeat"),
                     relax_op("relax.repeat", "value", name="value_repeat"), "bias"),
    from_relax=grouped_attention_from_relax,
    doc="grouped-query attention with a bias: relax.nn.attention_bias of keys and values repeated per group",
))
