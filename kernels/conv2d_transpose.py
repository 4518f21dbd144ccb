"""The transposed 2-D convolution kernel (simaccel.conv2d_transpose), NCHW data, IOHW weight.

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry. One thread
per output element, output width fastest, gathering what the scatter form
(simaccel.ops.builtin.conv2d `conv2d_transpose`) adds there: output row y takes input row
iy = (y + top - kh * dh) / sh for each kernel row kh where that is a whole number inside the
image, and likewise for columns; over those taps, the output channel's group of input
channels times the weight, summed in float32 in (kh, kw, channel) order. A direct gather,
correct for any stride, padding, output_padding, dilation and groups; not tiled (a decoder's
upsampling layers are a small part of its time), so far from a GEMM's speed.
"""

from __future__ import annotations

import numba
from numba import cuda, float32

from .elementwise import divmod_fast
from .grid import dims_of, launch_grid

_u = numba.uint64  # an index known non-negative: no negative-index wraparound code


def _conv2d_transpose_kernel(out, x, w, C, H, W, O, OH, OW, KH, KW, sh, sw, pt, pl, dh, dw, CG, OG,
                             inv_ow, inv_oh, inv_o, total):
    idx = cuda.grid(1)
    step = cuda.gridsize(1)
    while idx < total:
        t, ox = divmod_fast(idx, OW, inv_ow)
        t, oy = divmod_fast(t, OH, inv_oh)
        n, o = divmod_fast(t, O, inv_o)
        g = o // OG
        oo = o - g * OG
        acc = float32(0.0)
        for kh in range(KH):
            ty = oy + pt - kh * dh
            if ty >= 0 and ty % sh == 0 and ty // sh < H:
                iy = ty // sh
                for kw in range(KW):
                    tx = ox + pl - kw * dw
                    if tx >= 0 and tx % sw == 0 and tx // sw < W:
                        ix = tx // sw
                        for c in range(CG):
                            ci = g * CG + c
                            acc += (float32(x[_u(((n * C + ci) * H + iy) * W + ix)])
                                    * float32(w[_u(((ci * OG + oo) * KH + kh) * KW + kw)]))
        out[_u(idx)] = acc
        idx += step


def launch_conv2d_transpose(target, out, data, weight, *, strides, padding, output_padding, dilation,
                            groups) -> int:
    """Launch the transposed convolution on `target`; returns the number of kernel launches.
    Shapes and attributes come validated by the ISA (output_padding is in the output's shape)."""
    N, C, H, W = dims_of(data.shape)
    _, OG, KH, KW = dims_of(weight.shape)
    _, O, OH, OW = dims_of(out.shape)
    total = N * O * OH * OW
    if total == 0:
        return 0
    (sh, sw), (pt, pl, _, _), (dh, dw) = strides, padding, dilation
    grid, block = launch_grid(total)
    target.launch(_conv2d_transpose_kernel, grid, block, target.reshape(out, (total,)),
                  target.reshape(data, (N * C * H * W,)), target.reshape(weight, (C * OG * KH * KW,)),
                  C, H, W, O, OH, OW, KH, KW, sh, sw, pt, pl, dh, dw, C // groups, OG, 1.0 / OW, 1.0 / OH, 1.0 / O,
                  total)
    return 1
