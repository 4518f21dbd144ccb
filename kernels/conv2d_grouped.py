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
import linecache
import math
from types import SimpleNamespace

from numba import cuda, float32, int64, uint64

from .activation import ACTIVATIONS, apply_activation
from .epilogue import IDENTITY, fused_kernel
from .epilogue import args as epilogue_args
from .grid import chunk_starts, dims_of

NTHREADS = 128
PX = 4  # outputs per thread, neighbours along the output row
# (TH, TW): output rows x columns of one plane's tile; NP = NTHREADS * PX / (TH * TW) planes per block.
TILES = ((16, 32), (8, 16), (8, 8), (4, 4))
MAX_KERNEL = 7  # taps per side the kernels unroll (larger: the direct kernel)
MAX_SHARED_BYTES = 32 * 1024  # per block, leaving an SM room for several blocks
# Registers for the weights a thread keeps (MO * KH * KW): MO is the largest of MOS within it.
WEIGHT_REGISTERS = 64
MOS = (4, 2, 1)
_MAX_GRID_X = (1 << 31) - 1  # blocks per launch (gridDim.x); more take more launches


def input_extent(out_extent: int, kernel: int, stride: int, dilation: int) -> int:
    """Input rows (or columns) that `out_extent` outputs of a kernel of `kernel` taps read."""
    return (out_extent - 1) * stride + (kernel - 1) * dilation + 1


def _most_per_bank(words) -> int:
    """The most distinct words of one access that fall in one of the 32 shared banks."""
    banks: dict[int, set] = {}
    for word in words:
        banks.setdefault(word % 32, set()).add(word)
    return max(len(v) for v in banks.values())


def _warp_threads(np_: int, st: int):
    """(slot, thread in the plane) of warp 0's threads."""
    return [divmod(t, st) for t in range(min(32, np_ * st))]


def shared_pitch(width: int, words_at) -> int:
    """Words per shared row, at least `width`: the first with the fewest bank conflicts of
    the accesses `words_at(pitch)` gives (lists of one warp's words, one list per access)."""
    return min(range(width, width + 32), key=lambda p: (sum(_most_per_bank(a) for a in words_at(p)), p))


def _generated(name: str, source: str, namespace: dict):
    """The function `name` that `source` defines, compiled with `namespace` as its globals;
    the source is registered with linecache so tracebacks (the simulator's) show its lines."""
    filename = f"<simaccel generated {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


@functools.lru_cache(maxsize=None)
def geometry(TH, TW, KH, KW, SH, SW, DH, DW, MO) -> dict:
    """A tile configuration's thread layout and shared arrays: TX threads along a tile row, ST
    per plane, NP planes per block; the TIH x TIW input tile in rows of PITCH words, the MO x
    TH x TW accumulators in rows of SPITCH words; `bytes` of shared memory in all."""
    TX = TW // PX
    ST = TH * TX
    NP = NTHREADS // ST
    TIH = input_extent(TH, KH, SH, DH)
    TIW = input_extent(TW, KW, SW, DW)
    warp = _warp_threads(NP, ST)
    # Input tile: a thread reads row r * SH + kh * DH from column cx * PX * SW on.
    PITCH = shared_pitch(TIW, lambda p: [[(s * TIH + (lt // TX) * SH) * p + (lt % TX) * PX * SW for s, lt in warp]])
    # Accumulators go out through shared memory: written as a thread holds them (PX
    # neighbours per channel), read back row by row (consecutive threads, consecutive columns).
    SPITCH = shared_pitch(TW, lambda p: [[(s * MO * TH + lt // TX) * p + (lt % TX) * PX + q for s, lt in warp]
                                         for q in range(PX)]
                          + [[(s * MO * TH + lt // TW) * p + lt % TW for s, lt in warp]])
    return dict(TH=TH, TW=TW, TX=TX, ST=ST, NP=NP, TIH=TIH, TIW=TIW, PITCH=PITCH, SPITCH=SPITCH, MO=MO,
                bytes=4 * NP * (TIH * PITCH + MO * TH * SPITCH))


@functools.lru_cache(maxsize=None)
def grouped_kernel(TH, TW, KH, KW, SH, SW, DH, DW, MO, ONE_CHANNEL, epilogue=IDENTITY):
    """The kernel function for one geometry (see the module docstring), cached so that every
    launch of a geometry launches (and compiles, records and AOT-compiles) one function.

    Its body is generated with the taps, outputs and channels unrolled into scalars (a loop
    LLVM left rolled would put the accumulators in local memory); the epilogue is one loop
    around the one store point, which goes through `epilogue` (kernels/epilogue.py)."""
    geo = geometry(TH, TW, KH, KW, SH, SW, DH, DW, MO)
    g = SimpleNamespace(**geo, KH=KH, KW=KW, SH=SH, SW=SW, DH=DH, DW=DW, KHW=KH * KW, SLOT_WORDS=geo["TIH"] * geo["PITCH"],
                        STASH_M=TH * geo["SPITCH"], STAGED=geo["TIH"] * geo["TIW"], TILE_OUT=TH * TW,
                        used=sorted({p * SW + kw * DW for p in range(PX) for kw in range(KW)}))
    g.STASH_SLOT = MO * g.STASH_M
    lines = _setup_lines(g) + _channel_loop_lines(g, ONE_CHANNEL) + _store_lines(g)
    NAME = f"_conv2d_grouped_kernel_{TH}x{TW}_k{KH}x{KW}_s{SH}x{SW}_d{DH}x{DW}_m{MO}{'_c1' if ONE_CHANNEL else ''}"
    source = "\n".join(lines).replace("{NAME}", NAME) + "\n"
    kernel = _generated(NAME, source, dict(__name__=__name__, cuda=cuda, float32=float32, uint64=uint64, int64=int64,
                                          apply_activation=apply_activation, epilogue=epilogue))
    kernel.source = source
    kernel.launch_bounds = (NTHREADS, 4)
    kernel.geometry = geo
    return kernel


def _setup_lines(g) -> list[str]:
    """The kernel's signature and set-up: this thread's place in its plane's tile and in the
    shared arrays, the block's tile and plane, and its MO x PX accumulators at zero."""
    lines = []
    emit = lines.append
    emit("def {NAME}(out, x, w, bias, C, H, W, O, OG, CG, groups, OH, OW, MB, planes, tiles_w, tiles, bid0,")
    emit("        pt, pl, has_bias, act, e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23):")
    emit("    tile = cuda.shared.array(%d, float32)" % (g.NP * g.SLOT_WORDS))
    emit("    stash = cuda.shared.array(%d, float32)" % (g.NP * g.STASH_SLOT))
    emit("    zero = float32(0.0)")
    emit("    t = cuda.threadIdx.x")
    emit(f"    slot = t // {g.ST}")
    emit(f"    lt = t - slot * {g.ST}")
    emit(f"    r = lt // {g.TX}")
    emit(f"    cx = lt - r * {g.TX}")
    emit(f"    r0 = lt // {g.TIW}  # the input element this thread stages first: lt of the flat tile")
    emit(f"    c0 = lt - r0 * {g.TIW}")
    emit(f"    tile_at = slot * {g.SLOT_WORDS}")
    emit(f"    read_at = tile_at + r * {g.SH * g.PITCH} + cx * {PX * g.SW}")
    emit(f"    stash_at = slot * {g.STASH_SLOT}")
    emit(f"    stash_in = stash_at + r * {g.SPITCH} + cx * {PX}")
    emit("    plane_size = H * W")
    emit(f"    cgk = CG * {g.KHW}")
    emit("    bid = bid0 + cuda.blockIdx.x")
    emit("    pb = bid // tiles")
    emit("    ti = bid - pb * tiles")
    emit("    tr = ti // tiles_w")
    emit(f"    oh0 = tr * {g.TH}")
    emit(f"    ow0 = (ti - tr * tiles_w) * {g.TW}")
    emit(f"    ih_s = oh0 * {g.SH} - pt")
    emit(f"    iw_s = ow0 * {g.SW} - pl")
    emit(f"    plane = pb * {g.NP} + slot")
    emit("    valid = plane < planes")
    emit("    if not valid:")
    emit("        plane = 0  # reads in bounds (weights of channel 0), writes nothing")
    emit("    ng = plane // MB")
    emit("    mb = plane - ng * MB")
    emit("    n = ng // groups")
    emit("    g = ng - n * groups")
    emit(f"    o0 = g * OG + mb * {g.MO}")
    emit("    x_c = (n * C + g * CG) * plane_size  # input channel c of the group, from c = 0")
    emit(f"    w_c = o0 * cgk")
    for m in range(g.MO):
        for q in range(PX):
            emit(f"    a{m}_{q} = zero")
    return lines


def _channel_loop_lines(g, one_channel: bool) -> list[str]:
    """The loop over the group's input channels: the input tile staged, the channel's weights
    loaded, every tap of every kernel row multiplied."""
    lines = []
    emit = lines.append
    # One input channel per group (depthwise) is a loop of one trip LLVM removes: nothing is
    # hoisted above it to stay live through it (the tile's per-pass offsets would be).
    emit("    for c in range(1):" if one_channel else "    for c in range(CG):")
    # 1. The input tile, flat index lt + q * ST: row and column from (r0, c0) by constants.
    for q in range(-(-g.STAGED // g.ST)):
        dq, rq = divmod(q * g.ST, g.TIW)
        emit(f"        rq = r0 + {dq}")
        emit(f"        cq = c0 + {rq}")
        if rq:
            emit(f"        if cq >= {g.TIW}:")
            emit(f"            cq -= {g.TIW}")
            emit("            rq += 1")
        indent = "        "
        if (q + 1) * g.ST > g.STAGED:
            emit(f"        if rq < {g.TIH}:")
            indent += "    "
        emit(f"{indent}ih = ih_s + rq")
        emit(f"{indent}iw = iw_s + cq")
        emit(f"{indent}v = zero")
        emit(f"{indent}if valid and ih >= 0 and ih < H and iw >= 0 and iw < W:")
        emit(f"{indent}    v = float32(x[uint64(x_c + ih * W + iw)])")
        emit(f"{indent}tile[uint64(tile_at + rq * {g.PITCH} + cq)] = v")
    # 2. The channel's weights of the thread's MO output channels (the same in every thread).
    for m in range(g.MO):
        emit(f"        w_m = w_c + {m} * cgk" if m else "        w_m = w_c")
        for k in range(g.KHW):
            emit(f"        w{m}_{k} = float32(w[uint64(w_m + {k})])")
    emit("        cuda.syncthreads()")
    # 3. Per kernel row: the input values the thread's windows span, then every tap.
    for kh in range(g.KH):
        for j in g.used:
            emit(f"        x{j} = tile[uint64(read_at + {kh * g.DH * g.PITCH + j})]")
        for kw in range(g.KW):
            for m in range(g.MO):
                for q in range(PX):
                    emit(f"        a{m}_{q} += x{q * g.SW + kw * g.DW} * w{m}_{kh * g.KW + kw}")
    emit("        cuda.syncthreads()")
    emit("        x_c += plane_size")
    emit(f"        w_c += {g.KHW}")
    return lines


def _store_lines(g) -> list[str]:
    """The accumulators through shared memory to the one store point (output columns fastest
    across threads), where bias, activation and the epilogue apply."""
    lines = []
    emit = lines.append
    for m in range(g.MO):
        for q in range(PX):
            emit(f"    stash[uint64(stash_in + {m * g.STASH_M + q})] = a{m}_{q}")
    emit("    cuda.syncthreads()")
    emit(f"    for q in range({g.MO * PX}):")
    emit(f"        e = lt + q * {g.ST}")
    emit(f"        m = e // {g.TILE_OUT}")
    emit(f"        e -= m * {g.TILE_OUT}")
    emit(f"        rr = e // {g.TW}")
    emit(f"        cc = e - rr * {g.TW}")
    emit("        oh = oh0 + rr")
    emit("        ow = ow0 + cc")
    emit("        if valid and oh < OH and ow < OW:")
    emit("            o = o0 + m")
    emit("            b = float32(bias[o]) if has_bias else zero")
    emit(f"            v = stash[uint64(stash_at + m * {g.STASH_M} + rr * {g.SPITCH} + cc)]")
    emit("            i = ((n * O + o) * OH + oh) * OW + ow")
    emit("            out[uint64(i)] = epilogue(apply_activation(v + b, act), int64(i), e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23)")
    return lines


def channels_per_thread(og: int, taps: int) -> int:
    """MO: the most output channels of a group (4, 2 or 1) that divide OG and whose weights fit WEIGHT_REGISTERS."""
    return next(mo for mo in MOS if og % mo == 0 and mo * taps <= WEIGHT_REGISTERS)


def choose_tile(OH, OW, planes, kh, kw, sh, sw, dh, dw, mo):
    """(TH, TW) of TILES for these outputs, or None where no tile fits MAX_SHARED_BYTES.

    Each block costs what it computes and what it stages: its NP planes' TH x TW outputs
    (computed whether inside the output or not) and their input tiles, each row of those
    counted as the 32-byte sectors it reads (a row starts anywhere in a sector: one more than
    its width needs), in words. The tile with the least total over the whole convolution
    wins; ties go to the larger tile. Narrow tiles thus win only where the output is narrow.
    """
    best = None
    for th, tw in TILES:
        if geometry(th, tw, kh, kw, sh, sw, dh, dw, mo)["bytes"] > MAX_SHARED_BYTES:
            continue
        np_ = NTHREADS * PX // (th * tw)
        blocks = -(-planes // np_) * -(-OH // th) * -(-OW // tw)
        row_words = 8 * (-(-input_extent(tw, kw, sw, dw) // 8) + 1)
        cost = blocks * np_ * (th * tw + input_extent(th, kh, sh, dh) * row_words)
        if best is None or cost < best[0]:
            best = (cost, (th, tw))
    return None if best is None else best[1]


def plan(data_shape, weight_shape, out_shape, groups, strides, dilation):
    """(TH, TW, MO) this kernel runs the convolution with, or None where it does not take it
    (a kernel side above MAX_KERNEL, or no tile within MAX_SHARED_BYTES)."""
    N = dims_of(data_shape)[0]
    O, _, KH, KW = dims_of(weight_shape)
    if max(KH, KW) > MAX_KERNEL:
        return None
    MO = channels_per_thread(O // groups, KH * KW)
    tile = choose_tile(*dims_of(out_shape[2:]), N * O // MO, KH, KW, *strides, *dilation, MO)
    return None if tile is None else (*tile, MO)


def fits(data_shape, weight_shape, out_shape, groups, strides, dilation) -> bool:
    """Whether this kernel takes the convolution (see `plan`)."""
    return plan(data_shape, weight_shape, out_shape, groups, strides, dilation) is not None


def launch_grouped_conv2d(target, out, data, weight, b1, has_bias, *, strides, padding, dilation, groups,
                          activation, epilogue=None) -> int:
    """Launch the grouped/depthwise kernel on `target` (shapes validated by the ISA, `fits` true;
    b1 the bias as O values, or any 1-D view when has_bias is 0); returns the launches (1)."""
    N, C, H, W = dims_of(data.shape)
    O, CG, KH, KW = dims_of(weight.shape)
    OH, OW = dims_of(out.shape[2:])
    (sh, sw), (pt, pl, _, _), (dh, dw) = strides, padding, dilation
    TH, TW, MO = plan(data.shape, weight.shape, out.shape, groups, strides, dilation)
    OG = O // groups
    MB = OG // MO
    planes = N * groups * MB
    shape = (TH, TW, KH, KW, sh, sw, dh, dw, MO, CG == 1)
    if epilogue is None:
        kernel = grouped_kernel(*shape)
    else:
        kernel = fused_kernel(("conv2d_grouped", *shape), epilogue, lambda fn: grouped_kernel(*shape, fn))
    tiles_w = -(-OW // TW)
    tiles = -(-OH // TH) * tiles_w
    blocks = -(-planes // kernel.geometry["NP"]) * tiles
    args = (target.reshape(out, (math.prod(out.shape),)), target.reshape(data, (N * C * H * W,)),
            target.reshape(weight, (O * CG * KH * KW,)), b1, C, H, W, O, OG, CG, groups, OH, OW, MB, planes,
            tiles_w, tiles)
    fused = epilogue_args(target, epilogue, out)
    launches = 0
    for bid0 in chunk_starts(blocks, _MAX_GRID_X):
        target.launch(kernel, min(blocks - bid0, _MAX_GRID_X), NTHREADS, *args, bid0, pt, pl, has_bias,
                      ACTIVATIONS[activation], *fused)
        launches += 1
    return launches
