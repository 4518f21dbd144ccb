"""The attention kernel (simaccel.attention): one warp per query row, an online softmax.

For query row i of batch b and head h, the warp walks the keys once: each lane holds 8 of the
row's D query values (D <= 256) and 8 of the output's Dv accumulators; per key j the lanes'
partial dot products are summed across the warp (xor shuffles; on the simulator, through
shared memory), scaled, and folded into the running max m, the running sum l and the
accumulators (rescaled by exp(m_old - m_new)), so scores are never stored and any key length
runs. A causal mask ends the walk at key i + offset. The output is acc / l, 0 where no key is
seen (an empty key set). Float32 throughout; loads convert from the input dtype, the store
rounds to the output's.

This is the first form of the op: correct at any length, not yet fast. It reads K and V once
per query row (from L2 for neighbouring rows), and its loop is latency-bound; a tiled kernel
(tensor-core Q K^T and P V on tiles in shared memory, split keys for decode) is what the
issue's timing targets need.
"""

from __future__ import annotations

import math

from numba import cuda, float32

from numba.cuda.extending import register_jitable

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

    def _attention_kernel(out, q, k, v, T, D, DV, scale, causal, offset):
        i, h, b = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
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
                    part += qr[t] * float32(k[b, j, h, d])
            score = reduce(buf, part, lane) * scale
            top = max(m, score)
            correction = math.exp(m - top) if m > -math.inf else float32(0)
            p = math.exp(score - top)
            total = total * correction + p
            for t in range(PER_LANE):
                d = lane + WARP * t
                if d < DV:
                    acc[t] = acc[t] * correction + p * float32(v[b, j, h, d])
            m = top
        for t in range(PER_LANE):
            d = lane + WARP * t
            if d < DV:
                out[b, i, h, d] = acc[t] / total if limit > 0 else float32(0)

    return _attention_kernel


ATTENTION_KERNEL = with_simulator_twin(_attention_kernel)


def launch_attention(target, out, query, key, value, *, scale, causal, bottom_right) -> int:
    """One warp per (query row, head, batch); returns the launch count (0 for an empty output)."""
    B, S, H, D = query.shape
    T, DV = key.shape[1], value.shape[3]
    if B * S * H * DV == 0:
        return 0
    offset = abs(S - T) if bottom_right else 0
    target.launch(ATTENTION_KERNEL, (S, H, B), WARP, out, query, key, value, T, D, DV, float(scale),
                  int(bool(causal)), offset)
    return 1
