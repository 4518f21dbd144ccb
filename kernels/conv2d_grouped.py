"""Grouped and depthwise 2-D convolution (NCHW data, OIHW weight), bias + activation fused.

Where it sits: the simaccel runtime's "sim"/"cuda" engines (and native regions, through the
launch plan recorded from it) run `simaccel.conv2d[_bias][_relu]` through
`simaccel.kernels.conv2d.launch_conv2d`, which sends every convolution the implicit GEMM
does not take (few output channels per group: depthwise, narrow groups, tiny images) here,
to `launch_grouped_conv2d`.

One kernel per geometry, made by `grouped_kernel` with the geometry as compile-time
constants: the tile configuration (TH x TW output pixels of NP planes per 128-thread block),
the kernel size, strides, dilation and MO, the output channels of one group a thread computes
(several channels of a group share the input they read). A "plane" is (image n, group g,
channel block mb): output channels g * OG + mb * MO ... + MO - 1 of image n. For each of the
group's CG input channels a block

1. stages the input tile its outputs need (halo included; padding and everything outside the
   image as a zero that is multiplied like any other input, so 0 * inf is NaN, as in TVM) in
   shared memory, in float32, read width-fastest (coalesced);
2. loads the channel's KH x KW weights of its MO output channels into registers (the same
   addresses in every thread: broadcast loads);
3. computes, per thread, PX = 4 neighbouring outputs of one output row for MO channels: per
   kernel row it reads the (PX - 1) * SW + (KW - 1) * DW + 1 input values the PX windows span
   once into registers and uses each for every tap and channel that needs it.

All loops over taps, outputs and channels have compile-time bounds and unroll, so the
accumulators, weights and the input row stay in registers. Float32 accumulation also for
float16; the one store point adds the bias and applies the activation (`has_bias`, `bias`,
`act`, as in every kernel), rounding once to the output's dtype. Blocks run over (plane
block, tile) in a block-stride loop on a 1-D grid, tiles fastest (neighbouring tiles of one
plane share halos in L2), so no grid dimension limits N * O.

Outside the shared tile (kernels larger than MAX_KERNEL taps on a side, or a tile of more
than MAX_SHARED_BYTES) `kernels.conv2d` keeps its direct one-thread-per-output kernel.
"""

from __future__ import annotations

import functools
import math

from numba import cuda, float32, uint64

from .activation import ACTIVATIONS, apply_activation

NTHREADS = 128
PX = 4  # outputs per thread, neighbours along the output row
# (TH, TW): output rows x columns of one plane's tile; NP = NTHREADS * PX / (TH * TW) planes per block.
TILES = ((16, 32), (8, 16), (8, 8), (4, 4))
MAX_KERNEL = 7  # taps per side the kernels unroll (larger: the direct kernel)
MAX_SHARED_BYTES = 32 * 1024  # per block, leaving an SM room for several blocks
# Registers for the weights a thread keeps (MO * KH * KW): MO is the largest of MOS within it.
WEIGHT_REGISTERS = 64
MOS = (4, 2, 1)
_MAX_BLOCKS = 1 << 20  # the block-stride loop covers the rest


def input_extent(out_extent: int, kernel: int, stride: int, dilation: int) -> int:
    """Input rows (or columns) that `out_extent` outputs of a kernel of `kernel` taps read."""
    return (out_extent - 1) * stride + (kernel - 1) * dilation + 1


def _bank_conflicts(pitch: int, rows: int, np_: int, th: int, tx: int, sh: int, sw: int) -> int:
    """The most threads of one warp that read one shared bank at once (first tap), rows of `pitch` words."""
    banks: dict[int, set] = {}
    for t in range(32):
        slot, lt = divmod(t, th * tx)
        r, cx = divmod(lt, tx)
        if slot >= np_:
            break
        word = (slot * rows + r * sh) * pitch + cx * PX * sw
        banks.setdefault(word % 32, set()).add(word)
    return max(len(words) for words in banks.values())


def shared_pitch(tiw: int, tih: int, np_: int, th: int, tx: int, sh: int, sw: int) -> int:
    """Words per shared row, at least `tiw`: the first with the fewest bank conflicts of a warp's reads."""
    return min(range(tiw, tiw + 32), key=lambda p: (_bank_conflicts(p, tih, np_, th, tx, sh, sw), p))


@functools.lru_cache(maxsize=None)
def grouped_kernel(TH, TW, KH, KW, SH, SW, DH, DW, MO):
    """The kernel function for one geometry (see the module docstring), cached so that every
    launch of a geometry launches (and compiles, records and AOT-compiles) one function."""
    TX = TW // PX  # threads along a tile row
    ST = TH * TX  # threads per plane
    NP = NTHREADS // ST  # planes per block
    KHW = KH * KW
    TIH = input_extent(TH, KH, SH, DH)
    TIW = input_extent(TW, KW, SW, DW)
    PITCH = shared_pitch(TIW, TIH, NP, TH, TX, SH, SW)
    # Staging: a plane's ST threads as RSTEP rows of COLS columns, COLS the smallest power of
    # two (dividing ST) that spans the tile's width, else ST; row passes x column passes.
    COLS = next((c for c in (1, 2, 4, 8, 16, 32, 64, 128) if c >= TIW and ST % c == 0), ST)
    RSTEP = ST // COLS
    ROW_PASSES = -(-TIH // RSTEP)
    COL_PASSES = -(-TIW // COLS)
    SLOT_WORDS = TIH * PITCH
    SHARED_WORDS = NP * SLOT_WORDS
    SPAN = input_extent(PX, KW, SW, DW)  # input values a thread's PX windows span on one row
    ACC = MO * PX  # local array sizes must be plain closure constants for numba's typing
    WREGS = MO * KHW
    zero = float32(0.0)

    def kernel(out, x, w, bias, C, H, W, O, OG, CG, groups, OH, OW, MB, planes, tiles_w, tiles, blocks,
               pt, pl, has_bias, act):
        """out (N*O*OH*OW) = act(conv(x, w) + bias), x flat (N*C*H*W), w flat (O*CG*KH*KW)."""
        tile = cuda.shared.array(SHARED_WORDS, float32)
        acc = cuda.local.array(ACC, float32)
        wr = cuda.local.array(WREGS, float32)
        xr = cuda.local.array(SPAN, float32)
        t = cuda.threadIdx.x
        slot = t // ST
        lt = t - slot * ST
        r = lt // TX
        cx = lt - r * TX
        stage_r = lt // COLS
        stage_c = lt - stage_r * COLS
        # This thread's shared words (unsigned: no negative-index wrap-around).
        stage_at = slot * SLOT_WORDS + stage_r * PITCH + stage_c
        read_at = slot * SLOT_WORDS + r * (SH * PITCH) + cx * (PX * SW)
        plane_size = H * W
        for bid in range(cuda.blockIdx.x, blocks, cuda.gridDim.x):
            pb = bid // tiles
            ti = bid - pb * tiles
            tr = ti // tiles_w
            oh0 = tr * TH
            ow0 = (ti - tr * tiles_w) * TW
            plane = pb * NP + slot
            valid = plane < planes
            ng = plane // MB
            mb = plane - ng * MB
            n = ng // groups
            g = ng - n * groups
            m_left = OG - mb * MO  # channels of this block within the group
            o0 = g * OG + mb * MO
            ih_s = oh0 * SH - pt + stage_r  # the input row and column this thread stages first
            iw_s = ow0 * SW - pl + stage_c
            x_c = (n * C + g * CG) * plane_size + ih_s * W + iw_s  # ... of input channel c of the group
            w_c = o0 * CG * KHW
            for i in range(ACC):
                acc[i] = zero
            for c in range(CG):
                for cp in range(COL_PASSES):
                    iw = iw_s + cp * COLS
                    col_in = valid and iw >= 0 and iw < W and stage_c + cp * COLS < TIW
                    for rp in range(ROW_PASSES):
                        ih = ih_s + rp * RSTEP
                        if stage_r + rp * RSTEP < TIH and stage_c + cp * COLS < TIW:
                            v = zero
                            if col_in and ih >= 0 and ih < H:
                                v = float32(x[uint64(x_c + rp * RSTEP * W + cp * COLS)])
                            tile[uint64(stage_at + rp * (RSTEP * PITCH) + cp * COLS)] = v
                for m in range(MO):
                    for k in range(KHW):
                        wr[m * KHW + k] = float32(w[uint64(w_c + m * CG * KHW + k)]) if valid and m < m_left else zero
                cuda.syncthreads()
                for kh in range(KH):
                    for j in range(SPAN):
                        xr[j] = tile[uint64(read_at + kh * (DH * PITCH) + j)]
                    for kw in range(KW):
                        for m in range(MO):
                            wv = wr[m * KHW + kh * KW + kw]
                            for p in range(PX):
                                acc[m * PX + p] += xr[p * SW + kw * DW] * wv
                cuda.syncthreads()
                x_c += plane_size
                w_c += KHW
            oh = oh0 + r
            ow = ow0 + cx * PX
            if valid and oh < OH:
                for m in range(MO):
                    if m < m_left:
                        o = o0 + m
                        b = float32(bias[o]) if has_bias else zero
                        row_out = ((n * O + o) * OH + oh) * OW + ow
                        for p in range(PX):
                            if ow + p < OW:
                                out[uint64(row_out + p)] = apply_activation(acc[m * PX + p] + b, act)

    kernel.__name__ = kernel.__qualname__ = (
        f"_conv2d_grouped_kernel_{TH}x{TW}_k{KH}x{KW}_s{SH}x{SW}_d{DH}x{DW}_m{MO}")
    kernel.launch_bounds = (NTHREADS, 8)
    kernel.geometry = dict(TH=TH, TW=TW, NP=NP, TIH=TIH, TIW=TIW, PITCH=PITCH, MO=MO)
    return kernel


def channels_per_thread(og: int, taps: int) -> int:
    """MO: the most output channels of a group (4, 2 or 1) that divide OG and whose weights fit WEIGHT_REGISTERS."""
    return next(mo for mo in MOS if og % mo == 0 and mo * taps <= WEIGHT_REGISTERS)


def shared_bytes(th, tw, kh, kw, sh, sw, dh, dw) -> int:
    """Bytes of the block's shared input tiles for a tile configuration (before the row pitch)."""
    np_ = NTHREADS * PX // (th * tw)
    return 4 * np_ * input_extent(th, kh, sh, dh) * (input_extent(tw, kw, sw, dw) + 31)


def choose_tile(OH, OW, planes, kh, kw, sh, sw, dh, dw):
    """(TH, TW) of TILES for these outputs, or None where no tile fits MAX_SHARED_BYTES.

    Each block costs what it computes and what it stages: its NP planes' TH x TW outputs
    (computed whether inside the output or not) and their input tiles. The tile with the
    least total over the whole convolution wins; ties go to the larger tile.
    """
    best = None
    for th, tw in TILES:
        if shared_bytes(th, tw, kh, kw, sh, sw, dh, dw) > MAX_SHARED_BYTES:
            continue
        np_ = NTHREADS * PX // (th * tw)
        blocks = -(-planes // np_) * -(-OH // th) * -(-OW // tw)
        cost = blocks * np_ * (th * tw + input_extent(th, kh, sh, dh) * input_extent(tw, kw, sw, dw))
        if best is None or cost < best[0]:
            best = (cost, (th, tw))
    return None if best is None else best[1]


def fits(data_shape, weight_shape, out_shape, groups, strides, dilation) -> bool:
    """Whether this kernel takes the convolution (kernel size within MAX_KERNEL, a tile that fits)."""
    _, CG, KH, KW = weight_shape
    if max(KH, KW) > MAX_KERNEL:
        return False
    O = int(weight_shape[0])
    planes = int(data_shape[0]) * O // channels_per_thread(O // groups, KH * KW)
    return choose_tile(int(out_shape[2]), int(out_shape[3]), planes, KH, KW, *strides, *dilation) is not None


def launch_grouped_conv2d(target, out, data, weight, b1, has_bias, *, strides, padding, dilation, groups,
                          activation) -> int:
    """Launch the grouped/depthwise kernel on `target` (shapes validated by the ISA, `fits` true;
    b1 the bias as O values, or any 1-D view when has_bias is 0); returns the launches (1)."""
    N, C, H, W = (int(d) for d in data.shape)
    O, CG, KH, KW = (int(d) for d in weight.shape)
    OH, OW = int(out.shape[2]), int(out.shape[3])
    (sh, sw), (pt, pl, _, _), (dh, dw) = strides, padding, dilation
    OG = O // groups
    MO = channels_per_thread(OG, KH * KW)
    MB = OG // MO
    planes = N * groups * MB
    TH, TW = choose_tile(OH, OW, planes, KH, KW, sh, sw, dh, dw)
    kernel = grouped_kernel(TH, TW, KH, KW, sh, sw, dh, dw, MO)
    NP = kernel.geometry["NP"]
    tiles_w = -(-OW // TW)
    tiles = -(-OH // TH) * tiles_w
    blocks = -(-planes // NP) * tiles
    target.launch(
        kernel, min(blocks, _MAX_BLOCKS), NTHREADS,
        target.reshape(out, (math.prod(out.shape),)), target.reshape(data, (N * C * H * W,)),
        target.reshape(weight, (O * CG * KH * KW,)), b1, C, H, W, O, OG, CG, groups, OH, OW, MB, planes,
        tiles_w, tiles, blocks, pt, pl, has_bias, ACTIVATIONS[activation],
    )
    return 1
