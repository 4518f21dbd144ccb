"""Reduction families: ``simaccel.mean``, ``simaccel.sum`` and ``simaccel.max`` over axes, and
the running sum ``simaccel.cumsum`` along one axis.

The reduced axes must be neighbours (one run, e.g. the spatial axes (2, 3) of NCHW, or the
last axis): the tensor is then (outer, reduced, inner) in memory. `keepdims` keeps them as
size 1. Sums accumulate in float32 in index order; max is TVM's running
``acc if acc > v else v`` from TVM's min_value of the dtype (kernels/dtypes.py; as TVM's max pooling and
reduction on CPU), so NaN comes out as TVM's, and a max of no terms is TVM's initial value
(TVM alone leaves a reduction of no terms unwritten: its initialisation sits in the empty loop).
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ...kernels.dtypes import is_float, min_value
from .. import attrs as kinds
from ..declare import OpFamily, Reject, relax_op
from ..registry import declare
from ..rules import FLOAT_DTYPES, INT_DTYPES, check_rank, f32

MAX_RANK = 6
REDUCTIONS = ("sum", "mean", "max")


def reduction_from_relax(match):
    rank = len(match.shapes["data"])
    axis = match.attrs["axis"]
    axes = sorted({a % rank for a in axis}) if axis is not None else list(range(rank))
    return {"axes": axes, "keepdims": bool(match.attrs["keepdims"])}


def infer_reduction(shapes, *, axes, keepdims, reduction):
    data = tuple(shapes[0])
    check_rank("data", data, 1, MAX_RANK)
    axes = list(axes)
    if not axes or axes != sorted(axes) or axes[-1] >= len(data):
        raise ShapeError(f"axes {axes} must be increasing axes of data {data}")
    if axes != list(range(axes[0], axes[-1] + 1)):
        raise ShapeError(f"axes {axes} are not neighbours (the reduced axes must be one run)")
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(data))
    return tuple(d for i, d in enumerate(data) if i not in axes)


def reduce(data, *, axes, keepdims, reduction):
    x, axes = f32(data), tuple(axes)
    if reduction == "sum":
        return x.sum(axis=axes, keepdims=keepdims, dtype=np.float32)
    if reduction == "mean":
        count = np.prod([x.shape[a] for a in axes])
        return x.sum(axis=axes, keepdims=keepdims, dtype=np.float32) / np.float32(count)
    lowest = np.float32(min_value(np.asarray(data).dtype))
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    kept = moved.shape[: x.ndim - len(axes)]
    rows = moved.reshape(kept + (math.prod(moved.shape[len(kept):]),))  # not -1: numpy cannot infer it with no rows
    acc = np.full(rows.shape[:-1], lowest, dtype=np.float32)
    for r in range(rows.shape[-1]):  # in index order, like TVM's loop
        acc = np.where(acc > rows[..., r], acc, rows[..., r])
    shape = infer_reduction([x.shape], axes=axes, keepdims=keepdims, reduction=reduction)
    return acc.reshape(shape)


for _name in REDUCTIONS:
    declare(OpFamily(
        name=f"simaccel.{_name}",
        inputs=("data",),
        pattern=relax_op(f"relax.{_name}", "data"),
        attrs={"axes": kinds.axes, "keepdims": kinds.flag},
        from_relax=reduction_from_relax,
        infer=infer_reduction,
        reference=reduce,
        kernel="simaccel.kernels.reduction:launch_reduction",
        fixed={"reduction": _name},
        doc=f"{_name} over neighbouring axes, rank <= {MAX_RANK}",
    ))


# -- cumsum: the running sum along one axis ----------------------------------------------------
def cumsum_from_relax(match):
    rank = len(match.shapes["data"])
    axis = match.attrs["axis"]
    if rank == 0:
        raise Reject("cumsum of a 0-d tensor")
    if axis is None:
        if rank != 1:
            raise Reject(f"cumsum over the flattened tensor (axis None) of rank {rank}")
        axis = 0
    return {"axis": int(axis) % rank, "exclusive": bool(match.attrs["exclusive"])}


def infer_cumsum(shapes, *, axis, exclusive):
    data = tuple(shapes[0])
    check_rank("data", data, 1, MAX_RANK)
    if not 0 <= axis < len(data):
        raise ShapeError(f"axis {axis} is not an axis of data {data}")
    return data


def cumsum(data, *, axis, exclusive):
    """The running sum along `axis` in index order: float32 for floats (rounded once on store),
    the dtype's own wrapping arithmetic for integers, a running or for bool (numpy's bool sum;
    TVM 0.27 alone cannot build a bool cumsum for the CPU); `exclusive`: each element's sum of
    the ones before it."""
    x = np.asarray(data)
    floats = is_float(x.dtype)
    total = np.cumsum(f32(x) if floats else x, axis=axis, dtype=np.float32 if floats else x.dtype)
    if exclusive:
        before = np.zeros_like(total)
        index = [slice(None)] * x.ndim
        index[axis] = slice(1, None)
        shifted = [slice(None)] * x.ndim
        shifted[axis] = slice(None, -1)
        before[tuple(index)] = total[tuple(shifted)]
        total = before
    return total


declare(OpFamily(
    name="simaccel.cumsum",
    inputs=("data",),
    pattern=relax_op("relax.cumsum", "data"),
    attrs={"axis": kinds.integer, "exclusive": kinds.flag},
    from_relax=cumsum_from_relax,
    infer=infer_cumsum,
    reference=cumsum,
    kernel="simaccel.kernels.reduction:launch_cumsum",
    dtypes=FLOAT_DTYPES + INT_DTYPES + ("bool",),
    doc=f"running sum along one axis (exclusive too), rank <= {MAX_RANK}; integers exact, wrapping; bool a running or",
))

