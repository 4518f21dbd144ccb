"""Row-wise kernels (over the last axis): softmax, layer and RMS normalization, and row sums.

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry
(simaccel.softmax, simaccel.layer_norm, simaccel.rms_norm: layer norm's kernels with no mean
and no beta; simaccel.sum and simaccel.mean over the innermost
axes, through simaccel.kernels.reduction: row sums, laid out as softmax). Math is float32; rows are indexed through flat
views with unsigned offsets (no wrap-around of negative indices per access). Two layouts,
chosen by the row length D:

* **Rows of up to WARP * WARP_CACHE = 256** (from MIN_WARP_ROWS rows: a transformer's heads,
  attention scores of short sequences): a group of `lanes` threads per row, the smallest power
  of two with lanes x WARP_CACHE >= D and at least a 32-byte sector of the row (8 lanes for
  float32), so a warp holds 32 / lanes rows. Each lane keeps its WARP_CACHE values in
  registers; the group combines them with xor shuffles over its lanes (log2(lanes) steps, no
  block barriers). The simulator has no shuffles; its twin of those kernels reduces through
  shared memory (kernels/target.py, `with_simulator_twin`).
* **Longer rows**: a block per row, threads striding over it, partial results combined with a
  block reduction (warp shuffles, then the warps' results, on the GPU; a shared-memory tree on
  the simulator). From MIN_CACHED_ROWS rows the block has a thread per ROW_CACHE elements
  (the smallest power of two, up to MAX_BLOCK), which keep them in registers between the
  passes, so rows of up to ROW_CACHE * MAX_BLOCK = 8192 (layer norm: half that, its block
  is capped at 512 threads) are read from memory once (a 1024-wide layer norm: 128 threads
  of 8 values). Of longer rows the rest is read twice by softmax
  (summed online while the max is found, then for the output) and three times by layer norm,
  a pass of ROW_CACHE values a thread issued before any is used (one load in flight per
  thread left the long-row softmax at 31% of HBM). Layer norm loads gamma and beta before
  the stores that use them (the compiler keeps a load after a store to `out`, which may
  alias it: one round trip to L2 per value stored).
  Launches of fewer rows have a thread per VEC elements (up to FEW_ROWS_BLOCK), so short rows
  do not spawn idle threads (each one a Python thread on the simulator).
* **Row sums of many longer rows** (from MIN_WARP_SUM_ROWS rows: a global average pool over
  56 x 56) take a warp per row, in passes of WARP_CACHE values a lane: nothing is kept
  between passes, so a block's barriers would buy nothing.

Every kernel holds two copies of its row loop (kernels/vector.py, `both_ways`). Where the row
length is a multiple of VEC and every array it touches is 16-byte aligned (TVM's buffers
are), the vector copy runs: a thread's (or lane's) values are VEC-long runs of the row,
`stride` = threads x VEC apart, each moved by one 16-byte load or store (8 bytes of float16).
Elsewhere the element copy runs, the same loop an element at a time. The element-at-a-time
kernels alone spent most issue slots on index arithmetic (softmax 32768 x 1024 issue-bound
at 84% SM throughput, 48% of DRAM's: results/gpu/2026-12-03-h200-rownorm/). The passes over
a row that several kernels make (a pass loaded, summed, exponentiated, scaled and stored) are
written once, in kernels/row_passes.py, and inlined into each.

Softmax subtracts the row max (`v > m`: NaN never wins it, but exp(NaN - max) makes the row NaN
as numpy's does); layer norm takes the biased variance in a second pass over the cached values
(no E[x^2] - E[x]^2 cancellation).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import cuda, float32
from numba.cuda.extending import register_jitable

from .grid import dims_of, pow2_at_least
from .row_passes import long_row_passes, row_passes
from .dtypes import numpy_dtype
from .target import with_simulator_twin
from .vector import VEC, accessors, alignment_check, both_ways

MAX_BLOCK = 1024  # power of two; also the size of the shared reduction buffer
FEW_ROWS_BLOCK = 256  # the block cap of launches of fewer than MIN_CACHED_ROWS rows
ROW_SUM_BLOCK = 256  # the block cap of row sums (nothing cached: more threads only add reduction)
# Elements of its row each thread keeps in registers between the passes of softmax and
# layer norm, so that a row up to ROW_CACHE * MAX_BLOCK long is read from memory once.
ROW_CACHE = 8
# From this many rows on, a block has a thread per ROW_CACHE elements of its row, else one
# per VEC elements (an H200 holds about 132 x 8 blocks at once).
MIN_CACHED_ROWS = 1024
_MAX_GRID = 1 << 20  # rows beyond that are walked by a loop in the kernels
WARP = 32
# The grouped kernels (a group of lanes per row): blocks of ROWS_BLOCK threads, WARP_CACHE
# values per lane in registers, from MIN_WARP_ROWS rows of at most WARP * WARP_CACHE.
ROWS_BLOCK = 128
WARP_CACHE = 8
MIN_WARP_ROWS = 1024
SECTOR = 32  # bytes: the least a group reads of its row in one access
# Row sums take a warp per row of any length from MIN_WARP_SUM_ROWS rows (16 warps an SM of an
# H200 or more), WARP_CACHE values a lane per pass: on the H200 12 a lane were slower or even
# at every shape of scripts/rownorm_sweep_gpu.py (65536 x 512: 40.3 us against 35.5).
MIN_WARP_SUM_ROWS = 2048
_u = numba.uint64  # an index known non-negative: numba wraps signed ones around on every access


@register_jitable
def _block_reduce(buf, value, take_max):
    """Combine `value` over the block (sum, or max if `take_max`); every thread gets the result.

    A shared-memory tree reduction: every thread of the block must call it (it syncs).
    """
    tid = cuda.threadIdx.x
    buf[tid] = value
    cuda.syncthreads()
    s = cuda.blockDim.x // 2
    while s > 0:
        if tid < s:
            other = buf[tid + s]
            if take_max:
                if other > buf[tid]:
                    buf[tid] = other
            else:
                buf[tid] += other
        cuda.syncthreads()
        s //= 2
    result = buf[0]
    cuda.syncthreads()  # buf is free again once everyone has read the result
    return result


@register_jitable
def _lanes_reduce_shuffle(buf, value, take_max, lane, group, lanes):
    """Combine `value` over each aligned group of `lanes` lanes (a power of two <= 32; sum, or
    max if `take_max`) with xor shuffles, which stay within the group; every lane gets its
    group's result, and every lane of the warp must call it. Unrolled: the steps a group
    narrower than the warp skips are uniform branches."""
    for s in range(5):
        offset = 16 >> s
        if offset < lanes:
            other = cuda.shfl_xor_sync(0xFFFFFFFF, value, offset)
            if take_max:
                value = max(value, other)
            else:
                value += other
    return value


@register_jitable
def _lanes_reduce_shared(buf, value, take_max, lane, group, lanes):
    """The simulator's `_lanes_reduce_shuffle` (it has no shuffles): through the group's slice
    of `buf`, between block barriers, so every thread of the block must call it."""
    base = group * lanes
    buf[base + lane] = value
    cuda.syncthreads()
    result = buf[base]
    for k in range(1, lanes):
        other = buf[base + k]
        if take_max:
            result = max(result, other)
        else:
            result += other
    cuda.syncthreads()
    return result


@register_jitable
def _block_reduce_shuffle(buf, value, take_max):
    """`_block_reduce` on the GPU: shuffles within each warp, the warps' results through
    `buf`, two block barriers instead of one per halving. Blocks narrower than a warp take
    the tree. Every thread of the block must call it."""
    nthreads = cuda.blockDim.x
    if nthreads < WARP:
        return _block_reduce(buf, value, take_max)
    tid = cuda.threadIdx.x
    lane = tid % WARP
    warp = tid // WARP
    value = _lanes_reduce_shuffle(buf, value, take_max, lane, warp, WARP)
    if lane == 0:
        buf[warp] = value
    cuda.syncthreads()
    if lane < nthreads // WARP:
        value = buf[lane]
    elif take_max:
        value = float32(-math.inf)
    else:
        value = float32(0.0)
    value = _lanes_reduce_shuffle(buf, value, take_max, lane, warp, WARP)  # every warp, the same result
    cuda.syncthreads()  # buf is free again once everyone has read it
    return value


@register_jitable(inline="always")
def _lane_group(shift, vec):
    """This thread's place in the grouped kernels, 2**shift lanes a row and `vec` elements an
    access: (lanes, its lane, its group, rows per block, its first element, stride)."""
    lanes = 1 << shift
    lane = cuda.threadIdx.x & (lanes - 1)
    return lanes, lane, cuda.threadIdx.x >> shift, cuda.blockDim.x >> shift, lane * vec, lanes * vec


def _softmax_block_kernel(long_rows, simulator, cache=ROW_CACHE, name=None):
    """Softmax, a block per row (see above); block reductions with shuffles on the GPU. Only the
    `long_rows` kernel reads what its threads' caches do not hold (rows > ROW_CACHE x block),
    a pass of ROW_CACHE values issued before any is used."""
    assert cache % VEC == 0, f"a thread's {cache} values must be whole vectors of {VEC}"
    block_reduce = _block_reduce if simulator else _block_reduce_shuffle
    aligned = alignment_check(simulator)

    def rows_loop(vec):
        load_values, store_values = accessors(simulator, vec)
        passes = row_passes(load_values, store_values, vec, cache)
        load, exp_add, scale_store = passes.load, passes.exp_add, passes.scale_store
        tail = long_row_passes(load_values, store_values, vec, cache)
        online_add, load_exp_scale_store = tail.online_add, tail.load_exp_scale_store

        def loop(out, x, rows, D, buf):
            vals = cuda.local.array(cache, float32)
            chunk = cuda.local.array(cache, float32)  # the long rows' tail, a pass at a time
            nthreads = cuda.blockDim.x
            first = cuda.threadIdx.x * vec  # this thread's first element of a pass over a row
            stride = nthreads * vec  # from one of its accesses to its next
            span = cache * nthreads  # the elements of a pass
            # A long row holds every thread's whole cache (`long_rows`: no guard there). The row
            # loop is uniform over the block, so every thread reaches every syncthreads.
            r = cuda.blockIdx.x
            while r < rows:
                base = r * D
                # 1. row max, the row read once into the cache. The rest of a longer row (read
                # once more, for the output) is summed online meanwhile (`online_add`): its own
                # max tm and the sum ts of exp(v - tm); where two infinities of one sign make
                # v - tm NaN, the rescale below to the row max gives NaN exactly where the
                # two-pass formula does.
                m = float32(-math.inf)
                for j in range(0, cache, vec):
                    i = first + (j // vec) * stride
                    if long_rows or i < D:
                        load_values(vals, j, x, base + i)
                        for k in range(j, j + vec):
                            if vals[k] > m:
                                m = vals[k]
                tm = float32(-math.inf)
                ts = float32(0.0)
                p = span
                while long_rows and p < D:
                    load(chunk, x, base, p, first, stride, D, False, True)
                    tm, ts = online_add(chunk, p, first, stride, D, tm, ts)
                    p += span
                if tm > m:
                    m = tm
                row_max = block_reduce(buf, m, True)
                # 2. sum of exp(x - max)
                acc = exp_add(vals, row_max, first, stride, D, long_rows, True)
                if long_rows:
                    acc += ts * float32(math.exp(tm - row_max))
                inv = float32(1.0) / block_reduce(buf, acc, False)
                # 3. normalize
                scale_store(out, base, vals, inv, first, stride, D, long_rows, True)
                p = span
                while long_rows and p < D:
                    load_exp_scale_store(out, base, chunk, x, row_max, inv, p, first, stride, D)
                    p += span
                r += cuda.gridDim.x

        return loop

    vector_loop, element_loop = both_ways(rows_loop)

    def kernel(out, x, rows, D):
        buf = cuda.shared.array(MAX_BLOCK, float32)
        if D % VEC == 0 and aligned(x) and aligned(out):
            vector_loop(out, x, rows, D, buf)
        else:
            element_loop(out, x, rows, D, buf)

    kernel.__name__ = kernel.__qualname__ = name or ("_softmax_long_kernel" if long_rows else "_softmax_kernel")
    return kernel


_softmax_kernel = with_simulator_twin(_softmax_block_kernel, False)
_softmax_long_kernel = with_simulator_twin(_softmax_block_kernel, True)
# The same code for blocks of 1024 threads (cached rows of 4097 to 8192), under other launch
# bounds (see the end of the module).
_softmax_wide_kernel = with_simulator_twin(_softmax_block_kernel, False, name="_softmax_wide_kernel")


def _layer_norm_block_kernel(long_rows, simulator, cache=ROW_CACHE, rms=False):
    """Layer norm, a block per row (see above), as `_softmax_block_kernel`; gamma and beta are
    loaded an access at a time, before the values they scale are stored. `rms`: RMS norm, the
    same passes with a mean of 0 (none computed) and no beta (its argument is never read)."""
    assert cache % VEC == 0, f"a thread's {cache} values must be whole vectors of {VEC}"
    block_reduce = _block_reduce if simulator else _block_reduce_shuffle
    aligned = alignment_check(simulator)

    def rows_loop(vec):
        load_values, store_values = accessors(simulator, vec)
        passes = row_passes(load_values, store_values, vec, cache, not rms)
        load, add, add_squares, normalize_store = passes.load, passes.add, passes.add_squares, passes.normalize_store
        load_normalize_store = long_row_passes(load_values, store_values, vec, cache, not rms).load_normalize_store

        def loop(out, x, gamma, beta, rows, D, eps, buf):
            vals = cuda.local.array(cache, float32)
            chunk = cuda.local.array(cache, float32)  # the long rows' tail, a pass at a time
            g = cuda.local.array(cache, float32)  # gamma and beta of the values being stored
            b = cuda.local.array(cache, float32)
            nthreads = cuda.blockDim.x
            first = cuda.threadIdx.x * vec
            stride = nthreads * vec
            span = cache * nthreads
            whole = long_rows or first + span - stride < D  # this thread's cache lies in the row
            inv_d = float32(1.0) / float32(D)
            r = cuda.blockIdx.x
            while r < rows:
                base = r * D
                # 1. mean, the row read once into the cache (a padded slot holds 0)
                acc = float32(0.0)
                for j in range(0, cache, vec):
                    if whole or first + (j // vec) * stride < D:
                        load_values(vals, j, x, base + first + (j // vec) * stride)
                    else:
                        for k in range(j, j + vec):
                            vals[k] = float32(0.0)
                    for k in range(j, j + vec):
                        acc += vals[k]
                p = span
                while long_rows and not rms and p < D:
                    load(chunk, x, base, p, first, stride, D, False, True)
                    acc = add(acc, chunk, p, first, stride, D, False, True)
                    p += span
                mean = float32(0.0) if rms else block_reduce(buf, acc, False) * inv_d
                # 2. biased variance, two-pass (no cancellation from E[x^2] - E[x]^2)
                acc = add_squares(float32(0.0), vals, mean, 0, first, stride, D, whole, True)
                p = span
                while long_rows and p < D:
                    load(chunk, x, base, p, first, stride, D, False, True)
                    acc = add_squares(acc, chunk, mean, p, first, stride, D, False, True)
                    p += span
                rstd = float32(1.0) / float32(math.sqrt(block_reduce(buf, acc, False) * inv_d + float32(eps)))
                # 3. scale and shift, an access at a time
                normalize_store(out, base, vals, gamma, beta, g, b, mean, rstd, first, stride, D, whole, True)
                p = span
                while long_rows and p < D:
                    load_normalize_store(out, base, chunk, x, gamma, beta, g, b, mean, rstd, p, first, stride, D)
                    p += span
                r += cuda.gridDim.x

        return loop

    vector_loop, element_loop = both_ways(rows_loop)

    def kernel(out, x, gamma, beta, rows, D, eps):
        buf = cuda.shared.array(MAX_BLOCK, float32)
        if D % VEC == 0 and aligned(x) and aligned(out) and aligned(gamma) and aligned(beta):
            vector_loop(out, x, gamma, beta, rows, D, eps, buf)
        else:
            element_loop(out, x, gamma, beta, rows, D, eps, buf)

    name = "_rms_norm" if rms else "_layer_norm"
    kernel.__name__ = kernel.__qualname__ = f"{name}_long_kernel" if long_rows else f"{name}_kernel"
    return kernel


_layer_norm_kernel = with_simulator_twin(_layer_norm_block_kernel, False)
_layer_norm_long_kernel = with_simulator_twin(_layer_norm_block_kernel, True)
_rms_norm_kernel = with_simulator_twin(_layer_norm_block_kernel, False, rms=True)
_rms_norm_long_kernel = with_simulator_twin(_layer_norm_block_kernel, True, rms=True)


def _softmax_rows_kernel(simulator, cache=WARP_CACHE):
    """Softmax, a group of 2**shift lanes per row of D <= 2**shift * WARP_CACHE (see above);
    the row loop is uniform over the block, a group past the last row computes on nothing."""
    assert cache % VEC == 0, f"a thread's {cache} values must be whole vectors of {VEC}"
    reduce = _lanes_reduce_shared if simulator else _lanes_reduce_shuffle
    aligned = alignment_check(simulator)

    def rows_loop(vec):
        load_values, store_values = accessors(simulator, vec)
        passes = row_passes(load_values, store_values, vec, cache)
        exp_add, scale_store = passes.exp_add, passes.scale_store

        def loop(out, x, rows, D, shift, buf):
            vals = cuda.local.array(cache, float32)
            lanes, lane, group, per_block, first, stride = _lane_group(shift, vec)
            r0 = cuda.blockIdx.x * per_block
            while r0 < rows:
                r = r0 + group
                live = r < rows
                base = r * D
                m = float32(-math.inf)
                for j in range(0, cache, vec):
                    i = first + (j // vec) * stride
                    if live and i < D:
                        load_values(vals, j, x, base + i)
                        for k in range(j, j + vec):
                            m = max(m, vals[k])
                row_max = reduce(buf, m, True, lane, group, lanes)
                acc = exp_add(vals, row_max, first, stride, D, False, live)
                inv = float32(1.0) / reduce(buf, acc, False, lane, group, lanes)
                scale_store(out, base, vals, inv, first, stride, D, False, live)
                r0 += cuda.gridDim.x * per_block

        return loop

    vector_loop, element_loop = both_ways(rows_loop)

    def kernel(out, x, rows, D, shift):
        buf = cuda.shared.array(ROWS_BLOCK, float32)  # the simulator's reductions only
        if D % VEC == 0 and aligned(x) and aligned(out):
            vector_loop(out, x, rows, D, shift, buf)
        else:
            element_loop(out, x, rows, D, shift, buf)

    kernel.__name__ = kernel.__qualname__ = "_softmax_rows_kernel"
    return kernel


def _layer_norm_rows_kernel(simulator, cache=WARP_CACHE, rms=False):
    """Layer norm (or RMS norm: `rms` as in `_layer_norm_block_kernel`), a group of lanes per
    row (as `_softmax_rows_kernel`)."""
    assert cache % VEC == 0, f"a thread's {cache} values must be whole vectors of {VEC}"
    reduce = _lanes_reduce_shared if simulator else _lanes_reduce_shuffle
    aligned = alignment_check(simulator)

    def rows_loop(vec):
        load_values, store_values = accessors(simulator, vec)
        passes = row_passes(load_values, store_values, vec, cache, not rms)
        add_squares, normalize_store = passes.add_squares, passes.normalize_store

        def loop(out, x, gamma, beta, rows, D, eps, shift, buf):
            vals = cuda.local.array(cache, float32)
            g = cuda.local.array(VEC, float32)
            b = cuda.local.array(VEC, float32)
            lanes, lane, group, per_block, first, stride = _lane_group(shift, vec)
            inv_d = float32(1.0) / float32(D)
            r0 = cuda.blockIdx.x * per_block
            while r0 < rows:
                r = r0 + group
                live = r < rows
                base = r * D
                acc = float32(0.0)
                for j in range(0, cache, vec):
                    i = first + (j // vec) * stride
                    if live and i < D:
                        load_values(vals, j, x, base + i)
                        for k in range(j, j + vec):
                            acc += vals[k]
                mean = float32(0.0) if rms else reduce(buf, acc, False, lane, group, lanes) * inv_d
                acc = add_squares(float32(0.0), vals, mean, 0, first, stride, D, False, live)
                rstd = float32(1.0) / float32(math.sqrt(reduce(buf, acc, False, lane, group, lanes) * inv_d + float32(eps)))
                normalize_store(out, base, vals, gamma, beta, g, b, mean, rstd, first, stride, D, False, live)
                r0 += cuda.gridDim.x * per_block

        return loop

    vector_loop, element_loop = both_ways(rows_loop)

    def kernel(out, x, gamma, beta, rows, D, eps, shift):
        buf = cuda.shared.array(ROWS_BLOCK, float32)
        if D % VEC == 0 and aligned(x) and aligned(out) and aligned(gamma) and aligned(beta):
            vector_loop(out, x, gamma, beta, rows, D, eps, shift, buf)
        else:
            element_loop(out, x, gamma, beta, rows, D, eps, shift, buf)

    kernel.__name__ = kernel.__qualname__ = "_rms_norm_rows_kernel" if rms else "_layer_norm_rows_kernel"
    return kernel


_SOFTMAX_ROWS = with_simulator_twin(_softmax_rows_kernel)
_LAYER_NORM_ROWS = with_simulator_twin(_layer_norm_rows_kernel)
_RMS_NORM_ROWS = with_simulator_twin(_layer_norm_rows_kernel, rms=True)


def row_lanes(rows: int, D: int, itemsize: int):
    """The lanes per row of the grouped kernels for `rows` rows of D elements (a power of two
    <= 32), or None where a block per row serves them (fewer than MIN_WARP_ROWS rows, or rows
    longer than WARP * WARP_CACHE)."""
    if rows < MIN_WARP_ROWS or D > WARP * WARP_CACHE:
        return None
    sector = max(1, SECTOR // itemsize)  # lanes that read a whole sector of the row at once
    return min(WARP, max(pow2_at_least(-(-D // WARP_CACHE), WARP), min(sector, pow2_at_least(D, WARP))))


def _block_size(D: int, rows: int, cap: int | None = None) -> int:
    """Threads for each of `rows` rows of D elements: the smallest power of two >= D /
    ROW_CACHE (ROW_CACHE elements each, capped at MAX_BLOCK), or >= D / VEC where there are
    fewer than MIN_CACHED_ROWS rows (a launch that does not fill the GPU: a thread per vector,
    capped at FEW_ROWS_BLOCK); longer rows are walked in a loop."""
    cached = rows >= MIN_CACHED_ROWS
    per_thread = ROW_CACHE if cached else VEC
    cap = cap or (MAX_BLOCK if cached else FEW_ROWS_BLOCK)
    b = 1
    while b * per_thread < D and b < cap:
        b *= 2
    return b


def _rows_view(target, out, data):
    shape = dims_of(data.shape)
    D = shape[-1]
    rows = 1
    for d in shape[:-1]:
        rows *= d
    if rows == 0 or D == 0:
        return None
    return rows, D, target.reshape(data, (rows * D,)), target.reshape(out, (rows * D,))


def _itemsize(array) -> int:
    return numpy_dtype(array.dtype).itemsize


def _rows_grid(rows: int, lanes: int) -> int:
    per_block = ROWS_BLOCK // lanes
    return min(-(-rows // per_block), _MAX_GRID)


def launch_softmax(target, out, data) -> int:
    """Softmax over the last axis (subtracting the row max); returns the launch count."""
    view = _rows_view(target, out, data)
    if view is None:
        return 0
    rows, D, x1, o1 = view
    lanes = row_lanes(rows, D, _itemsize(data))
    if lanes:
        target.launch(_SOFTMAX_ROWS, _rows_grid(rows, lanes), ROWS_BLOCK, o1, x1, rows, D, lanes.bit_length() - 1)
    else:
        block = _block_size(D, rows)
        if D > ROW_CACHE * block:
            kernel = _softmax_long_kernel
        else:
            kernel = _softmax_kernel if block <= _softmax_kernel.launch_bounds[0] else _softmax_wide_kernel
        target.launch(kernel, min(rows, _MAX_GRID), min(block, kernel.launch_bounds[0]), o1, x1, rows, D)
    return 1


def launch_layer_norm(target, out, data, gamma, beta, *, epsilon) -> int:
    """Layer norm over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta."""
    return _launch_norm(target, out, data, gamma, beta, epsilon,
                        (_LAYER_NORM_ROWS, _layer_norm_kernel, _layer_norm_long_kernel))


def launch_rms_norm(target, out, data, weight, *, epsilon) -> int:
    """RMS norm over the last axis: x * rsqrt(sum(x * x) / D + eps) * weight (TVM's). The
    layer norm kernels' passes with no mean and no beta: `weight` also stands in beta's
    place, never read."""
    return _launch_norm(target, out, data, weight, weight, epsilon, (_RMS_NORM_ROWS, _rms_norm_kernel, _rms_norm_long_kernel))


def _launch_norm(target, out, data, gamma, beta, epsilon, kernels) -> int:
    """A layer or RMS norm's launch: `kernels` are its grouped, cached-block and long-row kernels."""
    view = _rows_view(target, out, data)
    if view is None:
        return 0
    rows_kernel, block_kernel, long_kernel = kernels
    rows, D, x1, o1 = view
    g1 = target.reshape(gamma, (D,))
    b1 = target.reshape(beta, (D,))
    lanes = row_lanes(rows, D, _itemsize(data))
    if lanes:
        target.launch(rows_kernel, _rows_grid(rows, lanes), ROWS_BLOCK,
                      o1, x1, g1, b1, rows, D, float(epsilon), lanes.bit_length() - 1)
    else:
        block = min(_block_size(D, rows), block_kernel.launch_bounds[0])
        kernel = block_kernel if D <= ROW_CACHE * block else long_kernel
        target.launch(kernel, min(rows, _MAX_GRID), min(block, kernel.launch_bounds[0]),
                      o1, x1, g1, b1, rows, D, float(epsilon))
    return 1


def _row_sum_block_kernel(simulator):
    """Row sums (or means), a block per row, a pass of ROW_CACHE values a thread issued before
    any is added (one load in flight at a time reached 41% of HBM)."""
    block_reduce = _block_reduce if simulator else _block_reduce_shuffle
    aligned = alignment_check(simulator)

    def rows_loop(vec):
        passes = row_passes(*accessors(simulator, vec), vec, ROW_CACHE)
        load, add = passes.load, passes.add

        def loop(out, x, rows, R, mean, buf):
            vals = cuda.local.array(ROW_CACHE, float32)
            first = cuda.threadIdx.x * vec
            stride = cuda.blockDim.x * vec
            span = ROW_CACHE * cuda.blockDim.x
            r = cuda.blockIdx.x
            while r < rows:
                base = r * R
                acc = float32(0.0)
                p = 0
                while p < R:
                    load(vals, x, base, p, first, stride, R, False, True)
                    acc = add(acc, vals, p, first, stride, R, False, True)
                    p += span
                total = block_reduce(buf, acc, False)
                if cuda.threadIdx.x == 0:
                    out[r] = total / float32(R) if mean else total
                r += cuda.gridDim.x

        return loop

    vector_loop, element_loop = both_ways(rows_loop)

    def kernel(out, x, rows, R, mean):
        buf = cuda.shared.array(MAX_BLOCK, float32)
        if R % VEC == 0 and aligned(x):
            vector_loop(out, x, rows, R, mean, buf)
        else:
            element_loop(out, x, rows, R, mean, buf)

    kernel.__name__ = kernel.__qualname__ = "_row_sum_kernel"
    return kernel


_row_sum_kernel = with_simulator_twin(_row_sum_block_kernel)


def _row_sum_rows_kernel(simulator):
    """Row sums (or means) of many rows, a group of 2**shift lanes per row (as
    `_softmax_rows_kernel`; a global average pool's 7 x 7 rows: 8 lanes), a pass of
    WARP_CACHE values a lane issued before any is added. Rows longer than a pass (a whole
    warp per row, from MIN_WARP_SUM_ROWS rows) loop over passes: a warp's shuffles replace
    the block reduction, whose barriers and shared memory left a block per row of 3136
    elements issue-bound (82% SM throughput, 64% of HBM on the H200)."""
    reduce = _lanes_reduce_shared if simulator else _lanes_reduce_shuffle
    aligned = alignment_check(simulator)

    def rows_loop(vec):
        passes = row_passes(*accessors(simulator, vec), vec, WARP_CACHE)
        load, add = passes.load, passes.add

        def loop(out, x, rows, R, mean, shift, buf):
            vals = cuda.local.array(WARP_CACHE, float32)
            lanes, lane, group, per_block, first, stride = _lane_group(shift, vec)
            span = WARP_CACHE * lanes
            r0 = cuda.blockIdx.x * per_block
            while r0 < rows:
                r = r0 + group
                live = r < rows
                base = r * R
                acc = float32(0.0)
                p = 0
                while p < R:  # the same passes for every group of the block
                    load(vals, x, base, p, first, stride, R, False, live)
                    acc = add(acc, vals, p, first, stride, R, False, live)
                    p += span
                total = reduce(buf, acc, False, lane, group, lanes)
                if live and lane == 0:
                    out[_u(r)] = total / float32(R) if mean else total
                r0 += cuda.gridDim.x * per_block

        return loop

    vector_loop, element_loop = both_ways(rows_loop)

    def kernel(out, x, rows, R, mean, shift):
        buf = cuda.shared.array(ROWS_BLOCK, float32)  # the simulator's reductions only
        if R % VEC == 0 and aligned(x):
            vector_loop(out, x, rows, R, mean, shift, buf)
        else:
            element_loop(out, x, rows, R, mean, shift, buf)

    kernel.__name__ = kernel.__qualname__ = "_row_sum_rows_kernel"
    return kernel


_ROW_SUM_ROWS = with_simulator_twin(_row_sum_rows_kernel)
_ROW_SUM_ROWS.launch_bounds = (ROWS_BLOCK, 8)


def launch_row_sums(target, out, x, *, mean: bool) -> int:
    """out[r] = the sum (or mean) of row r of x (rows, R), R >= 1: many short rows on groups of
    lanes, many longer ones on a warp each, few long ones on a block each."""
    rows, R = dims_of(x.shape)
    x1 = target.reshape(x, (rows * R,))
    lanes = row_lanes(rows, R, _itemsize(x)) or (WARP if rows >= MIN_WARP_SUM_ROWS else None)
    if lanes:
        target.launch(_ROW_SUM_ROWS, _rows_grid(rows, lanes), ROWS_BLOCK, out, x1, rows, R, int(mean),
                      lanes.bit_length() - 1)
    else:
        target.launch(_row_sum_kernel, min(rows, _MAX_GRID), _block_size(R, rows, ROW_SUM_BLOCK), out, x1,
                      rows, R, int(mean))
    return 1


# The launchers cap a block at its kernel's bounds. Softmax's cached kernel takes blocks of up
# to 512 threads, bounded so: on the H200 (scripts/rownorm_sweep_gpu.py --bounds,
# results/gpu/2026-12-03-h200-rownorm/) the same code compiled for (MAX_BLOCK, 1) took 6-21%
# longer at every row length of 512 to 4096 (40 registers against 55). Rows of 4097 to 8192
# take its wide twin, blocks of MAX_BLOCK: at most 64 registers a thread, which its ROW_CACHE
# values fit in, as softmax's long-row kernel. Layer norm's long-row kernel spilled at 64: blocks of at most
# FEW_ROWS_BLOCK, 128 registers (two blocks per SM; left alone it took 152). The grouped
# kernels: 64 (8 blocks of 128 per SM; layer norm took 94). tests/test_aot.py checks that
# none spills.
_softmax_kernel.launch_bounds = (MAX_BLOCK // 2,)
_softmax_wide_kernel.launch_bounds = (MAX_BLOCK, 1)
# Half the block, two blocks an SM: the same 64 registers on the H200 (TUNED_ARCH), and up
# to 128 elsewhere, where only the block size is passed (kernels/target.py `launch_bounds`):
# at 1024 threads it spilled on sm_75.
_layer_norm_kernel.launch_bounds = _rms_norm_kernel.launch_bounds = (MAX_BLOCK // 2, 2)
_softmax_long_kernel.launch_bounds = (MAX_BLOCK, 1)
_layer_norm_long_kernel.launch_bounds = _rms_norm_long_kernel.launch_bounds = (FEW_ROWS_BLOCK, 2)
_SOFTMAX_ROWS.launch_bounds = _LAYER_NORM_ROWS.launch_bounds = _RMS_NORM_ROWS.launch_bounds = (ROWS_BLOCK, 8)
