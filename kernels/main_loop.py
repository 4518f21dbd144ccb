"""What the matmul kernels share around their CUDA C++ main loops.

The float32 and float16 matmul kernels (kernels/matmul.py, kernels/tensor_core.py) are Numba
kernels whose K loop is a CUDA C++ device function (matmul_f32.cu, tensor_core.cu), declared
here with `cuda.declare_device` and linked with link-time optimisation (inlined). On the
simulator, which cannot run C++, a numpy model with the same arguments stands in
(`simulated_main_loop`): it fills the calling thread's accumulators with the same values the
C++ computes for them (up to the order of the float32 sums), so the Numba code around the call
runs and is tested on the CPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numba import cuda, types
from numba.cuda.extending import intrinsic, register_jitable

from .simulator import host_array
from .target import cpp_link

HERE = Path(__file__).parent


@intrinsic
def data_pointer(typingctx, array):
    """A typed pointer to `array`'s first element (for a C++ function's pointer arguments)."""
    sig = types.CPointer(array.dtype)(array)

    def codegen(context, builder, signature, args):
        return context.make_array(signature.args[0])(context, builder, args[0]).data

    return sig, codegen


@intrinsic
def data_address(typingctx, array):
    """`array`'s first element as an untyped pointer (a C++ function's `const void*`, for an
    argument whose dtype the call chooses)."""
    sig = types.voidptr(array)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.bitcast(data, context.get_value_type(types.voidptr))

    return sig, codegen


def same(array):
    """The simulator's `data_pointer`: its models take the arrays themselves."""
    return array


def declare_cpp(name: str, sig, source: str):
    """C ABI device function `name` of `source` (a CUDA C++ file next to this one), of Numba
    signature `sig`, linked with link-time optimisation (inlined) where a kernel calls it."""
    return cuda.declare_device(name, sig, link=cpp_link([HERE / source]), abi="c")


def declare(name: str, dtype, source: str):
    """C++ main loop `name` of `source` (a file next to this one) for operands of `dtype`:
    int name(float* acc, const T* a, int64 a_off, int64 lda, const T* b, int64 b_off,
    int64 ldb, int64 m_left, int64 n_left, int64 K), C ABI."""
    operand = types.CPointer(dtype)
    sig = types.int32(types.CPointer(types.float32), operand, types.int64, types.int64, operand, types.int64,
                      types.int64, types.int64, types.int64, types.int64)
    return declare_cpp(name, sig, source)


@register_jitable
def tile_operands(bx, by, bz, BM, BN, M, N, K, transpose_b, z0, tile0, d1, sa0, sa1, sb0, sb1):
    """Where block (bx, by, bz)'s BM x BN tile is, for the matmul kernels' arguments (see
    kernels/matmul.py): (z, row0, col0, m_left, n_left, a_off, b_off, ldb), with m_left and
    n_left capped at the tile and a_off / b_off the element offsets of its first row of a and
    its first column of b."""
    z = z0 + bz
    i0 = z // d1
    i1 = z - i0 * d1
    row0 = (tile0 + by) * BM
    col0 = bx * BN
    a_off = ((i0 * sa0 + i1 * sa1) * M + row0) * K
    if transpose_b:  # b is (N, K)
        b_off = (i0 * sb0 + i1 * sb1) * N * K + col0 * K
        ldb = K
    else:  # b is (K, N)
        b_off = (i0 * sb0 + i1 * sb1) * K * N + col0
        ldb = N
    return z, row0, col0, min(M - row0, BM), min(N - col0, BN), a_off, b_off, ldb


def simulated_main_loop(transpose_b: bool, positions):
    """The simulator's stand-in for a C++ main loop (same arguments, arrays for pointers).
    `positions()` gives the calling thread's (accumulator index, row, column) triples in the
    tile; it reads the thread's indices, so it is defined in the kernel's own module (the
    simulator swaps `cuda` there only)."""

    def main_loop(acc, a, a_off, lda, b, b_off, ldb, m_left, n_left, K):
        flat_acc = acc.reshape(-1)
        flat_a, flat_b = host_array(a).reshape(-1), host_array(b).reshape(-1)
        for i, row, col in positions():
            if row >= m_left or col >= n_left:
                flat_acc[i] = 0.0
                continue
            x = flat_a[a_off + row * lda: a_off + row * lda + K]
            if transpose_b:
                w = flat_b[b_off + col * ldb: b_off + col * ldb + K]
            else:
                w = flat_b[b_off + col: b_off + col + K * ldb: ldb]
            flat_acc[i] = np.dot(x.astype(np.float32), w.astype(np.float32))
        return 0

    return main_loop
