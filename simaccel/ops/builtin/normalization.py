"""Row-wise families over the last axis: ``simaccel.softmax``, ``simaccel.layer_norm`` and
``simaccel.rms_norm``."""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from .. import attrs as kinds
from ..declare import OpFamily, Reject, relax_op
from ..registry import declare
from ..rules import check_rank, f32


def _last_axis_only(match, axes, what: str) -> None:
    rank = len(match.shapes["data"])
    if [a % rank for a in axes] != [rank - 1]:
        raise Reject(f"{what} over {'axes' if len(axes) != 1 else 'axis'} {axes if len(axes) != 1 else axes[0]} "
                     "(only the last axis)")


def softmax_from_relax(match):
    _last_axis_only(match, [match.attrs["axis"]], "softmax")
    return {}


def infer_softmax(shapes):
    check_rank("data", shapes[0], 1, 4)
    return tuple(shapes[0])


def softmax(data):
    x = f32(data)
    e = np.exp(x - x.max(axis=-1, keepdims=True, initial=-np.inf))  # initial: rows may be empty
    return e / e.sum(axis=-1, keepdims=True)


def layer_norm_from_relax(match):
    a = match.attrs
    _last_axis_only(match, list(a["axes"]), "layer_norm")
    if not (a["center"] and a["scale"]):
        raise Reject("layer_norm without center or scale is not supported")
    return {"epsilon": float(a["epsilon"])}


def infer_layer_norm(shapes, *, epsilon, roles=("gamma", "beta")):
    check_rank("data", shapes[0], 1, 4)
    d = shapes[0][-1]
    for role, shape in zip(roles, shapes[1:]):
        if tuple(shape) != (d,):
            raise ShapeError(f"{role} must have shape ({d},) to match data {tuple(shapes[0])}, got {tuple(shape)}")
    return tuple(shapes[0])


def layer_norm(data, gamma, beta, *, epsilon):
    x = f32(data)
    if x.shape[-1] == 0:
        return x  # rows of no elements: nothing to normalise
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + np.float32(epsilon)) * f32(gamma) + f32(beta)


def rms_norm_from_relax(match):
    _last_axis_only(match, list(match.attrs["axes"]), "rms_norm")
    return {"epsilon": float(match.attrs["epsilon"])}


def rms_norm(data, weight, *, epsilon):
    """TVM's rms_norm (topi/nn/rms_norm.h), all in float32: x * rsqrt(sum(x * x) / D + eps) * weight
    (a row of inf gives 0 for its finite values and NaN for its infinities)."""
    x = f32(data)
    if x.shape[-1] == 0:
        return x  # rows of no elements: nothing to normalise
    square_mean = (x * x).sum(axis=-1, keepdims=True) / np.float32(x.shape[-1])
    return np.float32(1) / np.sqrt(square_mean + np.float32(epsilon)) * x * f32(weight)


declare(OpFamily(
    name="simaccel.softmax",
    inputs=("data",),
    pattern=relax_op("relax.nn.softmax", "data"),
    from_relax=softmax_from_relax,
    infer=infer_softmax,
    reference=softmax,
    kernel="simaccel.kernels.normalization:launch_softmax",
    doc="softmax over the last axis",
))

declare(OpFamily(
    name="simaccel.layer_norm",
    inputs=("data", "gamma", "beta"),
    pattern=relax_op("relax.nn.layer_norm", "data", "gamma", "beta"),
    attrs={"epsilon": kinds.positive_float},
    from_relax=layer_norm_from_relax,
    infer=infer_layer_norm,
    reference=layer_norm,
    kernel="simaccel.kernels.normalization:launch_layer_norm",
    doc="layer normalisation over the last axis, with gamma and beta",
))

declare(OpFamily(
    name="simaccel.rms_norm",
    inputs=("data", "weight"),
    pattern=relax_op("relax.nn.rms_norm", "data", "weight"),
    attrs={"epsilon": kinds.positive_float},
    from_relax=rms_norm_from_relax,
    infer=lambda shapes, *, epsilon: infer_layer_norm(shapes, epsilon=epsilon, roles=("weight",)),
    reference=rms_norm,
    kernel="simaccel.kernels.normalization:launch_rms_norm",
    doc="RMS normalisation over the last axis (LLaMA's), with a weight",
))
