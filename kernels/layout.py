"""Layout kernels: a strided gather, for permute_dims (transposes of up to 6 axes) and
strided_slice; a row scatter, for concat.

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry
(simaccel.permute_dims, simaccel.strided_slice, simaccel.concat). One thread per output element (grid-stride
loop), consecutive threads on consecutive output addresses; output element (i0, ..., i5)
reads input element ``offset + sum(i_k * s_k)``. A transpose permutes the input's strides,
a slice starts at an offset and scales them by its steps. Output axes that stay neighbours
in the input are merged first, so (0, 2, 1, 3) of a (B, H, S, D) tensor costs two index
divisions, not three. Values are copied as they are (no float32 round trip).
"""

from __future__ import annotations

from numba import cuda

from .elementwise import ILP, _grid, _size, divmod_fast, per_thread

RANK = 6


def _gather_kernel(out, x, d1, d2, d3, d4, d5, inv1, inv2, inv3, inv4, inv5,
                   s0, s1, s2, s3, s4, s5, offset, total, ilp):
    # Output index -> (i0..i5) over the merged output dims d0..d5 (d0 implied). Unused
    # leading dims are 1 with stride 0. `ilp` elements a block apart per thread, all
    # loaded before any is stored (as the elementwise kernels).
    v = cuda.local.array(ILP, x.dtype)
    block = cuda.blockDim.x
    start = cuda.blockIdx.x * block * ilp + cuda.threadIdx.x
    step = cuda.gridDim.x * block * ilp
    while start < total:
        for k in range(ILP):
            idx = start + k * block
            if k < ilp and idx < total:
                t, i5 = divmod_fast(idx, d5, inv5)
                t, i4 = divmod_fast(t, d4, inv4)
                t, i3 = divmod_fast(t, d3, inv3)
                t, i2 = divmod_fast(t, d2, inv2)
                i0, i1 = divmod_fast(t, d1, inv1)
                v[k] = x[offset + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3 + i4 * s4 + i5 * s5]
        for k in range(ILP):
            idx = start + k * block
            if k < ilp and idx < total:
                out[idx] = v[k]
        start += step


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


def _launch_gather(target, out, data, dims, strides, offset) -> int:
    total = _size(dims)
    if total == 0:
        return 0
    dims, strides = merged_dims(dims, strides)
    ilp = per_thread(total)
    grid, block = _grid(total, ilp)
    target.launch(_gather_kernel, grid, block, target.reshape(out, (total,)),
                  target.reshape(data, (_size(data.shape),)), *dims[1:], *(1.0 / d for d in dims[1:]),
                  *strides, offset, total, ilp)
    return 1


def launch_permute(target, out, data, *, axes) -> int:
    """out = data.transpose(axes): shapes and axes come validated by the ISA (rank <= 6)."""
    shape = tuple(int(d) for d in data.shape)
    strides = element_strides(shape)
    return _launch_gather(target, out, data, [shape[a] for a in axes], [strides[a] for a in axes], 0)


def launch_strided_slice(target, out, data, *, begin, end, strides) -> int:
    """out = data[begin[k]:end[k]:strides[k] for each axis k] (in bounds, steps >= 1: the ISA's)."""
    shape = tuple(int(d) for d in data.shape)
    within = element_strides(shape)
    dims = [int(d) for d in out.shape]
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
    """out = concatenate(data, axis): one launch per non-empty input (shapes validated by the ISA)."""
    shape = tuple(int(d) for d in out.shape)
    inner = _size(shape[axis + 1:])
    out_row = shape[axis] * inner
    flat_out = target.reshape(out, (_size(shape),))
    launches, offset = 0, 0
    for x in data:
        row = int(x.shape[axis]) * inner
        total = _size(x.shape)
        if total:
            grid, block = _grid(total)
            target.launch(_concat_kernel, grid, block, flat_out, target.reshape(x, (total,)),
                          row, 1.0 / row, out_row, offset, total)
            launches += 1
        offset += row
    return launches
