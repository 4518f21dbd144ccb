"""Convolution ops: ``simaccel.conv2d[_bias][_relu]``.

NCHW data, OIHW weight, groups 1; attributes strides (sh, sw), padding (top, left, bottom,
right) and dilation (dh, dw). Bias (1, O, 1, 1) and relu are fused; accumulation is float32.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..kernels.window import output_hw
from . import attrs as kinds
from .common import activate, check_rank, f32, kernel, same_dtype, window_taps
from .registry import register_op

CONV_ATTRS = {"strides": kinds.pair, "padding": kinds.padding, "dilation": kinds.pair}


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
    if len(shapes) == 3 and not is_channel_bias(shapes[2], o):
        raise ShapeError(
            f"{op}: bias {tuple(shapes[2])} is not one value per output channel: numpy broadcasting "
            f"adds it along the channels only as (1, {o}, 1, 1) or ({o}, 1, 1)"
        )
    if min(strides) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ShapeError(f"{op}: bad strides {strides}, padding {padding} or dilation {dilation}")
    oh, ow = output_hw((h, w), (kh, kw), strides, padding, dilation)
    if oh < 1 or ow < 1:
        raise ShapeError(f"{op}: kernel {kh}x{kw} does not fit data {tuple(data)} with padding {padding}")
    return (n, o, oh, ow), dtype


def is_channel_bias(shape, channels: int) -> bool:
    """Whether adding `shape` to an NCHW output (numpy broadcasting) adds one value per channel."""
    shape = tuple(shape)
    return len(shape) <= 4 and (1,) * (4 - len(shape)) + shape == (1, channels, 1, 1)


def conv2d(data, weight, bias=None, *, strides, padding, dilation, activation):
    """Numpy reference: one tensordot per kernel tap over a zero-padded input."""
    wt = f32(weight)
    taps = window_taps(f32(data), 0.0, wt.shape[2:], strides, padding, dilation)
    y = sum(np.einsum("nchw,oc->nohw", tap, wt[:, :, i, j], optimize=True) for (i, j), tap in taps)
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
