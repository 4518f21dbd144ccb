"""Reduction kernels: sum, mean and max over one run of neighbouring axes; the running sum
(cumsum) along one axis at the end.

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry
(simaccel.sum, simaccel.mean, simaccel.max). The input is viewed as (outer, R, inner): one
thread per output element (outer, inner), consecutive threads on consecutive inner indices
(coalesced reads where inner > 1), looping over R in index order with a float32
accumulator, ILP values loaded before any is combined. Sums and means of too few outputs to
fill the GPU so (below MIN_THREAD_OUTPUTS) give each output SLICES threads instead, each adding
every SLICES-th value, their partial sums added in a fixed order (deterministic, as the rest). max is TVM's running
``acc if acc > v else v`` from TVM's min_value of the dtype (kernels/dtypes.py), so NaN and empty reductions
match TVM's CPU build (a NaN survives only where no later element replaces it: an order
a parallel reduction would not keep, so max stays on this kernel). A sum or mean over the innermost
axes (inner = 1: a spatial mean) is one block per output instead, whose threads read the
row together (coalesced) and add up their partial sums in shared memory
(simaccel.kernels.normalization, beside the other row kernels).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import cuda, float32

from .dtypes import is_float, min_value
from .elementwise import ILP, divmod_fast
from .grid import BLOCK, MAX_BLOCKS, dims_of, launch_grid
from .normalization import launch_row_sums

REDUCTIONS = {"sum": 0, "mean": 1, "max": 2}
# Sums and means of fewer outputs than MIN_THREAD_OUTPUTS (a thread each would leave an H200's
# 132 SMs a quarter full: 65,536 outputs ran at 24% achieved occupancy, 60% of HBM) split their
# R over SLICES threads each, whose partial sums a block adds in a fixed order.
MIN_THREAD_OUTPUTS = 1 << 18
SLICES = 8
_COLUMNS = BLOCK // SLICES  # the outputs of a block of the split kernel
_u = numba.uint64  # an index known non-negative: numba wraps signed ones around on every access


def _reduction_kernel(out, x, R, inner, inv_inner, code, lowest, total):
    v = cuda.local.array(ILP, float32)
    idx = cuda.grid(1)
    step = cuda.gridsize(1)
    while idx < total:
        o, i = divmod_fast(idx, inner, inv_inner)
        base = o * R * inner + i
        acc = float32(lowest) if code == 2 else float32(0.0)
        # ILP loads issued before any is combined, combined in index order (the same result
        # as one at a time, which left each load's latency exposed), then the rest one by one.
        r = 0
        while r + ILP <= R:
            for k in range(ILP):
                v[k] = float32(x[_u(base + (r + k) * inner)])
            for k in range(ILP):
                if code == 2:
                    acc = acc if acc > v[k] else v[k]
                else:
                    acc += v[k]
            r += ILP
        while r < R:
            w = float32(x[_u(base + r * inner)])
            if code == 2:
                acc = acc if acc > w else w
            else:
                acc += w
            r += 1
        if code == 1:
            acc = acc / float32(R)
        out[idx] = acc
        idx += step


def _split_reduction_kernel(out, x, R, inner, inv_inner, mean, total):
    """Sum (or mean) of each of a block's _COLUMNS outputs over SLICES threads: thread (c, s)
    adds r = s, s + SLICES, ... of output c's R values (consecutive c on consecutive inner
    indices), ILP loads in flight, then slice 0 adds the SLICES partial sums in order."""
    partial = cuda.shared.array((SLICES, _COLUMNS), float32)
    v = cuda.local.array(ILP, float32)
    c = cuda.threadIdx.x % _COLUMNS
    s = cuda.threadIdx.x // _COLUMNS
    first = cuda.blockIdx.x * _COLUMNS
    while first < total:  # uniform over the block: every thread reaches every barrier
        idx = first + c
        acc = float32(0.0)
        if idx < total:
            o, i = divmod_fast(idx, inner, inv_inner)
            base = o * R * inner + i
            r = s
            while r + (ILP - 1) * SLICES < R:
                for k in range(ILP):
                    v[k] = float32(x[_u(base + (r + k * SLICES) * inner)])
                for k in range(ILP):
                    acc += v[k]
                r += ILP * SLICES
            while r < R:
                acc += float32(x[_u(base + r * inner)])
                r += SLICES
        partial[s, c] = acc
        cuda.syncthreads()
        if s == 0 and idx < total:
            total_sum = float32(0.0)
            for k in range(SLICES):
                total_sum += partial[k, c]
            out[idx] = total_sum / float32(R) if mean else total_sum
        cuda.syncthreads()
        first += cuda.gridDim.x * _COLUMNS


def launch_reduction(target, out, data, *, axes, keepdims, reduction) -> int:
    """out = reduction of data over `axes` (validated by the ISA: one run of neighbouring axes)."""
    shape = dims_of(data.shape)
    outer = math.prod(shape[: axes[0]])
    R = math.prod(shape[axes[0]: axes[-1] + 1])
    inner = math.prod(shape[axes[-1] + 1:])
    total = outer * inner
    if total == 0:
        return 0
    flat_out = target.reshape(out, (total,))
    if inner == 1 and R > 1 and reduction != "max":
        return launch_row_sums(target, flat_out, target.reshape(data, (total, R)), mean=reduction == "mean")
    # Reducing nothing reads nothing: `out` stands in for the empty input.
    flat_in = target.reshape(data, (math.prod(shape),)) if R else flat_out
    if reduction != "max" and total < MIN_THREAD_OUTPUTS and R >= 2 * ILP * SLICES:
        target.launch(_split_reduction_kernel, min(-(-total // _COLUMNS), MAX_BLOCKS), BLOCK, flat_out, flat_in, R,
                      inner, 1.0 / inner, int(reduction == "mean"), total)
        return 1
    lowest = min_value(data.dtype)
    grid, block = launch_grid(total)
    target.launch(_reduction_kernel, grid, block, flat_out, flat_in, R, inner, 1.0 / inner,
                  REDUCTIONS[reduction], lowest, total)
    return 1


# -- cumsum ---------------------------------------------------------------------------------
def _float_scan_kernel(out, x, R, inner, exclusive, total):
    """out = the running sum of x (viewed as (outer, R, inner)) along R, a thread per (outer,
    inner) column walking R in index order with a float32 sum (consecutive threads on
    consecutive inner indices: coalesced where inner > 1)."""
    for t in range(cuda.grid(1), total, cuda.gridsize(1)):
        at = (t // inner) * R * inner + t % inner
        acc = float32(0)
        for _ in range(R):
            value = float32(x[at])
            if exclusive:
                out[at] = acc
                acc += value
            else:
                acc += value
                out[at] = acc
            at += inner


def _int_scan_kernel(out, x, R, inner, exclusive, total, bits):
    """The integer twin of `_float_scan_kernel`: an int64 sum, each stored value wrapped to the
    output's `bits` (so int32 and int8 sums wrap as their own arithmetic does, on the simulator
    too, whose numpy stores refuse a value out of range); `bits` 1 is bool, the sum's != 0
    (numpy's bool cumsum, a running or)."""
    half = numba.int64(1) << (bits - 1) if bits < 64 else numba.int64(0)
    for t in range(cuda.grid(1), total, cuda.gridsize(1)):
        at = (t // inner) * R * inner + t % inner
        acc = numba.int64(0)
        for _ in range(R):
            before = acc
            acc += numba.int64(x[at])
            kept = before if exclusive else acc
            if bits == 1:
                out[at] = kept != 0
            else:
                out[at] = kept if bits == 64 else ((kept + half) & (2 * half - 1)) - half
            at += inner


def launch_cumsum(target, out, data, *, axis, exclusive) -> int:
    """out = the running sum of data along `axis` (validated by the ISA)."""
    shape = dims_of(data.shape)
    outer, R, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    total = outer * inner
    if total * R == 0:
        return 0
    n = total * R
    grid, block = launch_grid(total)
    args = (target.reshape(out, (n,)), target.reshape(data, (n,)), R, inner, int(bool(exclusive)), total)
    if is_float(data.dtype):
        target.launch(_float_scan_kernel, grid, block, *args)
    else:
        bits = 1 if np.dtype(data.dtype) == np.bool_ else np.dtype(data.dtype).itemsize * 8
        target.launch(_int_scan_kernel, grid, block, *args, bits)
    return 1

