"""Layout families: views (``simaccel.reshape``, ``expand_dims``, ``squeeze``, ``flatten``),
``simaccel.permute_dims``, ``simaccel.strided_slice``, ``simaccel.concat`` and ``simaccel.take``
(a gather along one axis by a tensor of int32 or int64 indices: embedding lookups).

A view op's result is its input's elements in the same order under another shape, so it is
declared ``view=True``: where its output is an intermediate of a region, no kernel runs and
nothing is copied (the runtime hands the next op the same memory, `Program.views`); where it
is a region output, a copy kernel fills the caller's buffer. The four Relax ops become one
kind of Program op each, all with the output `shape` as their attribute. Every family here
moves elements as they are, so it takes every dtype of the ISA (int64 indices, bool masks).
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from .. import attrs as kinds
from ..declare import OpFamily, Reject, relax_op, relax_tuple, relax_value
from ..registry import declare
from ..rules import ISA_DTYPES, at_least, check_rank

MAX_RANK = 6
COPY = "simaccel.kernels.masks:launch_copy"  # exact for every dtype (floats: elementwise.launch_copy)


def infer_view(shapes, *, shape):
    data, shape = tuple(shapes[0]), tuple(shape)
    check_rank("data", data, 0, MAX_RANK)
    if math.prod(shape) != math.prod(data):
        raise ShapeError(f"cannot view data {data} ({math.prod(data)} elements) as {shape}")
    return shape


def view(data, *, shape):
    return np.reshape(data, tuple(shape))


def _shape(dims: list[int]) -> dict:
    if len(dims) > MAX_RANK:
        raise Reject(f"result of rank {len(dims)} (at most {MAX_RANK})")
    return {"shape": dims}


def reshape_from_relax(match):
    return _shape(list(match.values["shape"]))


def expand_dims_from_relax(match):
    data = list(match.shapes["data"])
    rank = len(data) + len(match.attrs["axis"])
    axes = sorted(a % rank for a in match.attrs["axis"])
    for a in axes:
        data.insert(a, 1)
    return _shape(data)


def squeeze_from_relax(match):
    data = list(match.shapes["data"])
    axis = match.attrs["axis"]
    drop = {a % len(data) for a in axis} if axis is not None else {i for i, d in enumerate(data) if d == 1}
    if any(data[a] != 1 for a in drop):
        raise Reject(f"squeeze of axes {sorted(drop)} of {tuple(data)}, not all of size 1")
    return _shape([d for i, d in enumerate(data) if i not in drop])


def flatten_from_relax(match):
    return _shape([math.prod(match.shapes["data"])])


for _op, _pattern, _from_relax in (
    ("reshape", relax_op("relax.reshape", "data", relax_value("shape")), reshape_from_relax),
    ("expand_dims", relax_op("relax.expand_dims", "data"), expand_dims_from_relax),
    ("squeeze", relax_op("relax.squeeze", "data"), squeeze_from_relax),
    ("flatten", relax_op("relax.flatten", "data"), flatten_from_relax),
):
    declare(OpFamily(
        name=f"simaccel.{_op}",
        inputs=("data",),
        pattern=_pattern,
        attrs={"shape": kinds.shape},
        from_relax=_from_relax,
        infer=infer_view,
        reference=view,
        kernel=COPY,
        view=True,
        dtypes=ISA_DTYPES,  # they move elements and compute nothing: any dtype
        doc=f"{_op}: a view of its input (no kernel, no copy), rank <= {MAX_RANK}",
    ))


def permute_from_relax(match):
    axes = match.attrs["axes"]
    rank = len(match.shapes["data"])
    return {"axes": [a % rank for a in axes] if axes is not None else list(range(rank - 1, -1, -1))}


def infer_permute(shapes, *, axes):
    data = tuple(shapes[0])
    check_rank("data", data, 1, MAX_RANK)
    if sorted(axes) != list(range(len(data))):
        raise ShapeError(f"axes {list(axes)} are not a permutation of the {len(data)} axes of data {data}")
    return tuple(data[a] for a in axes)


declare(OpFamily(
    name="simaccel.permute_dims",
    inputs=("data",),
    pattern=relax_op("relax.permute_dims", "data"),
    attrs={"axes": kinds.axes},
    from_relax=permute_from_relax,
    infer=infer_permute,
    reference=lambda data, *, axes: np.transpose(data, axes),
    kernel="simaccel.kernels.layout:launch_permute",
    dtypes=ISA_DTYPES,
    doc=f"permute_dims (transpose) of up to {MAX_RANK} axes",
))


def strided_slice_from_relax(match):
    data = match.shapes["data"]
    rank = len(data)
    axes, begin, end, steps = (match.values[k] for k in ("axes", "begin", "end", "strides"))
    if not len(axes) == len(begin) == len(end) == len(steps):
        raise Reject(f"strided_slice with {len(axes)} axes, {len(begin)} begins, {len(end)} ends, {len(steps)} steps")
    if any(s < 1 for s in steps):
        raise Reject(f"strided_slice steps {list(steps)} (only steps >= 1)")
    inbound = "assume_inbound" in match.attrs and bool(match.attrs["assume_inbound"])
    first, last, step = [0] * rank, list(data), [1] * rank
    for a, b, e, s in zip(axes, begin, end, steps):
        start, stop = (_slice_index(i, data[a % rank], inbound) for i in (b, e))
        # the last element taken, plus one: start where the slice is empty
        past = start if stop - start <= 0 else start + (-(-(stop - start) // s) - 1) * s + 1
        first[a % rank], last[a % rank], step[a % rank] = start, past, s
    return {"begin": first, "end": last, "strides": step}


def _slice_index(index, length, inbound: bool):
    """One slice index on an axis of `length` (an int or a symbolic size); a negative one counts
    from the end. Relax clamps it to the axis as Python does, which needs comparisons that the size
    vars' bounds decide while partitioning, else the op stays on TVM (SymbolicError). Where the
    call may assume its indices are inside the axis (`assume_inbound`; a symbolic index is then a
    size, `n - 1`), it is taken as it is, and the shape rule requires it inside per call."""
    if inbound:
        return index + length if isinstance(index, int) and index < 0 else index
    if index < 0:
        index = index + length
        return 0 if index < 0 else index
    return length if length < index else index


def infer_strided_slice(shapes, *, begin, end, strides):
    data = tuple(shapes[0])
    check_rank("data", data, 1, MAX_RANK)
    if not len(begin) == len(end) == len(strides) == len(data):
        raise ShapeError(f"begin {list(begin)}, end {list(end)} and strides {list(strides)} need one value per axis "
                         f"of data {data}")
    for k, (b, e, s, d) in enumerate(zip(begin, end, strides, data)):
        if not (at_least(b, 0) and at_least(e, b) and at_least(d, e) and s >= 1):
            raise ShapeError(f"axis {k}: slice {b}:{e}:{s} is not within 0..{d} with a step >= 1")
    return tuple(-(-(e - b) // s) for b, e, s in zip(begin, end, strides))


declare(OpFamily(
    name="simaccel.strided_slice",
    inputs=("data",),
    pattern=relax_op("relax.strided_slice", "data", relax_value("axes"), relax_value("begin"),
                     relax_value("end"), relax_value("strides")),
    attrs={"begin": kinds.shape, "end": kinds.shape, "strides": kinds.shape},
    from_relax=strided_slice_from_relax,
    infer=infer_strided_slice,
    reference=lambda data, *, begin, end, strides: np.asarray(data)[tuple(map(slice, begin, end, strides))],
    kernel="simaccel.kernels.layout:launch_strided_slice",
    dtypes=ISA_DTYPES,
    doc=f"strided_slice (steps >= 1) of up to {MAX_RANK} axes",
))


def concat_from_relax(match):
    axis = match.attrs["axis"]
    if axis is None:  # Relax takes only 1-D tensors then (its type inference checks): axis 0
        axis = 0
    return {"axis": axis % len(match.shapes["data"][0])}


def infer_concat(shapes, *, axis):
    first = tuple(shapes[0])
    check_rank("data[0]", first, 1, MAX_RANK)
    if not 0 <= axis < len(first):
        raise ShapeError(f"axis {axis} is not an axis of data[0] {first}")
    total = 0
    for k, shape in enumerate(shapes):
        shape = tuple(shape)
        if len(shape) != len(first) or shape[:axis] + shape[axis + 1:] != first[:axis] + first[axis + 1:]:
            raise ShapeError(f"data[{k}] {shape} differs from data[0] {first} on an axis other than {axis}")
        total += shape[axis]
    return first[:axis] + (total,) + first[axis + 1:]


declare(OpFamily(
    name="simaccel.concat",
    inputs=("data",),
    pattern=relax_op("relax.concat", relax_tuple("data")),
    attrs={"axis": kinds.integer},
    from_relax=concat_from_relax,
    infer=infer_concat,
    reference=lambda *data, axis: np.concatenate(data, axis=axis),
    kernel="simaccel.kernels.layout:launch_concat",
    dtypes=ISA_DTYPES,
    doc=f"concat of one or more tensors along one axis, rank <= {MAX_RANK}",
))


# relax.take's modes and what simaccel reads for an index i of an axis of n elements. TVM 0.27
# (topi take): "clip" clamps to [0, n - 1] (-1 reads element 0), "wrap" reads i mod n, and
# "fast" (the default, and torch.export's nn.Embedding) reads element i unchecked, so an
# index outside [0, n) reads outside the tensor (undefined). simaccel's "fast" reads what
# TVM reads for every index in [0, n), what torch means (element i + n) for one in [-n, 0),
# as the constant-index rewrite does, and clamps the rest as "clip": never outside the tensor.
# "nan" (NaN for an index out of range) stays on TVM.
TAKE_MODES = ("clip", "wrap", "fast")


def take_mode(value) -> str:
    """An attribute kind: one of TAKE_MODES."""
    if value not in TAKE_MODES:
        raise ValueError(f"must be one of {list(TAKE_MODES)}, got {value!r}")
    return value


def take_from_relax(match):
    mode, axis = str(match.attrs["mode"]), match.attrs["axis"]
    if mode not in TAKE_MODES:
        raise Reject(f"take mode {mode!r} (simaccel takes {', '.join(TAKE_MODES)})")
    if axis is None:  # Relax takes only 1-D tensors then: axis 0
        axis = 0
    return {"axis": axis % len(match.shapes["data"]), "mode": mode}


def infer_take(shapes, *, axis, mode):
    data, indices = tuple(shapes[0]), tuple(shapes[1])
    check_rank("data", data, 1, MAX_RANK)
    if not 0 <= axis < len(data):
        raise ShapeError(f"axis {axis} is not an axis of data {data}")
    out = data[:axis] + indices + data[axis + 1:]
    check_rank("result", out, 0, MAX_RANK)
    if data[axis] == 0 and math.prod(indices) != 0:
        raise ShapeError(f"cannot take indices {indices} from axis {axis} of data {data}: it has no elements")
    return out


def take_index(indices, n: int, mode: str):
    """The element of an axis of `n` that simaccel's take reads for each of `indices` (TAKE_MODES)."""
    i = np.asarray(indices, np.int64)
    if mode == "wrap":
        i = i % max(n, 1)
    elif mode == "fast":
        i = np.where((i < 0) & (i >= -n), i + n, i)
    return np.clip(i, 0, max(n - 1, 0))


declare(OpFamily(
    name="simaccel.take",
    inputs=("data", "indices"),
    pattern=relax_op("relax.take", "data", "indices"),
    attrs={"axis": kinds.integer, "mode": take_mode},
    from_relax=take_from_relax,
    infer=infer_take,
    reference=lambda data, indices, *, axis, mode: np.take(data, take_index(indices, data.shape[axis], mode), axis=axis),
    kernel="simaccel.kernels.layout:launch_take",
    dtypes=ISA_DTYPES,
    role_dtypes={"indices": ("int32", "int64")},
    doc="take along one axis by a tensor of int32/int64 indices (embeddings); clip, wrap, fast (clamped)",
))
