"""Mask and index kernels: comparisons, logical ops, where, integer arithmetic and max,
casts, fills and exact copies.

Called by the simaccel runtime's "sim"/"cuda" engines through the op registry
(simaccel.less, ..., simaccel.where, simaccel.integer_add, simaccel.astype, simaccel.full,
simaccel.zeros_like, ..., and the view ops' copies: simaccel/ops/builtin/masks.py,
discrete.py, layout.py). Unlike the float elementwise kernels these compute in the
inputs' own types, never through float32: an int64 index above 2**24 or a bool stays
exact, a comparison of float16 values compares them as they are. Inputs broadcast numpy-style up to
rank 4, as in simaccel.kernels.elementwise: the launcher pads shapes to rank 4, collapses
the dims every input walks contiguously, and passes the output dims and each input's
element strides (0 on broadcast dims) as numbers. One output element per thread and pass
of a grid-stride loop: masks are small next to the activations they select from.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32
from numba.cuda.extending import register_jitable

from .elementwise import divmod_fast, launch_copy as launch_float_copy
from .grid import broadcast_strides, collapse_dims, dims_of, launch_grid, padded, size
from .dtypes import is_float, numpy_dtype
from .layout import _launch_gather

COMPARE = {"less": 0, "less_equal": 1, "greater": 2, "greater_equal": 3, "equal": 4, "not_equal": 5}
LOGICAL = {"logical_and": 0, "logical_or": 1, "logical_not": 2, "bitwise_not": 2, "bitwise_and": 0, "bitwise_or": 1}
INTEGER = {"add": 0, "subtract": 1, "multiply": 2}


@register_jitable
def _split4(idx, nd, d1, d2, d3, inv1, inv2, inv3):
    """(i0, i1, i2, i3) of output element `idx` over the collapsed, right-aligned dims; `nd`
    (uniform over a launch) of them are used."""
    if nd <= 1:
        return 0, 0, 0, idx
    t, i3 = divmod_fast(idx, d3, inv3)
    if nd == 2:
        return 0, 0, t, i3
    t, i2 = divmod_fast(t, d2, inv2)
    i0, i1 = divmod_fast(t, d1, inv1)
    return i0, i1, i2, i3


@register_jitable
def _compare(x, y, op):
    """Comparison `op` (0 <, 1 <=, 2 >, 3 >=, 4 ==, 5 !=) of two scalars."""
    if op == 0:
        return x < y
    if op == 1:
        return x <= y
    if op == 2:
        return x > y
    if op == 3:
        return x >= y
    if op == 4:
        return x == y
    return x != y


@register_jitable
def _compare_floats(x, y, op):
    # float16 compared as float32: exact (every float16 is a float32), and nvJitLink
    # 13.0 failed (ERROR_INTERNAL) to link Numba's float16 comparisons for sm_90.
    return _compare(float32(x), float32(y), op)


@register_jitable
def _logical(x, y, op):
    """Logical `op` (0 and, 1 or, 2 not of x) of two values taken as bools (!= 0)."""
    p = x != 0
    q = y != 0
    if op == 0:
        return p and q
    if op == 1:
        return p or q
    return not p


@register_jitable
def _integer(x, y, op):
    """Integer `op` (0 +, 1 -, 2 *): Numba widens to int64; the store keeps the low bits, C's
    wrapping, as TVM's."""
    if op == 0:
        return x + y
    if op == 1:
        return x - y
    return x * y


def _pair_kernel(combine, name):
    """The kernel of `combine` over two inputs broadcast to the output: out = combine(a, b, op)
    elementwise, in the inputs' own types; a thread per output element and pass of a
    grid-stride loop."""

    def kernel(out, a, b, nd, d1, d2, d3, inv1, inv2, inv3, sa0, sa1, sa2, sa3, sb0, sb1, sb2, sb3, op, total):
        idx = cuda.grid(1)
        step = cuda.gridsize(1)
        while idx < total:
            i0, i1, i2, i3 = _split4(idx, nd, d1, d2, d3, inv1, inv2, inv3)
            out[idx] = combine(a[i0 * sa0 + i1 * sa1 + i2 * sa2 + i3 * sa3], b[i0 * sb0 + i1 * sb1 + i2 * sb2 + i3 * sb3], op)
            idx += step

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


_compare_kernel = _pair_kernel(_compare, "_compare_kernel")
_compare_float_kernel = _pair_kernel(_compare_floats, "_compare_float_kernel")
_logical_kernel = _pair_kernel(_logical, "_logical_kernel")
_integer_kernel = _pair_kernel(_integer, "_integer_kernel")


def _where_kernel(out, c, a, b, nd, d1, d2, d3, inv1, inv2, inv3, sc0, sc1, sc2, sc3,
                  sa0, sa1, sa2, sa3, sb0, sb1, sb2, sb3, total):
    idx = cuda.grid(1)
    step = cuda.gridsize(1)
    while idx < total:
        i0, i1, i2, i3 = _split4(idx, nd, d1, d2, d3, inv1, inv2, inv3)
        if c[i0 * sc0 + i1 * sc1 + i2 * sc2 + i3 * sc3]:
            out[idx] = a[i0 * sa0 + i1 * sa1 + i2 * sa2 + i3 * sa3]
        else:
            out[idx] = b[i0 * sb0 + i1 * sb1 + i2 * sb2 + i3 * sb3]
        idx += step


def _integer_max_kernel(out, x, R, inner, inv_inner, lowest, total):
    # TVM's running max from the dtype's lowest value, in index order: exact for integers.
    idx = cuda.grid(1)
    step = cuda.gridsize(1)
    while idx < total:
        o, i = divmod_fast(idx, inner, inv_inner)
        base = o * R * inner + i
        acc = lowest
        for r in range(R):
            v = x[base + r * inner]
            acc = acc if acc > v else v
        out[idx] = acc
        idx += step


@register_jitable
def _element(x, idx):
    # The store converts: float -> integer truncates, -> bool is != 0, as C's (TVM's) casts.
    return x[idx]


@register_jitable
def _element_as_float(x, idx):
    # A float source through float32 (exact for float16): the same conversions, and no float16
    # comparison (float16 -> bool), which nvJitLink 13.0 failed to link for sm_90.
    return float32(x[idx])


@register_jitable
def _number(x, idx):
    return x


def _map_kernel(value_at, name):
    """The kernel out[idx] = value_at(x, idx) (the store converts to out's dtype); a thread per
    element and pass of a grid-stride loop."""

    def kernel(out, x, total):
        idx = cuda.grid(1)
        step = cuda.gridsize(1)
        while idx < total:
            out[idx] = value_at(x, idx)
            idx += step

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


_astype_kernel = _map_kernel(_element, "_astype_kernel")
_astype_float_kernel = _map_kernel(_element_as_float, "_astype_float_kernel")
_fill_number_kernel = _map_kernel(_number, "_fill_number_kernel")  # `x`: the number


def _fill_kernel(out, value, total):
    # `value`: one element (a 0-d tensor viewed as 1-D), read once, converted by the store.
    idx = cuda.grid(1)
    step = cuda.gridsize(1)
    v = value[0]
    while idx < total:
        out[idx] = v
        idx += step


def _broadcast_args(target, out, *arrays):
    """(flat out, flat inputs, index arguments, total) for `arrays` broadcast to `out` (at most
    RANK dims once merged, validated by the ISA); None where `out` is empty."""
    out_shape = dims_of(out.shape)
    total = size(out_shape)
    if total == 0:
        return None
    space = padded(out_shape)
    nd, dims, strides = collapse_dims(space, *(broadcast_strides(a.shape, space) for a in arrays))
    flats = [target.reshape(a, (size(a.shape),)) for a in arrays]
    index = [nd, dims[1], dims[2], dims[3], 1.0 / dims[1], 1.0 / dims[2], 1.0 / dims[3]]
    return target.reshape(out, (total,)), flats, index, [s for ss in strides for s in ss], total


def _launch_pair(target, kernel, out, a, b, op) -> int:
    args = _broadcast_args(target, out, a, b)
    if args is None:
        return 0
    o1, (a1, b1), index, strides, total = args
    grid, block = launch_grid(total)
    target.launch(kernel, grid, block, o1, a1, b1, *index, *strides, op, total)
    return 1


def launch_compare(target, out, lhs, rhs, *, operation) -> int:
    """out (bool) = lhs <operation> rhs (a key of COMPARE), numpy broadcasting, rank <= 4."""
    kernel = _compare_float_kernel if is_float(lhs.dtype) else _compare_kernel
    return _launch_pair(target, kernel, out, lhs, rhs, COMPARE[operation])


def launch_logical(target, out, *data, operation) -> int:
    """out = logical_and / logical_or (bitwise_and / bitwise_or: the same of bools) of two bool
    tensors (broadcast), or logical_not / bitwise_not of one."""
    return _launch_pair(target, _logical_kernel, out, data[0], data[-1], LOGICAL[operation])


def launch_integer_binary(target, out, lhs, rhs, *, operation) -> int:
    """out = lhs <operation> rhs (add, subtract, multiply) in integers, wrapping, broadcast."""
    return _launch_pair(target, _integer_kernel, out, lhs, rhs, INTEGER[operation])


def launch_where(target, out, condition, lhs, rhs) -> int:
    """out = lhs where condition else rhs, all three broadcast (rank <= 4)."""
    args = _broadcast_args(target, out, condition, lhs, rhs)
    if args is None:
        return 0
    o1, (c1, a1, b1), index, strides, total = args
    grid, block = launch_grid(total)
    target.launch(_where_kernel, grid, block, o1, c1, a1, b1, *index, *strides, total)
    return 1


def launch_integer_max(target, out, data, *, axes, keepdims) -> int:
    """out = max of integer data over `axes` (one run of neighbouring axes, the ISA's)."""
    shape = dims_of(data.shape)
    outer, R, inner = size(shape[: axes[0]]), size(shape[axes[0]: axes[-1] + 1]), size(shape[axes[-1] + 1:])
    total = outer * inner
    if total == 0:
        return 0
    flat_out = target.reshape(out, (total,))
    flat_in = target.reshape(data, (size(shape),)) if R else flat_out  # reducing nothing reads nothing
    grid, block = launch_grid(total)
    lowest = int(np.iinfo(numpy_dtype(data.dtype)).min)
    target.launch(_integer_max_kernel, grid, block, flat_out, flat_in, R, inner, 1.0 / inner, lowest, total)
    return 1


def launch_astype(target, out, data, *, dtype) -> int:
    """out = data converted to out's dtype (`dtype`)."""
    total = size(data.shape)
    if total == 0:
        return 0
    grid, block = launch_grid(total)
    kernel = _astype_float_kernel if is_float(data.dtype) else _astype_kernel
    target.launch(kernel, grid, block, target.reshape(out, (total,)), target.reshape(data, (total,)), total)
    return 1


def launch_fill(target, out, *arrays, dtype, shape=None, value=None) -> int:
    """out = one value everywhere: `value` (zeros_like, ones_like) or the last input, a 0-d
    tensor (full, full_like); any other input is read for its shape only, by the ISA."""
    total = size(out.shape)
    if total == 0:
        return 0
    grid, block = launch_grid(total)
    flat = target.reshape(out, (total,))
    if value is not None:
        target.launch(_fill_number_kernel, grid, block, flat, int(value), total)
    else:
        target.launch(_fill_kernel, grid, block, flat, target.reshape(arrays[-1], (1,)), total)
    return 1


def launch_copy(target, out, data, **attrs) -> int:
    """out = data's elements in order (a view op whose output is a region output), any rank
    and dtype: floats through elementwise.launch_copy, others as they are (an exact gather)."""
    if is_float(data.dtype):
        return launch_float_copy(target, out, data, **attrs)
    total = size(data.shape)
    if total == 0:
        return 0
    return _launch_gather(target, target.reshape(out, (total,)), target.reshape(data, (total,)), [total], [1], 0)
