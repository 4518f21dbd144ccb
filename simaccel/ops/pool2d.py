"""Pooling ops: ``simaccel.max_pool2d`` and ``simaccel.avg_pool2d`` (NCHW).

Attributes pool_size (kh, kw), strides, padding (top, left, bottom, right), dilation; avg
also count_include_pad (divide by the window area, or by its in-bounds elements).
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..kernels.window import window_extent
from .common import check_rank, f32, kernel, same_dtype
from .registry import register_op

POOL_ATTRS = ("pool_size", "strides", "padding", "dilation")


def _windows(x: np.ndarray, pad_value, *, pool_size, strides, padding, dilation):
    """Yield, for each window tap, the strided slice of the padded input it reads."""
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = pool_size, strides, padding, dilation
    oh = window_extent(x.shape[2], kh, sh, pt, pb, dh)
    ow = window_extent(x.shape[3], kw, sw, pl, pr, dw)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=pad_value)
    for i in range(kh):
        for j in range(kw):
            yield xp[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]


def make_infer(op: str):
    def infer(shapes, dtypes, *, pool_size, strides, padding, dilation, **_):
        dtype = same_dtype(op, ("data",), dtypes)
        check_rank(op, "data", shapes[0], 4, 4)
        n, c, h, w = shapes[0]
        if min(pool_size) < 1 or min(strides) < 1 or min(dilation) < 1 or min(padding) < 0:
            raise ShapeError(f"{op}: bad pool_size {pool_size}, strides {strides}, padding {padding} or dilation {dilation}")
        oh = window_extent(h, pool_size[0], strides[0], padding[0], padding[2], dilation[0])
        ow = window_extent(w, pool_size[1], strides[1], padding[1], padding[3], dilation[1])
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
    x = f32(data)
    return np.maximum.reduce(list(_windows(x, -np.inf, **attrs))).astype(np.asarray(data).dtype)


@register_op(
    "simaccel.avg_pool2d",
    inputs=("data",),
    attrs=POOL_ATTRS + ("count_include_pad",),
    infer=make_infer("simaccel.avg_pool2d"),
    kernel=kernel("pool2d", "launch_avg_pool2d"),
)
def avg_pool2d(data, *, count_include_pad, **attrs):
    x = f32(data)
    total = sum(_windows(x, 0.0, **attrs))
    if count_include_pad:
        count = attrs["pool_size"][0] * attrs["pool_size"][1]
    else:
        count = sum(_windows(np.ones_like(x[:1, :1]), 0.0, **attrs))
    return (total / count).astype(np.asarray(data).dtype)
