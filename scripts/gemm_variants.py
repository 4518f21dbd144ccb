"""GEMM kernel variants for scripts/gemm_variants_gpu.py: C[M,N] = A[M,K] @ B[K,N] in float32,
with no bias, activation or batching, so that their timings bound what a tiling can reach
inside kernels/matmul.py. `make` returns (kernel, block, tile) for one tiling: BM x BN tiles,
BK-wide K slices, TM x TN outputs per thread (strided, or `contiguous`), optionally loading
the next K slice into registers while the current one is computed (`prefetch`)."""
from numba import cuda, float32


def geometry(BM, BN, BK, TM, TN):
    """The tiling's compile-time constants, in `make`'s order: threads per block (TX, TY); the
    shared tiles', accumulators' and registers' shapes; rows of A (and k rows of B) filled per
    pass and the passes per K slice, with the prefetch registers' shapes."""
    TX = BN // TN
    TY = BM // TM
    NT = TX * TY
    PAD = 4
    A_ROWS = NT // BK          # rows of A filled per pass
    A_PASSES = BM // A_ROWS
    B_KROWS = NT // BN         # k rows of B filled per pass
    B_PASSES = BK // B_KROWS
    assert NT % BK == 0 and BM % A_ROWS == 0 and NT % BN == 0 and BK % B_KROWS == 0
    return (TX, TY, (BK, BM + PAD), (BK, BN + PAD), (TM, TN), (TM,), (TN,),
            A_ROWS, A_PASSES, B_KROWS, B_PASSES, (A_PASSES,), (B_PASSES,))


def kernel_name(BM, BN, BK, TM, TN, contiguous, prefetch):
    return f"gemm_{BM}x{BN}x{BK}_{TM}x{TN}{'_c' if contiguous else ''}{'_p' if prefetch else ''}"


def make(BM, BN, BK, TM, TN, contiguous=False, prefetch=False):
    """(kernel, block, tile) for one tiling (see the module docstring). The kernel reads the
    geometry's constants as closure variables, which Numba compiles in as constants."""
    (TX, TY, A_SHAPE, B_SHAPE, ACC, AR, BR,
     A_ROWS, A_PASSES, B_KROWS, B_PASSES, PA, PB) = geometry(BM, BN, BK, TM, TN)

    def kernel(out, a, b, M, N, K):
        sa = cuda.shared.array(A_SHAPE, float32)
        sb = cuda.shared.array(B_SHAPE, float32)
        acc = cuda.local.array(ACC, float32)
        ar = cuda.local.array(AR, float32)
        br = cuda.local.array(BR, float32)
        pa = cuda.local.array(PA, float32)
        pb = cuda.local.array(PB, float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        t = ty * TX + tx
        fk = t % BK
        fm = t // BK
        fn = t % BN
        fkn = t // BN
        col0 = cuda.blockIdx.x * BN
        row0 = cuda.blockIdx.y * BM
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = float32(0.0)
        if prefetch:
            for p in range(A_PASSES):
                row = row0 + fm + p * A_ROWS
                pa[p] = float32(a[row, fk]) if row < M and fk < K else float32(0.0)
            for p in range(B_PASSES):
                kb = fkn + p * B_KROWS
                col = col0 + fn
                pb[p] = float32(b[kb, col]) if kb < K and col < N else float32(0.0)
        for k0 in range(0, K, BK):
            if prefetch:
                for p in range(A_PASSES):
                    sa[fk, fm + p * A_ROWS] = pa[p]
                for p in range(B_PASSES):
                    sb[fkn + p * B_KROWS, fn] = pb[p]
                cuda.syncthreads()
                k1 = k0 + BK
                for p in range(A_PASSES):
                    row = row0 + fm + p * A_ROWS
                    ka = k1 + fk
                    pa[p] = float32(a[row, ka]) if row < M and ka < K else float32(0.0)
                for p in range(B_PASSES):
                    kb = k1 + fkn + p * B_KROWS
                    col = col0 + fn
                    pb[p] = float32(b[kb, col]) if kb < K and col < N else float32(0.0)
            else:
                ka = k0 + fk
                for p in range(A_PASSES):
                    row = row0 + fm + p * A_ROWS
                    sa[fk, fm + p * A_ROWS] = float32(a[row, ka]) if row < M and ka < K else float32(0.0)
                for p in range(B_PASSES):
                    kb = k0 + fkn + p * B_KROWS
                    col = col0 + fn
                    sb[fkn + p * B_KROWS, fn] = float32(b[kb, col]) if kb < K and col < N else float32(0.0)
                cuda.syncthreads()
            for kk in range(BK):
                for i in range(TM):
                    ar[i] = sa[kk, ty * TM + i] if contiguous else sa[kk, ty + i * TY]
                for j in range(TN):
                    br[j] = sb[kk, tx * TN + j] if contiguous else sb[kk, tx + j * TX]
                for i in range(TM):
                    for j in range(TN):
                        acc[i, j] += ar[i] * br[j]
            cuda.syncthreads()
        for i in range(TM):
            row = row0 + (ty * TM + i if contiguous else ty + i * TY)
            if row < M:
                for j in range(TN):
                    col = col0 + (tx * TN + j if contiguous else tx + j * TX)
                    if col < N:
                        out[row, col] = acc[i, j]

    kernel.__name__ = kernel_name(BM, BN, BK, TM, TN, contiguous, prefetch)
    return kernel, (TX, TY), (BM, BN)


VARIANTS = {
    "v64_4x4": dict(BM=64, BN=64, BK=16, TM=4, TN=4),
    "v128_8x8_bk8": dict(BM=128, BN=128, BK=8, TM=8, TN=8),
    "v128_8x8_bk8_p": dict(BM=128, BN=128, BK=8, TM=8, TN=8, prefetch=True),
    "v128_8x8_bk16_p": dict(BM=128, BN=128, BK=16, TM=8, TN=8, prefetch=True),
    "v128_8x8_bk8_c": dict(BM=128, BN=128, BK=8, TM=8, TN=8, contiguous=True),
    "v128x64_8x4_bk16_p": dict(BM=128, BN=64, BK=16, TM=8, TN=4, prefetch=True),
}
