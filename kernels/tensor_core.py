"""float16 and bfloat16 matmuls on tensor cores: a Numba kernel around a CUDA C++ main loop.

Called by kernels/matmul.py's `launch_matmul` for float16 and bfloat16 operands (simaccel.matmul*,
simaccel.dense*). Numba has no access to the `mma`, `ldmatrix` and `cp.async` instructions,
so the K loop of each 128 x BN output tile (BN 128, or 256 where a GEMM has enough such tiles
to fill the GPU: `width`) is a CUDA C++ device function (tensor_core.cu), declared with
`cuda.declare_device` and linked into the kernel with link-time optimisation (it is
inlined). Its stage buffers are dynamic shared memory, sized per compile target
(`dynamic_shared_bytes`, the kernel function's `dynamic_shared`, which both launch paths
add to a launch's shared bytes). The Numba kernel finds the tile's operands (batch strides
as the float32 kernel's), calls the main loop for BN / 2 float32 accumulators per thread, asks the C++ side
which tile element each accumulator is (`simaccel_mma_cell`, the layout of the instruction
it was compiled with), and applies bias, activation and the bounds-checked store (rounded to
the output's dtype),
with the same activation code as every other kernel.

Where it runs:
- on sm_90a (H100, H200 cubins): warpgroup MMA, wgmma.m64nBNk16 from shared memory;
- on a GPU of compute capability 8.0 or newer (and sm_90's portable PTX): mma.sync tensor
  cores (float16 or bfloat16 products, float32 sums);
- on older GPUs: the same C++ entry computes the same accumulators with float32 FMAs;
- on the simulator: a numpy model stands in for the C++ function (kernels/main_loop.py),
  filling each thread's accumulators in the C++ layout, so the kernel around it (offsets,
  fragment positions, epilogue) runs and is tested on the CPU.
"""

from __future__ import annotations

import functools

from numba import cuda, float32, types, uint64
from numba.cuda.types import bfloat16
from numba.cuda.extending import register_jitable

from .activation import apply_activation
from .epilogue import IDENTITY, fused_kernel
from .main_loop import HERE, data_pointer, declare, declare_cpp, same, simulated_main_loop, tile_operands
from .target import with_simulator_twin

SOURCE = "tensor_core.cu"  # the C++ main loop, next to this file
# The operand dtypes it takes: (Numba type of the C++ entry's pointers, the entries' infix).
DTYPES = {"float16": (types.float16, ""), "bfloat16": (bfloat16, "bf16_")}
BM = 128  # output tile rows of a block
WIDTHS = (128, 256)  # output tile columns (BN) a kernel is compiled for
THREADS = 256  # 8 warps: 2 along M x 4 along N, each a 64 x BN/4 piece (wgmma: 2 warpgroups of 64 rows)
# A launch of at least this many 128 x 256 tiles uses them (an H200 has 132 SMs); fewer, or
# N of at most 128, take 128 x 128 tiles, twice as many blocks.
MIN_WIDE_TILES = 128


def accumulators(bn: int) -> int:
    """float32 accumulators per thread of a 128 x bn tile."""
    return BM * bn // THREADS


def width(M: int, N: int, batches: int) -> int:
    """The tile width (BN) of a tensor-core GEMM of `batches` M x N results."""
    wide = -(-M // BM) * -(-N // 256) * batches
    return 256 if N > 128 and wide >= MIN_WIDE_TILES else 128


def dynamic_shared_bytes(bn: int, target: tuple) -> int:
    """Dynamic shared memory the C++ main loop of a 128 x bn tile needs, compiled for `target`
    ((major, minor) or with "a" for the arch-specific target, as numba-cuda and simaccel.aot
    name them): its stage buffers and 1 KiB of alignment (tensor_core.cu, `shared_bytes`; the
    kernel traps when given less). sm_90a (wgmma): 4 stages of K slices of 64; sm_80 and newer
    (mma.sync): slices of 32, 4 stages at bn 256 (96 KiB: sm_86/89/120 give a block at most
    99), 3 at 128; older GPUs stage nothing."""
    if tuple(target[:2]) < (8, 0):
        return 0
    if tuple(target) == (9, 0, "a"):
        bk, stages = 64, 4
    else:
        bk, stages = 32, 4 if bn == 256 else 3
    return stages * (BM + bn) * bk * 2 + 1024


@register_jitable
def fragment_position(i, lane, warp, bn):
    """(row, column) in the block's 128 x bn tile of accumulator `i` of thread `lane` of `warp`
    in the mma.sync main loop's layout (m16 tile, n8 tile, mma C register i % 4), the one the
    simulator's model fills; on a GPU the kernel asks the C++ (`_mma_cell`)."""
    ni_count = bn // 32
    mi, ni, r = i // (ni_count * 4), (i // 4) % ni_count, i % 4
    row = (warp // 4) * 64 + mi * 16 + lane // 4 + 8 * (r // 2)
    col = (warp % 4) * (bn // 4) + ni * 8 + 2 * (lane % 4) + r % 2
    return row, col


# The C++ side's own map of this thread's slot i to its tile element, row * bn + column: the
# layout of the main loop compiled beside it (mma.sync's accumulators, or on sm_90a the tile
# it left in shared memory), so the two agree.
_mma_cell = declare_cpp("simaccel_mma_cell", types.int32(types.int64, types.int64), SOURCE)


# This thread's slot i of the tile from the C++ side, where its main loop left it (on sm_90a
# the tile, row-major in shared memory; elsewhere accumulator i, in the `acc` array passed to it).
_mma_acc = declare_cpp("simaccel_mma_acc", types.float32(types.CPointer(types.float32), types.int64, types.int64), SOURCE)


@register_jitable
def _simulated_acc(acc, i, bn):  # the simulator model fills `acc` itself
    return acc[i]


@register_jitable
def _compiled_acc(acc, i, bn):
    return _mma_acc(data_pointer(acc), i, bn)


@functools.lru_cache(maxsize=None)
def _compiled_position(bn: int):
    """(row, column) of slot i, from the C++ map, for a tile of width `bn` (a power of two)."""
    shift = bn.bit_length() - 1

    @register_jitable
    def position(i, lane, warp, width):
        cell = _mma_cell(i, bn)
        return cell >> shift, cell & (bn - 1)

    return position


def _kernel(transpose_b, bn, dtype, epilogue, simulator):
    """The kernel for one form of B (`transpose_b`: b is (N, K), the dense form), tile width
    `bn` and operand `dtype`, around the C++ main loop, or on the simulator its numpy model."""
    acc_count = accumulators(bn)
    if simulator:
        def positions():  # the simulator model's view of this thread (this module's `cuda`)
            t = cuda.threadIdx.x
            return [(i, *fragment_position(i, t % 32, t // 32, bn)) for i in range(acc_count)]

        main_loop, pointer = simulated_main_loop(transpose_b, positions), same
        position, accumulator = fragment_position, _simulated_acc
    else:
        numba_type, infix = DTYPES[dtype]
        main_loop = declare(f"simaccel_mma_tile_{infix}{'nk' if transpose_b else 'kn'}_{bn}", numba_type, SOURCE)
        pointer, position, accumulator = data_pointer, _compiled_position(bn), _compiled_acc

    def kernel(out, a, b, bias, M, N, K, has_bias, act, z0, tile0, d1, sa0, sa1, sb0, sb1,
               e0, e1, e2, ed1, ed2, ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11, es12, es13, es20, es21, es22, es23):
        """out[z] = act(a[za] @ B[zb] + bias) for the 128 x bn tile (blockIdx.y + tile0,
        blockIdx.x) of matrix z = z0 + blockIdx.z; the arguments and batch strides are the
        float32 matmul kernel's (kernels/matmul.py), the epilogue's follow them."""
        acc = cuda.local.array(acc_count, float32)
        t = cuda.threadIdx.x
        lane, warp = t % 32, t // 32
        z, row0, col0, m_left, n_left, a_off, b_off, ldb = tile_operands(
            cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z, BM, bn, M, N, K, transpose_b, z0, tile0, d1,
            sa0, sa1, sb0, sb1)
        main_loop(pointer(acc), pointer(a), a_off, K, pointer(b), b_off, ldb, m_left, n_left, K)
        out_row0 = z * M + row0
        # Slots 2p and 2p + 1 are neighbours in a row (both layouts), so the pair shares its
        # place; indices are unsigned, as they cannot be negative (no wraparound code). (No
        # activation decided first in apply_activation itself made the 3x3 convolutions 7-29%
        # slower on the H200: it stays local to this kernel.)
        for p in range(acc_count // 2):
            row, col = position(2 * p, lane, warp, bn)
            if row < m_left:
                r = out_row0 + row
                for j in range(2):
                    if col + j < n_left:
                        c = col0 + col + j
                        v = accumulator(acc, 2 * p + j, bn)
                        if has_bias:
                            v += float32(bias[uint64(c)])
                        if act != 0:  # apply_activation's code tree costs a few % of the GEMM otherwise
                            v = apply_activation(v, act)
                        out[uint64(r), uint64(c)] = epilogue(v, r * N + c, e0, e1, e2, ed1, ed2,
                                                             ed3, einv1, einv2, einv3, es00, es01, es02, es03, es10, es11,
                                                             es12, es13, es20, es21, es22, es23)

    suffix = "" if dtype == "float16" else f"_{dtype}"
    kernel.__name__ = kernel.__qualname__ = f"_{'dense' if transpose_b else 'matmul'}_tensor_core_kernel_{bn}{suffix}"
    if not simulator:
        kernel.link = (str(HERE / SOURCE),)
        # The stage buffers are dynamic shared memory, sized per compile target.
        kernel.dynamic_shared = functools.partial(dynamic_shared_bytes, bn)
        # One block per SM: on sm_90a the stage buffers take 129 or 193 KiB. The accumulators
        # handed across are a stack frame (4 bytes each), written once and read once per tile
        # (tests/test_aot.py checks for more).
        kernel.launch_bounds = (THREADS, 1)
    return kernel


# (transpose_b, bn, dtype) -> kernel, without a fused group
KERNELS = {(t, bn, dtype): with_simulator_twin(_kernel, t, bn, dtype, IDENTITY)
           for t in (False, True) for bn in WIDTHS for dtype in DTYPES}


def kernel(transpose_b: bool, bn: int, dtype: str, epilogue):
    """The kernel for one form of B, tile width and operand dtype with `epilogue`'s group fused
    (None: none)."""
    if epilogue is None:
        return KERNELS[transpose_b, bn, dtype]
    return fused_kernel(("tensor_core", transpose_b, bn, dtype), epilogue,
                        lambda fn: with_simulator_twin(_kernel, transpose_b, bn, dtype, fn))
