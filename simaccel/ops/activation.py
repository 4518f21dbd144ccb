"""The ISA's activations (elementwise functions of one tensor): what a fused
``*_<activation>`` variant and a standalone op compute, and which Relax op each one replaces.

Kernels implement them under the same names (simaccel.kernels.activation); a test keeps the
two tables equal.
"""

from __future__ import annotations

import math

import numpy as np


def erf(x: np.ndarray) -> np.ndarray:
    """Elementwise erf (numpy has none): Abramowitz-Stegun 7.1.26, max abs error 1.5e-7."""
    x = np.asarray(x, dtype=np.float64)
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _relu(x):
    # TVM's relu is max(x, 0) as a select on x > 0: NaN gives 0 (numpy's maximum keeps NaN).
    return np.where(x > 0, x, np.float32(0))


def _gelu(x):
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _gelu_tanh(x):
    # GPT-2's approximation (torch's approximate="tanh", TVM's nn.gelu_tanh).
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        inner = np.float32(math.sqrt(2.0 / math.pi)) * (x + np.float32(0.044715) * x * x * x)
        return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))


def _sigmoid(x):
    x = np.asarray(x, dtype=np.float32)
    e = np.exp(-np.abs(x))  # never overflows; sigmoid(-|x|) = e / (1 + e)
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


# name -> (the Relax op it replaces, float32 numpy function)
ACTIVATIONS = {
    "relu": ("relax.nn.relu", _relu),
    "gelu": ("relax.nn.gelu", _gelu),
    "gelu_tanh": ("relax.nn.gelu_tanh", _gelu_tanh),
    "sigmoid": ("relax.sigmoid", _sigmoid),
    "tanh": ("relax.tanh", np.tanh),
    "silu": ("relax.nn.silu", lambda x: x * _sigmoid(x)),
    "exp": ("relax.exp", np.exp),
    "sqrt": ("relax.sqrt", np.sqrt),
    "rsqrt": ("relax.rsqrt", lambda x: 1 / np.sqrt(x)),
    "negative": ("relax.negative", np.negative),  # IEEE negation: -0.0 for 0.0, as TVM's
    "sin": ("relax.sin", np.sin),  # NaN for +-inf, as TVM's
    "cos": ("relax.cos", np.cos),
}


def activate(x: np.ndarray, activation: str) -> np.ndarray:
    """`activation` ("none" or a key of ACTIVATIONS) applied to a float32 array."""
    if activation == "none":
        return x
    return np.asarray(ACTIVATIONS[activation][1](x), dtype=np.float32)
