"""Elementwise kernels: broadcasting add / subtract / multiply / divide / power, broadcast_to and
copies, and the unary functions of simaccel.kernels.activation.

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry
(simaccel.add, simaccel.subtract, ..., simaccel.broadcast_to, simaccel.relu, ...). Each thread
of a large launch handles ILP output elements a block apart (consecutive threads on
consecutive addresses), loading all of them before it computes and stores any: an H200
needs about 3 MB of loads in flight to keep its 4.8 TB/s busy, and one 4-byte load per
thread, even with every thread resident, is about 1 MB. Below MIN_ILP_TOTAL elements a
thread handles one (`per_thread`). Grid-stride loop over chunks of `ilp` blocks. Binary ops
broadcast numpy-style up to rank 4: shapes are padded to rank 4 on the left and the kernel
gets the output dims and each input's element strides as scalar arguments (stride 0 on
broadcast dims), so a launch copies nothing from the host. Dims are collapsed first (same
shapes become one flat dim, a bias add two), so common cases skip most index divisions; of
a thread's ILP elements only the first is divided into its indices, the next ones (a block
apart) add the block's step while they stay in the innermost dim's row. Inputs may be float32 or
float16 (also mixed); math is float32 and the result is stored in the out dtype.

Each kernel holds two copies of its loop (kernels/vector.py, `both_ways`): where a launch has
ILP elements a thread, the innermost dim is a multiple of VEC and the arrays are 16-byte
aligned, a thread's ILP elements are ILP / VEC runs of VEC, each moved by one 16-byte access
(an input broadcast along the innermost dim: one element, repeated); elsewhere the element copy
runs.
"""

from __future__ import annotations

import numba
from numba import cuda, float32
from numba.cuda.extending import register_jitable

from .activation import ACTIVATIONS, TRIG_CODES, apply_activation, apply_trig
from .grid import BLOCK, broadcast_strides, collapse_dims, dims_of, launch_grid, padded, size
from .target import with_simulator_twin
from .vector import VEC, accessors, alignment_check, both_ways

ILP = 8  # output elements per thread and chunk, loaded before any is stored
# From this many elements on, a launch has ILP per thread (an H200: 132 SMs x 1024 threads x 8).
MIN_ILP_TOTAL = 1 << 20

OP_ADD = 0
OP_MULTIPLY = 1
OP_SUBTRACT = 2
OP_DIVIDE = 3
OP_FIRST = 4
OP_POWER = 5
BINARY_OPS = {"add": OP_ADD, "multiply": OP_MULTIPLY, "subtract": OP_SUBTRACT, "divide": OP_DIVIDE, "power": OP_POWER}


@register_jitable
def divmod_fast(n, d, inv_d):
    """(n // d, n % d) for 0 <= n < 2**51 and d >= 1, given inv_d = 1.0 / d.

    A float64 estimate of the quotient (off by at most one) and one correction step:
    64-bit integer division is a long software routine on GPUs, and Numba does all integer
    index math in 64 bits.
    """
    return corrected_divmod(n, d, numba.int64(numba.float64(n) * inv_d))


@register_jitable(inline="always")
def corrected_divmod(n, d, q):
    """(n // d, n % d) from q, an estimate of n // d off by at most one (n >= 0, d >= 1): one
    correction step. The float-reciprocal divisions (`divmod_fast`, conv2d's `divmod_small`)
    end in it."""
    r = n - q * d
    if r < 0:
        q -= 1
        r += d
    elif r >= d:
        q += 1
        r -= d
    return q, r


@register_jitable
def _binary_offsets(idx, nd, d1, d2, d3, inv1, inv2, inv3, sa0, sa1, sa2, sa3, sb0, sb1, sb2, sb3):
    """The offsets in a and b of output element `idx`, and its index i3 along the innermost
    (collapsed, right-aligned) dim. nd: how many of the dims are used; the branch is uniform
    over the launch and spares the common cases most of the index math."""
    if nd <= 1:
        return idx * sa3, idx * sb3, idx
    t, i3 = divmod_fast(idx, d3, inv3)
    if nd == 2:
        return t * sa2 + i3 * sa3, t * sb2 + i3 * sb3, i3
    t, i2 = divmod_fast(t, d2, inv2)
    i0, i1 = divmod_fast(t, d1, inv1)
    return i0 * sa0 + i1 * sa1 + i2 * sa2 + i3 * sa3, i0 * sb0 + i1 * sb1 + i2 * sb2 + i3 * sb3, i3


def _binary_kernel_for(simulator):
    """The broadcasting binary kernel. Its vector copy (`both_ways`) moves VEC consecutive
    output elements per access: taken where every launch has ILP elements a thread, the
    innermost (collapsed) dim is a multiple of VEC and each input either runs along it
    (stride 1: one vector load) or is broadcast along it (stride 0: one element, repeated), and
    every array moved in vectors is `aligned`."""
    aligned = alignment_check(simulator)

    def chunk_loop(vec):
        load_values, store_values = accessors(simulator, vec)

        def loop(out, a, b, nd, d1, d2, d3, inv1, inv2, inv3, sa0, sa1, sa2, sa3, sb0, sb1, sb2, sb3, op, total, ilp):
            va = cuda.local.array(ILP, float32)
            vb = cuda.local.array(ILP, float32)
            block = cuda.blockDim.x
            hop = block * vec  # from one of a thread's accesses to its next
            start = cuda.blockIdx.x * block * ilp + cuda.threadIdx.x * vec
            step = cuda.gridDim.x * block * ilp
            while start < total:
                # The first access's offsets by division, each next one (a block further) by
                # adding the block's step along the innermost dim while it stays in that dim's row.
                ia, ib, i3 = _binary_offsets(start, nd, d1, d2, d3, inv1, inv2, inv3, sa0, sa1, sa2, sa3, sb0, sb1, sb2, sb3)
                for j in range(0, ILP, vec):
                    idx = start + (j // vec) * hop
                    if j < ilp and idx < total:
                        if j > 0:
                            i3 += hop
                            if i3 < d3:
                                ia += hop * sa3
                                ib += hop * sb3
                            else:
                                ia, ib, i3 = _binary_offsets(idx, nd, d1, d2, d3, inv1, inv2, inv3,
                                                             sa0, sa1, sa2, sa3, sb0, sb1, sb2, sb3)
                        if vec == 1 or sa3 == 1:
                            load_values(va, j, a, ia)
                        else:  # broadcast along the row: one value for the whole vector
                            x = float32(a[ia])
                            for k in range(j, j + vec):
                                va[k] = x
                        if vec == 1 or sb3 == 1:
                            load_values(vb, j, b, ib)
                        else:
                            y = float32(b[ib])
                            for k in range(j, j + vec):
                                vb[k] = y
                for j in range(0, ILP, vec):
                    idx = start + (j // vec) * hop
                    if j < ilp and idx < total:
                        for k in range(j, j + vec):
                            x = va[k]
                            y = vb[k]
                            if op == 0:
                                r = x + y
                            elif op == 1:
                                r = x * y
                            elif op == 2:
                                r = x - y
                            elif op == 3:
                                r = x / y
                            elif op == 5:
                                r = x ** y  # powf on the GPU; numpy's float32 power (C's semantics) on the simulator
                            else:  # OP_FIRST: the first operand, broadcast (broadcast_to, and copies)
                                r = x
                            va[k] = r
                        store_values(out, idx, va, j)
                start += step

        return loop

    vector_loop, element_loop = both_ways(chunk_loop)

    def kernel(out, a, b, nd, d1, d2, d3, inv1, inv2, inv3, sa0, sa1, sa2, sa3, sb0, sb1, sb2, sb3, op, total, ilp):
        if (ilp == ILP and d3 % VEC == 0 and (sa3 == 0 or sa3 == 1) and (sb3 == 0 or sb3 == 1)
                and aligned(out) and (sa3 == 0 or aligned(a)) and (sb3 == 0 or aligned(b))):
            vector_loop(out, a, b, nd, d1, d2, d3, inv1, inv2, inv3, sa0, sa1, sa2, sa3, sb0, sb1, sb2, sb3, op, total, ilp)
        else:
            element_loop(out, a, b, nd, d1, d2, d3, inv1, inv2, inv3, sa0, sa1, sa2, sa3, sb0, sb1, sb2, sb3, op, total, ilp)

    kernel.__name__ = kernel.__qualname__ = "_binary_kernel"
    return kernel


def _map_kernel_for(clip, simulator, trig=False):
    """A one-input kernel: activation `act` (a code of ACTIVATIONS) of each element (with
    `trig`, sin or cos: `apply_trig`), or with `clip` TVM's clip to [low, high]
    (max(min(x, high), low) as selects: NaN gives `high`).
    Its vector copy runs where every launch has ILP elements a thread, the element count is a
    multiple of VEC and both arrays are `aligned`."""
    aligned = alignment_check(simulator)

    def chunk_loop(vec):
        load_values, store_values = accessors(simulator, vec)

        def loop(out, x, act, low, high, total, ilp):
            lo = float32(low)
            hi = float32(high)
            v = cuda.local.array(ILP, float32)
            block = cuda.blockDim.x
            hop = block * vec
            start = cuda.blockIdx.x * block * ilp + cuda.threadIdx.x * vec
            step = cuda.gridDim.x * block * ilp
            while start < total:
                for j in range(0, ILP, vec):
                    idx = start + (j // vec) * hop
                    if j < ilp and idx < total:
                        load_values(v, j, x, idx)
                for j in range(0, ILP, vec):
                    idx = start + (j // vec) * hop
                    if j < ilp and idx < total:
                        for k in range(j, j + vec):
                            if clip:
                                c = v[k] if v[k] < hi else hi
                                v[k] = c if c > lo else lo
                            elif trig:
                                v[k] = apply_trig(v[k], act)
                            else:
                                v[k] = apply_activation(v[k], act)
                        store_values(out, idx, v, j)
                start += step

        return loop

    vector_loop, element_loop = both_ways(chunk_loop)

    def kernel(out, x, act, low, high, total, ilp):
        if ilp == ILP and total % VEC == 0 and aligned(out) and aligned(x):
            vector_loop(out, x, act, low, high, total, ilp)
        else:
            element_loop(out, x, act, low, high, total, ilp)

    kernel.__name__ = kernel.__qualname__ = "_clip_kernel" if clip else "_trig_kernel" if trig else "_unary_kernel"
    return kernel


_binary_kernel = with_simulator_twin(_binary_kernel_for)
_unary_kernel = with_simulator_twin(_map_kernel_for, False)
_clip_kernel = with_simulator_twin(_map_kernel_for, True)
_trig_kernel = with_simulator_twin(_map_kernel_for, False, trig=True)


def per_thread(total: int) -> int:
    """Elements per thread (the kernels' `ilp` argument, <= ILP) for `total` elements: ILP for
    launches that fill the GPU with threads even so, else 1, so a small tensor is spread over
    as many threads as it has elements."""
    return ILP if total >= MIN_ILP_TOTAL else 1


def _launch_binary(target, out, a, b, op) -> int:
    """Shapes come validated by the ISA: `a` and `b` broadcast (numpy rules) to `out`, at most
    RANK dims once merged (collapse_dims)."""
    a_shape = dims_of(a.shape)
    b_shape = dims_of(b.shape)
    out_shape = dims_of(out.shape)
    total = size(out_shape)
    if total == 0:
        return 0
    space = padded(out_shape)
    nd, dims, (sa, sb) = collapse_dims(space, broadcast_strides(a_shape, space), broadcast_strides(b_shape, space))
    a1 = target.reshape(a, (size(a_shape),))
    b1 = target.reshape(b, (size(b_shape),))
    o1 = target.reshape(out, (total,))
    ilp = per_thread(total)
    grid, block = launch_grid(total, ilp)
    target.launch(_binary_kernel, grid, block, o1, a1, b1, nd, dims[1], dims[2], dims[3],
                  1.0 / dims[1], 1.0 / dims[2], 1.0 / dims[3], *sa, *sb, op, total, ilp)
    return 1


def _launch_unary(target, out, data, act) -> int:
    shape = dims_of(data.shape)
    total = size(shape)
    if total == 0:
        return 0
    ilp = per_thread(total)
    grid, block = launch_grid(total, ilp)
    target.launch(_trig_kernel if act in TRIG_CODES else _unary_kernel, grid, block, target.reshape(out, (total,)),
                  target.reshape(data, (total,)), act, 0.0, 0.0, total, ilp)
    return 1


def launch_binary(target, out, a, b, *, operation) -> int:
    """out = a <operation> b (a key of BINARY_OPS) with numpy broadcasting;
    returns the launch count."""
    return _launch_binary(target, out, a, b, BINARY_OPS[operation])


def launch_broadcast_to(target, out, data, *, shape) -> int:
    """out = data broadcast (numpy rules) to out's shape."""
    return _launch_binary(target, out, data, data, OP_FIRST)


def launch_copy(target, out, data, **_) -> int:
    """out = data's elements in order (a view op whose output is a region output), any rank;
    the view's attributes (its shape) are out's shape already."""
    total = size(data.shape)
    if total == 0:
        return 0
    flat = target.reshape(data, (total,))
    return _launch_binary(target, target.reshape(out, (total,)), flat, flat, OP_FIRST)


def launch_activation(target, out, data, *, activation) -> int:
    """out = activation(data) (a name of simaccel.kernels.activation.ACTIVATIONS); returns the launch count."""
    return _launch_unary(target, out, data, ACTIVATIONS[activation])


def launch_clip(target, out, data, *, min, max) -> int:
    """out = clip(data, min, max), TVM's semantics (NaN -> max)."""
    total = size(data.shape)
    if total == 0:
        return 0
    ilp = per_thread(total)
    grid, block = launch_grid(total, ilp)
    target.launch(_clip_kernel, grid, block, target.reshape(out, (total,)), target.reshape(data, (total,)),
                  0, float(min), float(max), total, ilp)
    return 1


# At most 85 registers, so that 3 blocks (768 threads, each with ILP loads in flight) share
# an SM: left alone, the float32 unary kernel took 106 (the index of each of its ILP elements
# is 64-bit). tests/test_aot.py checks that it does not spill (at 64 it did, by 8 bytes, and
# so did the clip kernel, its twin).
_unary_kernel.launch_bounds = _clip_kernel.launch_bounds = _trig_kernel.launch_bounds = (BLOCK, 3)
