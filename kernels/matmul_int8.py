"""int8 matmuls with int32 sums: out (int32) = a (int8) @ b (int8), exactly, batched as the
float kernels are.

Called by kernels/matmul.py's `launch_gemm` for int8 operands (simaccel.matmul and
simaccel.dense with ``out_dtype`` int32: W8A8-quantized models' GEMMs, TVM's cuBLAS int8
offload). The arguments and batch strides are the float kernels' (kernels/matmul.py); a fused
bias, activation or epilogue never reaches it (those variants take float operands only, and
an int32 result does not fuse: simaccel/fusion.py).

A block of 16 x 16 threads computes a 64 x 64 tile of `out`, each thread 4 x 4 results (rows
ty + 16 i, columns tx + 16 j, so that a warp's shared reads fall in distinct banks). Per K
slice of 32 the block stages both operands in shared memory as 32-bit words of four int8
values along K (bounds-checked, zero past the edge), row by row of a and column by column of
b, and each thread folds a word of its row and of its column into its sum with `dp4a` (four
int8 products added to an int32 in one instruction, sm_61 and newer): 16 of them per 8 shared
reads. Sums wrap as int32 arithmetic does, as numpy's int32 matmul (the reference) does. On
the simulator a Python `dp4a` stands in for the instruction.
"""

from __future__ import annotations

from llvmlite import ir
from numba import cuda, int32, types
from numba.cuda.extending import intrinsic, register_jitable

from .main_loop import tile_operands
from .target import with_simulator_twin

THREADS = 16  # a block is THREADS x THREADS
PER_THREAD = 4  # results per thread along each axis
BM = BN = THREADS * PER_THREAD  # 64
BK = 32  # int8 values of K per shared stage
WORDS = BK // 4  # 32-bit words of a row's stage
PAD = WORDS + 1  # a staged row's stride in words (a column of b read across a warp: distinct banks)


@intrinsic
def _dp4a(typingctx, a, b, c):
    """c + the four products of a's and b's signed bytes (PTX dp4a.s32.s32)."""
    sig = types.int32(types.int32, types.int32, types.int32)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32)] * 3)
        return builder.asm(fnty, "dp4a.s32.s32 $0, $1, $2, $3;", "=r,r,r,r", list(args), False, name="dp4a")

    return sig, codegen


def _signed_byte(word, i):
    byte = (int(word) >> (8 * i)) & 0xFF
    return byte - 256 if byte >= 128 else byte


def _simulated_dp4a(a, b, c):
    """The simulator's dp4a: the same sum, wrapped to int32."""
    total = int(c) + sum(_signed_byte(a, i) * _signed_byte(b, i) for i in range(4))
    return ((total + 2**31) % 2**32) - 2**31


@register_jitable
def _word(x0, x1, x2, x3):
    """Four int8 values as one int32, x0 in the lowest byte (dp4a's order)."""
    u = (x0 & 0xFF) | ((x1 & 0xFF) << 8) | ((x2 & 0xFF) << 16) | ((x3 & 0xFF) << 24)
    return int32(u - 4294967296 if u >= 2147483648 else u)


def _kernel(transpose_b: bool, simulator: bool):
    dp4a = _simulated_dp4a if simulator else _dp4a

    def kernel(out, a, b, bias, M, N, K, has_bias, act, z0, tile0, d1, sa0, sa1, sb0, sb1):
        """out[z] = a[za] @ B[zb] for the 64 x 64 tile (blockIdx.y + tile0, blockIdx.x) of
        matrix z = z0 + blockIdx.z, int32 sums (bias and act unused: see the module)."""
        sa = cuda.shared.array((BM, PAD), int32)
        sb = cuda.shared.array((BN, PAD), int32)
        acc = cuda.local.array((PER_THREAD, PER_THREAD), int32)
        bv = cuda.local.array(PER_THREAD, int32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        t = ty * THREADS + tx
        z, row0, col0, m_left, n_left, a_off, b_off, ldb = tile_operands(
            cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z, BM, BN, M, N, K, transpose_b, z0, tile0, d1,
            sa0, sa1, sb0, sb1)
        # a is (rows, K) and b (N rows, K) or (K rows, N): the tile's first row of a and first row
        # and column of b, from the offsets (a multiple of the row length plus the column)
        a_row = a_off // max(K, 1)
        b_row, b_col = (b_off // max(K, 1), 0) if transpose_b else (b_off // N, b_off % N)
        for i in range(PER_THREAD):
            for j in range(PER_THREAD):
                acc[i, j] = 0
        for k0 in range(0, K, BK):
            # Stage: 64 rows (or columns) of 8 words each, 2 words per thread and operand.
            for w in range(t, BM * WORDS, THREADS * THREADS):
                r, kw = w // WORDS, w % WORDS
                k = k0 + 4 * kw
                x = cuda.local.array(4, int32)
                y = cuda.local.array(4, int32)
                for q in range(4):
                    inside = k + q < K
                    x[q] = a[a_row + r, k + q] if inside and r < m_left else 0
                    if transpose_b:  # b is (N, K): the column's K values are contiguous
                        y[q] = b[b_row + r, k + q] if inside and r < n_left else 0
                    else:
                        y[q] = b[b_row + k + q, b_col + r] if inside and r < n_left else 0
                sa[r, kw] = _word(x[0], x[1], x[2], x[3])
                sb[r, kw] = _word(y[0], y[1], y[2], y[3])
            cuda.syncthreads()
            for kw in range(WORDS):
                for j in range(PER_THREAD):  # this thread's columns' words, read once per word of K
                    bv[j] = sb[tx + THREADS * j, kw]
                for i in range(PER_THREAD):
                    av = sa[ty + THREADS * i, kw]
                    for j in range(PER_THREAD):
                        acc[i, j] = dp4a(av, bv[j], acc[i, j])
            cuda.syncthreads()
        out_row0 = z * M + row0
        for i in range(PER_THREAD):
            r = ty + THREADS * i
            if r < m_left:
                for j in range(PER_THREAD):
                    c = tx + THREADS * j
                    if c < n_left:
                        out[out_row0 + r, col0 + c] = acc[i, j]

    kernel.__name__ = kernel.__qualname__ = f"_{'dense' if transpose_b else 'matmul'}_int8_kernel"
    return kernel


# transpose_b -> kernel
KERNELS = {t: with_simulator_twin(_kernel, t) for t in (False, True)}
