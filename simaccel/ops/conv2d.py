"""Convolution ops: ``simaccel.conv2d[_bias][_relu]``.

NCHW data, OIHW weight, groups 1; attributes strides (sh, sw), padding (top, left, bottom,
right) and dilation (dh, dw). Bias (1, O, 1, 1) and relu are fused; accumulation is float32.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..kernels.window import window_extent
from .common import activate, check_rank, f32, kernel, same_dtype
from .registry import register_op

CONV_ATTRS = ("strides", "padding", "dilation")


def conv2d_name(bias: bool, activation: str) -> str:
    return "simaccel.conv2d" + ("_bias" if bias else "") + ("" if activation == "none" else f"_{activation}")


def infer_conv2d(shapes, dtypes, *, strides, padding, dilation, activation):
    op = conv2d_name(len(shapes) == 3, activation)
    roles = ("data", "weight", "bias")[: len(shapes)]
    dtype = same_dtype(op, roles, dtypes)
    data, weight = shapes[0], shapes[1]
    check_rank(op, "data", data, 4, 4)
    check_rank(op, "weight", weight, 4, 4)
    n, c, h, w = data
    o, c_w, kh, kw = weight
    if c != c_w:
        raise ShapeError(f"{op}: data {tuple(data)} has {c} channels, weight {tuple(weight)} expects {c_w}")
    if len(shapes) == 3 and tuple(shapes[2]) not in ((1, o, 1, 1), (o,)):
        raise ShapeError(f"{op}: bias must have shape (1, {o}, 1, 1), got {tuple(shapes[2])}")
    if min(strides) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ShapeError(f"{op}: bad strides {strides}, padding {padding} or dilation {dilation}")
    oh = window_extent(h, kh, strides[0], padding[0], padding[2], dilation[0])
    ow = window_extent(w, kw, strides[1], padding[1], padding[3], dilation[1])
    if oh < 1 or ow < 1:
        raise ShapeError(f"{op}: kernel {kh}x{kw} does not fit data {tuple(data)} with padding {padding}")
    return (n, o, oh, ow), dtype


def conv2d(data, weight, bias=None, *, strides, padding, dilation, activation):
    """Numpy reference: one tensordot per kernel tap over a zero-padded input."""
    x = f32(data)
    wt = f32(weight)
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = strides, padding, dilation
    _, _, kh, kw = wt.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = window_extent(x.shape[2], kh, sh, pt, pb, dh)
    ow = window_extent(x.shape[3], kw, sw, pl, pr, dw)
    y = np.zeros((x.shape[0], wt.shape[0], oh, ow), np.float32)
    for i in range(kh):
        for j in range(kw):
            tap = xp[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
            y += np.einsum("nchw,oc->nohw", tap, wt[:, :, i, j], optimize=True)
    if bias is not None:
        y += f32(bias).reshape(1, -1, 1, 1)
    return activate(y, activation).astype(np.asarray(data).dtype)


for _bias in (False, True):
    for _activation in ("none", "relu"):
        register_op(
            conv2d_name(_bias, _activation),
            inputs=("data", "weight", "bias") if _bias else ("data", "weight"),
            infer=infer_conv2d,
            kernel=kernel("conv2d", "launch_conv2d"),
            attrs=CONV_ATTRS,
            fixed={"activation": _activation},
            reference=conv2d,
        )
