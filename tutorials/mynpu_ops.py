"""mynpu: the ops of the tutorials' accelerator, declared as a user of simaccel declares them.

Two instructions simaccel's own ISA does not have (it leaves both to TVM):

* ``mynpu.leaky_relu``  replaces ``relax.nn.leakyrelu(data, alpha)``;
* ``mynpu.log_softmax`` replaces ``relax.nn.log_softmax(data, axis)``, over the last axis only.

Importing this module declares them; a process that never imports it (a library loaded in a
fresh process, ``simaccel fuzz``'s workers) finds it through ``$SIMACCEL_OPS``. The kernels are
named, not imported: ``mynpu_kernels.py`` beside this file is imported on the first launch, so
the ``ref`` engine (which runs only the references below) never needs Numba or the kernels.
Tutorial 1 (``01_first_accelerator.py``) walks through this file, tutorial 2 through the kernels.
"""

import numpy as np
from simaccel.ops import OpFamily, Reject, ShapeError, attrs, declare, relax_op


# -- mynpu.leaky_relu -------------------------------------------------------------------------------
def leaky_relu(data, *, alpha):  # the numpy reference: TVM's select(x > 0, x, x * alpha), in float32
    x = data.astype(np.float32)
    return np.where(x > 0, x, x * np.float32(alpha))


def leaky_relu_from_relax(match):  # Relax's attributes -> the op's
    return {"alpha": float(match.attrs["alpha"])}


def same_shape(shapes, **attrs):  # the shape rule of an elementwise op
    return shapes[0]


# -- mynpu.log_softmax ------------------------------------------------------------------------------
def log_softmax(data):  # the numpy reference: TVM's (x - max) - log(sum(exp(x - max))), in float32
    x = data.astype(np.float32)
    if x.size == 0:  # no rows, or empty rows: nothing to compute (np.max refuses an empty axis)
        return x
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def log_softmax_from_relax(match):  # the match stays on TVM unless it normalises over the last axis
    rank, axis = len(match.shapes["data"]), match.attrs["axis"]
    if rank == 0 or axis % rank != rank - 1:
        raise Reject(f"log_softmax over axis {axis} of a rank-{rank} tensor (mynpu normalises the last axis only)")
    return {}  # no attributes: the axis is always the last


def last_axis(shapes):  # the shape rule: ShapeError for inputs the op does not take
    if not shapes[0]:
        raise ShapeError(f"mynpu.log_softmax: data must have at least one axis, got shape {shapes[0]}")
    return shapes[0]


# -- the declarations -------------------------------------------------------------------------------
LEAKY_RELU = declare(OpFamily(
    name="mynpu.leaky_relu", inputs=("data",), pattern=relax_op("relax.nn.leakyrelu", "data"),
    attrs={"alpha": attrs.number}, from_relax=leaky_relu_from_relax, infer=same_shape, reference=leaky_relu,
    kernel="mynpu_kernels:launch_leaky_relu", doc="leaky ReLU, any slope",
    fuzz=lambda shape, draw: ({}, {"alpha": draw.choice([0.01, 0.1, 0.5])})))

LOG_SOFTMAX = declare(OpFamily(
    name="mynpu.log_softmax", inputs=("data",), pattern=relax_op("relax.nn.log_softmax", "data"),
    from_relax=log_softmax_from_relax, infer=last_axis, reference=log_softmax,
    kernel="mynpu_kernels:launch_log_softmax", doc="log_softmax over the last axis",
    fuzz=lambda shape, draw: ({}, {"axis": -1}) if len(shape) > 0 else None))
