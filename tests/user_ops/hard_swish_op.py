"""Hard swish, x * clip(x + 3, 0, 6) / 6, as a user op written from docs/adding-an-op.md alone.

Its pattern holds four values: the scalar constants 3 and 6 (``R.const``) and clip's bounds
(numbers); a match whose values are not 3, 0, 6 and 6 is some other function and stays on TVM.
Used by tests/test_user_ops.py through $SIMACCEL_OPS.
"""
import math

import numpy as np
from numba import cuda, float32
from simaccel.ops import OpFamily, Reject, declare, relax_op, relax_value

PATTERN = relax_op(
    "relax.divide",
    relax_op("relax.multiply", "data",
             relax_op("relax.clip", relax_op("relax.add", "data", relax_value("three")),
                      relax_value("low"), relax_value("high"), name="clip")),
    relax_value("six"))
EXPECTED = {"three": 3, "low": 0, "high": 6, "six": 6}


def hard_swish(data):  # the numpy reference, in float32
    x = data.astype(np.float32)
    return x * np.clip(x + np.float32(3), np.float32(0), np.float32(6)) / np.float32(6)


def hard_swish_kernel(out, x, n):  # one thread per element, flat views
    i = cuda.grid(1)
    if i < n:
        v = float32(x[i])
        out[i] = v * min(max(v + float32(3.0), float32(0.0)), float32(6.0)) / float32(6.0)


def launch(target, out, data):
    n = math.prod(tuple(data.shape))
    if n:
        target.launch(hard_swish_kernel, (n + 127) // 128, 128, target.reshape(out, (n,)), target.reshape(data, (n,)), n)
    return int(n > 0)


def from_relax(match):
    wrong = {k: match.values[k] for k, v in EXPECTED.items() if match.values[k] != v}
    if wrong:
        raise Reject(f"not hard swish: {wrong} (hard swish is x * clip(x + 3, 0, 6) / 6)")
    return {}


def fuzz(shape, draw):  # clip's bounds are the inner call's values, 3 and 6 scalar constants
    return {}, {"three": np.array(3.0), "low": 0.0, "high": 6.0, "six": np.array(6.0)}


declare(OpFamily(
    name="myaccel.hard_swish", inputs=("data",), pattern=PATTERN, from_relax=from_relax,
    infer=lambda shapes: shapes[0], reference=hard_swish, kernel=launch, fuzz=fuzz,
    doc="x * clip(x + 3, 0, 6) / 6"))
