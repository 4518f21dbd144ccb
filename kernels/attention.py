"""The attention kernels (simaccel.attention): tensor-core tiles, or one warp per query row.

float16 and bfloat16 with query and value head dims both 64 or both 128 run on tensor cores:
a Numba kernel around attention.cu's flash-attention tile (64 query rows of one key/value head
a block, the rows packed with their query-head group for GQA; see that file), whose shared
memory is dynamic and sized per target (`dynamic_shared_bytes`). A bias
(`simaccel.attention_bias`) reaches the tile's `_bias` entries (compiled apart: the tile
without one has no code for it) as an untyped pointer, its dtype's code and its four
broadcast strides (`bias_operand`). On the simulator a numpy model of the block stands in
for the C++ (`_simulated_tile`), so the launch geometry, the packing of grouped heads and the
bias' strides are tested on the CPU.

Everything else (float32, other head dims) runs on the one-warp-per-row kernel below. For
query row i of batch b and head h, the warp walks the keys in chunks of 32: the query row sits
in shared memory (D <= 256), each lane scores one key of the chunk (its own dot product over
D), the chunk's max is taken across the warp (xor shuffles; on the simulator, through shared
memory), and the running max m, each lane's share of the running sum l and the accumulators
(8 of the output's Dv a lane) are rescaled by exp(m_old - m_new); then each key's weight is
broadcast from its lane and every lane adds weight * V[j] to its accumulators. So there is one
warp reduction per 32 keys (not per key), scores are never stored and any key length runs. A
causal mask ends the walk at key i + offset; a bias (rank 4, broadcast to (B, H, S, T) through
strides of 0) is added to each score after the scaling, as Relax's attention_bias does. The output is acc / l, 0 where no key has weight
(none seen, or every score -inf), NaN where a score is. Float32 throughout; loads convert from
the input dtype, the store rounds to the output's.

It reads K and V once per query row (from L2 for the rows that share them). Where its warps
are few (a decode step), the keys are split over warps as over the tiles below, through the
same workspace layout and combining kernel. Long float32 prefills would want a tile of their
own.

Grouped-query attention (H query heads over HKV key/value heads, H a multiple of HKV): query
head h reads key/value head h // (H // HKV), in both kernels.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, types
from numba.cuda.extending import intrinsic, register_jitable
from numba.cuda.types import bfloat16

from .grid import broadcast_strides, dims_of
from .main_loop import HERE, data_address, data_pointer, declare_cpp, same
from .simulator import host_array
from .target import with_simulator_twin

WARP = 32
PER_LANE = 8  # head-dim values a lane keeps: D, Dv <= 256 (simaccel.ops.builtin.attention.MAX_HEAD_DIM)
ROW = PER_LANE * WARP  # the query row in shared memory


@register_jitable
def _larger(a, b):
    """max(a, b) where a NaN loses to a number: a row's NaN score spreads through its weight
    (exp(NaN - max) is NaN), not through the max, unless every score is NaN."""
    return b if b > a or a != a else a


@register_jitable
def _warp_sum(buf, value, lane):
    """`value` summed over the warp, every lane getting the sum: xor shuffles."""
    for s in range(5):
        value += cuda.shfl_xor_sync(0xFFFFFFFF, value, 16 >> s)
    return value


@register_jitable
def _warp_max(buf, value, lane):
    """`_larger` of `value` over the warp, every lane getting it: xor shuffles."""
    for s in range(5):
        value = _larger(value, cuda.shfl_xor_sync(0xFFFFFFFF, value, 16 >> s))
    return value


@register_jitable
def _lane_value(buf, value, lane, src):
    """Lane `src`'s `value`, to every lane."""
    return cuda.shfl_sync(0xFFFFFFFF, value, src)


@register_jitable
def _simulated_warp_sum(buf, value, lane):
    """The simulator's `_warp_sum` (it has no shuffles): through shared memory, between barriers."""
    buf[lane] = value
    cuda.syncthreads()
    total = float32(0)
    for other in range(WARP):
        total += buf[other]
    cuda.syncthreads()
    return total


@register_jitable
def _simulated_warp_max(buf, value, lane):
    """The simulator's `_warp_max`: through shared memory."""
    buf[lane] = value
    cuda.syncthreads()
    top = buf[0]
    for other in range(1, WARP):
        top = _larger(top, buf[other])
    cuda.syncthreads()
    return top


@register_jitable
def _simulated_lane_value(buf, value, lane, src):
    """The simulator's `_lane_value`: through shared memory."""
    buf[lane] = value
    cuda.syncthreads()
    got = buf[src]
    cuda.syncthreads()
    return got


@register_jitable
def _walk_keys(acc, row, buf, k, v, b, kvh, lane, first, stop, D, DV, scale, bias, bias_row, bias_step, has_bias,
               simulator):
    """The online softmax of the query row in shared `row` over keys [first, stop) of key/value
    head `kvh`, 32 keys a chunk: adds this lane's PER_LANE outputs (unnormalised) to `acc` and
    returns (the scores' max, this lane's share of the sum). With `has_bias`, key j's score gets
    bias[bias_row + j * bias_step] added after the scaling. `simulator`: the warp's exchanges
    through shared memory (the simulator has no shuffles)."""
    m = float32(-math.inf)
    total = float32(0)
    for start in range(first, stop, WARP):
        j = start + lane  # each lane scores one key of the chunk
        score = float32(-math.inf)
        if j < stop:
            part = float32(0)
            for d in range(D):
                part += row[d] * float32(k[b, j, kvh, d])
            score = part * scale
            if has_bias:
                score += float32(bias[bias_row + j * bias_step])
        top = _larger(m, _simulated_warp_max(buf, score, lane) if simulator else _warp_max(buf, score, lane))
        correction = math.exp(m - top) if m > -math.inf else float32(0)
        if top > -math.inf:
            p = math.exp(score - top)
        else:  # every score so far -inf (or NaN)
            p = score if score != score else float32(0)
        total = total * correction + p
        for t in range(PER_LANE):
            acc[t] *= correction
        for n in range(min(WARP, stop - start)):
            weight = _simulated_lane_value(buf, p, lane, n) if simulator else _lane_value(buf, p, lane, n)
            for t in range(PER_LANE):
                d = lane + WARP * t
                if d < DV:
                    acc[t] += weight * float32(v[b, start + n, kvh, d])
        m = top
    return m, total


@register_jitable
def _load_row(row, acc, q, b, i, h, D, lane):
    """Query row (b, i, h) into shared `row` (float32), this lane's accumulators to 0."""
    for t in range(PER_LANE):
        d = lane + WARP * t
        if d < D:
            row[d] = float32(q[b, i, h, d])
        acc[t] = float32(0)
    cuda.syncthreads()


def _attention_kernel(simulator):
    warp_sum = _simulated_warp_sum if simulator else _warp_sum

    def _attention_kernel(out, q, k, v, bias, T, D, DV, G, scale, causal, offset, has_bias, bs0, bs1, bs2, bs3):
        i, h, b = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
        lane = cuda.threadIdx.x
        buf = cuda.shared.array(WARP, float32)
        row = cuda.shared.array(ROW, float32)  # the query row, read by every lane
        acc = cuda.local.array(PER_LANE, float32)
        _load_row(row, acc, q, b, i, h, D, lane)
        limit = min(T, max(i + offset + 1, 0)) if causal else T
        m, total = _walk_keys(acc, row, buf, k, v, b, h // G, lane, 0, limit, D, DV, float32(scale), bias,
                              b * bs0 + h * bs1 + i * bs2, bs3, has_bias, simulator)
        total = warp_sum(buf, total, lane)
        for t in range(PER_LANE):
            d = lane + WARP * t
            if d < DV:
                out[b, i, h, d] = acc[t] / total if total != 0 else float32(0)  # no key weighed: 0

    return _attention_kernel


def _attention_split_kernel(simulator):
    warp_sum = _simulated_warp_sum if simulator else _warp_sum

    def _attention_split_kernel(partial, q, k, v, bias, S, T, D, DV, H, HKV, scale, causal, offset, splits, chunk,
                                has_bias, bs0, bs1, bs2, bs3):
        """Keys [split * chunk, (split + 1) * chunk) of query row blockIdx.x, head blockIdx.y,
        batch blockIdx.z // splits (split blockIdx.z % splits): its output (unnormalised), max
        (base 2) and sum into `partial`, in the tiles' layout (packed row s * G + h % G of
        key/value head h // G), for `_combine_kernel`."""
        i, h, z = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
        b, split = z // splits, z % splits
        G = H // HKV
        lane = cuda.threadIdx.x
        buf = cuda.shared.array(WARP, float32)
        row = cuda.shared.array(ROW, float32)
        acc = cuda.local.array(PER_LANE, float32)
        _load_row(row, acc, q, b, i, h, D, lane)
        limit = min(T, max(i + offset + 1, 0)) if causal else T
        first = split * chunk
        m, total = _walk_keys(acc, row, buf, k, v, b, h // G, lane, first, min(limit, first + chunk), D, DV,
                              float32(scale), bias, b * bs0 + h * bs1 + i * bs2, bs3, has_bias, simulator)
        total = warp_sum(buf, total, lane)
        base = ((((b * HKV + h // G) * splits + split) * S * G) + i * G + h % G) * (DV + 2)
        for t in range(PER_LANE):
            d = lane + WARP * t
            if d < DV:
                partial[base + d] = acc[t]
        if lane == 0:
            partial[base + DV] = m * float32(LOG2E)
            partial[base + DV + 1] = total

    return _attention_split_kernel


ATTENTION_KERNEL = with_simulator_twin(_attention_kernel)
ATTENTION_SPLIT_KERNEL = with_simulator_twin(_attention_split_kernel)
WARPS_A_BLOCK = 8  # the one-warp kernel's warps counted as one block of key_splits' budget

# -- tensor-core tiles (attention.cu) -------------------------------------------------------

SOURCE = "attention.cu"
TILE_ROWS = 64  # packed query rows of a block (attention.cu's BLOCK_M), 4 warps of 16
TILE_THREADS = 128
TILE_HEAD_DIMS = (64, 128)
TILE_DTYPES = {"float16": (types.float16, "f16"), "bfloat16": (bfloat16, "bf16")}


def dynamic_shared_bytes(d: int, target: tuple) -> int:
    """Dynamic shared memory of a head-dim-`d` tile compiled for `target`: its Q tile and two
    stages of K and V tiles of 64 rows (attention.cu's `shared_bytes`); none below sm_80,
    where the tile runs without tensor cores."""
    return 0 if tuple(target[:2]) < (8, 0) else (TILE_ROWS + 4 * 64) * d * 2


SPLIT_BLOCKS = 256  # blocks a split launch aims at: about two per SM of a large GPU
SPLIT_MIN_KEYS = 512  # keys below which a launch is never split
# At most 32 ranges: a single-sequence grouped-query decode step (8 key/value heads: 8 tiles)
# then fills SPLIT_BLOCKS, two blocks an SM, and took 14.5 us on an H100 where 16 splits took
# 18.0 (torch's SDPA: 11.5; results/gpu/2026-12-07-h100-bias-tile-gemv/).
MAX_SPLITS = 32
# The workspace a split launch asks for: a row of Dv + 2 floats (output, max, sum) per (batch,
# key/value head, split, packed query row). Splitting needs tiles * splits <= SPLIT_BLOCKS (so
# B * S * H * splits <= 64 SPLIT_BLOCKS), a bound that holds at any size of a symbolic region.
PARTIAL_ROWS = SPLIT_BLOCKS * TILE_ROWS
LOG2E = 1.4426950408889634


def key_splits(tiles, keys) -> int:
    """How many ranges the keys of a launch of `tiles` blocks are split into (flash-decoding):
    1 where the tiles fill the GPU or the keys are few, else the power of two that brings the
    blocks up to SPLIT_BLOCKS (at most MAX_SPLITS). Few questions of the sizes: each is a size
    plan's guard (simaccel.size_plans)."""
    if keys < SPLIT_MIN_KEYS or tiles * 2 > SPLIT_BLOCKS:
        return 1
    splits = 2
    while splits < MAX_SPLITS and tiles * splits * 2 <= SPLIT_BLOCKS:
        splits *= 2
    return splits


def _simulated_tile(out, q, k, v, partial, S, T, H, HKV, scale, causal, offset, splits, chunk, bias, bias_kind,
                    bs0, bs1, bs2, bs3):
    """The simulator's stand-in for attention.cu's entry: block (x, y, z)'s 64 packed rows of
    key/value head y of batch z // splits, computed by thread 0 with numpy (float32, an exact
    softmax), against keys [split * chunk, (split + 1) * chunk) of split z % splits where
    splits > 1, whose output, max (base 2) and sum go to `partial`, as attention.cu writes them;
    with `bias_kind`, the flat `bias` read through its strides and added after the scaling."""
    if cuda.threadIdx.x != 0:
        return 0
    G = H // HKV
    b, split, kvh, m0 = cuda.blockIdx.z // splits, cuda.blockIdx.z % splits, cuda.blockIdx.y, cuda.blockIdx.x * TILE_ROWS
    rows = np.arange(m0, min(m0 + TILE_ROWS, S * G))
    s, h = rows // G, kvh * G + rows % G
    first, stop = (split * chunk, min(T, (split + 1) * chunk)) if splits > 1 else (0, T)
    queries = host_array(q)[b, s, h].astype(np.float32)
    keys, values = (host_array(a)[b, first:stop, kvh].astype(np.float32) for a in (k, v))
    with np.errstate(all="ignore"):
        scores = queries @ keys.T * np.float32(scale)
        if bias_kind:
            at = b * bs0 + h[:, None] * bs1 + s[:, None] * bs2 + np.arange(first, stop)[None, :] * bs3
            scores = scores + host_array(bias)[at].astype(np.float32)
        if causal:
            scores = np.where(np.arange(first, stop)[None, :] <= s[:, None] + offset, scores, -np.inf)
        top = scores.max(axis=1, keepdims=True, initial=-np.inf)
        e = np.exp(scores - np.where(np.isfinite(top), top, 0))
        total = e.sum(axis=1, keepdims=True)
        if splits > 1:
            dv = values.shape[1]
            at = (((b * HKV + kvh) * splits + split) * S * G + rows) * (dv + 2)
            dst = host_array(partial).reshape(-1)
            for r, base in enumerate(at):
                dst[base:base + dv] = e[r] @ values
                dst[base + dv], dst[base + dv + 1] = top[r, 0] * np.float32(LOG2E), total[r, 0]
            return 0
        dst = host_array(out)
        dst[b, s, h] = np.where(total == 0, 0, e @ values / np.where(total == 0, 1, total)).astype(dst.dtype)
    return 0


@intrinsic
def _no_floats(typingctx):
    """A null float pointer: the tile's `partial` where its keys are not split."""
    sig = types.CPointer(types.float32)()

    def codegen(context, builder, signature, args):
        return context.get_constant_null(signature.return_type)

    return sig, codegen


def _tile_kernel(dtype: str, d: int, split: bool, biased: bool, simulator: bool):
    """The kernel around attention.cu's tile for operand `dtype` and head dim `d`, writing the
    output or (`split`) its split's share to a float32 `partial`; on the simulator, around its
    numpy model. `biased`: around the entry that reads `bias`, a flat array of kind
    `bias_kind` (`bias_operand`); the other entry never reads it."""
    if simulator:
        entry, pointer, address, none = _simulated_tile, same, same, None
    else:
        numba_type, infix = TILE_DTYPES[dtype]
        operand, i64 = types.CPointer(numba_type), types.int64
        sig = types.int32(operand, operand, operand, operand, types.CPointer(types.float32), i64, i64, i64, i64,
                          types.float32, i64, i64, i64, i64, types.voidptr, i64, i64, i64, i64, i64)
        entry = declare_cpp(f"simaccel_attention_{'bias_' if biased else ''}{infix}_d{d}", sig, SOURCE)
        pointer, address = data_pointer, data_address

    if split:
        def kernel(partial, q, k, v, S, T, H, HKV, scale, causal, offset, splits, chunk, bias, bias_kind,
                   bs0, bs1, bs2, bs3):
            """Split z % splits of softmax(Q K^T * scale + bias) V for the 64 packed query rows
            (blockIdx.x) of key/value head blockIdx.y of batch blockIdx.z // splits, into `partial`."""
            # The entry's output is not written where the keys are split: q stands in for it.
            entry(pointer(q), pointer(q), pointer(k), pointer(v), pointer(partial), S, T, H, HKV, float32(scale),
                  causal, offset, splits, chunk, address(bias), bias_kind, bs0, bs1, bs2, bs3)
    elif simulator:
        def kernel(out, q, k, v, S, T, H, HKV, scale, causal, offset, bias, bias_kind, bs0, bs1, bs2, bs3):
            """softmax(Q K^T * scale + bias) V for the 64 packed query rows (blockIdx.x) of
            key/value head blockIdx.y of batch blockIdx.z."""
            entry(out, q, k, v, none, S, T, H, HKV, float32(scale), causal, offset, 1, 0, bias, bias_kind,
                  bs0, bs1, bs2, bs3)
    else:
        def kernel(out, q, k, v, S, T, H, HKV, scale, causal, offset, bias, bias_kind, bs0, bs1, bs2, bs3):
            """softmax(Q K^T * scale + bias) V for the 64 packed query rows (blockIdx.x) of
            key/value head blockIdx.y of batch blockIdx.z."""
            entry(pointer(out), pointer(q), pointer(k), pointer(v), _no_floats(), S, T, H, HKV, float32(scale),
                  causal, offset, 1, 0, address(bias), bias_kind, bs0, bs1, bs2, bs3)

    kernel.__name__ = kernel.__qualname__ = (f"_attention_{'split' if split else 'tile'}_kernel"
                                             + f"{'_bias' if biased else ''}_d{d}"
                                             + ("" if dtype == "float16" else f"_{dtype}"))
    if not simulator:
        kernel.link = (str(HERE / SOURCE),)
        kernel.dynamic_shared = functools.partial(dynamic_shared_bytes, d)
        kernel.launch_bounds = (TILE_THREADS, 2)
    return kernel


# (dtype, head dim, split, biased) -> kernel
TILE_KERNELS = {(dtype, d, split, biased): with_simulator_twin(_tile_kernel, dtype, d, split, biased)
                for dtype in TILE_DTYPES for d in TILE_HEAD_DIMS for split in (False, True) for biased in (False, True)}


def _combine_kernel(out, partial, S, H, HKV, splits, DV):
    """out[b, s, h] from its key splits' shares in `partial` (attention.cu's layout): each
    split's output and sum weighed by 2^(its max - the largest), summed, divided. Block (b, s,
    h) flattened, a thread per value of the head dim (DV >= MAX_SPLITS). 0 where no key weighed
    (every max -inf and every sum 0), NaN where a split's sum is (a NaN score).

    Latency, not bandwidth, is this kernel's cost (a few hundred KB in all), so every global
    load is issued before any is used: thread i < splits loads split i's max and sum, and each
    thread its MAX_SPLITS values (split indices clamped to the last split, their weights 0), in
    a loop of constant length that unrolls into independent loads."""
    r = cuda.blockIdx.x
    h, s, b = r % H, (r // H) % S, r // (H * S)
    G = H // HKV
    rows = S * G
    first = ((b * HKV + h // G) * splits) * rows + s * G + h % G  # split i's row: first + i * rows
    width = DV + 2
    t = cuda.threadIdx.x
    tops = cuda.shared.array(MAX_SPLITS, float32)
    sums = cuda.shared.array(MAX_SPLITS, float32)
    d = min(t, DV - 1)
    values = cuda.local.array(MAX_SPLITS, float32)
    for i in range(MAX_SPLITS):
        values[i] = partial[(first + min(i, splits - 1) * rows) * width + d]
    if t < MAX_SPLITS:
        base = (first + min(t, splits - 1) * rows) * width + DV
        tops[t] = partial[base] if t < splits else float32(-math.inf)
        sums[t] = partial[base + 1] if t < splits else float32(0)
    cuda.syncthreads()
    top = float32(-math.inf)
    for i in range(MAX_SPLITS):
        top = max(top, tops[i])
    total = float32(0)
    acc = float32(0)
    for i in range(MAX_SPLITS):
        w = math.exp((tops[i] - top) * float32(0.6931471805599453)) if top > -math.inf else float32(0)
        if i < splits:
            total += w * sums[i]
            acc += w * values[i]
    if t < DV:
        out[b, s, h, d] = acc / total if total != 0 else float32(0)


def bias_operand(target, bias, query, scores):
    """(flat bias, its kind, its element strides along `scores`' (B, H, S, T)) as the kernels
    take them: a C-contiguous rank-4 bias broadcast to the scores (stride 0 along its dims of 1),
    of kind 1 where it is float32 and 2 where it is the operands' dtype (the one-warp kernels
    read any kind alike); with no bias, kind 0 and a flat view of the query that is never read."""
    if bias is None:
        return target.reshape(query, (math.prod(dims_of(query.shape)),)), 0, (0, 0, 0, 0)
    shape = dims_of(bias.shape)
    kind = 1 if str(bias.dtype) == "float32" else 2
    return target.reshape(bias, (math.prod(shape),)), kind, tuple(broadcast_strides(shape, scores))


def launch_attention(target, out, query, key, value, bias=None, *, scale, causal, bottom_right) -> int:
    """Tensor-core tiles where the dtype and head dims allow (a block per 64 packed query rows,
    key/value head and batch), else one warp per (query row, head, batch);
    where those few leave the GPU idle, per key split too (WARPS_A_BLOCK warps counting as one
    block), then a combining launch. Returns the launch count (0 for an empty output)."""
    B, S, H, D = query.shape
    T, HKV, DV = key.shape[1], key.shape[2], value.shape[3]
    if B * S * H * DV == 0:
        return 0
    offset = abs(S - T) if bottom_right else 0
    flat, bias_kind, strides = bias_operand(target, bias, query, (B, H, S, T))
    biased = bias_kind != 0
    if D != DV or (str(query.dtype), D, False, biased) not in TILE_KERNELS:
        splits = key_splits(-(-(B * S * H) // WARPS_A_BLOCK), T)
        if splits == 1:
            target.launch(ATTENTION_KERNEL, (S, H, B), WARP, out, query, key, value, flat, T, D, DV, H // HKV,
                          float(scale), int(bool(causal)), offset, int(biased), *strides)
            return 1
        chunk = -(-T // (splits * WARP)) * WARP  # keys a split, whole chunks of 32
        return _split_and_combine(target, out, ATTENTION_SPLIT_KERNEL, (S, H, B * splits), WARP,
                                  (query, key, value, flat, S, T, D, DV, H, HKV, float(scale), int(bool(causal)),
                                   offset, splits, chunk, int(biased), *strides), HKV, splits)
    tiles = -(-(S * (H // HKV)) // TILE_ROWS)
    splits = key_splits(tiles * HKV * B, T)
    if splits == 1:
        target.launch(TILE_KERNELS[str(query.dtype), D, False, biased], (tiles, HKV, B), TILE_THREADS, out, query, key, value,
                      S, T, H, HKV, float(scale), int(bool(causal)), offset, flat, bias_kind, *strides)
        return 1
    chunk = -(-T // (splits * TILE_ROWS)) * TILE_ROWS  # keys a split, whole tiles of 64
    return _split_and_combine(target, out, TILE_KERNELS[str(query.dtype), D, True, biased], (tiles, HKV, B * splits),
                              TILE_THREADS, (query, key, value, S, T, H, HKV, float(scale), int(bool(causal)), offset,
                                             splits, chunk, flat, bias_kind, *strides), HKV, splits)


def _split_and_combine(target, out, kernel, grid, block, args, HKV, splits) -> int:
    """Launch split `kernel` (`grid`'s z counting the splits) on the workspace, its first
    argument, and `args`, each split writing its share there; then the combining kernel weighs
    them into `out` (B, S, H, DV). Returns the launch count, 2."""
    B, S, H, DV = out.shape
    partial = target.workspace((PARTIAL_ROWS * (int(DV) + 2),), np.float32)  # a head dim: a plain number
    target.launch(kernel, grid, block, partial, *args)
    target.launch(_combine_kernel, B * S * H, max(int(DV), MAX_SPLITS), out, partial, S, H, HKV, splits, DV)
    return 2
