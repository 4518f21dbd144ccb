"""Elementwise families: ``simaccel.add``, ``subtract``, ``multiply``, ``divide`` and ``power`` (numpy
broadcasting, rank <= 6 in at most 4 broadcast dims: simaccel.ops.rules.broadcast_result), ``simaccel.clip``, ``simaccel.broadcast_to``, and one op per ISA
activation (``simaccel.relu``, ``gelu``, ``gelu_tanh``, ``sigmoid``, ``tanh``, ``silu``, ``exp``, ``sqrt``,
``rsqrt``, ``negative``, ``sin``, ``cos``; these and clip up to rank 6, walked flat). Computed in float32,
stored in the input dtype."""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ..activation import ACTIVATIONS, activate
from .. import attrs as kinds
from ..declare import OpFamily, Reject, relax_op, relax_value
from ..registry import declare
from ..rules import BROADCAST_RANK, broadcast_result, check_rank, f32


def broadcast_shape(shapes, **_):
    return broadcast_result(shapes[:2])


def same_shape(shapes, **_):
    check_rank("data", shapes[0], 0, BROADCAST_RANK)  # the kernels walk the data flat
    return tuple(shapes[0])


# The scalar functions of the binary ops, as kernels/elementwise.py's binary kernel computes
# them (float32 operands): what fused groups of them run (simaccel/fusion.py).
def add(lhs, rhs):
    return lhs + rhs


def subtract(lhs, rhs):
    return lhs - rhs


def multiply(lhs, rhs):
    return lhs * rhs


def divide(lhs, rhs):
    return lhs / rhs


def power(lhs, rhs):
    return lhs ** rhs


for _name, _fn, _scalar in (("add", np.add, add), ("subtract", np.subtract, subtract),
                            ("multiply", np.multiply, multiply), ("divide", np.divide, divide),
                            ("power", np.power, power)):
    declare(OpFamily(
        name=f"simaccel.{_name}",
        inputs=("lhs", "rhs"),
        pattern=relax_op(f"relax.{_name}", "lhs", "rhs"),
        infer=broadcast_shape,
        reference=lambda lhs, rhs, *, operation, _fn=_fn: _fn(f32(lhs), f32(rhs)),
        kernel="simaccel.kernels.elementwise:launch_binary",
        elementwise=_scalar,
        fixed={"operation": _name},
        doc=f"{_name} with numpy broadcasting, rank <= 6 (at most 4 broadcast dims once merged)",
    ))


def clip_from_relax(match):
    low, high = float(match.values["min"]), float(match.values["max"])
    if math.isnan(low) or math.isnan(high):
        raise Reject(f"clip bounds ({low}, {high}) include NaN")
    return {"min": _bound_value(low), "max": _bound_value(high)}


def _bound_value(value: float):
    """What a Program holds for a clip bound (`attrs.bound`): the number, or "inf" / "-inf"."""
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def clip_scalar(data, min, max):
    """clip of one float32 value, as kernels/elementwise.py's clip kernel computes it."""
    c = data if data < max else max
    return c if c > min else min


def clip(data, *, min, max):
    """TVM's clip, max(min(x, max), min) as selects: NaN gives `max` (so does TVM, CPU and CUDA)."""
    x = f32(data)
    x = np.where(x < np.float32(max), x, np.float32(max))
    return np.where(x > np.float32(min), x, np.float32(min))


declare(OpFamily(
    name="simaccel.clip",
    inputs=("data",),
    pattern=relax_op("relax.clip", "data", relax_value("min"), relax_value("max")),
    attrs={"min": kinds.bound, "max": kinds.bound},
    from_relax=clip_from_relax,
    infer=same_shape,
    reference=clip,
    kernel="simaccel.kernels.elementwise:launch_clip",
    elementwise=clip_scalar,
    doc="clip to [min, max] (ReLU6 is clip(0, 6)), elementwise",
))


def infer_broadcast_to(shapes, *, shape):
    shape = tuple(shape)
    if broadcast_shape([shapes[0], shape]) != shape:
        raise ShapeError(f"data {tuple(shapes[0])} does not broadcast to {shape}")
    return shape


declare(OpFamily(
    name="simaccel.broadcast_to",
    inputs=("data",),
    pattern=relax_op("relax.broadcast_to", "data", relax_value("shape")),
    attrs={"shape": kinds.shape},
    from_relax=lambda match: {"shape": list(match.values["shape"])},
    infer=infer_broadcast_to,
    reference=lambda data, *, shape: np.broadcast_to(data, tuple(shape)),
    kernel="simaccel.kernels.elementwise:launch_broadcast_to",
    elementwise=lambda data: data,
    doc="broadcast_to a shape (numpy rules), rank <= 6 (at most 4 broadcast dims once merged)",
))

for _name, (_relax, _) in ACTIVATIONS.items():
    declare(OpFamily(
        name=f"simaccel.{_name}",
        inputs=("data",),
        pattern=relax_op(_relax, "data"),
        infer=same_shape,
        reference=lambda data, *, activation: activate(f32(data), activation),
        kernel="simaccel.kernels.elementwise:launch_activation",
        elementwise=f"simaccel.kernels.activation:scalar_{_name}",
        fixed={"activation": _name},
        doc=f"{_name}, elementwise",
    ))
