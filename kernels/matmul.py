"""Matrix multiplication kernel: y = act(x @ W (+ bias)) or, dense form, act(x @ W^T (+ bias)).

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry
(simaccel.matmul*, simaccel.dense*). One register-tiled kernel source covers all of them,
batched too, in four tilings (128x128 output tiles with 8x8 outputs per thread, 64x64 with
4x4 where large tiles would leave the GPU idle, 32x32 with K split four ways inside the
block where even those would, and 4x8 GEMV tiles for matrices of at most 4 rows: `tiling`),
16x16 threads per block, operands staged
through shared memory in K slices, float32 accumulation, bias and activation fused into the
epilogue, bounds checks everywhere so any M, N, K works. The K loop is CUDA C++
(matmul_f32.cu, see kernels/main_loop.py); the epilogue, and the steps conv2d's implicit GEMM
shares (`tile_steps`: its K loop is Numba), are here. The GEMV's loop (kernels/gemv.cu) also
takes float16 and bfloat16 operands: a 16-bit GEMM of at most 4 rows (a decoder step's linear
layer) streams its weight there; larger ones go to the tensor-core kernel
(kernels/tensor_core.py), int8 ones to kernels/matmul_int8.py: both take the same arguments.
"""

from __future__ import annotations

import math

from numba import cuda, float32, types
from numba.cuda.types import bfloat16
from numba.cuda.extending import register_jitable

from . import matmul_int8, tensor_core
from .activation import ACTIVATIONS, apply_activation
from .epilogue import IDENTITY, fused_kernel
from .epilogue import args as epilogue_args
from .grid import chunk_starts, dims_of
from .main_loop import HERE, data_pointer, declare, same, simulated_main_loop, tile_operands
from .target import with_simulator_twin

# Two tilings of one kernel source, each compiled with its sizes as constants
# (`_tiled_kernel`). A block of TY x TX = 16 x 16 threads computes a BM x BN tile of `out`;
# thread (ty, tx) owns TM x TN outputs: rows ty*TM .. ty*TM + TM-1 (a contiguous run: the A
# values of a warp's two ty are two broadcast shared reads) and columns in runs of 4,
# 4*tx .. 4*tx + 3 (+ 64 for the second run: a warp's shared reads of B cover consecutive
# addresses). Per K slice of BK the block stages A[BM, BK] and B[BK, BN] in shared memory,
# k-major (sa[k, m], sb[k, n]), so the inner loop reads a row of each: per k a thread loads
# (TM + TN) / 4 16-byte vectors for TM * TN FMAs.
# - LARGE: 128 x 128 tiles, 8 x 8 outputs per thread, BK = 8 (4 vector loads per 64 FMAs).
#   39 TFLOP/s at 4096^3 on an H200 with the C++ K loop (cuBLAS 51); the Numba one, scalar
#   shared loads and no double buffering, 19.5.
# - SMALL: 64 x 64 tiles, 4 x 4 per thread, BK = 16: four times the blocks, for problems that
#   would leave SMs idle with LARGE tiles (1024^3 is 64 large tiles for 132 SMs).
# Every size is a module-level constant or a constant of a kernel factory's closure: Numba
# needs array shapes known at compile time.
THREADS_X = 16
THREADS_Y = 16
NTHREADS = THREADS_X * THREADS_Y  # 256
LARGE = (128, 128, 8)  # BM, BN, BK
SMALL = (64, 64, 16)
# A launch with fewer LARGE tiles than this uses SMALL ones (an H200 has 132 SMs).
MIN_LARGE_TILES = 128
# - SLICED: 32 x 32 tiles, the block's 256 threads in 4 groups that each take a quarter of
#   the K slices (matmul_f32.cu `SlicedLoop`), for launches of fewer SMALL tiles than
#   MIN_SMALL_TILES with K of at least MIN_SLICED_K: four times the blocks, each a quarter of
#   the chain (a 7 x 7 stage's pointwise convolution was 3..20 SMALL tiles of K up to 960).
#   On the H200 (results/gpu/2026-12-02-h200-gemm-tiling/) it was 1.8-3.6x faster than SMALL
#   from 3 to 48 SMALL tiles, 1.25x at 144 (256x2304x768), and 1.18x slower at 256 (1024^3);
#   on a batch-1 network's pointwise convolutions (K of 24 to 232, 1 to 49 SMALL tiles:
#   results/gpu/2026-12-04-h200-vector-conv/) 1.1-2.1x faster from two K slices of SMALL on,
#   and 5% slower at one (K = 16): MIN_SLICED_K is one more than a slice.
SLICED = 32
SLICED_LD = SLICED + 1  # the shared result tile's row stride
MIN_SMALL_TILES = 200
MIN_SLICED_K = SMALL[2] + 1
# - GEMV: 4 x 8 tiles for matrices of at most 4 rows (gemv.cu), in float32, float16 and
#   bfloat16: B streamed once with 16-byte loads, no shared staging, float32 sums reduced in a
#   fixed order. A 128-row tensor-core tile would give such a GEMM N / 128 blocks (32 for a
#   4096-wide layer on 132 SMs); the GEMV gives N / 8.
GEMV = (4, 8)

# CUDA caps gridDim.y and gridDim.z at 65535; row tiles and matrices beyond that get launches
# of their own (the kernel takes the first tile and matrix of its launch). Loops over them
# around the main loop cost the 128x128 kernel about 60 registers; the 64x64 kernel with such
# loops ran at 6.2 TFLOP/s against 14.2 without (same registers, no spills: the cause was not
# pinned down further).
_MAX_GRID_Y = 65535
_MAX_GRID_Z = 65535


EPILOGUE_ROWS = 4


@register_jitable
def tile_column(j, tx):
    """Tile column of a thread's accumulator column j: runs of 4 (one 16-byte shared load each),
    the second run 64 columns on (matmul_f32.cu uses the same map)."""
    return (j // 4) * (THREADS_X * 4) + tx * 4 + j % 4


@register_jitable
def sync_block():
    """This module's block barrier, for `tile_steps` (see there)."""
    cuda.syncthreads()


def tile_steps(BM, BN, BK, sync, bias_on_rows=False, epilogue=IDENTITY):
    """The steps of a tiled kernel that do not depend on where its operands come from, for
    BM x BN tiles and K slices of BK (the matmul kernels and conv2d's implicit GEMM share them),
    as two device functions with the sizes as constants:

    - `multiply(sa, sb, acc, areg, breg, ty, tx)`: acc += the staged slice sa[BK, BM]^T @ sb[BK, BN],
      this thread's TM x TN outputs: rows ty * TM + i, columns `tile_column(j, tx)` (runs of 4
      consecutive columns, each read from shared memory with one 16-byte load);
    - `store(out, stash, acc, bias, has_bias, act, out_row0, m_left, col0, N, bias0, ty, tx)`: the
      epilogue, EPILOGUE_ROWS rows of acc at a time: copied to this thread's slots of `stash`
      (loops of constant bounds and small bodies, which the compiler unrolls, so acc stays in
      registers: indexing acc in the loop that applies the activation put it in local memory,
      a 256-byte stack frame), then, after a barrier, read back a column per thread and 16
      apart (consecutive threads, consecutive columns: whole 32-byte sectors per store; written
      from the runs of 4, a store covered a quarter of each sector it touched, and the
      convolutions, whose K is short, ran up to 28% slower), bias (bias[bias0 + row] with
      `bias_on_rows`, else bias[column]), activation and store to
      out[out_row0 + row, col0 + column] for rows below m_left and columns below N, through
      `epilogue` (kernels/epilogue.py; its arguments follow the others). Every thread of the
      block must call it.

    Thread indices (ty, tx) come as arguments and the block barrier as `sync` (the calling
    kernel's module's `sync_block`): the simulator stands its own `cuda` in for the launched
    kernel's module only, and these may be called from another module's kernels.
    """
    TM, TN = BM // THREADS_Y, BN // THREADS_X
    assert TM in (EPILOGUE_ROWS, 2 * EPILOGUE_ROWS)

    @register_jitable
    def multiply(sa, sb, acc, areg, breg, ty, tx):
        for kk in range(BK):
            for i in range(TM):
                areg[i] = sa[kk, ty * TM + i]
            for j in range(TN):
                breg[j] = sb[kk, tile_column(j, tx)]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += areg[i] * breg[j]

    @register_jitable
    def store_rows(out, stash, bias, has_bias, act, out_row0, m0, m_left, col0, N, bias0, ty, tx,
                   e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23):
        for r in range(EPILOGUE_ROWS):
            m = m0 + r
            if m < m_left:
                for j in range(TN):
                    col = col0 + tx + j * THREADS_X
                    if col < N:
                        v = stash[r, ty, tx + j * THREADS_X]
                        if has_bias:
                            v += float32(bias[bias0 + m]) if bias_on_rows else float32(bias[col])
                        out[out_row0 + m, col] = epilogue(apply_activation(v, act), (out_row0 + m) * N + col,
                                                          e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23)

    @register_jitable
    def store(out, stash, acc, bias, has_bias, act, out_row0, m_left, col0, N, bias0, ty, tx,
              e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23):
        for r in range(EPILOGUE_ROWS):
            for j in range(TN):
                stash[r, ty, tile_column(j, tx)] = acc[r, j]
        sync()
        store_rows(out, stash, bias, has_bias, act, out_row0, ty * TM, m_left, col0, N, bias0, ty, tx,
                   e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23)
        if TM > EPILOGUE_ROWS:
            sync()  # everyone has read the first rows
            for r in range(EPILOGUE_ROWS):
                for j in range(TN):
                    stash[r, ty, tile_column(j, tx)] = acc[EPILOGUE_ROWS + r, j]
            sync()
            store_rows(out, stash, bias, has_bias, act, out_row0, ty * TM + EPILOGUE_ROWS, m_left, col0, N, bias0, ty,
                       tx, e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23)

    return multiply, store


def tile_arrays(BM, BN, BK):
    """Shapes of a tiled kernel's arrays: shared sa (BK, BM + pad), sb (BK, BN + pad) and
    stash, local acc (TM, TN), areg (TM,) and breg (TN,). Shared rows carry 4 padding words:
    rows stay 16-byte aligned (the inner loop reads runs of 4 with one vector load; the arrays
    are declared 16-byte aligned), and the transposed stores of a warp (BK k rows x 32 // BK m
    columns) land in 32 distinct banks at BK = 8, two to a bank at BK = 16."""
    TM, TN = BM // THREADS_Y, BN // THREADS_X
    return (BK, BM + 4), (BK, BN + 4), (EPILOGUE_ROWS, THREADS_Y, BN), (TM, TN), (TM,), (TN,)


def _tiled_kernel(BM, BN, BK, transpose_b, epilogue, simulator):
    """The float32 matmul kernel for BM x BN tiles and K slices of BK (see above) and one form
    of B (`transpose_b`: the dense form), as a Python function for `numba.cuda.jit`: its K loop
    is the C++ main loop of matmul_f32.cu (on the simulator, its numpy model), its epilogue
    `tile_steps`' store, through `epilogue` (a device function of kernels/epilogue.py)."""
    _, _, stash_shape, acc_shape, _, _ = tile_arrays(BM, BN, BK)
    _, store = tile_steps(BM, BN, BK, sync_block, epilogue=epilogue)
    TM, TN = acc_shape
    source = "matmul_f32.cu"
    if simulator:
        def positions():  # this thread's accumulators (this module's `cuda`)
            ty, tx = cuda.threadIdx.y, cuda.threadIdx.x
            return [(i * TN + j, ty * TM + i, tile_column(j, tx)) for i in range(TM) for j in range(TN)]

        main_loop, pointer = simulated_main_loop(transpose_b, positions), same
    else:
        main_loop = declare(f"simaccel_f32_tile_{BM}_{'nk' if transpose_b else 'kn'}", float32, source)
        pointer = data_pointer

    def kernel(out, a, b, bias, M, N, K, has_bias, act, z0, tile0, d1, sa0, sa1, sb0, sb1,
               e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23):
        """out[z] = act(a[za] @ B[zb] + bias) for matrix z = z0 + blockIdx.z of `out`, row tile
        tile0 + blockIdx.y, column tile blockIdx.x; B = b[K, N], or b[N, K]^T (transpose_b).

        The arrays are 2-D, matrices stacked by rows: out's matrix z is rows z*M .. z*M + M - 1.
        The batch index z is (i0, i1) over batch dims (..., d1); a's matrix is i0*sa0 + i1*sa1
        and b's i0*sb0 + i1*sb1 (stride 0 on a broadcast batch dim).
        """
        acc = cuda.local.array(acc_shape, float32)
        stash = cuda.shared.array(stash_shape, float32)
        z, row0, col0, m_left, n_left, a_off, b_off, ldb = tile_operands(
            cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z, BM, BN, M, N, K, transpose_b, z0, tile0, d1,
            sa0, sa1, sb0, sb1)
        main_loop(pointer(acc), pointer(a), a_off, K, pointer(b), b_off, ldb, m_left, n_left, K)
        store(out, stash, acc, bias, has_bias, act, z * M + row0, m_left, col0, N, 0, cuda.threadIdx.y,
              cuda.threadIdx.x, e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23)

    kernel.__name__ = kernel.__qualname__ = f"_{'dense' if transpose_b else 'matmul'}_kernel_{BM}x{BN}"
    if not simulator:
        kernel.link = (str(HERE / source),)
        if BM == LARGE[0]:
            # At most 128 registers, so two blocks share an SM (tests/test_aot.py checks every
            # variant). The 64x64 ones need fewer without a bound.
            kernel.launch_bounds = (NTHREADS, 2)
    return kernel


def result_tile_store(rows, cols, bias_on_rows, epilogue):
    """The epilogue of a kernel whose C++ main loop leaves its rows x cols result tile in shared
    memory (the sliced-K and GEMV matmuls, conv2d's sliced-K kernel), as a device function:
    `store(out, result, tid, m_left, n_left, out_row0, col0, N, bias, has_bias, bias0, act,
    e0, ...)` has thread `tid` of the block's NTHREADS store elements tid, tid + NTHREADS, ...
    (consecutive threads, consecutive columns) of result[:m_left, :n_left], plus the bias
    (bias[bias0 + row] with `bias_on_rows`, else bias[col0 + column]) and activation `act`,
    through `epilogue`, to out[out_row0 + row, col0 + column] of an output N columns wide."""
    size = rows * cols

    @register_jitable
    def store(out, result, tid, m_left, n_left, out_row0, col0, N, bias, has_bias, bias0, act,
              e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23):
        for q in range((size + NTHREADS - 1) // NTHREADS):
            e = tid + q * NTHREADS
            r = e // cols
            c = e - r * cols
            if e < size and r < m_left and c < n_left:
                v = result[r, c]
                col = col0 + c
                if has_bias:
                    v += float32(bias[bias0 + r]) if bias_on_rows else float32(bias[col])
                row = out_row0 + r
                out[row, col] = epilogue(apply_activation(v, act), row * N + col, e0, e1, e2, ed1, ed2, ed3, einv1,
                                         einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22,
                                         es23)

    return store


def _shared_tile_kernel(name, rows, cols, ld, source, transpose_b, dtype, epilogue, simulator):
    """A kernel whose C++ main loop (`simaccel_{f32|f16|bf16}_{name}_{nk|kn}` of `source`)
    leaves the block's rows x cols float32 result tile in shared memory (row stride `ld`), for
    one form of B and operand `dtype`, with `epilogue` fused: the sliced-K kernel (SLICED,
    float32) and the GEMV (GEMV, float32 and 16-bit). From the tile each thread stores elements
    tid, tid + 256, ... (consecutive threads, consecutive columns) through the epilogue, rounded
    to the output's dtype."""
    size = rows * cols
    store = result_tile_store(rows, cols, False, epilogue)
    if simulator:
        def positions():  # the elements this thread stores: on the simulator it computes them
            tid = cuda.threadIdx.y * THREADS_X + cuda.threadIdx.x
            return [((e // cols) * ld + e % cols, e // cols, e % cols) for e in range(tid, size, NTHREADS)]

        main_loop, pointer = simulated_main_loop(transpose_b, positions), same
    else:
        numba_type, prefix = _SHARED_TILE_DTYPES[dtype]
        main_loop = declare(f"simaccel_{prefix}_{name}_{'nk' if transpose_b else 'kn'}", numba_type, source)
        pointer = data_pointer

    def kernel(out, a, b, bias, M, N, K, has_bias, act, z0, tile0, d1, sa0, sa1, sb0, sb1,
               e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23):
        """As the tiled kernels (same arguments), on rows x cols tiles."""
        result = cuda.shared.array((rows, ld), float32)
        z, row0, col0, m_left, n_left, a_off, b_off, ldb = tile_operands(
            cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z, rows, cols, M, N, K, transpose_b, z0, tile0, d1,
            sa0, sa1, sb0, sb1)
        main_loop(pointer(result), pointer(a), a_off, K, pointer(b), b_off, ldb, m_left, n_left, K)
        cuda.syncthreads()
        store(out, result, cuda.threadIdx.y * THREADS_X + cuda.threadIdx.x, m_left, n_left, z * M + row0, col0, N,
              bias, has_bias, 0, act, e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23)

    suffix = "" if dtype == "float32" else f"_{dtype}"
    kernel.__name__ = kernel.__qualname__ = f"_{'dense' if transpose_b else 'matmul'}_{name}_kernel_{rows}x{cols}{suffix}"
    if not simulator:
        kernel.link = (str(HERE / source),)
    return kernel


# tiling -> (the C++ main loop's name, rows, cols, row stride of the shared result tile, its file)
_SHARED_TILES = {"sliced": (f"sliced_{SLICED}", SLICED, SLICED, SLICED_LD, "matmul_f32.cu"),
                 "gemv": ("gemv", *GEMV, GEMV[1], "gemv.cu")}
# operand dtype -> (Numba type of the C++ entry's pointers, the entry's prefix); the sliced-K
# loop is float32 only, the GEMV takes all three.
_SHARED_TILE_DTYPES = {"float32": (float32, "f32"), "float16": (types.float16, "f16"), "bfloat16": (bfloat16, "bf16")}
# the (tiling, operand dtype) pairs with a kernel
_SHARED_TILE_FORMS = (("sliced", "float32"), *(("gemv", dtype) for dtype in _SHARED_TILE_DTYPES))


# (transpose_b, large tiles) -> kernel, without a fused group
_KERNELS = {(t, large): with_simulator_twin(_tiled_kernel, *(LARGE if large else SMALL), t, IDENTITY)
            for t in (False, True) for large in (False, True)}


# (tiling, transpose_b, operand dtype) -> kernel, without a fused group
_SHARED_TILE_KERNELS = {(tiling, t, dtype): with_simulator_twin(_shared_tile_kernel, *_SHARED_TILES[tiling], t, dtype,
                                                                IDENTITY)
                        for tiling, dtype in _SHARED_TILE_FORMS for t in (False, True)}


def _kernel(transpose_b: bool, large: bool, epilogue):
    """The float32 kernel for one form of B and tiling, with `epilogue`'s group fused (None: none)."""
    if epilogue is None:
        return _KERNELS[transpose_b, large]
    return fused_kernel(("matmul", transpose_b, large), epilogue,
                        lambda fn: with_simulator_twin(_tiled_kernel, *(LARGE if large else SMALL), transpose_b, fn))


def _shared_tile(tiling: str, transpose_b: bool, dtype: str, epilogue):
    """The sliced-K or GEMV kernel (`tiling`) for one form of B and operand `dtype`, with
    `epilogue`'s group fused (None: none)."""
    if epilogue is None:
        return _SHARED_TILE_KERNELS[tiling, transpose_b, dtype]
    return fused_kernel(("matmul_" + tiling, transpose_b, dtype), epilogue,
                        lambda fn: with_simulator_twin(_shared_tile_kernel, *_SHARED_TILES[tiling], transpose_b, dtype,
                                                       fn))


def tiling(M: int, N: int, K: int, batches: int) -> str:
    """Which float32 kernel a GEMM of `batches` M x N x K matrices runs on: "gemv", "large",
    "small" or "sliced" (see GEMV, LARGE, SMALL, SLICED)."""
    if M <= GEMV[0]:
        return "gemv"
    if -(-M // LARGE[0]) * -(-N // LARGE[1]) * batches >= MIN_LARGE_TILES:
        return "large"
    if -(-M // SMALL[0]) * -(-N // SMALL[1]) * batches < MIN_SMALL_TILES and K >= MIN_SLICED_K:
        return "sliced"
    return "small"


def _batch_strides(batch, out_batch):
    """Matrix strides of a C-contiguous stack of matrices with batch dims `batch`, broadcast to
    `out_batch` (rank 2, left-padded): 0 on broadcast dims."""
    batch = (1,) * (2 - len(batch)) + tuple(batch)
    return (batch[1] if batch[0] != 1 else 0, 1 if batch[1] != 1 else 0)


def launch_matmul(target, out, data, weight, bias=None, *, transpose_b: bool, activation: str, epilogue=None,
                  out_dtype=None, tiling_override=None) -> int:
    """Launch the register-tiled matmul on `target`; returns the number of kernel launches.

    With `epilogue` (simaccel.fusion), the group of elementwise ops after it runs in the
    kernel's store and `out` is the group's output.

    Shapes come validated by the ISA (simaccel.ops.builtin.matmul): data (..., M, K), rank 2..4;
    weight (K, N), or (N, K) when `transpose_b` (torch linear form, y = x @ W^T), or, not
    transposed, a stack (..., K, N) whose batch dims broadcast with data's (attention's
    Q @ K^T and A @ V); bias None or N values; out (broadcast batch dims..., M, N), of
    dtype `out_dtype` where given (float32 for 16-bit operands: the sums stored unrounded;
    int32 for int8 ones), else the operands'.
    A 2-D weight is shared by every row of data, so data's batch dims are folded into rows.
    """
    # Device arrays' shapes reject negative indices: work on plain tuples.
    dshape = dims_of(data.shape)
    wshape = dims_of(weight.shape)
    oshape = dims_of(out.shape)
    K = dshape[-1]
    N = oshape[-1]
    act = ACTIVATIONS[activation]
    if math.prod(oshape) == 0:
        return 0
    if len(wshape) == 2:  # one weight: every row of data is a row of one big matrix
        batches, d1, sa, sb = 1, 1, (0, 0), (0, 0)
        M = math.prod(dshape[:-1])
    else:
        out_batch = oshape[:-2]
        padded = (1,) * (2 - len(out_batch)) + out_batch
        batches, d1 = math.prod(out_batch), padded[1]
        sa, sb = _batch_strides(dshape[:-2], padded), _batch_strides(wshape[:-2], padded)
        M = dshape[-2]
    a2 = target.reshape(data, (math.prod(dshape[:-1]), K))
    w2 = target.reshape(weight, (math.prod(wshape[:-1]), wshape[-1]))
    o2 = target.reshape(out, (math.prod(oshape[:-1]), N))
    if bias is not None:
        b1 = target.reshape(bias, (N,))
        has_bias = 1
    else:
        # Never read (has_bias=0); a 1-D view of the weight keeps the kernel signature
        # the same without allocating anything.
        b1 = target.reshape(weight, (math.prod(wshape),))
        has_bias = 0
    return launch_gemm(target, o2, a2, w2, b1, has_bias, act, M, N, K, batches, d1, sa, sb, bool(transpose_b),
                       str(data.dtype), epilogue, out, tiling_override)


def launch_gemm(target, o2, a2, b2, b1, has_bias, act, M, N, K, batches, d1, sa, sb, transpose_b, dtype, epilogue,
                out, tiling_override=None) -> int:
    """Launch the tiled kernels on 2-D views: `batches` matrices out[z] (M x N, stacked by rows
    in o2) = a[za] @ B[zb] (+ b1 per column when has_bias, activation `act`), the batch index
    z = (i0, i1) over (., d1) and the matrices' strides `sa`, `sb` as the kernels take them;
    float16 and bfloat16 on tensor cores. `out` is the output as the op sees it (the epilogue's index space).
    Also used by conv2d for pointwise convolutions (a shared weight, one matrix per image).
    `tiling_override` ("gemv", "large", "small", "sliced") replaces `tiling`'s float32 choice,
    for benchmarks that compare the tilings on one problem ("gemv" only where M <= GEMV[0])."""
    if tiling_override not in (None, "gemv", "large", "small", "sliced"):
        raise ValueError(f"matmul: tiling_override {tiling_override!r}; expected 'gemv', 'large', 'small' or 'sliced'")
    if tiling_override == "gemv" and M > GEMV[0]:
        raise ValueError(f"matmul: tiling_override 'gemv' takes at most {GEMV[0]} rows; M = {M}")
    if max(K, N) >= 2**31:  # the C++ main loops index a row in 32 bits
        raise ValueError(f"matmul: K = {K}, N = {N}; the kernels take K and N below 2^31 "
                          "(the default device profile's element limit keeps them there)")
    if dtype == "int8":  # int32 sums (kernels/matmul_int8.py): no bias, activation or epilogue reaches it
        if epilogue is not None or has_bias or act != 0:
            raise ValueError("matmul: int8 operands take no fused bias, activation or epilogue")
        kernel, block = matmul_int8.KERNELS[transpose_b], (matmul_int8.THREADS, matmul_int8.THREADS)
        BM, BN = matmul_int8.BM, matmul_int8.BN
    elif dtype in tensor_core.DTYPES and M > GEMV[0]:  # tensor cores (kernels/tensor_core.py)
        BM, BN = tensor_core.BM, tensor_core.width(M, N, batches)
        kernel, block = tensor_core.kernel(transpose_b, BN, dtype, epilogue), (tensor_core.THREADS,)
    # A 16-bit GEMM of at most GEMV[0] rows streams B on the GEMV, as a float32 one does.
    elif (choice := "gemv" if dtype in tensor_core.DTYPES else tiling_override or tiling(M, N, K, batches)) \
            in _SHARED_TILES:
        kernel, block = _shared_tile(choice, transpose_b, dtype, epilogue), (THREADS_X, THREADS_Y)
        _, BM, BN, _, _ = _SHARED_TILES[choice]
    else:
        large = choice == "large"
        kernel, block = _kernel(transpose_b, large, epilogue), (THREADS_X, THREADS_Y)
        BM, BN, _ = LARGE if large else SMALL
    fused = epilogue_args(target, epilogue, out) if dtype != "int8" else ()
    row_tiles = (M + BM - 1) // BM
    launches = 0
    for z0 in chunk_starts(batches, _MAX_GRID_Z):
        for tile0 in chunk_starts(row_tiles, _MAX_GRID_Y):
            grid = ((N + BN - 1) // BN, min(row_tiles - tile0, _MAX_GRID_Y), min(batches - z0, _MAX_GRID_Z))
            target.launch(kernel, grid, block, o2, a2, b2, b1, M, N, K, has_bias, act, z0, tile0,
                          d1, *sa, *sb, *fused)
            launches += 1
    return launches
