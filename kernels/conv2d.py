"""2-D convolution kernels (NCHW data, OIHW weight, grouped) with fused bias + activation.

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry
(simaccel.conv2d, simaccel.conv2d_bias, simaccel.conv2d_relu, simaccel.conv2d_bias_relu).
Float32 accumulation also for float16 inputs; with `groups` > 1 output channel o reads only
the CG = C / groups input channels of its group (depthwise: groups = C, one channel each).
Three kernels:

- implicit GEMM, for convolutions with enough output channels per group
  (`uses_implicit_gemm`) and at least MIN_GEMM_PIXELS output pixels per image: for image n
  and group g, out[n, g's channels] (OG x P output pixels) = W_g (OG x K) @ im2col(x[n], g)
  (K x P), K = CG * KH * KW. im2col is never stored: the B tile is gathered from x while it
  is staged in shared memory (a padding position reads as a zero, multiplied like any
  other input, as in TVM), and the bias is per row (output channel). Where CG is a multiple
  of 16 (K channels inner) the K loop is CUDA C++ (conv2d_f32.cu) on 64 x 64 tiles, or on
  32 x 32 tiles with K sliced four ways in the block where 64 x 64 ones would leave the GPU
  idle (`tiling`: a batch-1 network); otherwise it is Numba's, on the matmul kernels' tiled
  core (simaccel.kernels.matmul `tile_steps`);
- grouped / depthwise convolution (`kernels/conv2d_grouped.py`): an input tile in shared
  memory and 4 outputs x up to 4 channels per thread, for depthwise and other narrow groups
  (grouped convolutions with fewer than a GEMM tile, 64, of output channels per group;
  ungrouped ones with fewer than MIN_GEMM_CHANNELS) and for tiny images, where a GEMM tile
  would be mostly empty (`uses_implicit_gemm` says why);
- direct convolution, one thread per output element (output width fastest, so neighbouring
  threads write neighbouring addresses), for what the grouped kernel's shared tile does not
  take: kernels larger than 7 taps a side, or a tile (large strides and dilations) beyond
  its shared-memory budget.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import cuda, float32, types
from numba.cuda.types import bfloat16
from numba.cuda.extending import register_jitable

from . import conv2d_grouped
from .activation import ACTIVATIONS, apply_activation
from .elementwise import corrected_divmod, divmod_fast
from .epilogue import IDENTITY, fused_kernel, with_bias
from .epilogue import args as epilogue_args
from .grid import chunk_starts, dims_of, launch_grid
from .main_loop import HERE, data_pointer, declare_cpp, same
from .matmul import (MIN_SLICED_K, MIN_SMALL_TILES, NTHREADS, SLICED, SLICED_LD, SMALL, THREADS_X, THREADS_Y,
                     launch_gemm, result_tile_store, tile_arrays, tile_column, tile_steps)
from .simulator import host_array
from .target import shared_alignment, with_simulator_twin

_MAX_GRID_YZ = 65535

# Output channels per group and output pixels per image from which the implicit GEMM runs
# (below either: the direct kernel). Its tiles are 64 channels x 64 pixels: below these
# three quarters of a tile would be empty, which the simulator, running every thread of
# it, pays for most (resnet18 at 16x16 pixels took over 15 minutes there with no pixel floor).
MIN_GEMM_CHANNELS = 16
MIN_GEMM_PIXELS = 16
# The GEMM's K = CG * KH * KW is split into (c, kh, kw) with float32 quotients, exact below this.
_MAX_GEMM_K = 1 << 22


@register_jitable
def divmod_small(n, d, inv_d):
    """(n // d, n % d) for 0 <= n < 2**22 and d >= 1, given inv_d = float32(1 / d): a float32
    estimate of the quotient (off by at most one) and one correction step, a handful of
    instructions where an integer division is a software routine."""
    return corrected_divmod(n, d, numba.int32(float32(n) * float32(inv_d)))


@register_jitable
def sync_block():
    """This module's block barrier, for matmul.tile_steps (the simulator swaps `cuda` here
    while a kernel of this module runs)."""
    cuda.syncthreads()


@register_jitable
def gemm_tile(z0, tile0, groups, OG, C, CG, plane, BM, BN):
    """Where block (blockIdx) of the implicit GEMM works: (n, o0, m_left, col0, x0): its image,
    its first output channel, its rows within the group, its first output pixel, and the
    offset of the group's first input channel in image n (x flat)."""
    z = z0 + cuda.blockIdx.z
    n = z // groups
    g = z - n * groups
    row0 = (tile0 + cuda.blockIdx.y) * BM
    return n, g * OG + row0, OG - row0, cuda.blockIdx.x * BN, (n * C + g * CG) * plane


def _implicit_gemm_kernel(BM, BN, BK, channels_inner, epilogue, simulator, dtype=None):
    """The implicit-GEMM conv2d kernel for BM x BN tiles (output channels x output pixels) and
    K slices of BK (GEMM_TILES), as a Python function for `numba.cuda.jit` (see the module
    docstring). K runs over (kh, kw, channel), channels fastest, where the group's channel
    count is a multiple of BK (`channels_inner`: every ResNet convolution but the first): a
    K slice is then BK channels at one tap, and the K loop is the CUDA C++ of conv2d_f32.cu
    for operands of `dtype` (on the simulator, its numpy model `_simulated_conv_loop`).
    Otherwise K runs over (channel, kh, kw), each staged value splits its k, and the K loop
    is Numba's (`tile_steps`). Both store through `tile_steps`' epilogue."""
    make = _channels_inner_kernel if channels_inner else _channels_outer_kernel
    kernel = make(BM, BN, BK, epilogue, simulator, dtype)
    kernel.__name__ = kernel.__qualname__ = (f"_conv2d_gemm_kernel_{BM}x{BN}"
                                             f"{f'_channels_inner_{dtype}' if channels_inner else ''}")
    return kernel


def _channels_inner_kernel(BM, BN, BK, epilogue, simulator, dtype):
    _, _, stash_shape, acc_shape, _, _ = tile_arrays(BM, BN, BK)
    _, store = tile_steps(BM, BN, BK, sync_block, bias_on_rows=True, epilogue=epilogue)
    TM, TN = acc_shape
    if simulator:
        def positions():  # this thread's accumulators (this module's `cuda`)
            ty, tx = cuda.threadIdx.y, cuda.threadIdx.x
            return [(i * TN + j, ty * TM + i, tile_column(j, tx)) for i in range(TM) for j in range(TN)]

        main_loop, pointer = _simulated_conv_loop(positions), same
    else:
        main_loop, pointer = _CONV_LOOPS[dtype], data_pointer

    def kernel(out, x, w, bias, C, H, W, O, OG, CG, groups, OW, P, KHW, KW, inv_ow, inv_khw, inv_kw,
               sh, sw, pt, pl, dh, dw, has_bias, act, z0, tile0, e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23):
        """out (N*O, P) = act(conv(x, w) + bias) for image n and group g (z0 + blockIdx.z =
        n * groups + g), channel tile tile0 + blockIdx.y of the group and pixel tile
        blockIdx.x; x is flat (N*C*H*W), w is (O, CG * KHW) (OIHW)."""
        acc = cuda.local.array(acc_shape, float32)
        stash = cuda.shared.array(stash_shape, float32)
        n, o0, m_left, col0, x0 = gemm_tile(z0, tile0, groups, OG, C, CG, H * W, BM, BN)
        K = CG * KHW
        main_loop(pointer(acc), pointer(w), o0 * K, K, m_left, pointer(x), x0, col0, P, OW, H, W, CG, KHW, KW,
                  sh, sw, pt, pl, dh, dw)
        store(out, stash, acc, bias, has_bias, act, n * O + o0, m_left, col0, P, o0, cuda.threadIdx.y,
              cuda.threadIdx.x, e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11,
              es12, es13, es20, es21, es22, es23)

    if not simulator:
        kernel.link = (str(HERE / CONV_SOURCE),)
    return kernel


def _sliced_kernel(epilogue, simulator, dtype):
    """The implicit-GEMM conv2d kernel on SLICED x SLICED tiles with K sliced four ways inside
    the block (conv2d_f32.cu, `ConvLoop<T, 32, 4>`; its numpy model on the simulator), K
    channels inner, for convolutions whose 64 x 64 tiles would leave the GPU idle (`tiling`).
    The C++ leaves the tile in shared memory; each thread stores elements tid, tid + 256, ...
    (consecutive threads, consecutive pixels) through the bias, activation and `epilogue`."""
    size = SLICED * SLICED
    store = result_tile_store(SLICED, SLICED, True, epilogue)  # the bias per row: an output channel
    if simulator:
        def positions():  # the elements this thread stores: on the simulator it computes them
            tid = cuda.threadIdx.y * THREADS_X + cuda.threadIdx.x
            return [((e // SLICED) * SLICED_LD + e % SLICED, e // SLICED, e % SLICED) for e in range(tid, size, NTHREADS)]

        main_loop, pointer = _simulated_conv_loop(positions), same
    else:
        main_loop, pointer = _SLICED_CONV_LOOPS[dtype], data_pointer

    def kernel(out, x, w, bias, C, H, W, O, OG, CG, groups, OW, P, KHW, KW, inv_ow, inv_khw, inv_kw,
               sh, sw, pt, pl, dh, dw, has_bias, act, z0, tile0, e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23):
        """As the 64 x 64 kernels (same arguments), on SLICED x SLICED tiles."""
        result = cuda.shared.array((SLICED, SLICED_LD), float32)
        n, o0, m_left, col0, x0 = gemm_tile(z0, tile0, groups, OG, C, CG, H * W, SLICED, SLICED)
        K = CG * KHW
        main_loop(pointer(result), pointer(w), o0 * K, K, m_left, pointer(x), x0, col0, P, OW, H, W, CG, KHW, KW,
                  sh, sw, pt, pl, dh, dw)
        cuda.syncthreads()
        store(out, result, cuda.threadIdx.y * THREADS_X + cuda.threadIdx.x, m_left, P - col0, n * O + o0, col0, P,
              bias, has_bias, o0, act, e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23)

    kernel.__name__ = kernel.__qualname__ = f"_conv2d_sliced_kernel_{SLICED}x{SLICED}_{dtype}"
    if not simulator:
        kernel.link = (str(HERE / CONV_SOURCE),)
    return kernel


def _channels_outer_kernel(BM, BN, BK, epilogue, simulator, dtype):
    a_tile, b_tile, stash_shape, acc_shape, a_regs, b_regs = tile_arrays(BM, BN, BK)
    multiply, store = tile_steps(BM, BN, BK, sync_block, bias_on_rows=True, epilogue=epilogue)
    alignment = shared_alignment(simulator)
    TM, TN = acc_shape
    # Fill passes as in the matmul kernel: A (the weight, OG x K) k-fastest; B (K x P)
    # pixel-fastest, so a warp reads neighbouring pixels of one input row.
    rows_per_pass = NTHREADS // BK
    mn_passes = BM // rows_per_pass
    k_rows_per_pass = NTHREADS // BN
    k_passes = BK // k_rows_per_pass

    def kernel(out, x, w, bias, C, H, W, O, OG, CG, groups, OW, P, KHW, KW, inv_ow, inv_khw, inv_kw,
               sh, sw, pt, pl, dh, dw, has_bias, act, z0, tile0, e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23):
        """As the channels-inner kernel (same arguments)."""
        sa = cuda.shared.array(a_tile, float32, alignment=alignment)  # sa[k, m] = A[o0 + m, k0 + k]
        sb = cuda.shared.array(b_tile, float32, alignment=alignment)  # sb[k, p] = im2col[k0 + k, col0 + p]
        acc = cuda.local.array(acc_shape, float32)
        stash = cuda.shared.array(stash_shape, float32)
        areg = cuda.local.array(a_regs, float32)
        breg = cuda.local.array(b_regs, float32)
        ty = cuda.threadIdx.y
        tx = cuda.threadIdx.x
        t = ty * THREADS_X + tx
        fill_k = t % BK
        fill_m = t // BK
        fill_p = t % BN
        fill_kp = t // BN
        zero = float32(0.0)
        plane = H * W
        n, o0, m_left, col0, x0 = gemm_tile(z0, tile0, groups, OG, C, CG, plane, BM, BN)
        K = CG * KHW
        # The output pixel this thread stages B values for, the same in every K slice.
        p = col0 + fill_p
        oh, ow = divmod_fast(p, OW, inv_ow)
        ih0 = oh * sh - pt
        iw0 = ow * sw - pl
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = zero
        for k0 in range(0, K, BK):
            ka = k0 + fill_k
            for q in range(mn_passes):
                m = fill_m + q * rows_per_pass
                sa[fill_k, m] = float32(w[o0 + m, ka]) if m < m_left and ka < K else zero
            for q in range(k_passes):
                k = fill_kp + q * k_rows_per_pass
                kb = k0 + k
                v = zero
                if kb < K and p < P:
                    c, r = divmod_small(kb, KHW, inv_khw)
                    kh, kw = divmod_small(r, KW, inv_kw)
                    ih = ih0 + kh * dh
                    iw = iw0 + kw * dw
                    if ih >= 0 and ih < H and iw >= 0 and iw < W:
                        v = float32(x[x0 + c * plane + ih * W + iw])
                sb[k, fill_p] = v
            cuda.syncthreads()
            multiply(sa, sb, acc, areg, breg, ty, tx)
            cuda.syncthreads()
        store(out, stash, acc, bias, has_bias, act, n * O + o0, m_left, col0, P, o0, ty, tx,
              e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23)

    return kernel


# The matmul kernels' 64x64 tiling (4x4 outputs per thread): 96 registers, no spills. The
# 128x128 one spilled here (a 24-byte stack at its 128-register bound, for the im2col state a
# thread keeps), and at batch 8 a ResNet's convolutions have too few large tiles to fill an
# H200 (28x28x128: 56 tiles for 132 SMs) anyway.
GEMM_TILES = SMALL
# The C++ K loops (conv2d_f32.cu), per operand dtype.
CONV_SOURCE = "conv2d_f32.cu"
_CONV_DTYPES = {"float32": (float32, "f32"), "float16": (types.float16, "f16"), "bfloat16": (bfloat16, "bf16")}


def _declare_conv_loop(name: str, t):
    """C++ K loop `name` of conv2d_f32.cu for operands of Numba type `t` (its C ABI signature)."""
    sig = types.int32(types.CPointer(float32), types.CPointer(t), *[types.int64] * 3, types.CPointer(t),
                      *[types.int64] * 15)
    return declare_cpp(name, sig, CONV_SOURCE)


_CONV_LOOPS = {name: _declare_conv_loop(f"simaccel_conv_tile_64_{suffix}", t) for name, (t, suffix) in _CONV_DTYPES.items()}
_SLICED_CONV_LOOPS = {name: _declare_conv_loop(f"simaccel_conv_sliced_{SLICED}_{suffix}", t)
                      for name, (t, suffix) in _CONV_DTYPES.items()}


def _simulated_conv_loop(positions):
    """The simulator's stand-in for conv2d_f32.cu's K loop (same arguments, arrays for
    pointers): the calling thread's accumulators, each the dot product of its output
    channel's weights with its output pixel's receptive field (zeros for padding), as the C++
    computes them up to the order of the float32 sums."""

    def main_loop(acc, w, w_off, ldw, m_left, x, x_off, col0, P, OW, H, W, CG, KHW, KW, sh, sw, pt, pl, dh, dw):
        flat_acc, fw, fx = acc.reshape(-1), host_array(w).reshape(-1), host_array(x).reshape(-1)
        kh, kw = np.divmod(np.arange(KHW), KW)
        channels = np.arange(CG)[:, None] * (H * W)
        for i, row, col in positions():
            p = col0 + col
            if row >= m_left or p >= P:
                flat_acc[i] = 0.0
                continue
            oh, ow = divmod(p, OW)
            ih, iw = oh * sh - pt + kh * dh, ow * sw - pl + kw * dw
            inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            at = x_off + channels + np.where(inside, ih * W + iw, 0)[None, :]  # (CG, KHW)
            field = np.where(inside[None, :], fx[at].astype(np.float32), np.float32(0.0))
            weights = fw[w_off + row * ldw: w_off + row * ldw + CG * KHW].astype(np.float32).reshape(CG, KHW)
            flat_acc[i] = np.dot(weights.reshape(-1), field.reshape(-1))
        return 0

    return main_loop


def _gemm_key(channels_inner: bool, dtype: str):
    return (True, dtype) if channels_inner else (False, None)


# operand dtype -> the sliced kernel, without a fused group
_SLICED_KERNELS = {d: with_simulator_twin(_sliced_kernel, IDENTITY, dtype=d) for d in _CONV_DTYPES}


def _sliced(dtype: str, epilogue):
    if epilogue is None:
        return _SLICED_KERNELS[dtype]
    return fused_kernel(("conv2d_sliced", dtype), epilogue, lambda fn: with_simulator_twin(_sliced_kernel, fn, dtype=dtype))


# (channels_inner, operand dtype or None) -> kernel, without a fused group
_GEMM_KERNELS = {key: with_simulator_twin(_implicit_gemm_kernel, *GEMM_TILES, key[0], IDENTITY, dtype=key[1])
                 for key in [(False, None)] + [(True, d) for d in _CONV_DTYPES]}


def _gemm_kernel(channels_inner: bool, dtype: str, epilogue):
    """The implicit-GEMM kernel for K channels-inner (operands of `dtype`) or not, with
    `epilogue`'s group fused (None: none)."""
    key = _gemm_key(channels_inner, dtype)
    if epilogue is None:
        return _GEMM_KERNELS[key]
    return fused_kernel(("conv2d_gemm",) + key, epilogue,
                        lambda fn: with_simulator_twin(_implicit_gemm_kernel, *GEMM_TILES, key[0], fn, dtype=key[1]))


def _direct_kernel(epilogue):
    """The direct convolution kernel, through `epilogue` at its store (kernels/epilogue.py)."""

    def kernel(out, x, w, bias, C, CG, H, W, O, OG, OH, OW, KH, KW, sh, sw, pt, pl, dh, dw,
               inv_ow, inv_oh, inv_o, inv_og, has_bias, act, total, e0, e1, e2, ed1, ed2, ed3, einv1, einv2,
               einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23):
        # x, w and out are flat: one offset per tap instead of a 4-D index (and its four
        # negative-index checks); index splits by float reciprocals (divmod_fast).
        idx = cuda.grid(1)
        step = cuda.gridsize(1)
        plane = H * W
        taps = KH * KW
        while idx < total:
            t, ow = divmod_fast(idx, OW, inv_ow)
            t, oh = divmod_fast(t, OH, inv_oh)
            n, o = divmod_fast(t, O, inv_o)
            group, _ = divmod_fast(o, OG, inv_og)
            ih0 = oh * sh - pt
            iw0 = ow * sw - pl
            x0 = (n * C + group * CG) * plane  # the first input channel of o's group
            w0 = o * CG * taps
            acc = float32(0.0)
            for cw in range(CG):
                for kh in range(KH):
                    ih = ih0 + kh * dh
                    row_in = ih >= 0 and ih < H
                    for kw in range(KW):
                        iw = iw0 + kw * dw
                        # Padding is a zero that is multiplied like any other input (as in TVM):
                        # 0 * inf or 0 * NaN in the weight gives NaN there too.
                        v = float32(0.0)
                        if row_in and iw >= 0 and iw < W:
                            v = float32(x[x0 + ih * W + iw])
                        acc += v * float32(w[w0 + kh * KW + kw])
                x0 += plane
                w0 += taps
            if has_bias:
                acc += float32(bias[o])
            out[idx] = epilogue(apply_activation(acc, act), idx, e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3,
                                es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23)
            idx += step

    kernel.__name__ = kernel.__qualname__ = "_conv2d_kernel"
    return kernel


_conv2d_kernel = _direct_kernel(IDENTITY)


def _direct(epilogue):
    if epilogue is None:
        return _conv2d_kernel
    return fused_kernel(("conv2d_direct",), epilogue, _direct_kernel)


def uses_implicit_gemm(og: int, groups: int, pixels: int, k: int) -> bool:
    """Whether a convolution with `og` output channels per group, `pixels` output pixels per
    image and K = CG * KH * KW runs as the implicit GEMM (else: the grouped kernel, or the
    direct one where that does not fit).

    The GEMM's tiles are GEMM_TILES[0] = 64 output channels of one group: a group of OG < 64
    channels leaves 1 - OG / 64 of every tile's multiply-adds wasted (ResNeXt's 32 groups x 16:
    three quarters), where the grouped kernel computes only real outputs, MO <= 4 channels of
    a group per thread from one staged input tile. So grouped convolutions take the GEMM from
    a full tile of channels per group; ungrouped ones (one group, its channels are all the
    output channels) from MIN_GEMM_CHANNELS, as before. Both need MIN_GEMM_PIXELS.
    """
    if k >= _MAX_GEMM_K or pixels < MIN_GEMM_PIXELS:
        return False
    return og >= (GEMM_TILES[0] if groups > 1 else MIN_GEMM_CHANNELS)


def launch_conv2d(target, out, data, weight, bias=None, *, strides, padding, dilation, groups,
                  activation, epilogue=None) -> int:
    """Launch the implicit-GEMM, the grouped (kernels.conv2d_grouped) or the direct conv2d on
    `target` (`uses_implicit_gemm`, then `conv2d_grouped.fits`); returns the number of kernel launches.

    Shapes and attributes come validated by the ISA (simaccel.ops.builtin.conv2d): data (N, C, H, W);
    weight (O, C / groups, KH, KW); bias None or O values; strides (sh, sw); padding (top, left,
    bottom, right); dilation (dh, dw); out (N, O, OH, OW). With `epilogue` (simaccel.fusion)
    the group of elementwise ops after it runs in the kernel's store and `out` is its output.
    """
    N, C, H, W = dims_of(data.shape)
    O, CG, KH, KW = dims_of(weight.shape)
    OH, OW = dims_of(out.shape[2:])
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
    OG = O // groups
    if is_pointwise(weight.shape, strides, padding, groups):
        done = _launch_pointwise(target, out, data, weight, bias, ACTIVATIONS[activation], epilogue)
        if done is not None:
            return done
    if uses_implicit_gemm(OG, groups, OH * OW, CG * KH * KW):
        return _launch_implicit_gemm(target, out, data, weight, b1, has_bias, groups, strides, padding, dilation,
                                     ACTIVATIONS[activation], epilogue)
    if conv2d_grouped.fits(data.shape, weight.shape, out.shape, groups, strides, dilation):
        return conv2d_grouped.launch_grouped_conv2d(target, out, data, weight, b1, has_bias, strides=strides,
                                                    padding=padding, dilation=dilation, groups=groups,
                                                    activation=activation, epilogue=epilogue)
    grid, block = launch_grid(total)
    target.launch(
        _direct(epilogue), grid, block,
        target.reshape(out, (total,)), target.reshape(data, (N * C * H * W,)), target.reshape(weight, (O * CG * KH * KW,)),
        b1, C, CG, H, W, O, OG, OH, OW, KH, KW, sh, sw, pt, pl, dh, dw, 1.0 / OW, 1.0 / OH, 1.0 / O, 1.0 / OG,
        has_bias, ACTIVATIONS[activation], total, *epilogue_args(target, epilogue, out),
    )
    return 1


def _launch_implicit_gemm(target, out, data, weight, b1, has_bias, groups, strides, padding, dilation, act,
                          epilogue=None) -> int:
    N, C, H, W = dims_of(data.shape)
    O, CG, KH, KW = dims_of(weight.shape)
    OH, OW = dims_of(out.shape[2:])
    (sh, sw), (pt, pl, _, _), (dh, dw) = strides, padding, dilation
    OG, P = O // groups, OH * OW
    BM, BN, BK = GEMM_TILES
    # The C++ K loops take one operand dtype (the ISA gives conv2d's data and weight the same one).
    channels_inner = CG % BK == 0 and str(data.dtype) == str(weight.dtype) and str(data.dtype) in _CONV_DTYPES
    if channels_inner and tiling(OG, P, CG * KH * KW, N * groups) == "sliced":
        kernel, BM, BN = _sliced(str(data.dtype), epilogue), SLICED, SLICED
    else:
        kernel = _gemm_kernel(channels_inner, str(data.dtype), epilogue)
    fused = epilogue_args(target, epilogue, out)
    x1 = target.reshape(data, (N * C * H * W,))
    w2 = target.reshape(weight, (O, CG * KH * KW))
    o2 = target.reshape(out, (N * O, P))
    row_tiles, images = -(-OG // BM), N * groups
    launches = 0
    for z0 in chunk_starts(images, _MAX_GRID_YZ):
        for tile0 in chunk_starts(row_tiles, _MAX_GRID_YZ):
            grid = (-(-P // BN), min(row_tiles - tile0, _MAX_GRID_YZ), min(images - z0, _MAX_GRID_YZ))
            target.launch(kernel, grid, (THREADS_X, THREADS_Y), o2, x1, w2, b1, C, H, W, O, OG, CG, groups, OW, P,
                          KH * KW, KW, 1.0 / OW, _f32_inverse(KH * KW), _f32_inverse(KW), sh, sw, pt, pl, dh, dw,
                          has_bias, act, z0, tile0, *fused)
            launches += 1
    return launches


def tiling(og: int, pixels: int, k: int, images: int) -> str:
    """Which implicit-GEMM tiling a convolution with channels inner takes: "sliced" (32 x 32
    tiles, K sliced four ways in the block) where its 64 x 64 tiles would be fewer than
    MIN_SMALL_TILES and K at least MIN_SLICED_K (the float32 matmuls' rule, kernels/matmul.py:
    a batch-1 network's stages from 28 x 28 on), else "small" (64 x 64)."""
    tiles = -(-og // GEMM_TILES[0]) * -(-pixels // GEMM_TILES[1]) * images
    return "sliced" if tiles < MIN_SMALL_TILES and k >= MIN_SLICED_K else "small"


def is_pointwise(weight_shape, strides, padding, groups) -> bool:
    """A 1x1 convolution with stride 1, no padding and one group: per image a matrix product
    over channels, out[n] (O x H*W) = W (O x C) @ x[n] (C x H*W), with no im2col at all."""
    return (dims_of(weight_shape[2:]) == (1, 1) and tuple(strides) == (1, 1)
            and tuple(padding) == (0, 0, 0, 0) and groups == 1)


def _launch_pointwise(target, out, data, weight, bias, act, epilogue):
    """A pointwise convolution on the matmul kernels (kernels/matmul.py `launch_gemm`: the
    C++ main loops, tensor cores for float16): one matrix per image, the weight shared. Their
    bias runs per column, here per row (output channel), so the bias and the activation go
    into the epilogue (kernels/epilogue.py `with_bias`); None where that leaves too many
    tensors for one epilogue (the caller then takes the implicit GEMM)."""
    N, C, H, W = dims_of(data.shape)
    O, P = dims_of(weight.shape[:1])[0], H * W
    channel_bias = target.reshape(bias, (O, 1, 1)) if bias is not None else None
    fused = with_bias(epilogue, channel_bias, act, str(out.dtype))
    if fused is None:
        return None
    a2 = target.reshape(weight, (O, C))
    b2 = target.reshape(data, (N * C, P))
    o2 = target.reshape(out, (N * O, P))
    unused = target.reshape(weight, (O * C,))  # the kernels' own bias, never read (has_bias 0)
    # Matrix z = image z: a's stride 0 (the one weight), b's 1 (d1 = 1: the batch index is i0).
    return launch_gemm(target, o2, a2, b2, unused, 0, 0, O, P, C, N, 1, (0, 0), (1, 0), False, str(data.dtype),
                       fused, out)


def _f32_inverse(d: int) -> float:
    """1 / d rounded to float32, as `divmod_small` expects it."""
    return float(np.float32(1.0 / d))
