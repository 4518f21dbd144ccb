"""Activation functions shared by simaccel's Numba CUDA kernels.

`apply_activation` is a device helper: `register_jitable` leaves it a plain Python function
(so the "sim" engine's simulated kernels call it directly) and also makes it callable from
`numba.cuda.jit` kernels (the "cuda" engine). Kernels in this package (matmul, conv2d and
elementwise, launched by the simaccel runtime's "sim"/"cuda" engines through the op
registry) take the integer code from `ACTIVATIONS` as a scalar argument; launchers look the
code up by the activation's name, which the ISA has already validated.
"""

from __future__ import annotations

import functools
import math

import numba
from numba.cuda.extending import register_jitable

# The kernels' code for each activation of the ISA (simaccel.ops.activation names the same ones).
ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2, "sigmoid": 3, "tanh": 4, "silu": 5, "exp": 6, "sqrt": 7, "rsqrt": 8,
               "gelu_tanh": 9, "negative": 10, "sin": 11, "cos": 12}

_INV_SQRT2 = 0.7071067811865476
_SQRT_2_OVER_PI = 0.7978845608028654


@register_jitable
def apply_activation(v, code):
    """Apply activation `code` (see ACTIVATIONS) to scalar `v`; returns float32.

    gelu is the exact erf form 0.5 * x * (1 + erf(x / sqrt(2))); gelu_tanh GPT-2's
    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))); silu is x * sigmoid(x).
    """
    x = numba.float32(v)
    if code == 1:
        # TVM's relu is max(x, 0): NaN gives 0 (so "x > 0", not "x < 0", picks x).
        if x > numba.float32(0.0):
            return x
        return numba.float32(0.0)
    if code == 2:
        e = numba.float32(math.erf(x * numba.float32(_INV_SQRT2)))
        return numba.float32(numba.float32(0.5) * x * (numba.float32(1.0) + e))
    if code == 3 or code == 5:
        s = _sigmoid(x)
        return s if code == 3 else numba.float32(x * s)
    if code == 4:
        return numba.float32(math.tanh(x))
    if code == 9:
        inner = numba.float32(_SQRT_2_OVER_PI) * (x + numba.float32(0.044715) * x * x * x)
        return numba.float32(numba.float32(0.5) * x * (numba.float32(1.0) + numba.float32(math.tanh(inner))))
    # exp and sqrt outside their float32 range are written out: the simulator runs Python's
    # math, which raises there, where the GPU gives inf and NaN.
    if code == 6:
        if x > numba.float32(89.0):
            return numba.float32(math.inf)
        return numba.float32(math.exp(x))
    if code == 7 or code == 8:
        r = numba.float32(math.nan) if x < numba.float32(0.0) else numba.float32(math.sqrt(x))
        return r if code == 7 else numba.float32(numba.float32(1.0) / r)
    if code == 10:
        return numba.float32(-x)  # -0.0 for 0.0 (a negation, not 0 - x)
    return x


# sin and cos: not in `apply_activation`, whose callers (matmul and conv kernels, the unary
# kernel) take the code as a run-time argument, so each would carry their argument reduction
# for large |x| and its local array (a stack frame: tests/test_aot.py's spill checks).
TRIG_CODES = (ACTIVATIONS["sin"], ACTIVATIONS["cos"])


@register_jitable
def apply_trig(v, code):
    """sin (code 11) or cos (12) of scalar `v` in float32; NaN for NaN and +-inf, as TVM's."""
    x = numba.float32(v)
    if math.isinf(x):  # written out: the simulator runs Python's math, which raises there
        return numba.float32(math.nan)
    if code == 11:
        return numba.float32(math.sin(x))
    return numba.float32(math.cos(x))


@register_jitable
def _sigmoid(x):
    """1 / (1 + exp(-x)) in float32, without overflow: exp of a non-positive number only."""
    one = numba.float32(1.0)
    if x >= numba.float32(0.0):
        return numba.float32(one / (one + numba.float32(math.exp(-x))))
    e = numba.float32(math.exp(x))  # NaN lands here too, and stays NaN
    return numba.float32(e / (one + e))


@functools.lru_cache(maxsize=None)
def scalar_function(code: int):
    """Activation `code` as a function of one value (what fused epilogues call), one per code."""

    if code in TRIG_CODES:
        @register_jitable
        def scalar(x):
            return apply_trig(x, code)
    else:
        @register_jitable
        def scalar(x):
            return apply_activation(x, code)

    return scalar


# scalar_relu, scalar_gelu, ...: the declarations' `elementwise` (simaccel/ops/builtin/elementwise.py)
for _name, _code in ACTIVATIONS.items():
    if _code:
        globals()[f"scalar_{_name}"] = scalar_function(_code)
