"""Convolution families: ``simaccel.conv2d[_bias][_relu]`` and ``simaccel.conv2d_transpose``.

NCHW data, OIHW weight (O, C / groups, KH, KW); attributes strides (sh, sw), padding (top,
left, bottom, right), dilation (dh, dw) and groups (1: dense; C: depthwise, as in MobileNet). A bias adds one value per output channel; accumulation is float32.

The transposed convolution (the gradient of conv2d with respect to its input: a decoder's
upsampling) takes an IOHW weight (C, O / groups, KH, KW): each input pixel spreads its
channels over a window of the output, strides apart, padding cropped from the output's edges
and ``output_padding`` rows and columns added at its bottom and right.
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
    if not (at_least(oh, 0) and at_least(ow, 0)):  # 0: an empty output, as TVM alone gives
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


def conv2d_transpose_from_relax(match):
    a = match.attrs
    layouts = (a["data_layout"], a["kernel_layout"], a["out_layout"])
    if layouts != ("NCHW", "IOHW", "NCHW"):
        raise Reject(f"conv2d_transpose layouts {layouts} (only NCHW data, IOHW weight, NCHW output)")
    return {"strides": list(a["strides"]), "padding": padding4(a["padding"]), "output_padding": list(a["output_padding"]),
            "dilation": list(a["dilation"]), "groups": a["groups"]}


def transposed_hw(hw, window, strides, padding, output_padding, dilation) -> tuple[int, int]:
    """(OH, OW) of a transposed convolution: the conv2d whose input it would be, plus output_padding."""
    (h, w), (kh, kw), (sh, sw), (pt, pl, pb, pr), (oph, opw), (dh, dw) = (hw, window, strides, padding,
                                                                           output_padding, dilation)
    return (h - 1) * sh - pt - pb + dh * (kh - 1) + oph + 1, (w - 1) * sw - pl - pr + dw * (kw - 1) + opw + 1


def infer_conv2d_transpose(shapes, *, strides, padding, output_padding, dilation, groups):
    data, weight = shapes
    check_rank("data", data, 4, 4)
    check_rank("weight", weight, 4, 4)
    n, c, h, w = data
    c_w, og, kh, kw = weight
    if groups < 1 or c % groups:
        raise ShapeError(f"groups={groups} does not divide the {c} input channels")
    if c != c_w:
        raise ShapeError(f"data {tuple(data)} has {c} channels, weight {tuple(weight)} (IOHW) has {c_w}")
    for extra, s, d, axis in zip(output_padding, strides, dilation, ("height", "width")):
        if extra >= max(s, d):
            raise ShapeError(f"output_padding {extra} along the {axis} is not below its stride {s} or dilation {d}")
    oh, ow = transposed_hw((h, w), (kh, kw), strides, padding, output_padding, dilation)
    if not (at_least(oh, 0) and at_least(ow, 0)):
        raise ShapeError(f"padding {tuple(padding)} crops more than the {kh}x{kw} transposed convolution of "
                         f"data {tuple(data)} gives")
    return (n, og * groups, oh, ow)


def conv2d_transpose(data, weight, *, strides, padding, output_padding, dilation, groups):
    """Scatter form: per kernel tap, the input's channel sums added strides apart into a
    full-size output, then padding cropped; float32."""
    x, wt = f32(data), f32(weight)
    n, c, h, w = x.shape
    _, og, kh, kw = wt.shape
    (sh, sw), (pt, pl, _, _), (dh, dw) = strides, padding, dilation
    oh, ow = transposed_hw((h, w), (kh, kw), strides, padding, output_padding, dilation)
    rows, cols = max((h - 1) * sh + (kh - 1) * dh + 1, pt + oh), max((w - 1) * sw + (kw - 1) * dw + 1, pl + ow)
    full = np.zeros((n, og * groups, rows, cols), np.float32)
    grouped = x.reshape(n, groups, c // groups, h, w)
    for i in range(kh):
        for j in range(kw):
            tap = np.einsum("ngchw,gco->ngohw", grouped, wt[:, :, i, j].reshape(groups, c // groups, og), optimize=True)
            full[:, :, i * dh: i * dh + (h - 1) * sh + 1: sh, j * dw: j * dw + (w - 1) * sw + 1: sw] += \
                tap.reshape(n, og * groups, h, w)
    return full[:, :, pt: pt + oh, pl: pl + ow]


def conv2d_transpose_flops(shapes, out_shape, **attrs):
    """A multiply-add per input element and weight tap of its group: O / groups x KH x KW."""
    return 2 * math.prod(shapes[0]) * math.prod(shapes[1][1:])


declare(OpFamily(
    name="simaccel.conv2d_transpose",
    inputs=("data", "weight"),
    pattern=relax_op("relax.nn.conv2d_transpose", "data", "weight"),
    attrs={"strides": kinds.pair, "padding": kinds.padding, "output_padding": kinds.output_padding,
           "dilation": kinds.pair, "groups": kinds.count},
    from_relax=conv2d_transpose_from_relax,
    infer=infer_conv2d_transpose,
    reference=conv2d_transpose,
    kernel="simaccel.kernels.conv2d_transpose:launch_conv2d_transpose",
    flops=conv2d_transpose_flops,
    doc="2-D transposed convolution, NCHW data, IOHW weight, grouped too, output_padding",
))
