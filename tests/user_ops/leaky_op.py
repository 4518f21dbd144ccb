"""max(x, slope * x) with a scalar ``R.const`` slope: a user op whose constraint reads a constant.

It is a leaky ReLU only for slopes in (0, 1] (with slope 0 it is a ReLU, and TVM folds
0 * x to 0, so NaN inputs give 0 there), so a match is offloaded only there; the slope
becomes the op's attribute. Used by tests/test_user_ops.py through $SIMACCEL_OPS.
"""
import math

import numpy as np
from numba import cuda, float32
from simaccel.ops import OpFamily, Reject, attrs, declare, relax_op, relax_value


def leaky(data, *, slope):  # the numpy reference, in float32
    x = data.astype(np.float32)
    return np.maximum(x, x * np.float32(slope))


def leaky_kernel(out, x, n, slope):  # one thread per element, flat views
    i = cuda.grid(1)
    if i < n:
        v = float32(x[i])
        out[i] = max(v, v * float32(slope))


def launch(target, out, data, *, slope):
    n = math.prod(tuple(data.shape))
    if n:
        target.launch(leaky_kernel, (n + 127) // 128, 128, target.reshape(out, (n,)), target.reshape(data, (n,)), n, slope)
    return int(n > 0)


def from_relax(match):
    slope = match.values["slope"]
    if not 0 < slope <= 1:
        raise Reject(f"max(x, {slope} * x) is a leaky ReLU only for a slope in (0, 1]")
    return {"slope": float(slope)}


def fuzz(shape, draw):  # mostly slopes it takes; now and then one it keeps on TVM
    return {}, {"slope": np.array(draw.choice((0.1, 0.25, 0.5, 1.0, 1.5, -0.5)))}


declare(OpFamily(
    name="myaccel.leaky", inputs=("data",),
    pattern=relax_op("relax.maximum", "data", relax_op("relax.multiply", "data", relax_value("slope"))),
    attrs={"slope": attrs.number}, from_relax=from_relax, infer=lambda shapes, *, slope: shapes[0],
    reference=leaky, kernel=launch, fuzz=fuzz, doc="max(x, slope * x), slope a scalar constant in (0, 1]"))
