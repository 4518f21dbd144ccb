"""Pooling families: ``simaccel.max_pool2d`` and ``simaccel.avg_pool2d`` (NCHW).

Attributes pool_size (kh, kw), strides, padding (top, left, bottom, right), dilation; avg
also count_include_pad (divide by the window area, or by its in-bounds elements). Max
pooling with ceil_mode=True (squeezenet's) is the same op with more bottom and right
padding; average pooling with it stays on TVM.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ...kernels.dtypes import min_value
from .. import attrs as kinds
from ..declare import OpFamily, Reject, relax_op
from ..registry import declare
from ..rules import at_least, check_rank, f32, output_hw, padding4, window_taps

WINDOW_ATTRS = {"pool_size": kinds.pair, "strides": kinds.pair, "padding": kinds.padding, "dilation": kinds.pair}


def _from_relax(average: bool):
    return lambda match: pool2d_attrs(match, average)


def pool2d_attrs(match, average: bool) -> dict:
    a = match.attrs
    if a["ceil_mode"] and average:
        raise Reject("average pooling with ceil_mode=True is not supported")
    if (a["layout"], a["out_layout"]) != ("NCHW", "NCHW"):
        raise Reject(f"pooling layout {a['layout']}/{a['out_layout']} (only NCHW)")
    padding = padding4(a["padding"])
    if a["ceil_mode"]:
        padding = ceil_mode_padding(match.shapes["data"][2:], a["pool_size"], a["strides"], padding, a["dilation"])
    attrs = {"pool_size": list(a["pool_size"]), "strides": list(a["strides"]), "padding": padding,
             "dilation": list(a["dilation"])}
    if average:
        attrs["count_include_pad"] = bool(a["count_include_pad"])
    return attrs


def ceil_mode_padding(hw, window, strides, padding, dilation) -> list[int]:
    """The padding under which floor-mode pooling is Relax's ceil mode: the output size is
    ceil((H + top + bottom - dilated window) / stride) + 1, less one where that last window would
    start in the bottom (right) padding, as Relax's shape rule and PyTorch say; the bottom and
    right padding are set to give exactly that size. The extra taps lie past the input, which
    max pooling reads as the dtype's lowest value wherever the padding ends, so only the size
    changes (the match's Relax shape is checked against it)."""
    top_left, bottom_right = list(padding[:2]), []
    for size, k, s, lo, hi, d in zip(hw, window, strides, padding[:2], padding[2:], dilation):
        span = size + lo + hi - d * (k - 1) - 1
        out = -(-span // s) + 1
        if (out - 1) * s >= size + lo:
            out -= 1
        bottom_right.append(max(0, (out - 1) * s + d * (k - 1) + 1 - size - lo))
    return top_left + bottom_right


def infer_pool2d(shapes, *, pool_size, strides, padding, dilation, **_):
    (data,) = shapes
    check_rank("data", data, 4, 4)
    n, c, h, w = data
    oh, ow = output_hw((h, w), pool_size, strides, padding, dilation)
    if not (at_least(oh, 0) and at_least(ow, 0)):  # 0: an empty output, as TVM alone gives
        raise ShapeError(f"window {tuple(pool_size)} does not fit data {tuple(data)}")
    return (n, c, oh, ow)


def _windows(x: np.ndarray, pad_value, *, pool_size, strides, padding, dilation):
    """The strided slice of the padded input each window tap reads."""
    return [tap for _, tap in window_taps(x, pad_value, pool_size, strides, padding, dilation)]


def max_pool2d(data, **attrs):
    """TVM's max pooling: a running max(acc, v) = (acc if acc > v else v) over the window's taps
    in row-major order, starting from (and padding with) TVM's min_value of the dtype (its
    lowest finite value; for bfloat16 float32's, kernels/dtypes.py).

    So a window entirely in padding gives that value (not -inf, but for bfloat16 -inf once
    rounded), and a NaN survives only if no later tap replaces it, exactly as in TVM's CPU build.
    """
    lowest = np.float32(min_value(np.asarray(data).dtype))
    taps = _windows(f32(data), lowest, **attrs)
    acc = np.full(taps[0].shape, lowest)
    for tap in taps:
        acc = np.where(acc > tap, acc, tap)
    return acc


def avg_pool2d(data, *, count_include_pad, **attrs):
    x = f32(data)
    total = sum(_windows(x, 0.0, **attrs))
    if count_include_pad:
        count = attrs["pool_size"][0] * attrs["pool_size"][1]
    else:  # in-bounds taps only; a window entirely in padding gives 0, as in TVM
        count = sum(_windows(np.ones_like(x[:1, :1]), 0.0, **attrs))
        total = np.where(count > 0, total, np.float32(0))
        count = np.maximum(count, 1)
    return total / count


def pool2d_flops(shapes, out_shape, *, pool_size, **attrs):
    """One operation per output element and window tap."""
    return math.prod(out_shape) * pool_size[0] * pool_size[1]


for _kind, _reference, _attrs in (("max", max_pool2d, WINDOW_ATTRS),
                                  ("avg", avg_pool2d, {**WINDOW_ATTRS, "count_include_pad": kinds.flag})):
    declare(OpFamily(
        name=f"simaccel.{_kind}_pool2d",
        inputs=("data",),
        pattern=relax_op(f"relax.nn.{_kind}_pool2d", "data"),
        attrs=_attrs,
        from_relax=_from_relax(_kind == "avg"),
        infer=infer_pool2d,
        reference=_reference,
        kernel=f"simaccel.kernels.pool2d:launch_{_kind}_pool2d",
        flops=pool2d_flops,
        doc=f"2-D {_kind} pooling, NCHW",
    ))
