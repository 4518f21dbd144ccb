"""Zero-size tensors: every op of the ISA with a zero-size dim, whatever strides the tensor has.

A tensor with no elements is compact whatever its strides: numpy gives an empty array element
strides (0, ...), and any DLPack producer may give others. Both tensor checks must take them,
the Python runtime's (simaccel.tensors) and a native region's (simaccel/native/region.h), and
every result must be what TVM alone gives (or, for a reduction of no terms, where TVM alone
leaves its result unwritten, the value the op means): through the Python runtime directly,
end to end through a TVM build on the ref and sim engines, and through a native region
against the stand-in CUDA driver.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

from compare import assert_same
from harness import offloaded_ops, tvm_alone
from test_dtype_sweep import Fixed  # an input of a dtype of its own (take's indices)
from model_zoo import single_op
from native_support import cuda_tensor, stand_in_library
from simaccel.native.source import NativeRegion
from simaccel.ops import list_ops
from simaccel.tensors import is_compact
from simaccel.tvm_integration import build, partition_for_simaccel
from simaccel.tvm_integration.backend.codegen import region_program
from simaccel.tvm_integration.backend.patterns import sync_patterns
from simaccel.tvm_integration.tools.models import random_inputs

op = relax.op
F32 = "float32"


def dense(x, w):
    return op.matmul(x, op.permute_dims(w))


def conv(x, w):
    return op.nn.conv2d(x, w)


def gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


# Where a reduction has no terms, TVM alone leaves its result uninitialised (its TIR sets the
# initial value inside the loop over the reduction, which runs no times: a max over an empty
# axis came back as whatever the memory held). Those cases give the value the op means,
# computed here: a sum of nothing is 0 (then the bias and the activation), a max the dtype's
# lowest value (TVM's initial value, as simaccel's max pooling).
def empty_sum(shape, bias_role=None, activation=lambda v: v):
    def expect(arrays):
        value = np.zeros(shape, np.float64)
        if bias_role is not None:
            value = value + arrays[bias_role].astype(np.float64)
        return activation(value).astype(F32)
    return expect


LOWEST = float(np.finfo(np.float32).min)
ACTIVATIONS = {"": lambda v: v, "_relu": lambda v: np.maximum(v, 0), "_gelu": gelu}

# (id, Relax body, input shapes[, expected result where TVM alone's is not defined]): each op of
# the ISA with a zero-size dim in an input, an output or both; several have an empty input and
# an output with elements (empty sums, concat).
CASES = [
    ("conv2d_no_batch", conv, [(0, 2, 3, 3), (3, 2, 1, 1)]),
    ("conv2d_no_out_channels", conv, [(1, 2, 3, 3), (0, 2, 1, 1)]),
    ("conv2d_no_in_channels", conv, [(1, 0, 3, 3), (3, 0, 1, 1)], empty_sum((1, 3, 3, 3))),
    ("conv2d_relu", lambda x, w: op.nn.relu(conv(x, w)), [(0, 2, 3, 3), (3, 2, 1, 1)]),
    # a window wider than the data: an empty output (TVM alone cannot build these static shapes,
    # its topi rejects a 0 output width; with a symbolic width it runs them and gives an empty one)
    ("conv2d_window_past_width", conv, [(1, 2, 3, 1), (3, 2, 1, 2)], lambda arrays: np.zeros((1, 3, 3, 0), F32)),
    ("conv2d_transpose_no_batch", lambda x, w: op.nn.conv2d_transpose(x, w, strides=2), [(0, 2, 3, 3), (2, 3, 2, 2)]),
    ("conv2d_transpose_no_in_channels", lambda x, w: op.nn.conv2d_transpose(x, w), [(1, 0, 3, 3), (0, 3, 2, 2)],
     empty_sum((1, 3, 4, 4))),
    ("conv2d_bias", lambda x, w, b: op.add(conv(x, w), b), [(0, 2, 3, 3), (3, 2, 1, 1), (1, 3, 1, 1)]),
    ("conv2d_bias_relu", lambda x, w, b: op.nn.relu(op.add(conv(x, w), b)), [(1, 0, 3, 3), (3, 0, 1, 1), (1, 3, 1, 1)],
     empty_sum((1, 3, 3, 3), 2, ACTIVATIONS["_relu"])),
    *[(f"{name}_{tag}", getattr(op, name), shapes) for name in ("add", "subtract", "multiply", "divide", "power")
      for tag, shapes in (("no_rows", [(0, 3), (1, 3)]), ("broadcast_empty", [(2, 1), (0,)]))],
    ("clip", lambda x: op.clip(x, 0.0, 6.0), [(0, 3)]),
    ("rms_norm_no_rows", lambda x, w: op.nn.rms_norm(x, w, axes=[-1]), [(0, 3), (3,)]),
    ("attention_no_keys", lambda q, k, v: op.nn.attention(q, k, v), [(1, 2, 2, 4), (1, 0, 2, 4), (1, 0, 2, 4)],
     empty_sum((1, 2, 2, 4))),  # P V over no keys: its sums have no terms
    ("attention_no_queries", lambda q, k, v: op.nn.attention(q, k, v, causal_mask="TopLeft"), [(1, 0, 2, 4), (1, 3, 2, 4), (1, 3, 2, 4)]),
    ("grouped_attention_no_keys", lambda q, k, v: op.nn.attention(q, op.repeat(k, 2, axis=2), op.repeat(v, 2, axis=2)),
     [(1, 2, 4, 4), (1, 0, 2, 4), (1, 0, 2, 4)], empty_sum((1, 2, 4, 4))),
    ("attention_bias_no_keys", lambda q, k, v, b: op.nn.attention(q, k, v, b), [(1, 2, 2, 4), (1, 0, 2, 4), (1, 0, 2, 4),
                                                                                 (1, 1, 1, 0)], empty_sum((1, 2, 2, 4))),
    ("grouped_attention_bias_no_queries", lambda q, k, v, b: op.nn.attention(q, op.repeat(k, 2, axis=2),
                                                                              op.repeat(v, 2, axis=2), b),
     [(1, 0, 4, 4), (1, 3, 2, 4), (1, 3, 2, 4), (1, 4, 0, 3)]),
    ("take_no_indices", lambda x, i: op.take(x, i, axis=0), [(4, 3), Fixed((0, 2), "int64")]),
    ("take_from_no_columns", lambda x, i: op.take(x, i, axis=0, mode="clip"), [(2, 0), Fixed((3,), "int32")]),
    ("broadcast_to_no_rows", lambda x: op.broadcast_to(x, (0, 3)), [(1, 3)]),
    ("broadcast_to_empty", lambda x: op.broadcast_to(x, (2, 0, 4)), [(0, 1)]),
    *[(f"{name}_{tag}", fn, [shape]) for name, fn in (
        ("relu", op.nn.relu), ("gelu", op.nn.gelu), ("gelu_tanh", op.nn.gelu_tanh), ("sigmoid", op.sigmoid), ("tanh", op.tanh), ("silu", op.nn.silu),
        ("exp", op.exp), ("sqrt", op.sqrt), ("rsqrt", op.rsqrt), ("negative", op.negative), ("sin", op.sin), ("cos", op.cos))
        for tag, shape in (("0x3", (0, 3)), ("2x0x4", (2, 0, 4)))],
    ("reshape", lambda x: op.nn.relu(op.reshape(x, (0, 2, 3))), [(0, 6)]),
    ("expand_dims", lambda x: op.nn.relu(op.expand_dims(x, 1)), [(0, 3)]),
    ("squeeze", lambda x: op.nn.relu(op.squeeze(x, [1])), [(0, 1, 3)]),
    ("flatten", lambda x: op.nn.relu(op.flatten(x)), [(0, 2, 3)]),
    ("permute_dims", lambda x: op.permute_dims(x, [1, 0]), [(0, 3)]),
    ("strided_slice", lambda x: op.strided_slice(x, [1], [0], [2], [1]), [(0, 4)]),
    ("concat_empty_first", lambda x, y: op.concat([x, y], axis=1), [(2, 0), (2, 3)]),
    ("concat_empty_last", lambda x, y: op.concat([x, y], axis=0), [(2, 3), (0, 3)]),
    *[(f"matmul{suffix}_{tag}", make, shapes, *([empty_sum((2, 3), 2 if bias else None, ACTIVATIONS[suffix.replace("_bias", "")])]
                                                 if tag == "empty_reduction" else []))
      for suffix, make, bias in (
          ("", lambda x, w: op.matmul(x, w), False),
          ("_relu", lambda x, w: op.nn.relu(op.matmul(x, w)), False),
          ("_gelu", lambda x, w: op.nn.gelu(op.matmul(x, w)), False),
          ("_bias", lambda x, w, b: op.add(op.matmul(x, w), b), True),
          ("_bias_relu", lambda x, w, b: op.nn.relu(op.add(op.matmul(x, w), b)), True),
          ("_bias_gelu", lambda x, w, b: op.nn.gelu(op.add(op.matmul(x, w), b)), True))
      for tag, shapes in (("no_rows", [(0, 2), (2, 3)]), ("empty_reduction", [(2, 0), (0, 3)]),
                          ("empty_batch", [(0, 2, 2), (2, 3)]))
      for shapes in [shapes + [(3,)] if bias else shapes]],
    *[(f"dense{suffix}_{tag}", make, shapes, *([empty_sum((2, 3), 2 if bias else None, ACTIVATIONS[suffix.replace("_bias", "")])]
                                                if tag == "empty_reduction" else []))
      for suffix, make, bias in (
          ("", dense, False),
          ("_relu", lambda x, w: op.nn.relu(dense(x, w)), False),
          ("_gelu", lambda x, w: op.nn.gelu(dense(x, w)), False),
          ("_bias", lambda x, w, b: op.add(dense(x, w), b), True),
          ("_bias_relu", lambda x, w, b: op.nn.relu(op.add(dense(x, w), b)), True),
          ("_bias_gelu", lambda x, w, b: op.nn.gelu(op.add(dense(x, w), b)), True))
      for tag, shapes in (("no_rows", [(0, 2), (3, 2)]), ("empty_reduction", [(2, 0), (3, 0)]))
      for shapes in [shapes + [(3,)] if bias else shapes]],
    ("softmax_no_rows", op.nn.softmax, [(0, 3)]),
    ("softmax_empty_rows", op.nn.softmax, [(2, 0)]),
    ("layer_norm_no_rows", lambda x, g, b: op.nn.layer_norm(x, g, b, axes=[-1]), [(0, 3), (3,), (3,)]),
    ("max_pool2d_no_batch", lambda x: op.nn.max_pool2d(x, 2), [(0, 2, 4, 4)]),
    ("max_pool2d_no_channels", lambda x: op.nn.max_pool2d(x, 2), [(1, 0, 4, 4)]),
    ("max_pool2d_window_past_height", lambda x: op.nn.max_pool2d(x, (2, 1)), [(1, 2, 1, 4)],
     lambda arrays: np.zeros((1, 2, 0, 4), F32)),
    ("avg_pool2d_window_past_width", lambda x: op.nn.avg_pool2d(x, (1, 3), strides=2), [(1, 2, 4, 1)],
     lambda arrays: np.zeros((1, 2, 2, 0), F32)),
    ("avg_pool2d_no_batch", lambda x: op.nn.avg_pool2d(x, 2), [(0, 2, 4, 4)]),
    ("avg_pool2d_no_channels", lambda x: op.nn.avg_pool2d(x, 2, padding=1), [(1, 0, 4, 4)]),
    *[(f"{name}_kept_empty", lambda x, name=name: getattr(op, name)(x, axis=[1]), [(0, 3)]) for name in ("sum", "mean", "max")],
    ("sum_over_empty", lambda x: op.sum(x, axis=[0]), [(0, 3)], empty_sum((3,))),
    ("cumsum_no_rows", lambda x: op.cumsum(x, axis=1), [(0, 3)]),
    # a cumsum along an empty axis: TVM alone cannot build it (its scan divides by zero)
    ("max_over_empty", lambda x: op.max(x, axis=[0]), [(0, 3)], lambda arrays: np.full(3, LOWEST, F32)),
    # a mean over an empty axis: TVM alone cannot build it (its constant folding divides by zero)
    # mask and index ops (masks.py, discrete.py): bool and integer results made float again
    *[(f"{name}_no_rows", lambda x, y, name=name: op.astype(getattr(op, name)(x, y), "float32"), [(0, 3), (1, 3)])
      for name in ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal")],
    *[(f"{name}_no_rows", lambda x, y, name=name: op.astype(getattr(op, name)(op.less(x, y), op.greater(x, y)), "float32"),
       [(0, 3), (1, 3)]) for name in ("logical_and", "logical_or", "bitwise_and", "bitwise_or")],
    *[(f"{name}_no_rows", lambda x, y, name=name: op.astype(getattr(op, name)(op.less(x, y)), "float32"), [(0, 3), (1, 3)])
      for name in ("logical_not", "bitwise_not")],
    ("where_no_rows", lambda x, y: op.where(op.less(x, y), x, y), [(0, 3), (1, 3)]),
    *[(f"integer_{name}_no_rows", lambda x, y, name=name: op.astype(
        getattr(op, name)(op.astype(x, "int64"), op.astype(y, "int64")), "float32"), [(0, 3), (1, 3)])
      for name in ("add", "subtract", "multiply")],
    ("integer_max_kept_empty", lambda x: op.astype(op.max(op.astype(x, "int32"), axis=[1]), "float32"), [(0, 3)]),
    ("full_empty", lambda v: op.full((0, 3), op.sum(v), "float32"), [(2,)]),  # its fill: a 0-d tensor
    ("full_like_empty", lambda x, v: op.full_like(x, op.sum(v)), [(0, 3), (2,)]),
    ("zeros_like_empty", lambda x: op.zeros_like(x), [(2, 0)]),
    ("ones_like_empty", lambda x: op.ones_like(x), [(0, 3)]),
]
IDS = [c[0] for c in CASES]
BY_ID = {c[0]: c for c in CASES}


@functools.lru_cache(maxsize=None)
def model(case: str):
    _, make, shapes, *_ = BY_ID[case]
    return single_op(make, [(s, getattr(s, "dtype", None)) for s in shapes])


@functools.lru_cache(maxsize=None)
def tvm_result(case: str):
    """(inputs, the result to expect): TVM alone's, or the op's own value where TVM's is undefined."""
    mod = model(case)
    arrays = random_inputs(mod, 0)
    expect = BY_ID[case][3] if len(BY_ID[case]) > 3 else None
    return arrays, expect(arrays) if expect else tvm_alone(mod, arrays)


def regions(mod):
    """(Program, positions of `main`'s parameters it takes) of every region of `mod`'s `main`."""
    partitioned = partition_for_simaccel(mod)
    specs = sync_patterns()
    params = list(partitioned["main"].params)
    found = []
    for block in partitioned["main"].body.blocks:
        for binding in block.bindings:
            call = binding.value
            if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.GlobalVar):
                func = partitioned[call.op]
                if func.attrs is not None and "Codegen" in func.attrs:
                    program = region_program(call.op.name_hint, func, specs)
                    found.append((program, [params.index(a) if a in params else None for a in call.args]))
    return found


def test_the_cases_cover_the_isa():
    offloaded = set()
    for case in IDS:
        offloaded |= set(offloaded_ops(model(case)))
    assert offloaded == set(list_ops()), sorted(set(list_ops()) - offloaded)


# -- the compactness check --------------------------------------------------------------------
def odd_strides(shape):
    """Element strides an empty tensor of `shape` may come with: numpy's (0, ...), compact
    row-major, column-major, negative, huge, and strides of 0 and 1 mixed."""
    n = len(shape)
    row = [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(n)]
    return {"zeros": (0,) * n, "row_major": tuple(row), "column_major": tuple(int(np.prod(shape[:i])) for i in range(n)),
            "negative": tuple(-s - 1 for s in row), "huge": tuple(2**40 + i for i in range(n)),
            "mixed": tuple(i % 2 for i in range(n))}


EMPTY_SHAPES = [(0,), (0, 3), (3, 0), (2, 0, 4), (2, 4, 0), (0, 1, 5), (1, 1, 0), (2, 3, 4, 0, 1, 2)]


@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=str)
def test_an_empty_tensor_is_compact_whatever_its_strides(shape):
    for name, strides in odd_strides(shape).items():
        assert is_compact(shape, strides), name


@pytest.mark.parametrize("shape, strides, compact", [
    ((2, 3), (3, 1), True), ((2, 3), (0, 0), False), ((2, 3), (1, 2), False), ((2, 1), (1, 7), True),
    ((1, 3), (9, 1), True), ((3,), (0,), False), ((2, 3, 4), (12, 4, 1), True), ((2, 3, 4), (12, 4, 2), False),
])
def test_a_tensor_with_elements_is_still_checked(shape, strides, compact):
    assert is_compact(shape, strides) == compact


def strided_empty(array: np.ndarray, strides, misalign: int = 0) -> np.ndarray:
    """`array` (of no elements) with element `strides`, as a DLPack producer may give it, its
    data pointer `misalign` bytes past a 64-byte boundary."""
    assert array.size == 0
    buffer = np.zeros(128, np.uint8)
    start = -buffer.ctypes.data % 64 + misalign  # TVM takes only 64-byte aligned data through DLPack
    base = buffer[start:start + array.itemsize].view(array.dtype)
    return np.lib.stride_tricks.as_strided(base, array.shape, [s * array.itemsize for s in strides])


def with_strides(arrays, kind: str):
    """Every empty array in `arrays` viewed with the strides of `kind` (a view: an output's
    writes, had it elements, would reach the array); the others as they are."""
    return [strided_empty(a, odd_strides(a.shape)[kind]) if a.size == 0 else a for a in arrays]


# -- through the Python runtime directly ---------------------------------------------------------
STRIDES = ["zeros", "row_major", "column_major", "negative", "huge", "mixed"]


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("case", IDS)
def test_the_runtime_takes_empty_tensors_with_any_strides(clean_runtime, case, engine):
    mod = model(case)
    [(program, positions)] = regions(mod)  # one region, whose inputs are the model's parameters
    arrays, want = tvm_result(case)
    arrays = [arrays[i] for i in positions]
    for strides in STRIDES:
        got = np.full(program.tensors[program.outputs[0]].shape, np.nan, F32)
        outputs = with_strides([got], strides)
        with clean_runtime.use_engine(engine):
            clean_runtime.run(program, *with_strides(arrays, strides), *outputs)
        assert_same(got, want, F32)
    # An empty tensor's data pointer is never read: one off its elements' alignment is taken too.
    odd = [strided_empty(a, odd_strides(a.shape)["row_major"], misalign=1) if a.size == 0 else a for a in arrays]
    got = np.full(program.tensors[program.outputs[0]].shape, np.nan, F32)
    outputs = [strided_empty(got, odd_strides(got.shape)["row_major"], misalign=1)] if got.size == 0 else [got]
    with clean_runtime.use_engine(engine):
        clean_runtime.run(program, *odd, *outputs)
    assert_same(got, want, F32)


# -- end to end through TVM -----------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("case", IDS)
def test_end_to_end_against_tvm_alone(clean_runtime, case, engine):
    """Compact inputs, and TVM tensors made from numpy's empty arrays, which keep their
    strides of 0 into the region."""
    mod = model(case)
    arrays, want = tvm_result(case)
    executable = build(mod)
    for inputs in ([tvm.runtime.tensor(a) for a in arrays],
                   [tvm.runtime.from_dlpack(a) if a.size == 0 else tvm.runtime.tensor(a)
                    for a in with_strides(arrays, "zeros")]):
        clean_runtime.ledger.reset()
        with clean_runtime.use_engine(engine):
            got = relax.VirtualMachine(executable, tvm.cpu())["main"](*inputs)
        assert clean_runtime.ledger.snapshot()["offloaded_calls"] >= 1, "nothing ran on simaccel"
        assert_same(got.numpy(), want, F32)


# -- a native region against the stand-in CUDA driver -----------------------------------------------
NATIVE_CASES = ["relu_0x3", "add_no_rows", "concat_empty_first", "matmul_bias_empty_reduction", "sum_over_empty",
                "conv2d_no_batch", "softmax_empty_rows"]


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    programs = {case: regions(model(case))[0][0] for case in NATIVE_CASES}
    native_regions = [NativeRegion(p.name, p) for p in programs.values()]
    with stand_in_library(native_regions, tmp_path_factory.mktemp("native_zero")) as (library, driver):
        yield library, programs, driver


@pytest.mark.parametrize("case", NATIVE_CASES)
def test_a_native_region_takes_empty_tensors_with_any_strides(native, case):
    library, programs, driver = native
    program = programs[case]
    arrays = [np.zeros(program.tensors[i].shape, F32) for i in program.inputs + program.outputs]
    for strides in STRIDES:
        driver.reset()
        tensors = [cuda_tensor(a, strides=odd_strides(a.shape)[strides]) if a.size == 0 else cuda_tensor(a)
                   for a in arrays]
        with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", 0), 0x5EED):
            library[program.name](*tensors)
        out = program.tensors[program.outputs[0]]
        # An output without elements needs no kernel; one with elements (an empty sum, a concat) does.
        assert (len(driver.launches()) > 0) == (np.prod(out.shape) > 0), strides
    # An empty tensor's data pointer is never read: one off its elements' alignment is taken too.
    driver.reset()
    library[program.name](*[cuda_tensor(a, byte_offset=1) if a.size == 0 else cuda_tensor(a) for a in arrays])
    assert (len(driver.launches()) > 0) == (np.prod(program.tensors[program.outputs[0]].shape) > 0)
