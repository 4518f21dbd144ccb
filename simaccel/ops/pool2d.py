"""Pooling ops: ``simaccel.max_pool2d`` and ``simaccel.avg_pool2d`` (NCHW).

Attributes pool_size (kh, kw), strides, padding (top, left, bottom, right), dilation; avg
also count_include_pad (divide by the window area, or by its in-bounds elements).
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..kernels.window import output_hw
from . import attrs as kinds
from .common import check_rank, f32, kernel, same_dtype, window_taps
from .registry import register_op

POOL_ATTRS = {"pool_size": kinds.pair, "strides": kinds.pair, "padding": kinds.padding, "dilation": kinds.pair}


def _windows(x: np.ndarray, pad_value, *, pool_size, strides, padding, dilation):
    """The strided slice of the padded input each window tap reads."""
    return [tap for _, tap in window_taps(x, pad_value, pool_size, strides, padding, dilation)]


def make_infer(op: str):
    def infer(shapes, dtypes, *, pool_size, strides, padding, dilation, **_):
        dtype = same_dtype(op, ("data",), dtypes)
        check_rank(op, "data", shapes[0], 4, 4)
        n, c, h, w = shapes[0]
        if min(pool_size) < 1 or min(strides) < 1 or min(dilation) < 1 or min(padding) < 0:
            raise ShapeError(f"{op}: bad pool_size {pool_size}, strides {strides}, padding {padding} or dilation {dilation}")
        oh, ow = output_hw((h, w), pool_size, strides, padding, dilation)
        if oh < 1 or ow < 1:
            raise ShapeError(f"{op}: window {tuple(pool_size)} does not fit data {tuple(shapes[0])}")
        return (n, c, oh, ow), dtype

    return infer


@register_op(
    "simaccel.max_pool2d",
    inputs=("data",),
    attrs=POOL_ATTRS,
    infer=make_infer("simaccel.max_pool2d"),
    kernel=kernel("pool2d", "launch_max_pool2d"),
)
def max_pool2d(data, **attrs):
    """TVM's max pooling: a running max(acc, v) = (acc if acc > v else v) over the window's taps
    in row-major order, starting from (and padding with) the dtype's lowest finite value.

    So a window entirely in padding gives that lowest value (not -inf), and a NaN survives
    only if no later tap replaces it, exactly as in TVM's CPU build.
    """
    lowest = np.float32(np.finfo(np.asarray(data).dtype).min)
    taps = _windows(f32(data), lowest, **attrs)
    acc = np.full(taps[0].shape, lowest)
    for tap in taps:
        acc = np.where(acc > tap, acc, tap)
    return acc.astype(np.asarray(data).dtype)


@register_op(
    "simaccel.avg_pool2d",
    inputs=("data",),
    attrs={**POOL_ATTRS, "count_include_pad": kinds.flag},
    infer=make_infer("simaccel.avg_pool2d"),
    kernel=kernel("pool2d", "launch_avg_pool2d"),
)
def avg_pool2d(data, *, count_include_pad, **attrs):
    x = f32(data)
    total = sum(_windows(x, 0.0, **attrs))
    if count_include_pad:
        count = attrs["pool_size"][0] * attrs["pool_size"][1]
    else:  # in-bounds taps only; a window entirely in padding gives 0, as in TVM
        count = sum(_windows(np.ones_like(x[:1, :1]), 0.0, **attrs))
        total = np.where(count > 0, total, np.float32(0))
        count = np.maximum(count, 1)
    return (total / count).astype(np.asarray(data).dtype)
