"""Helpers shared by the op definitions: shape rules, float32 math, lazy kernel lookup."""

from __future__ import annotations

import importlib
import math

import numpy as np

from ..errors import DtypeError, ShapeError
from ..kernels.window import output_hw

FLOAT_DTYPES = ("float32", "float16")


def same_dtype(op: str, roles, dtypes) -> str:
    """The one dtype shared by all inputs; DtypeError naming the op and roles otherwise."""
    first = dtypes[0]
    for role, dtype in zip(roles, dtypes):
        if dtype not in FLOAT_DTYPES:
            raise DtypeError(f"{op}: {role} has dtype {dtype}; simaccel ops take float32 or float16")
        if dtype != first:
            raise DtypeError(
                f"{op}: inputs must share one dtype, got "
                + ", ".join(f"{r}={d}" for r, d in zip(roles, dtypes))
            )
    return first


def check_rank(op: str, role: str, shape, low: int, high: int) -> None:
    if not low <= len(shape) <= high:
        want = f"rank {low}" if low == high else f"rank {low}..{high}"
        raise ShapeError(f"{op}: {role} must have {want}, got shape {tuple(shape)}")


def erf(x: np.ndarray) -> np.ndarray:
    """Elementwise erf (numpy has none): Abramowitz-Stegun 7.1.26, max abs error 1.5e-7."""
    x = np.asarray(x, dtype=np.float64)
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def activate(x: np.ndarray, activation: str) -> np.ndarray:
    """Apply "none", "relu" or "gelu" (erf form) to a float32 array.

    relu is TVM's max(x, 0), which maps NaN to 0 (a select on x > 0, not numpy's maximum).
    """
    if activation == "none":
        return x
    if activation == "relu":
        return np.where(x > 0, x, np.float32(0)).astype(np.float32)
    if activation == "gelu":
        return (0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))).astype(np.float32)
    raise ValueError(f"unknown activation {activation!r}")


def f32(array) -> np.ndarray:
    return np.asarray(array, dtype=np.float32)


def kernel(module: str, name: str):
    """A launcher that imports `simaccel.kernels.<module>` on first use.

    The "ref" engine never launches kernels, so it never pays for importing Numba.
    """
    cache = []

    def launch(*args, **kwargs):
        if not cache:
            cache.append(getattr(importlib.import_module(f"simaccel.kernels.{module}"), name))
        return cache[0](*args, **kwargs)

    launch.__name__ = name
    launch.__qualname__ = f"kernels.{module}.{name}"
    return launch


def window_taps(x: np.ndarray, pad_value, window, strides, padding, dilation):
    """For each tap (i, j) of a 2-D window over NCHW `x`: ((i, j), the strided slice it reads).

    The slice has the output's spatial shape; `x` is padded with `pad_value` first.
    """
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = window, strides, padding, dilation
    oh, ow = output_hw(x.shape[2:], window, strides, padding, dilation)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=pad_value)
    for i in range(kh):
        for j in range(kw):
            yield (i, j), xp[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
