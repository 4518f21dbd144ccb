"""Launch geometry the kernel modules share: element counts, grids of grid-stride kernels, and
the broadcast index space of the elementwise, mask and epilogue kernels (at most RANK dims
once merged).

Host-side only (the launchers call it; no kernel does): elementwise, masks, epilogue, layout,
reduction, pool2d, conv2d and normalization size their launches with it. A broadcasting
launcher pads the output shape to RANK (`padded`), gives each input its element strides in
that space (`broadcast_strides`, 0 along broadcast dims) and merges the dims every input walks
contiguously (`collapse_dims`), so its kernel divides an index into as few dims as it can.
"""

from __future__ import annotations

import numpy as np

BLOCK = 256  # threads per block of the grid-stride kernels
MAX_BLOCKS = 1 << 20  # a grid-stride loop covers the rest
RANK = 4  # dims of the broadcast index space


def dims_of(shape) -> tuple:
    """`shape` as a tuple of sizes, numpy ints as ints. Sizes that are not ints stay as they
    are: a symbolic region's launches are traced with sizes that carry their expressions
    (simaccel.size_plans), and `int()` would pin each to its value at the traced point."""
    return tuple(int(d) if isinstance(d, np.integer) else d for d in shape)


def size(shape) -> int:
    """The number of elements of `shape`."""
    n = 1
    for d in shape:
        n *= d
    return n


def launch_grid(total: int, elements_per_thread: int = 1):
    """(blocks, threads per block) for `total` elements, `elements_per_thread` per thread and
    pass of a grid-stride loop."""
    block = min(BLOCK, total)
    return min(-(-total // (block * elements_per_thread)), MAX_BLOCKS), block


def chunk_starts(total: int, step: int):
    """0, step, 2 * step, ... below `total`: where each launch of a loop over a grid limit
    starts. A loop, not `range`, so that a traced size (simaccel.size_plans) is asked only
    whether each start is below it."""
    start = 0
    while start < total:
        yield start
        start += step


def pow2_at_least(n: int, cap: int | None = None) -> int:
    """The smallest power of two >= n (1 for n <= 1), at most `cap` (a power of two) where given.
    A loop that stops at the cap: a traced size (simaccel.size_plans) is asked only whether it
    is above each power of two up to the cap, so sizes past it share one size plan."""
    p = 1
    while p < n and (cap is None or p < cap):
        p *= 2
    return p


def padded(shape) -> tuple:
    """`shape` left-padded with 1s to RANK (a shape of more dims as it is)."""
    return (1,) * (RANK - len(shape)) + dims_of(shape)


def broadcast_strides(shape, out_shape):
    """Element strides of a C-contiguous array of `shape` broadcast to `out_shape` (of at least
    its rank: RANK where it comes `padded`)."""
    rank = len(out_shape)
    shape = (1,) * (rank - len(shape)) + dims_of(shape)
    strides = [0] * rank
    s = 1
    for i in range(rank - 1, -1, -1):
        if shape[i] != 1:
            if shape[i] != out_shape[i]:
                raise ValueError(f"shape {shape} does not broadcast to {out_shape}")
            strides[i] = s
        s *= shape[i]
    return strides


def collapse_dims(out_shape, *strides):
    """The iteration space of `out_shape` (rank RANK or more) with size-1 dims dropped and a
    dim merged into its inner neighbour where every input continues contiguously across them
    (or is broadcast along both): (nd, dims, [strides per input]), `nd` dims used,
    right-aligned and left-padded to RANK with size 1 / stride 0. The element offsets stay
    those of the original strides. ValueError where more than RANK dims remain (the ISA's
    rule, simaccel.ops.rules.broadcast_result, refuses those shapes)."""
    merged: list = []
    for k, d in enumerate(out_shape):
        if d == 1:
            continue
        ss = [s[k] for s in strides]
        if merged and all(p == x * d for p, x in zip(merged[-1][1], ss)):
            merged[-1] = (merged[-1][0] * d, ss)
            continue
        merged.append((d, ss))
    nd = len(merged)
    if nd > RANK:
        raise ValueError(f"{tuple(out_shape)} is {nd} broadcast dims once merged (at most {RANK})")
    merged = [(1, [0] * len(strides))] * (RANK - nd) + merged
    return nd, [d for d, _ in merged], [[ss[i] for _, ss in merged] for i in range(len(strides))]
