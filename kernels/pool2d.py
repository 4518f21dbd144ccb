"""2-D max and average pooling kernels (NCHW).

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry
(simaccel.max_pool2d, simaccel.avg_pool2d). One thread per output element, output width
fastest. Padding is (top, left, bottom, right). The average divides by the window area
(KH * KW) when count_include_pad, else by the number of in-bounds elements (TVM / PyTorch
semantics), and gives 0 for a window entirely in padding. Max pooling is TVM's: a running `best = best if best > v else v` over every tap
of the window in row-major order, padded taps included as `lowest` (TVM's min_value of the
dtype, also the start value: its lowest finite value, float32's for bfloat16, which is -inf
once stored; kernels/dtypes.py), so NaN and all-padding windows come out as in TVM's CPU build.
Math is float32. A window that lies entirely in the image (all but the border's) takes the
same taps in the same order with no bounds checks, unrolled for 2x2 and 3x3 windows so that
its loads are all in flight before the first compare or add.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import cuda, float32
from numba.cuda.extending import register_jitable

from .dtypes import min_value
from .elementwise import divmod_fast
from .grid import dims_of, launch_grid

_u = numba.uint64  # an index known non-negative: numba wraps signed ones around on every access


@register_jitable
def _window_max(x, p, row_step, dw, KH, KW, best):
    """The running max over a window that lies entirely in the image, from flat offset `p`
    (its top-left tap), rows `row_step` apart: no bounds checks, so with constant KH and KW
    the loads are unrolled and all issued before the compares."""
    for kh in range(KH):
        q = p + kh * row_step
        for kw in range(KW):
            v = float32(x[_u(q + kw * dw)])
            if not best > v:
                best = v
    return best


@register_jitable
def _window_sum(x, p, row_step, dw, KH, KW):
    """The sum over a window that lies entirely in the image (as `_window_max`), in the same
    row-major order as the checked loop."""
    acc = float32(0.0)
    for kh in range(KH):
        q = p + kh * row_step
        for kw in range(KW):
            acc += float32(x[_u(q + kw * dw)])
    return acc


@register_jitable(inline="always")
def _window_at(idx, H, W, OH, OW, sh, sw, pt, pl, inv_oh, inv_ow):
    """Output element idx's window: its top-left tap (ih0, iw0) and x0, the offset of its
    image and channel's plane."""
    t, ow = divmod_fast(idx, OW, inv_ow)
    nc, oh = divmod_fast(t, OH, inv_oh)
    return oh * sh - pt, ow * sw - pl, nc * H * W


def _max_pool2d_kernel(out, x, H, W, OH, OW, KH, KW, sh, sw, pt, pl, dh, dw, inv_oh, inv_ow,
                       lowest, total):
    idx = cuda.grid(1)
    step = cuda.gridsize(1)
    low = float32(lowest)
    while idx < total:
        ih0, iw0, x0 = _window_at(idx, H, W, OH, OW, sh, sw, pt, pl, inv_oh, inv_ow)
        best = low
        if ih0 >= 0 and iw0 >= 0 and ih0 + (KH - 1) * dh < H and iw0 + (KW - 1) * dw < W:
            # Inside the image (most windows): the same taps in the same order, unchecked.
            p = x0 + ih0 * W + iw0
            if KH == 3 and KW == 3:
                best = _window_max(x, p, W * dh, dw, 3, 3, best)
            elif KH == 2 and KW == 2:
                best = _window_max(x, p, W * dh, dw, 2, 2, best)
            else:
                best = _window_max(x, p, W * dh, dw, KH, KW, best)
        else:
            for kh in range(KH):
                ih = ih0 + kh * dh
                row_in = ih >= 0 and ih < H
                for kw in range(KW):
                    iw = iw0 + kw * dw
                    v = low
                    if row_in and iw >= 0 and iw < W:
                        v = float32(x[_u(x0 + ih * W + iw)])
                    if not best > v:
                        best = v
        out[_u(idx)] = best
        idx += step


def _avg_pool2d_kernel(out, x, H, W, OH, OW, KH, KW, sh, sw, pt, pl, dh, dw, inv_oh, inv_ow,
                       count_include_pad, total):
    idx = cuda.grid(1)
    step = cuda.gridsize(1)
    while idx < total:
        ih0, iw0, x0 = _window_at(idx, H, W, OH, OW, sh, sw, pt, pl, inv_oh, inv_ow)
        if ih0 >= 0 and iw0 >= 0 and ih0 + (KH - 1) * dh < H and iw0 + (KW - 1) * dw < W:
            # Inside the image: every tap counts either way.
            p = x0 + ih0 * W + iw0
            if KH == 3 and KW == 3:
                acc = _window_sum(x, p, W * dh, dw, 3, 3)
            elif KH == 2 and KW == 2:
                acc = _window_sum(x, p, W * dh, dw, 2, 2)
            else:
                acc = _window_sum(x, p, W * dh, dw, KH, KW)
            count = KH * KW
        else:
            acc = float32(0.0)
            count = 0
            for kh in range(KH):
                ih = ih0 + kh * dh
                if ih >= 0 and ih < H:
                    for kw in range(KW):
                        iw = iw0 + kw * dw
                        if iw >= 0 and iw < W:
                            acc += float32(x[_u(x0 + ih * W + iw)])
                            count += 1
            if count_include_pad:
                count = KH * KW
        if count > 0:
            out[_u(idx)] = acc / float32(count)
        else:
            out[_u(idx)] = float32(0.0)
        idx += step


def _prepare(target, out, data, pool_size, strides, padding, dilation):
    """(grid, block, flat out, flat data, scalar args), or None when the output is empty.

    Shapes and attributes come validated by the ISA (simaccel.ops.builtin.pool2d).
    """
    N, C, H, W = dims_of(data.shape)
    OH, OW = dims_of(out.shape[2:])
    (KH, KW), (sh, sw), (pt, pl, _, _), (dh, dw) = pool_size, strides, padding, dilation
    total = N * C * OH * OW
    if total == 0:
        return None
    # Flat arrays: one offset per tap instead of a 3-D index (and its negative-index checks).
    x1 = target.reshape(data, (N * C * H * W,))
    o1 = target.reshape(out, (total,))
    grid, block = launch_grid(total)
    return grid, block, o1, x1, (H, W, OH, OW, KH, KW, sh, sw, pt, pl, dh, dw, 1.0 / OH, 1.0 / OW)


def launch_max_pool2d(target, out, data, *, pool_size, strides, padding, dilation) -> int:
    """Launch max pooling on `target`; returns the number of kernel launches."""
    prep = _prepare(target, out, data, pool_size, strides, padding, dilation)
    if prep is None:
        return 0
    grid, block, o1, x1, dims = prep
    total = dims_of(o1.shape)[0]
    lowest = min_value(out.dtype)
    target.launch(_max_pool2d_kernel, grid, block, o1, x1, *dims, lowest, total)
    return 1


def launch_avg_pool2d(target, out, data, *, pool_size, strides, padding, dilation,
                      count_include_pad) -> int:
    """Launch average pooling on `target`; returns the number of kernel launches."""
    prep = _prepare(target, out, data, pool_size, strides, padding, dilation)
    if prep is None:
        return 0
    grid, block, o1, x1, dims = prep
    total = dims_of(o1.shape)[0]
    target.launch(_avg_pool2d_kernel, grid, block, o1, x1, *dims,
                  1 if count_include_pad else 0, total)
    return 1
