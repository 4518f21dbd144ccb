"""Matrix multiplication kernel: y = act(x @ W (+ bias)) or, dense form, act(x @ W^T (+ bias)).

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry
(simaccel.matmul*, simaccel.dense*). One shared-memory tiled kernel covers all twelve ops:
TILE x TILE output tiles, one thread per output element, float32 accumulation (also for
float16 inputs), bias and activation fused into the epilogue, bounds checks everywhere so
any M, N, K works.
"""

from __future__ import annotations

import math

from numba import cuda, float32

from .activation import activation_code, apply_activation

TILE = 16
# Row length of the B tile: one padding column (a literal constant, as cuda.shared.array
# needs; `TILE + 1` inside the kernel is not folded).
TILE_PAD = TILE + 1

# CUDA caps gridDim.y at 65535; row tiles beyond that are walked by a loop in the kernel.
_MAX_GRID_Y = 65535


def _matmul_kernel(out, a, b, bias, M, N, K, transpose_b, has_bias, act):
    """out[M, N] = act(a[M, K] @ B + bias), B = b[K, N], or b[N, K]^T when transpose_b."""
    sa = cuda.shared.array((TILE, TILE), float32)
    # One padding column: the transposed load writes sb column-wise; without it the
    # threads of a warp would hit the same shared-memory banks.
    sb = cuda.shared.array((TILE, TILE_PAD), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    col0 = cuda.blockIdx.x * TILE
    col = col0 + tx
    row_tiles = (M + TILE - 1) // TILE
    zero = float32(0.0)
    # Loop bounds are uniform over the block, so every thread reaches every syncthreads.
    for tile_m in range(cuda.blockIdx.y, row_tiles, cuda.gridDim.y):
        row = tile_m * TILE + ty
        acc = float32(0.0)
        for k0 in range(0, K, TILE):
            # A tile: threads along x read consecutive k of one row (coalesced).
            ka = k0 + tx
            if row < M and ka < K:
                sa[ty, tx] = float32(a[row, ka])
            else:
                sa[ty, tx] = zero
            if transpose_b:
                # b is (N, K): threads along x read consecutive k of one weight row
                # (coalesced) and store it transposed, sb[k, n].
                n = col0 + ty
                kb = k0 + tx
                if n < N and kb < K:
                    sb[tx, ty] = float32(b[n, kb])
                else:
                    sb[tx, ty] = zero
            else:
                # b is (K, N): threads along x read consecutive n (coalesced).
                kb = k0 + ty
                if kb < K and col < N:
                    sb[ty, tx] = float32(b[kb, col])
                else:
                    sb[ty, tx] = zero
            cuda.syncthreads()
            for kk in range(TILE):
                acc += sa[ty, kk] * sb[kk, tx]
            cuda.syncthreads()
        if row < M and col < N:
            if has_bias:
                acc += float32(bias[col])
            out[row, col] = apply_activation(acc, act)


def launch_matmul(target, out, data, weight, bias=None, *, transpose_b: bool, activation: str) -> int:
    """Launch the tiled matmul on `target`; returns the number of kernel launches.

    data: (..., M, K), rank 2..4 (leading dims are flattened into rows); weight: (K, N), or
    (N, K) when `transpose_b` (torch linear form, y = x @ W^T); bias: None, (N,) or (1, N);
    out: data.shape[:-1] + (N,).
    """
    # Device arrays' shapes reject negative indices: work on plain tuples.
    dshape = tuple(int(d) for d in data.shape)
    wshape = tuple(int(d) for d in weight.shape)
    if not 2 <= len(dshape) <= 4:
        raise ValueError(f"matmul data must have rank 2..4, got shape {dshape}")
    if len(wshape) != 2:
        raise ValueError(f"matmul weight must have rank 2, got shape {wshape}")
    K = dshape[-1]
    if transpose_b:
        N, Kw = wshape
    else:
        Kw, N = wshape
    if Kw != K:
        raise ValueError(
            f"matmul reduction dims differ: data {dshape}, weight {wshape}"
            f" (transpose_b={bool(transpose_b)})"
        )
    rows = math.prod(dshape[:-1])
    expected = dshape[:-1] + (N,)
    if tuple(int(d) for d in out.shape) != expected:
        raise ValueError(f"matmul out shape {tuple(out.shape)} != expected {expected}")
    if bias is not None and math.prod(int(d) for d in bias.shape) != N:
        raise ValueError(f"matmul bias shape {tuple(bias.shape)} does not hold {N} values")
    act = activation_code(activation)
    if rows == 0 or N == 0:
        return 0

    a2 = target.reshape(data, (rows, K))
    o2 = target.reshape(out, (rows, N))
    if bias is not None:
        b1 = target.reshape(bias, (N,))
        has_bias = 1
    else:
        # Never read (has_bias=0); a 1-D view of the weight keeps the kernel signature
        # the same without allocating anything.
        b1 = target.reshape(weight, (wshape[0] * wshape[1],))
        has_bias = 0
    grid = ((N + TILE - 1) // TILE, min((rows + TILE - 1) // TILE, _MAX_GRID_Y))
    block = (TILE, TILE)
    target.launch(
        _matmul_kernel, grid, block,
        o2, a2, weight, b1, rows, N, K, 1 if transpose_b else 0, has_bias, act,
    )
    return 1
