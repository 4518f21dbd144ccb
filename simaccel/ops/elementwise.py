"""Elementwise ops: ``simaccel.add`` and ``simaccel.multiply`` (numpy broadcasting, rank <= 4),
``simaccel.relu`` and ``simaccel.gelu``. Computed in float32, stored in the input dtype."""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from .common import activate, check_rank, f32, kernel, same_dtype
from .registry import register_op


def make_binary_infer(op: str):
    def infer(shapes, dtypes):
        dtype = same_dtype(op, ("lhs", "rhs"), dtypes)
        try:
            shape = np.broadcast_shapes(tuple(shapes[0]), tuple(shapes[1]))
        except ValueError:
            raise ShapeError(f"{op}: shapes {tuple(shapes[0])} and {tuple(shapes[1])} do not broadcast") from None
        check_rank(op, "result", shape, 0, 4)
        return tuple(shape), dtype

    return infer


def make_unary_infer(op: str):
    def infer(shapes, dtypes):
        dtype = same_dtype(op, ("data",), dtypes)
        check_rank(op, "data", shapes[0], 0, 4)
        return tuple(shapes[0]), dtype

    return infer


@register_op("simaccel.add", inputs=("lhs", "rhs"), infer=make_binary_infer("simaccel.add"),
             kernel=kernel("elementwise", "launch_add"))
def add(lhs, rhs):
    return (f32(lhs) + f32(rhs)).astype(np.asarray(lhs).dtype)


@register_op("simaccel.multiply", inputs=("lhs", "rhs"), infer=make_binary_infer("simaccel.multiply"),
             kernel=kernel("elementwise", "launch_multiply"))
def multiply(lhs, rhs):
    return (f32(lhs) * f32(rhs)).astype(np.asarray(lhs).dtype)


@register_op("simaccel.relu", inputs=("data",), infer=make_unary_infer("simaccel.relu"),
             kernel=kernel("elementwise", "launch_relu"))
def relu(data):
    return activate(f32(data), "relu").astype(np.asarray(data).dtype)


@register_op("simaccel.gelu", inputs=("data",), infer=make_unary_infer("simaccel.gelu"),
             kernel=kernel("elementwise", "launch_gelu"))
def gelu(data):
    return activate(f32(data), "gelu").astype(np.asarray(data).dtype)
