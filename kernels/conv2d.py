"""2-D convolution kernel (NCHW data, OIHW weight, grouped) with fused bias + activation.

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry
(simaccel.conv2d, simaccel.conv2d_bias, simaccel.conv2d_relu, simaccel.conv2d_bias_relu).
Direct convolution, one thread per output element (output width fastest, so neighbouring
threads write neighbouring addresses), float32 accumulation also for float16 inputs. With
`groups` > 1 output channel o reads only the CG = C / groups input channels of its group
(depthwise: groups = C, one channel each).
"""

from __future__ import annotations

from numba import cuda, float32

from .activation import ACTIVATIONS, apply_activation

BLOCK = 256
_MAX_BLOCKS = 1 << 20  # grid-stride loop covers the rest


def _conv2d_kernel(out, x, w, bias, CG, H, W, O, OG, OH, OW, KH, KW, sh, sw, pt, pl, dh, dw,
                   has_bias, act, total):
    idx = cuda.grid(1)
    step = cuda.gridsize(1)
    while idx < total:
        ow = idx % OW
        t = idx // OW
        oh = t % OH
        t = t // OH
        o = t % O
        n = t // O
        ih0 = oh * sh - pt
        iw0 = ow * sw - pl
        c0 = (o // OG) * CG  # the first input channel of o's group
        acc = float32(0.0)
        for cw in range(CG):
            c = c0 + cw
            for kh in range(KH):
                ih = ih0 + kh * dh
                for kw in range(KW):
                    iw = iw0 + kw * dw
                    # Padding is a zero that is multiplied like any other input (as in TVM):
                    # 0 * inf or 0 * NaN in the weight gives NaN there too.
                    v = float32(0.0)
                    if ih >= 0 and ih < H and iw >= 0 and iw < W:
                        v = float32(x[n, c, ih, iw])
                    acc += v * float32(w[o, cw, kh, kw])
        if has_bias:
            acc += float32(bias[o])
        out[n, o, oh, ow] = apply_activation(acc, act)
        idx += step


def launch_conv2d(target, out, data, weight, bias=None, *, strides, padding, dilation, groups,
                  activation) -> int:
    """Launch the direct conv2d on `target`; returns the number of kernel launches.

    Shapes and attributes come validated by the ISA (simaccel.ops.builtin.conv2d): data (N, C, H, W);
    weight (O, C / groups, KH, KW); bias None or O values; strides (sh, sw); padding (top, left,
    bottom, right); dilation (dh, dw); out (N, O, OH, OW).
    """
    N, C, H, W = (int(d) for d in data.shape)
    O, CG, KH, KW = (int(d) for d in weight.shape)
    OH, OW = int(out.shape[2]), int(out.shape[3])
    (sh, sw), (pt, pl, _, _), (dh, dw) = strides, padding, dilation
    total = N * O * OH * OW
    if total == 0:
        return 0
    if bias is not None:
        b1 = target.reshape(bias, (O,))
        has_bias = 1
    else:
        # Never read (has_bias=0): a 1-D view of the weight, so nothing is allocated.
        b1 = target.reshape(weight, (O * CG * KH * KW,))
        has_bias = 0
    block = min(BLOCK, total)
    grid = min((total + block - 1) // block, _MAX_BLOCKS)
    target.launch(
        _conv2d_kernel, grid, block,
        out, data, weight, b1, CG, H, W, O, O // groups, OH, OW, KH, KW, sh, sw, pt, pl, dh, dw,
        has_bias, ACTIVATIONS[activation], total,
    )
    return 1
