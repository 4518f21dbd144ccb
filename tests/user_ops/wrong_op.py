"""A planted defect: ``wrongaccel.abs`` replaces ``relax.abs`` but is off by 0.25 in one element.

Its numpy reference and its kernel are wrong by the same amount in the same element (flat
index `WRONG_INDEX`, or the last one of a smaller tensor), so the `ref` and `sim` engines both
give the wrong value and both agree with the op's own reference; only TVM alone, which
computes the Relax op, shows the difference. Used by tests/test_bisect.py, which must find it.
"""
import math

import numpy as np
from numba import cuda, float32
from simaccel.ops import OpFamily, declare, relax_op

WRONG_INDEX = 5
ERROR = 0.25


def wrong_element(n: int) -> int:
    return min(WRONG_INDEX, n - 1)


def wrong_abs(data):  # the numpy reference, in float32: |x|, plus ERROR in one element
    out = np.abs(data.astype(np.float32))
    if out.size:
        out.reshape(-1)[wrong_element(out.size)] += np.float32(ERROR)
    return out


def wrong_abs_kernel(out, x, n, bad):  # one thread per element, flat views
    i = cuda.grid(1)
    if i < n:
        v = abs(float32(x[i]))
        if i == bad:
            v += float32(ERROR)
        out[i] = v


def launch(target, out, data):
    n = math.prod(tuple(data.shape))
    if n:
        target.launch(wrong_abs_kernel, (n + 127) // 128, 128, target.reshape(out, (n,)), target.reshape(data, (n,)), n,
                      wrong_element(n))
    return int(n > 0)


declare(OpFamily(
    name="wrongaccel.abs", inputs=("data",), pattern=relax_op("relax.abs", "data"),
    infer=lambda shapes: shapes[0], reference=wrong_abs, kernel=launch,
    doc="|x|, wrong by 0.25 in one element (a planted defect for bisection tests)"))
