"""A frozen copy of kernels/matmul.py as of commit 37bfd25 (before batched matmul), kept as
the "before_batching" peer of scripts/gemm_variants_gpu.py. Not used by simaccel.

Its original docstring follows.

Matrix multiplication kernel: y = act(x @ W (+ bias)) or, dense form, act(x @ W^T (+ bias)).

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry
(simaccel.matmul*, simaccel.dense*). One register-tiled kernel covers all twelve ops:
64x64 output tiles per 16x16-thread block, a 4x4 micro-tile of outputs per thread, operands
staged through shared memory in K slices of 16, float32 accumulation (also for float16
inputs), bias and activation fused into the epilogue, bounds checks everywhere so any M, N,
K works.
"""

from __future__ import annotations

import math

from numba import cuda, float32

from simaccel.kernels.activation import ACTIVATIONS, apply_activation

# Tiling scheme. A block of THREADS_Y x THREADS_X = 16 x 16 threads computes a BM x BN =
# 64 x 64 tile of `out`. Per K slice of BK = 16 the block stages A[BM, BK] and B[BK, BN] in
# shared memory, both stored k-major (sa[k, m], sb[k, n]), so the inner loop reads a row of
# each. Thread (ty, tx) owns the TM x TN = 4 x 4 outputs at rows ty + 16*i and columns
# tx + 16*j (i, j < 4), accumulated in registers: per k it loads 4 values of A and 4 of B
# from shared memory for 16 FMAs (the 16x16 one-output-per-thread kernel did 2 loads per FMA).
# The strided (not contiguous) micro-tile keeps shared reads and global stores of a warp on
# consecutive addresses.
BM = 64
BN = 64
BK = 16
TM = 4
TN = 4
THREADS_X = BN // TN  # 16
THREADS_Y = BM // TM  # 16
NTHREADS = THREADS_X * THREADS_Y  # 256

# Shared tiles are filled by all NTHREADS threads in a few passes, consecutive threads
# reading consecutive global addresses:
# - A (M, K) and B in dense form (N, K): a thread reads k = t % BK of row t // BK (+ 16 per
#   pass); the rows of one pass are NTHREADS // BK = 16 apart, BM // 16 = 4 passes.
# - B (K, N): a thread reads column n = t % BN of k row t // BN (+ 4 per pass), 4 passes.
ROWS_PER_PASS = NTHREADS // BK  # 16 rows (of A, or of the dense-form weight) per pass
MN_PASSES = BM // ROWS_PER_PASS  # 4 (BM == BN)
K_ROWS_PER_PASS = NTHREADS // BN  # 4 k rows of a (K, N) weight per pass
K_PASSES = BK // K_ROWS_PER_PASS  # 4
assert BM == BN and BM % ROWS_PER_PASS == 0 and NTHREADS % BN == 0 and BK % K_ROWS_PER_PASS == 0

# Shared/local array shapes must be compile-time constants: module-level tuples, never
# expressions inside the kernel. The shared rows carry 2 padding columns: the transposed
# stores (sa[k, m], dense-form sb[k, n]) write 16 k rows x 2 m columns per warp, which with a
# row length of 66 words land in 32 distinct banks (64, 65 or 68 would give 2- to 16-way
# conflicts).
A_TILE_SHAPE = (BK, BM + 2)
B_TILE_SHAPE = (BK, BN + 2)
ACC_SHAPE = (TM, TN)
B_REG_SHAPE = (TN,)

# CUDA caps gridDim.y at 65535; row tiles beyond that are walked by a loop in the kernel.
_MAX_GRID_Y = 65535


def _matmul_kernel(out, a, b, bias, M, N, K, transpose_b, has_bias, act):
    """out[M, N] = act(a[M, K] @ B + bias), B = b[K, N], or b[N, K]^T when transpose_b."""
    sa = cuda.shared.array(A_TILE_SHAPE, float32)  # sa[k, m] = a[row0 + m, k0 + k]
    sb = cuda.shared.array(B_TILE_SHAPE, float32)  # sb[k, n] = B[k0 + k, col0 + n]
    acc = cuda.local.array(ACC_SHAPE, float32)
    breg = cuda.local.array(B_REG_SHAPE, float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    t = ty * THREADS_X + tx
    # Fill coordinates of this thread (see ROWS_PER_PASS above).
    fill_k = t % BK
    fill_mn = t // BK
    fill_n = t % BN
    fill_kn = t // BN
    col0 = cuda.blockIdx.x * BN
    row_tiles = (M + BM - 1) // BM
    zero = float32(0.0)
    # Loop bounds are uniform over the block, so every thread reaches every syncthreads.
    for tile_m in range(cuda.blockIdx.y, row_tiles, cuda.gridDim.y):
        row0 = tile_m * BM
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = zero
        for k0 in range(0, K, BK):
            # A slice: consecutive threads read consecutive k of one row (coalesced).
            ka = k0 + fill_k
            for p in range(MN_PASSES):
                m = fill_mn + p * ROWS_PER_PASS
                row = row0 + m
                if row < M and ka < K:
                    sa[fill_k, m] = float32(a[row, ka])
                else:
                    sa[fill_k, m] = zero
            if transpose_b:
                # b is (N, K): consecutive threads read consecutive k of one weight row.
                for p in range(MN_PASSES):
                    n = fill_mn + p * ROWS_PER_PASS
                    col = col0 + n
                    if col < N and ka < K:
                        sb[fill_k, n] = float32(b[col, ka])
                    else:
                        sb[fill_k, n] = zero
            else:
                # b is (K, N): consecutive threads read consecutive n of one k row.
                col = col0 + fill_n
                for p in range(K_PASSES):
                    k = fill_kn + p * K_ROWS_PER_PASS
                    kb = k0 + k
                    if kb < K and col < N:
                        sb[k, fill_n] = float32(b[kb, col])
                    else:
                        sb[k, fill_n] = zero
            cuda.syncthreads()
            for kk in range(BK):
                for j in range(TN):
                    breg[j] = sb[kk, tx + j * THREADS_X]
                for i in range(TM):
                    av = sa[kk, ty + i * THREADS_Y]
                    for j in range(TN):
                        acc[i, j] += av * breg[j]
            cuda.syncthreads()
        # Epilogue: bias, activation, store (consecutive threads write consecutive columns).
        for i in range(TM):
            row = row0 + ty + i * THREADS_Y
            if row < M:
                for j in range(TN):
                    col = col0 + tx + j * THREADS_X
                    if col < N:
                        v = acc[i, j]
                        if has_bias:
                            v += float32(bias[col])
                        out[row, col] = apply_activation(v, act)


def launch_matmul(target, out, data, weight, bias=None, *, transpose_b: bool, activation: str) -> int:
    """Launch the register-tiled matmul on `target`; returns the number of kernel launches.

    Shapes come validated by the ISA (simaccel.ops.builtin.matmul): data (..., M, K), rank 2..4
    (leading dims are flattened into rows); weight (K, N), or (N, K) when `transpose_b`
    (torch linear form, y = x @ W^T); bias None or N values; out data.shape[:-1] + (N,).
    """
    # Device arrays' shapes reject negative indices: work on plain tuples.
    dshape = tuple(int(d) for d in data.shape)
    wshape = tuple(int(d) for d in weight.shape)
    K = dshape[-1]
    N = wshape[0] if transpose_b else wshape[1]
    rows = math.prod(dshape[:-1])
    act = ACTIVATIONS[activation]
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
    grid = ((N + BN - 1) // BN, min((rows + BM - 1) // BM, _MAX_GRID_Y))
    block = (THREADS_X, THREADS_Y)
    target.launch(
        _matmul_kernel, grid, block,
        o2, a2, weight, b1, rows, N, K, 1 if transpose_b else 0, has_bias, act,
    )
    return 1
