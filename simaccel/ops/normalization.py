"""Row-wise ops over the last axis: ``simaccel.softmax`` and ``simaccel.layer_norm``."""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from . import attrs as kinds
from .common import check_rank, f32, kernel, same_dtype
from .registry import register_op


def infer_softmax(shapes, dtypes):
    dtype = same_dtype("simaccel.softmax", ("data",), dtypes)
    check_rank("simaccel.softmax", "data", shapes[0], 1, 4)
    return tuple(shapes[0]), dtype


@register_op("simaccel.softmax", inputs=("data",), infer=infer_softmax, kernel=kernel("normalization", "launch_softmax"))
def softmax(data):
    x = f32(data)
    e = np.exp(x - x.max(axis=-1, keepdims=True, initial=-np.inf))  # initial: rows may be empty
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.asarray(data).dtype)


def infer_layer_norm(shapes, dtypes, *, epsilon):
    op = "simaccel.layer_norm"
    dtype = same_dtype(op, ("data", "gamma", "beta"), dtypes)
    check_rank(op, "data", shapes[0], 1, 4)
    d = shapes[0][-1]
    for role, shape in zip(("gamma", "beta"), shapes[1:]):
        if tuple(shape) != (d,):
            raise ShapeError(f"{op}: {role} must have shape ({d},) to match data {tuple(shapes[0])}, got {tuple(shape)}")
    if not epsilon > 0:
        raise ShapeError(f"{op}: epsilon must be positive, got {epsilon}")
    return tuple(shapes[0]), dtype


@register_op(
    "simaccel.layer_norm",
    inputs=("data", "gamma", "beta"),
    attrs={"epsilon": kinds.positive_float},
    infer=infer_layer_norm,
    kernel=kernel("normalization", "launch_layer_norm"),
)
def layer_norm(data, gamma, beta, *, epsilon):
    x = f32(data)
    if x.shape[-1] == 0:
        return np.empty_like(np.asarray(data))  # rows of no elements: nothing to normalise
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + np.float32(epsilon)) * f32(gamma) + f32(beta)
    return y.astype(np.asarray(data).dtype)
