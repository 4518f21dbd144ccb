"""Layout kernels: permute_dims (transposes of up to 6 axes), strided_slice, concat and take.

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry
(simaccel.permute_dims, simaccel.strided_slice, simaccel.concat, simaccel.take; take is a
gather of its own, `_take_kernel`, described there). Output element (i0, ..., i5)
reads input element ``offset + sum(i_k * s_k)``: a transpose permutes the input's strides, a
slice starts at an offset and scales them by its steps. Output axes that stay neighbours in the
input are merged first, so (0, 2, 1, 3) of a (B, H, S, D) tensor has four dims, not six, and
each kernel does the index math of the dims there are, no more. Values are copied as they are
(no float32 round trip). Three kernels, chosen by where the input's stride-1 axis lands:

* **Row copy** (`_copy_rows_kernel`) where the innermost output axis is the input's innermost
  too (a permute that keeps the last axis, such as attention's (0, 2, 1, 3); slices with step 1
  on it; concat; plain copies): the output is rows of L contiguous elements, each a
  contiguous run of the input. `lanes` threads (a power of two, 32 bytes of the row at least,
  so a warp's access fills whole 32-byte sectors) copy one row chunk of up to lanes x ILP
  elements, ILP a thread, all loaded before any is stored; the row's offset in the input
  (a division per merged dim) is computed once per chunk, not once per element.
* **Tiled transpose** (`_transpose_kernel`) where the innermost axis moves (NCHW -> NHWC, a
  2-D transpose): a TILE_A x TILE_B tile of the (A, B) plane, A the output axis that is
  contiguous in the input and B the output's innermost, is read along A (coalesced), kept
  in shared memory padded by one column (column reads hit 32 different banks; for 2-byte
  types too) and written along B (coalesced); 8 elements a thread. The other axes index
  the tile's batch, once per tile.
* **Gather** (`_gather_kernel`) otherwise (short rows, tiny planes): one output element at a
  time, consecutive threads on consecutive output addresses, ILP elements a block apart per
  thread for large launches, a division per merged dim and element.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import cuda
from numba.cuda.extending import register_jitable

from .dtypes import BFLOAT16, numpy_dtype
from .elementwise import ILP, divmod_fast, per_thread
from .grid import BLOCK, MAX_BLOCKS, dims_of, launch_grid, pow2_at_least, size

RANK = 6
# Tiled transpose: TILE_A output positions along A (the input's contiguous axis) by TILE_B
# along B (the output's), a block of TILE_A x TILE_ROWS threads, TILE_B / TILE_ROWS elements each.
TILE_A = 32
TILE_B = 64
TILE_ROWS = 8
# Both axes of the transposed plane at least this long, else the gather (a tile would be mostly empty).
MIN_TILE_AXIS = 16
_TILE_COLS = TILE_A + 1  # the shared tile's row: one column of padding
SECTOR = 32  # bytes: a warp's access should cover whole DRAM sectors
# Array indices are cast to unsigned where they are known non-negative: numba wraps a signed
# index around (three more instructions per access), never an unsigned one.
_u = numba.uint64


@register_jitable
def _outer_offset(t, nd, d1, d2, d3, d4, inv1, inv2, inv3, inv4, s0, s1, s2, s3, s4):
    """The offset of index `t` over right-aligned dims (d0, ..., d4) (d0 implied) with strides
    s0..s4, of which only the last `nd` are used: nd - 1 divisions (the branch is uniform)."""
    if nd <= 1:
        return t * s4
    t, i = divmod_fast(t, d4, inv4)
    off = i * s4
    if nd == 2:
        return off + t * s3
    t, i = divmod_fast(t, d3, inv3)
    off += i * s3
    if nd == 3:
        return off + t * s2
    t, i = divmod_fast(t, d2, inv2)
    off += i * s2
    if nd == 4:
        return off + t * s1
    t, i = divmod_fast(t, d1, inv1)
    return off + i * s1 + t * s0


def _gather_kernel(out, x, nd, d1, d2, d3, d4, d5, inv1, inv2, inv3, inv4, inv5,
                   s0, s1, s2, s3, s4, s5, offset, total, ilp):
    # Output index -> (i0..i5) over the merged output dims d0..d5 (d0 implied), of which the
    # last `nd` are used. `ilp` elements a block apart per thread, all loaded before any is
    # stored (as the elementwise kernels).
    v = cuda.local.array(ILP, x.dtype)
    block = cuda.blockDim.x
    start = cuda.blockIdx.x * block * ilp + cuda.threadIdx.x
    step = cuda.gridDim.x * block * ilp
    while start < total:
        for k in range(ILP):
            idx = start + k * block
            if k < ilp and idx < total:
                if nd <= 1:
                    src = idx * s5
                else:
                    t, i5 = divmod_fast(idx, d5, inv5)
                    src = i5 * s5 + _outer_offset(t, nd - 1, d1, d2, d3, d4, inv1, inv2, inv3, inv4, s0, s1, s2, s3, s4)
                v[k] = x[_u(offset + src)]
        for k in range(ILP):
            idx = start + k * block
            if k < ilp and idx < total:
                out[_u(idx)] = v[k]
        start += step


def _copy_rows_kernel(out, x, L, chunks, inv_chunks, shift, ilp, items, nd, d1, d2, d3, d4,
                      inv1, inv2, inv3, inv4, s0, s1, s2, s3, s4, offset, out_row, out_offset):
    # Work item u = (row, chunk of lanes * ilp columns), rows over the outer dims d0..d4 (the
    # last nd used). 2**shift lanes per item; lane l copies columns chunk*width + l + k*lanes.
    v = cuda.local.array(ILP, x.dtype)
    lanes = 1 << shift
    tid = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    lane = tid & (lanes - 1)
    u = tid >> shift
    step = (cuda.gridDim.x * cuda.blockDim.x) >> shift
    width = lanes * ilp
    while u < items:
        if chunks == 1:
            row = u
            c0 = lane
        else:
            row, chunk = divmod_fast(u, chunks, inv_chunks)
            c0 = chunk * width + lane
        src = offset + _outer_offset(row, nd, d1, d2, d3, d4, inv1, inv2, inv3, inv4, s0, s1, s2, s3, s4)
        dst = out_offset + row * out_row
        for k in range(ILP):
            c = c0 + k * lanes
            if k < ilp and c < L:
                v[k] = x[_u(src + c)]
        for k in range(ILP):
            c = c0 + k * lanes
            if k < ilp and c < L:
                out[_u(dst + c)] = v[k]
        u += step


def _transpose_kernel(out, x, A, B, sa_in, sb_in, sa_out, tiles_a, tiles_b, inv_ta, inv_tb, tiles, nb,
                      e1, e2, e3, e4, inve1, inve2, inve3, inve4, si0, si1, si2, si3, si4,
                      so0, so1, so2, so3, so4, offset):
    # Tile t = (batch, ta, tb): out[batch][a][b] (a along A, b along B, B innermost in the
    # output) = x[batch][a * sa_in + b * sb_in]. Batch over dims (e0..e4) (the last nb used),
    # input strides si, output strides so. Block (TILE_A, TILE_ROWS).
    tile = cuda.shared.array((TILE_B, _TILE_COLS), x.dtype)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    t = cuda.blockIdx.x
    while t < tiles:  # uniform over the block: every thread reaches every barrier
        rest, tb = divmod_fast(t, tiles_b, inv_tb)
        batch, ta = divmod_fast(rest, tiles_a, inv_ta)
        src = offset + _outer_offset(batch, nb, e1, e2, e3, e4, inve1, inve2, inve3, inve4, si0, si1, si2, si3, si4)
        dst = _outer_offset(batch, nb, e1, e2, e3, e4, inve1, inve2, inve3, inve4, so0, so1, so2, so3, so4)
        a0 = ta * TILE_A
        b0 = tb * TILE_B
        # Read along A: consecutive threads on consecutive input addresses.
        a = a0 + tx
        for j in range(TILE_B // TILE_ROWS):
            r = ty + j * TILE_ROWS
            b = b0 + r
            if a < A and b < B:
                tile[r, tx] = x[_u(src + a * sa_in + b * sb_in)]
        cuda.syncthreads()
        # Write along B: consecutive threads on consecutive output addresses.
        for h in range(TILE_B // TILE_A):
            c = tx + h * TILE_A
            b = b0 + c
            for j in range(TILE_A // TILE_ROWS):
                r = ty + j * TILE_ROWS
                a = a0 + r
                if a < A and b < B:
                    out[_u(dst + a * sa_out + b)] = tile[c, r]
        cuda.syncthreads()  # the tile is free again
        t += cuda.gridDim.x


def element_strides(shape) -> list[int]:
    """Element strides of a C-contiguous array of `shape`."""
    strides, s = [0] * len(shape), 1
    for k in range(len(shape) - 1, -1, -1):
        strides[k] = s
        s *= shape[k]
    return strides


def merged_dims(dims, strides) -> tuple[list[int], list[int]]:
    """Output `dims` read with input `strides`: size-1 dims dropped, an axis merged into the
    one before it where that one steps exactly over it, left-padded to RANK (size 1, stride 0)."""
    merged: list[tuple[int, int]] = []
    for d, st in zip(dims, strides):
        if d == 1:
            continue
        if merged and merged[-1][1] == st * d:
            merged[-1] = (merged[-1][0] * d, st)
        else:
            merged.append((d, st))
    merged = [(1, 0)] * (RANK - len(merged)) + merged
    return [d for d, _ in merged], [st for _, st in merged]


def _padded(dims, strides, rank):
    """`dims` (all > 1) and `strides` left-padded to `rank` with (1, 0): the dims a kernel's
    `_outer_offset` walks, their reciprocals and strides, and how many are used."""
    n = len(dims)
    dims = [1] * (rank - n) + list(dims)
    strides = [0] * (rank - n) + list(strides)
    return dims, [1.0 / d for d in dims], strides, n


def _min_lanes(dtype) -> int:
    """Threads per row of the row copy: a warp's access to a row covers a whole 32-byte sector."""
    return max(1, min(32, SECTOR // numpy_dtype(dtype).itemsize))


def plan_copy_rows(rows: int, L: int, dtype, total: int) -> tuple[int, int, int]:
    """(lanes, elements a lane per chunk, chunks per row) of the row copy of `rows` rows of L."""
    ilp = per_thread(total)
    lanes = max(_min_lanes(dtype), pow2_at_least(-(-L // ilp), 32))
    return lanes, ilp, -(-L // (lanes * ilp))


def _moved(target, *arrays):
    """`arrays` as the copy kernels read them: bfloat16 ones as float16, the same 2 bytes an
    element moved unchanged (the kernels hold values in local and shared arrays, and numba-cuda
    0.30 makes none of its bfloat16: "unsupported type: __nv_bfloat16", seen on an H100)."""
    return [target.reshape(a, a.shape, np.float16) if numpy_dtype(a.dtype) == BFLOAT16 else a for a in arrays]


def _launch_copy_rows(target, out, x, rows, L, outer_dims, outer_strides, offset, out_row, out_offset):
    """Rows of L contiguous input elements, row r at `offset` + its index over `outer_dims`
    (strides `outer_strides`), to out[out_offset + r * out_row + c]."""
    out, x = _moved(target, out, x)
    lanes, ilp, chunks = plan_copy_rows(rows, L, x.dtype, rows * L)
    items = rows * chunks
    threads = items * lanes
    grid, block = launch_grid(threads)
    dims, inv, strides, nd = _padded(outer_dims, outer_strides, RANK - 1)
    target.launch(_copy_rows_kernel, grid, block, out, x, L, chunks, 1.0 / chunks, lanes.bit_length() - 1, ilp,
                  items, nd, *dims[1:], *inv[1:], *strides, offset, out_row, out_offset)
    return 1


def _transpose_plane(dims, strides):
    """The output axis q (not the last) whose input stride is 1, where the innermost output axis
    moves and both axes of the (q, last) plane are long enough to tile; else None."""
    if strides[-1] == 1 or dims[-1] < MIN_TILE_AXIS:
        return None
    for q in range(RANK - 1):
        if strides[q] == 1 and dims[q] >= MIN_TILE_AXIS:
            return q
    return None


def _launch_transpose(target, out, x, dims, strides, q, offset):
    out, x = _moved(target, out, x)
    out_strides = element_strides(dims)
    A, B = dims[q], dims[-1]
    batch = [k for k in range(RANK - 1) if k != q and dims[k] > 1]
    bdims, binv, bin_strides, nb = _padded([dims[k] for k in batch], [strides[k] for k in batch], RANK - 1)
    _, _, bout_strides, _ = _padded([dims[k] for k in batch], [out_strides[k] for k in batch], RANK - 1)
    tiles_a, tiles_b = -(-A // TILE_A), -(-B // TILE_B)
    tiles = tiles_a * tiles_b * size(bdims)
    target.launch(_transpose_kernel, min(tiles, MAX_BLOCKS), (TILE_A, TILE_ROWS), out, x, A, B, strides[q],
                  strides[-1], out_strides[q], tiles_a, tiles_b, 1.0 / tiles_a, 1.0 / tiles_b, tiles, nb,
                  *bdims[1:], *binv[1:], *bin_strides, *bout_strides, offset)
    return 1


def _launch_gather(target, out, data, dims, strides, offset) -> int:
    total = size(dims)
    if total == 0:
        return 0
    dims, strides = merged_dims(dims, strides)
    nd = max(1, sum(d > 1 for d in dims))
    flat_out = target.reshape(out, (total,))
    flat_in = target.reshape(data, (size(data.shape),))
    if strides[-1] == 1 and dims[-1] >= _min_lanes(data.dtype):
        L = dims[-1]
        return _launch_copy_rows(target, flat_out, flat_in, total // L, L, dims[RANK - nd:-1],
                                 strides[RANK - nd:-1], offset, L, 0)
    q = _transpose_plane(dims, strides)
    if q is not None:
        return _launch_transpose(target, flat_out, flat_in, dims, strides, q, offset)
    ilp = per_thread(total)
    grid, block = launch_grid(total, ilp)
    flat_out, flat_in = _moved(target, flat_out, flat_in)
    target.launch(_gather_kernel, grid, block, flat_out, flat_in, nd, *dims[1:], *(1.0 / d for d in dims[1:]),
                  *strides, offset, total, ilp)
    return 1


def launch_permute(target, out, data, *, axes) -> int:
    """out = data.transpose(axes): shapes and axes come validated by the ISA (rank <= 6)."""
    shape = dims_of(data.shape)
    strides = element_strides(shape)
    return _launch_gather(target, out, data, [shape[a] for a in axes], [strides[a] for a in axes], 0)


def launch_strided_slice(target, out, data, *, begin, end, strides) -> int:
    """out = data[begin[k]:end[k]:strides[k] for each axis k] (in bounds, steps >= 1: the ISA's)."""
    shape = dims_of(data.shape)
    within = element_strides(shape)
    dims = list(dims_of(out.shape))
    offset = sum(b * s for b, s in zip(begin, within))
    return _launch_gather(target, out, data, dims, [s * k for s, k in zip(within, strides)], offset)


def _concat_kernel(out, x, row, inv_row, out_row, offset, total):
    # x viewed as (outer, row) lands in out viewed as (outer, out_row), at column `offset`:
    # consecutive threads read and write consecutive addresses within a row.
    idx = cuda.grid(1)
    step = cuda.gridsize(1)
    while idx < total:
        r, c = divmod_fast(idx, row, inv_row)
        out[r * out_row + offset + c] = x[idx]
        idx += step


def launch_concat(target, out, *data, axis) -> int:
    """out = concatenate(data, axis): one launch per non-empty input (shapes validated by the ISA).
    An input's rows of at least a sector are row copies, shorter ones one thread per element."""
    shape = dims_of(out.shape)
    inner = size(shape[axis + 1:])
    out_row = shape[axis] * inner
    flat_out = target.reshape(out, (size(shape),))
    launches, offset = 0, 0
    for x in data:
        row = dims_of(x.shape)[axis] * inner
        total = size(x.shape)
        if total:
            flat_x = target.reshape(x, (total,))
            outer = total // row
            if row >= _min_lanes(x.dtype):
                _launch_copy_rows(target, flat_out, flat_x, outer, row, [outer] if outer > 1 else [], [row] if outer > 1 else [],
                                  0, out_row, offset)
            else:
                grid, block = launch_grid(total)
                target.launch(_concat_kernel, grid, block, flat_out, flat_x, row, 1.0 / row, out_row, offset, total)
            launches += 1
        offset += row
    return launches


TAKE_MODES = {"clip": 0, "wrap": 1, "fast": 2}  # simaccel.take's modes (simaccel/ops/builtin/layout.py)


@register_jitable
def take_index(i, n, mode):
    """The element of an axis of n >= 1 that take reads for index i in `mode` (TAKE_MODES):
    "wrap" i mod n; "fast" i + n for i in [-n, 0); then clamped to [0, n - 1] ("clip")."""
    if mode == 1:
        i = i % n  # Python's (and Numba's) modulo: never negative for n > 0
    elif mode == 2 and i < 0 and i >= -n:
        i += n
    if i < 0:
        return 0
    if i >= n:
        return n - 1
    return i


def _take_kernel(out, x, indices, n, inner, inv_inner, count, inv_count, mode, total):
    # out viewed as (outer, count, inner), x as (outer, n, inner), indices flat (count,): output
    # element (o, k, j) is x[o, index k, j]. Consecutive threads copy consecutive elements of a
    # row (an embedding's vector), so reads and writes stay coalesced along it.
    idx = cuda.grid(1)
    step = cuda.gridsize(1)
    while idx < total:
        rest, j = divmod_fast(idx, inner, inv_inner)
        o, k = divmod_fast(rest, count, inv_count)
        i = take_index(numba.int64(indices[k]), n, mode)
        out[idx] = x[(o * n + i) * inner + j]
        idx += step


def launch_take(target, out, data, indices, *, axis, mode) -> int:
    """out = data's elements along `axis` at `indices` (any rank), read as `take_index` says."""
    total = size(out.shape)
    if not total:
        return 0
    shape = dims_of(data.shape)
    n, inner, count = shape[axis], size(shape[axis + 1:]), size(indices.shape)
    grid, block = launch_grid(total)
    target.launch(_take_kernel, grid, block, target.reshape(out, (total,)), target.reshape(data, (size(shape),)),
                  target.reshape(indices, (count,)), n, inner, 1.0 / inner, count, 1.0 / count, TAKE_MODES[mode], total)
    return 1


# At most 64 registers (4 blocks of 256 per SM): left alone, the gather's 8 unrolled offsets took 89.
_gather_kernel.launch_bounds = (BLOCK, 4)
