"""Vector loads and stores for the bandwidth-bound row kernels (kernels/normalization.py).

numba-cuda reads an array an element at a time (4 bytes of float32), and NVVM merges
neighbouring accesses into one only where it can prove them aligned, which it never can for a
kernel argument. `load_vector` and `store_vector` issue the wide access themselves: VEC
consecutive elements (16 bytes of float32, `ld.global.v4.f32`; 8 of float16) between a global
array and a thread's local values, converted to the destination's dtype. A row kernel so
spends one instruction and one index computation where it spent four.

A region's tensors are only element-aligned (TVM's own buffers are 64-byte aligned, a view
into one need not be), so the kernels decide per launch: each holds two copies of its row
loop (`both_ways`), one built for VEC elements an access (a thread's values VEC-long runs of
the row) and one for a single element (the layout of the kernels before vectors), and runs
the first where every array it touches is `aligned` and the row length a multiple of VEC.
With the choice made per access inside one loop instead, the registers of both ways were
live at once (layer norm's cached kernel spilled at its 64), and the element-wise way on
VEC-long runs was slower than the old layout (row sums of 1001: 14.0 us against 11.6).
On the simulator, which runs kernels as Python, numpy stand-ins take the intrinsics' place
and check the alignment the GPU would need.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.cuda.extending import intrinsic, register_jitable

from .dtypes import numpy_dtype
from .simulator import host_array

ALIGNMENT = 16  # bytes: what `aligned` checks, enough for any vector below
# Consecutive elements a kernel's vector loop moves per access: 16 bytes of float32 (8 of
# float16), one `ld.global.v4.f32`.
VEC = 4
_I32 = ir.IntType(32)


def _access_type(nbytes: int):
    """The LLVM type one access of `nbytes` moves: 32-bit words from 8 bytes on (NVVM splits a
    vector of 8 halves into two 8-byte accesses, never one of four words). 32 bytes (VEC
    float64s) are two 16-byte accesses: no wider one exists."""
    return ir.VectorType(_I32, nbytes // 4) if nbytes >= 8 else ir.IntType(8 * nbytes)


def _alignment(nbytes: int) -> int:
    """The alignment an access of `nbytes` is issued with (and needs): its size, at most ALIGNMENT."""
    return min(nbytes, ALIGNMENT)


def _vector_typing(global_array, local_array, count):
    """(count, access bytes) for a vector between the two arrays, or None where the types do not fit."""
    if not (isinstance(global_array, types.Array) and isinstance(local_array, types.Array)
            and isinstance(count, types.IntegerLiteral)):
        return None
    if global_array.layout != "C" or global_array.ndim != 1:  # the address is data + index: flat views only
        return None
    nbytes = count.literal_value * numpy_dtype(global_array.dtype).itemsize
    return (count.literal_value, nbytes) if nbytes in (1, 2, 4, 8, 16, 32) else None


def _element_pointer(context, builder, array_type, array, index):
    data = context.make_array(array_type)(context, builder, array).data
    return builder.gep(data, [index])


@intrinsic
def load_vector(typingctx, dst, j, src, index, count):
    """dst[j + k] = src[index + k] for k < count (a literal), src read in one access of count
    elements: its address must be a multiple of that access's size."""
    fit = _vector_typing(src, dst, count)
    if fit is None:
        return None
    n, nbytes = fit
    sig = types.void(dst, j, src, index, count)

    def codegen(context, builder, signature, args):
        dst_type, _, src_type, _, _ = signature.args
        pointer = _element_pointer(context, builder, src_type, args[2], args[3])
        words = builder.load(builder.bitcast(pointer, _access_type(nbytes).as_pointer()), align=_alignment(nbytes))
        element = context.get_data_type(src_type.dtype)
        values = builder.bitcast(words, ir.VectorType(element, n)) if n > 1 else builder.bitcast(words, element)
        for k in range(n):  # each element from its in-memory form (a bool's byte) to its value, converted
            value = builder.extract_element(values, ir.Constant(_I32, k)) if n > 1 else values
            value = context.data_model_manager[src_type.dtype].from_data(builder, value)
            value = context.cast(builder, value, src_type.dtype, dst_type.dtype)
            slot = builder.add(args[1], ir.Constant(args[1].type, k))
            context.pack_value(builder, dst_type.dtype, value, _element_pointer(context, builder, dst_type, args[0], slot))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def store_vector(typingctx, dst, index, src, j, count):
    """dst[index + k] = src[j + k] for k < count (a literal), dst written in one access of count
    elements: its address must be a multiple of that access's size."""
    fit = _vector_typing(dst, src, count)
    if fit is None:
        return None
    n, nbytes = fit
    sig = types.void(dst, index, src, j, count)

    def codegen(context, builder, signature, args):
        dst_type, _, src_type, _, _ = signature.args
        element = context.get_data_type(dst_type.dtype)
        values = ir.Constant(ir.VectorType(element, n), ir.Undefined)
        for k in range(n):
            slot = builder.add(args[3], ir.Constant(args[3].type, k))
            value = context.unpack_value(builder, src_type.dtype, _element_pointer(context, builder, src_type, args[2], slot))
            value = context.cast(builder, value, src_type.dtype, dst_type.dtype)
            value = context.data_model_manager[dst_type.dtype].as_data(builder, value)
            values = builder.insert_element(values, value, ir.Constant(_I32, k))
        words = builder.bitcast(values if n > 1 else builder.extract_element(values, ir.Constant(_I32, 0)),
                                _access_type(nbytes))
        pointer = _element_pointer(context, builder, dst_type, args[0], args[1])
        builder.store(words, builder.bitcast(pointer, _access_type(nbytes).as_pointer()), align=_alignment(nbytes))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def aligned(typingctx, array):
    """Whether `array`'s data pointer is a multiple of ALIGNMENT bytes."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        low = builder.and_(builder.ptrtoint(data, ir.IntType(64)), ir.Constant(ir.IntType(64), ALIGNMENT - 1))
        return builder.icmp_unsigned("==", low, ir.Constant(ir.IntType(64), 0))

    return types.boolean(array), codegen


def _simulated_load_vector(dst, j, src, index, count):
    _check_vector(src, index, count)
    for k in range(count):
        dst[j + k] = src[index + k]


def _simulated_store_vector(dst, index, src, j, count):
    _check_vector(dst, index, count)
    for k in range(count):
        dst[index + k] = src[j + k]


def _check_vector(array, index, count):
    """What the GPU's wide access needs, checked on the simulator (a kernel that takes it
    where it should not would fault there, or read the wrong bytes)."""
    nbytes = count * array.dtype.itemsize
    address = _address(array) + int(index) * array.dtype.itemsize
    if address % _alignment(nbytes):
        raise AssertionError(f"a {nbytes}-byte vector access at {address:#x}, not aligned to {_alignment(nbytes)} bytes")


def _address(array) -> int:
    return host_array(array).__array_interface__["data"][0]


def _simulated_aligned(array):
    return _address(array) % ALIGNMENT == 0


def accessors(simulator: bool, count: int):
    """(load_values, store_values) for a kernel that moves `count` elements per access:

    * load_values(dst, j, src, index): dst[j + k] = src[index + k] for k < count;
    * store_values(dst, index, src, j): src[j + k] to dst[index + k], the same way round;

    dst / src the global array, the other a thread's local one; one access of `count`
    elements, so the global array's address there must be a multiple of its size (count = 1:
    any element). The simulator's are numpy stand-ins that check it.
    """
    if simulator:
        load, store = _simulated_load_vector, _simulated_store_vector
    else:
        load, store = load_vector, store_vector
    u = numba.uint64  # an index known non-negative: no wrap-around of negative ones per access

    @register_jitable
    def load_values(dst, j, src, index):
        load(dst, j, src, u(index), count)

    @register_jitable
    def store_values(dst, index, src, j):
        store(dst, u(index), src, j, count)

    return load_values, store_values


def alignment_check(simulator: bool):
    """The `aligned(array)` a kernel calls: whether `array`'s data is ALIGNMENT-byte aligned."""
    return _simulated_aligned if simulator else aligned


def both_ways(make_loop):
    """(make_loop(VEC), make_loop(1)) as device functions: a kernel's loop built for VEC
    elements per access or for one, each a copy of its own, and its kernel calls the one its
    arrays allow (every one `aligned` and the row length a multiple of VEC: VEC)."""
    return register_jitable(make_loop(VEC)), register_jitable(make_loop(1))
