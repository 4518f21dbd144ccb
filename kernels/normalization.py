"""Row-wise kernels (over the last axis): softmax, layer normalization, and row sums.

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry
(simaccel.softmax, simaccel.layer_norm; simaccel.sum and simaccel.mean over the innermost
axes, through simaccel.kernels.reduction). One block per row; its threads stride over the
row and combine partial results with a block reduction: warp shuffles, then the warps'
results, on the GPU; a shared-memory tree on the simulator, which has no shuffles. Softmax and layer norm
keep up to ROW_CACHE elements per thread in registers between their passes, so a row is
read once. The block size is the smallest power of two >= the row length / ROW_CACHE
(launches of fewer than MIN_CACHED_ROWS rows: >= the row length), capped at MAX_BLOCK, so
short rows do not spawn idle threads (each one a Python thread on the simulator). Math is
float32.

Many short rows (from MIN_WARP_ROWS rows of at most WARP * WARP_CACHE = 1024: a transformer's
activations) take a warp per row instead: WARP_CACHE values per lane in registers and warp
shuffle reductions, no block barriers. The simulator has no shuffles; its twin of those
kernels reduces through shared memory (kernels/target.py, `with_simulator_twin`).
"""

from __future__ import annotations

import math

from numba import cuda, float32
from numba.cuda.extending import register_jitable

from .target import with_simulator_twin

MAX_BLOCK = 256  # power of two; also the size of the shared reduction buffer
# Elements of its row each thread keeps in registers between the passes of softmax and
# layer norm, so that a row up to ROW_CACHE * MAX_BLOCK long is read from memory once.
ROW_CACHE = 8
# From this many rows on, a block has a thread per ROW_CACHE elements of its row, else one
# per element (an H200 holds about 132 x 8 blocks at once).
MIN_CACHED_ROWS = 1024
_MAX_GRID = 1 << 20  # rows beyond that are walked by a loop in the kernels
# Many short rows (a transformer's activations): a warp per row, WARP_CACHE elements per lane
# in registers, warp reductions, no block barriers (from MIN_WARP_ROWS rows of at most
# WARP * WARP_CACHE elements).
WARP = 32
# Rows per block of the warp-per-row kernels. They keep 32 values per lane in registers, and
# take up to 164 registers (capped at 128 they spilled): blocks of 4 warps fit 3 to an SM.
WARPS = 4
WARP_CACHE = 32
MIN_WARP_ROWS = 1024
_WARP_BUF = WARPS * WARP  # the simulator's reduction buffer


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
def _warp_reduce_shuffle(buf, value, take_max, lane, warp):
    """Combine `value` over the 32 lanes of a warp (sum, or max if `take_max`) with register
    shuffles; every lane gets the result, and every lane must call it."""
    offset = WARP // 2
    while offset > 0:
        other = cuda.shfl_xor_sync(0xFFFFFFFF, value, offset)
        if take_max:
            value = max(value, other)
        else:
            value += other
        offset //= 2
    return value


@register_jitable
def _warp_reduce_shared(buf, value, take_max, lane, warp):
    """The simulator's `_warp_reduce_shuffle` (it has no shuffles): through the warp's slice of
    `buf`, between block barriers, so every thread of the block must call it."""
    base = warp * WARP
    buf[base + lane] = value
    cuda.syncthreads()
    result = buf[base]
    for k in range(1, WARP):
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
    value = _warp_reduce_shuffle(buf, value, take_max, lane, warp)
    if lane == 0:
        buf[warp] = value
    cuda.syncthreads()
    if lane < nthreads // WARP:
        value = buf[lane]
    elif take_max:
        value = float32(-math.inf)
    else:
        value = float32(0.0)
    value = _warp_reduce_shuffle(buf, value, take_max, lane, warp)  # every warp, the same result
    cuda.syncthreads()  # buf is free again once everyone has read it
    return value


def _softmax_block_kernel(simulator):
    """Softmax, a block per row (see above); block reductions with shuffles on the GPU."""
    block_reduce = _block_reduce if simulator else _block_reduce_shuffle

    def kernel(out, x, rows, D):
        buf = cuda.shared.array(MAX_BLOCK, float32)
        vals = cuda.local.array(ROW_CACHE, float32)
        tid = cuda.threadIdx.x
        nthreads = cuda.blockDim.x
        tail = tid + ROW_CACHE * nthreads  # this thread's first element past the cache
        # The row loop is uniform over the block, so every thread reaches every syncthreads.
        r = cuda.blockIdx.x
        while r < rows:
            # 1. row max, the row read once into the cache (rows longer than it: the rest twice more)
            m = float32(-math.inf)
            for j in range(ROW_CACHE):
                i = tid + j * nthreads
                if i < D:
                    v = float32(x[r, i])
                    vals[j] = v
                    if v > m:
                        m = v
            i = tail
            while i < D:
                v = float32(x[r, i])
                if v > m:
                    m = v
                i += nthreads
            row_max = block_reduce(buf, m, True)
            # 2. sum of exp(x - max)
            acc = float32(0.0)
            for j in range(ROW_CACHE):
                if tid + j * nthreads < D:
                    e = float32(math.exp(vals[j] - row_max))
                    vals[j] = e
                    acc += e
            i = tail
            while i < D:
                acc += float32(math.exp(float32(x[r, i]) - row_max))
                i += nthreads
            inv = float32(1.0) / block_reduce(buf, acc, False)
            # 3. normalize
            for j in range(ROW_CACHE):
                i = tid + j * nthreads
                if i < D:
                    out[r, i] = vals[j] * inv
            i = tail
            while i < D:
                out[r, i] = float32(math.exp(float32(x[r, i]) - row_max)) * inv
                i += nthreads
            r += cuda.gridDim.x

    kernel.__name__ = kernel.__qualname__ = "_softmax_kernel"
    return kernel


_softmax_kernel = with_simulator_twin(_softmax_block_kernel)


def _layer_norm_block_kernel(simulator):
    """Layer norm, a block per row (see above); block reductions with shuffles on the GPU."""
    block_reduce = _block_reduce if simulator else _block_reduce_shuffle

    def kernel(out, x, gamma, beta, rows, D, eps):
        buf = cuda.shared.array(MAX_BLOCK, float32)
        vals = cuda.local.array(ROW_CACHE, float32)
        tid = cuda.threadIdx.x
        nthreads = cuda.blockDim.x
        tail = tid + ROW_CACHE * nthreads
        inv_d = float32(1.0) / float32(D)
        r = cuda.blockIdx.x
        while r < rows:
            # 1. mean, the row read once into the cache
            acc = float32(0.0)
            for j in range(ROW_CACHE):
                i = tid + j * nthreads
                if i < D:
                    v = float32(x[r, i])
                    vals[j] = v
                    acc += v
            i = tail
            while i < D:
                acc += float32(x[r, i])
                i += nthreads
            mean = block_reduce(buf, acc, False) * inv_d
            # 2. biased variance, two-pass (no cancellation from E[x^2] - E[x]^2)
            acc = float32(0.0)
            for j in range(ROW_CACHE):
                if tid + j * nthreads < D:
                    d = vals[j] - mean
                    acc += d * d
            i = tail
            while i < D:
                d = float32(x[r, i]) - mean
                acc += d * d
                i += nthreads
            rstd = float32(1.0) / float32(math.sqrt(block_reduce(buf, acc, False) * inv_d + float32(eps)))
            # 3. scale and shift
            for j in range(ROW_CACHE):
                i = tid + j * nthreads
                if i < D:
                    out[r, i] = (vals[j] - mean) * rstd * float32(gamma[i]) + float32(beta[i])
            i = tail
            while i < D:
                y = (float32(x[r, i]) - mean) * rstd
                out[r, i] = y * float32(gamma[i]) + float32(beta[i])
                i += nthreads
            r += cuda.gridDim.x

    kernel.__name__ = kernel.__qualname__ = "_layer_norm_kernel"
    return kernel


_layer_norm_kernel = with_simulator_twin(_layer_norm_block_kernel)


def _softmax_rows_kernel(simulator):
    """Softmax, a warp per row of D <= WARP * WARP_CACHE (see above); the row loop is uniform
    over the block, a warp past the last row computes on nothing."""
    reduce = _warp_reduce_shared if simulator else _warp_reduce_shuffle

    def kernel(out, x, rows, D):
        buf = cuda.shared.array(_WARP_BUF, float32)  # the simulator's reductions only
        vals = cuda.local.array(WARP_CACHE, float32)
        lane = cuda.threadIdx.x % WARP
        warp = cuda.threadIdx.x // WARP
        r0 = cuda.blockIdx.x * WARPS
        while r0 < rows:
            r = r0 + warp
            live = r < rows
            m = float32(-math.inf)
            for j in range(WARP_CACHE):
                i = lane + j * WARP
                if live and i < D:
                    v = float32(x[r, i])
                    vals[j] = v
                    m = max(m, v)
            row_max = reduce(buf, m, True, lane, warp)
            acc = float32(0.0)
            for j in range(WARP_CACHE):
                if live and lane + j * WARP < D:
                    e = float32(math.exp(vals[j] - row_max))
                    vals[j] = e
                    acc += e
            inv = float32(1.0) / reduce(buf, acc, False, lane, warp)
            for j in range(WARP_CACHE):
                i = lane + j * WARP
                if live and i < D:
                    out[r, i] = vals[j] * inv
            r0 += cuda.gridDim.x * WARPS

    kernel.__name__ = kernel.__qualname__ = "_softmax_rows_kernel"
    return kernel


def _layer_norm_rows_kernel(simulator):
    """Layer norm, a warp per row of D <= WARP * WARP_CACHE (as `_softmax_rows_kernel`)."""
    reduce = _warp_reduce_shared if simulator else _warp_reduce_shuffle

    def kernel(out, x, gamma, beta, rows, D, eps):
        buf = cuda.shared.array(_WARP_BUF, float32)
        vals = cuda.local.array(WARP_CACHE, float32)
        lane = cuda.threadIdx.x % WARP
        warp = cuda.threadIdx.x // WARP
        inv_d = float32(1.0) / float32(D)
        r0 = cuda.blockIdx.x * WARPS
        while r0 < rows:
            r = r0 + warp
            live = r < rows
            acc = float32(0.0)
            for j in range(WARP_CACHE):
                i = lane + j * WARP
                if live and i < D:
                    v = float32(x[r, i])
                    vals[j] = v
                    acc += v
            mean = reduce(buf, acc, False, lane, warp) * inv_d
            acc = float32(0.0)
            for j in range(WARP_CACHE):
                if live and lane + j * WARP < D:
                    d = vals[j] - mean
                    acc += d * d
            rstd = float32(1.0) / float32(math.sqrt(reduce(buf, acc, False, lane, warp) * inv_d + float32(eps)))
            for j in range(WARP_CACHE):
                i = lane + j * WARP
                if live and i < D:
                    out[r, i] = (vals[j] - mean) * rstd * float32(gamma[i]) + float32(beta[i])
            r0 += cuda.gridDim.x * WARPS

    kernel.__name__ = kernel.__qualname__ = "_layer_norm_rows_kernel"
    return kernel


_SOFTMAX_ROWS = with_simulator_twin(_softmax_rows_kernel)
_LAYER_NORM_ROWS = with_simulator_twin(_layer_norm_rows_kernel)


def _warp_per_row(rows: int, D: int) -> bool:
    return rows >= MIN_WARP_ROWS and D <= WARP * WARP_CACHE


def _block_size(D: int, rows: int) -> int:
    """Threads for each of `rows` rows of D elements: the smallest power of two >= D /
    ROW_CACHE (ROW_CACHE elements each), or >= D where there are fewer than MIN_CACHED_ROWS
    rows (a launch that does not fill the GPU: as many threads as elements), capped at
    MAX_BLOCK (longer rows are walked in a loop)."""
    per_thread = ROW_CACHE if rows >= MIN_CACHED_ROWS else 1
    b = 1
    while b * per_thread < D and b < MAX_BLOCK:
        b *= 2
    return b


def _rows_view(target, out, data):
    shape = tuple(int(d) for d in data.shape)
    D = shape[-1]
    rows = 1
    for d in shape[:-1]:
        rows *= d
    if rows == 0 or D == 0:
        return None
    return rows, D, target.reshape(data, (rows, D)), target.reshape(out, (rows, D))


def launch_softmax(target, out, data) -> int:
    """Softmax over the last axis (subtracting the row max); returns the launch count."""
    view = _rows_view(target, out, data)
    if view is None:
        return 0
    rows, D, x2, o2 = view
    if _warp_per_row(rows, D):
        target.launch(_SOFTMAX_ROWS, min(-(-rows // WARPS), _MAX_GRID), WARPS * WARP, o2, x2, rows, D)
    else:
        target.launch(_softmax_kernel, min(rows, _MAX_GRID), _block_size(D, rows), o2, x2, rows, D)
    return 1


def launch_layer_norm(target, out, data, gamma, beta, *, epsilon) -> int:
    """Layer norm over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta."""
    view = _rows_view(target, out, data)
    if view is None:
        return 0
    rows, D, x2, o2 = view
    g1 = target.reshape(gamma, (D,))
    b1 = target.reshape(beta, (D,))
    if _warp_per_row(rows, D):
        target.launch(_LAYER_NORM_ROWS, min(-(-rows // WARPS), _MAX_GRID), WARPS * WARP,
                      o2, x2, g1, b1, rows, D, float(epsilon))
    else:
        target.launch(_layer_norm_kernel, min(rows, _MAX_GRID), _block_size(D, rows),
                      o2, x2, g1, b1, rows, D, float(epsilon))
    return 1


def _row_sum_block_kernel(simulator):
    """Row sums (or means), a block per row; ROW_CACHE loads in flight per thread."""
    block_reduce = _block_reduce if simulator else _block_reduce_shuffle

    def kernel(out, x, rows, R, mean):
        buf = cuda.shared.array(MAX_BLOCK, float32)
        vals = cuda.local.array(ROW_CACHE, float32)
        tid = cuda.threadIdx.x
        nthreads = cuda.blockDim.x
        r = cuda.blockIdx.x
        while r < rows:
            acc = float32(0.0)
            i = tid
            while i < R:  # ROW_CACHE loads issued before any is added (one at a time: 41% of HBM)
                for j in range(ROW_CACHE):
                    k = i + j * nthreads
                    vals[j] = float32(x[r, k]) if k < R else float32(0.0)
                for j in range(ROW_CACHE):
                    acc += vals[j]
                i += ROW_CACHE * nthreads
            total = block_reduce(buf, acc, False)
            if tid == 0:
                out[r] = total / float32(R) if mean else total
            r += cuda.gridDim.x

    kernel.__name__ = kernel.__qualname__ = "_row_sum_kernel"
    return kernel


_row_sum_kernel = with_simulator_twin(_row_sum_block_kernel)


def launch_row_sums(target, out, x, *, mean: bool) -> int:
    """out[r] = the sum (or mean) of row r of x (rows, R), R >= 1."""
    rows, R = (int(d) for d in x.shape)
    target.launch(_row_sum_kernel, min(rows, _MAX_GRID), _block_size(R, rows), out, x, rows, R, int(mean))
    return 1


# At most 128 registers (two full blocks per SM): left alone, layer norm took 152.
# tests/test_aot.py checks that neither spills.
_softmax_kernel.launch_bounds = _layer_norm_kernel.launch_bounds = (MAX_BLOCK, 2)
