"""Convolution family: ``simaccel.conv2d[_bias][_relu]``.

NCHW data, OIHW weight (O, C / groups, KH, KW); attributes strides (sh, sw), padding (top,
left, bottom, right), dilation (dh, dw) and groups (1: dense; C: depthwise, as in MobileNet). A bias adds one value per output channel; accumulation is float32.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from .. import attrs as kinds
from ..declare import OpFamily, Reject, relax_op
from ..registry import declare
from ..rules import at_least, check_rank, f32, output_hw, padding4, window_taps

OP = "simaccel.conv2d"


def conv2d_from_relax(match):
    a = match.attrs
    layouts = (a["data_layout"], a["kernel_layout"], a["out_layout"])
    if layouts != ("NCHW", "OIHW", "NCHW"):
        raise Reject(f"conv2d layouts {layouts} (only NCHW data, OIHW weight, NCHW output)")
    return {"strides": list(a["strides"]), "padding": padding4(a["padding"]), "dilation": list(a["dilation"]),
            "groups": a["groups"]}


def infer_conv2d(shapes, *, strides, padding, dilation, groups):
    data, weight = shapes
    check_rank("data", data, 4, 4)
    check_rank("weight", weight, 4, 4)
    n, c, h, w = data
    o, c_w, kh, kw = weight
    if groups < 1 or c % groups or o % groups:
        raise ShapeError(f"groups={groups} does not divide the {c} input and {o} output channels")
    if c != c_w * groups:
        raise ShapeError(f"data {tuple(data)} has {c} channels, weight {tuple(weight)} with groups={groups} "
                         f"expects {c_w * groups}")
    oh, ow = output_hw((h, w), (kh, kw), strides, padding, dilation)
    if not (at_least(oh, 1) and at_least(ow, 1)):
        raise ShapeError(f"kernel {kh}x{kw} does not fit data {tuple(data)} with padding {tuple(padding)}")
    return (n, o, oh, ow)


def conv2d(data, weight, *, strides, padding, dilation, groups):
    """One tensordot per kernel tap over a zero-padded input (channels split into groups), in float32."""
    wt = f32(weight)
    o, cg = wt.shape[:2]
    total = 0
    for (i, j), tap in window_taps(f32(data), 0.0, wt.shape[2:], strides, padding, dilation):
        n, _, oh, ow = tap.shape
        grouped = tap.reshape(n, groups, cg, oh, ow)
        total = total + np.einsum("ngchw,goc->ngohw", grouped, wt[:, :, i, j].reshape(groups, o // groups, cg),
                                  optimize=True).reshape(n, o, oh, ow)
    return total


def conv2d_flops(shapes, out_shape, **attrs):
    """A multiply-add per output element and weight tap of its group: C / groups x KH x KW."""
    return 2 * math.prod(out_shape) * math.prod(shapes[1][1:])


declare(OpFamily(
    name=OP,
    inputs=("data", "weight"),
    pattern=relax_op("relax.nn.conv2d", "data", "weight"),
    attrs={"strides": kinds.pair, "padding": kinds.padding, "dilation": kinds.pair, "groups": kinds.count},
    from_relax=conv2d_from_relax,
    infer=infer_conv2d,
    reference=conv2d,
    kernel="simaccel.kernels.conv2d:launch_conv2d",
    epilogue=True,
    flops=conv2d_flops,
    bias="channel",
    activations=("relu",),
    doc="2-D convolution, NCHW data, OIHW weight, grouped and depthwise too",
))
