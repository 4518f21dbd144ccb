"""The attention kernels (simaccel.attention): tensor-core tiles, or one warp per query row.

float16 and bfloat16 with query and value head dims both 64 or both 128 run on tensor cores:
a Numba kernel around attention.cu's flash-attention tile (64 query rows of one key/value head
a block, the rows packed with their query-head group for GQA; see that file), whose shared
memory is dynamic and sized per target (`dynamic_shared_bytes`). On the simulator a numpy model
of the block stands in for the C++ (`_simulated_tile`), so the launch geometry and the
packing of grouped heads are tested on the CPU.

Everything else runs on the one-warp-per-row kernel below. For query row i of batch b and head h, the warp walks the keys once: each lane holds 8 of the
row's D query values (D <= 256) and 8 of the output's Dv accumulators; per key j the lanes'
partial dot products are summed across the warp (xor shuffles; on the simulator, through
shared memory), scaled, and folded into the running max m, the running sum l and the
accumulators (rescaled by exp(m_old - m_new)), so scores are never stored and any key length
runs. A causal mask ends the walk at key i + offset. The output is acc / l, 0 where no key
has weight (none seen, or every score -inf), NaN where a score is. Float32 throughout; loads convert from the input dtype, the store
rounds to the output's.

This one is correct at any length and head dim up to 256, not fast: it reads K and V once per
query row (from L2 for neighbouring rows), and its loop is latency-bound.

Grouped-query attention (H query heads over HKV key/value heads, H a multiple of HKV): query
head h reads key/value head h // (H // HKV), in both kernels.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, types
from numba.cuda.extending import register_jitable
from numba.cuda.types import bfloat16

from .main_loop import HERE, data_pointer, declare_cpp, same
from .simulator import host_array
from .target import with_simulator_twin

WARP = 32
PER_LANE = 8  # head-dim values a lane keeps: D, Dv <= 256 (simaccel.ops.builtin.attention.MAX_HEAD_DIM)


@register_jitable
def _warp_sum(buf, value, lane):
    """`value` summed over the warp, every lane getting the sum: xor shuffles."""
    for s in range(5):
        value += cuda.shfl_xor_sync(0xFFFFFFFF, value, 16 >> s)
    return value


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


def _attention_kernel(simulator):
    reduce = _simulated_warp_sum if simulator else _warp_sum

    def _attention_kernel(out, q, k, v, T, D, DV, G, scale, causal, offset):
        i, h, b = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
        kvh = h // G
        lane = cuda.threadIdx.x
        buf = cuda.shared.array(WARP, float32)
        qr = cuda.local.array(PER_LANE, float32)
        acc = cuda.local.array(PER_LANE, float32)
        for t in range(PER_LANE):
            d = lane + WARP * t
            qr[t] = float32(q[b, i, h, d]) if d < D else float32(0)
            acc[t] = float32(0)
        limit = T
        if causal:
            limit = min(T, max(i + offset + 1, 0))
        m = float32(-math.inf)
        total = float32(0)
        for j in range(limit):
            part = float32(0)
            for t in range(PER_LANE):
                d = lane + WARP * t
                if d < D:
                    part += qr[t] * float32(k[b, j, kvh, d])
            score = reduce(buf, part, lane) * scale
            top = max(m, score)
            correction = math.exp(m - top) if m > -math.inf else float32(0)
            p = math.exp(score - top) if top > -math.inf else float32(0)  # every score so far -inf
            total = total * correction + p
            for t in range(PER_LANE):
                d = lane + WARP * t
                if d < DV:
                    acc[t] = acc[t] * correction + p * float32(v[b, j, kvh, d])
            m = top
        for t in range(PER_LANE):
            d = lane + WARP * t
            if d < DV:
                out[b, i, h, d] = acc[t] / total if total != 0 else float32(0)  # no key weighed: 0

    return _attention_kernel


ATTENTION_KERNEL = with_simulator_twin(_attention_kernel)

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


def _simulated_tile(out, q, k, v, S, T, H, HKV, scale, causal, offset):
    """The simulator's stand-in for attention.cu's entry: block (x, y, z)'s 64 packed rows of
    key/value head y of batch z, computed by thread 0 with numpy (float32, an exact softmax)."""
    if cuda.threadIdx.x != 0:
        return 0
    G = H // HKV
    b, kvh, m0 = cuda.blockIdx.z, cuda.blockIdx.y, cuda.blockIdx.x * TILE_ROWS
    rows = np.arange(m0, min(m0 + TILE_ROWS, S * G))
    s, h = rows // G, kvh * G + rows % G
    dst = host_array(out)
    queries = host_array(q)[b, s, h].astype(np.float32)
    keys, values = (host_array(a)[b, :, kvh].astype(np.float32) for a in (k, v))
    with np.errstate(all="ignore"):
        scores = queries @ keys.T * np.float32(scale)
        if causal:
            scores = np.where(np.arange(T)[None, :] <= s[:, None] + offset, scores, -np.inf)
        top = scores.max(axis=1, keepdims=True, initial=-np.inf)
        e = np.exp(scores - np.where(np.isfinite(top), top, 0))
        total = e.sum(axis=1, keepdims=True)
        dst[b, s, h] = np.where(total == 0, 0, e @ values / np.where(total == 0, 1, total)).astype(dst.dtype)
    return 0


def _tile_kernel(dtype: str, d: int, simulator: bool):
    """The kernel around attention.cu's tile for operand `dtype` and head dim `d`, or on the
    simulator around its numpy model."""
    if simulator:
        entry, pointer = _simulated_tile, same
    else:
        numba_type, infix = TILE_DTYPES[dtype]
        operand = types.CPointer(numba_type)
        sig = types.int32(operand, operand, operand, operand, types.int64, types.int64, types.int64, types.int64,
                          types.float32, types.int64, types.int64)
        entry, pointer = declare_cpp(f"simaccel_attention_{infix}_d{d}", sig, SOURCE), data_pointer

    def kernel(out, q, k, v, S, T, H, HKV, scale, causal, offset):
        """softmax(Q K^T * scale) V for the 64 packed query rows (blockIdx.x) of key/value
        head blockIdx.y of batch blockIdx.z."""
        entry(pointer(out), pointer(q), pointer(k), pointer(v), S, T, H, HKV, float32(scale), causal, offset)

    kernel.__name__ = kernel.__qualname__ = f"_attention_tile_kernel_d{d}" + ("" if dtype == "float16" else f"_{dtype}")
    if not simulator:
        kernel.link = (str(HERE / SOURCE),)
        kernel.dynamic_shared = functools.partial(dynamic_shared_bytes, d)
        kernel.launch_bounds = (TILE_THREADS, 2)
    return kernel


# (dtype, head dim) -> kernel
TILE_KERNELS = {(dtype, d): with_simulator_twin(_tile_kernel, dtype, d) for dtype in TILE_DTYPES for d in TILE_HEAD_DIMS}


def launch_attention(target, out, query, key, value, *, scale, causal, bottom_right) -> int:
    """Tensor-core tiles where the dtype and head dims allow (a block per 64 packed query rows,
    key/value head and batch), else one warp per (query row, head, batch); returns the launch
    count (0 for an empty output)."""
    B, S, H, D = query.shape
    T, HKV, DV = key.shape[1], key.shape[2], value.shape[3]
    if B * S * H * DV == 0:
        return 0
    offset = abs(S - T) if bottom_right else 0
    tile = TILE_KERNELS.get((str(query.dtype), D)) if D == DV else None
    if tile is not None:
        rows = S * (H // HKV)
        target.launch(tile, (-(-rows // TILE_ROWS), HKV, B), TILE_THREADS, out, query, key, value, S, T, H, HKV,
                      float(scale), int(bool(causal)), offset)
    else:
        target.launch(ATTENTION_KERNEL, (S, H, B), WARP, out, query, key, value, T, D, DV, H // HKV, float(scale),
                      int(bool(causal)), offset)
    return 1
