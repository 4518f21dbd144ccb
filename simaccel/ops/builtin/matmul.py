"""Matmul families: ``simaccel.matmul`` and ``simaccel.dense``, each with ``_bias`` and
``_relu`` / ``_gelu`` variants.

`matmul` multiplies data (..., M, K) by a weight (K, N), or by a stack of them (..., K, N)
whose batch dims broadcast with data's (attention's Q @ K^T and A @ V); `dense` is the
torch-style linear form, weight (N, K) used as W^T (Relax: ``permute_dims`` of the weight,
then ``matmul``).
A bias adds one value per output column; accumulation is float32.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ...shapes import broadcast_shapes
from ..declare import OpFamily, Reject, relax_op
from ..registry import declare
from ..rules import check_rank, f32


def infer_matmul(shapes, *, transpose_b):
    data, weight = (tuple(s) for s in shapes)
    check_rank("data", data, 2, 4)
    check_rank("weight", weight, 2, 2 if transpose_b else 4)
    k_w, n = (weight[1], weight[0]) if transpose_b else (weight[-2], weight[-1])
    if data[-1] != k_w:
        raise ShapeError(f"reduction sizes differ: data {data} has K={data[-1]}, weight {weight} has K={k_w}")
    if len(weight) == 2:
        return data[:-1] + (n,)
    try:
        batch = broadcast_shapes(data[:-2], weight[:-2])
    except ValueError:
        raise ShapeError(f"batch dims of data {data} and weight {weight} do not broadcast") from None
    return tuple(batch) + (data[-2], n)


def matmul(data, weight, *, transpose_b):
    """data @ weight (or weight^T) in float32, batch dims broadcast."""
    w = f32(weight)
    return np.matmul(f32(data), w.T if transpose_b else w)


def matmul_flops(shapes, out_shape, **attrs):
    """A multiply-add per output element and step along K."""
    return 2 * math.prod(out_shape) * shapes[0][-1]


def dense_from_relax(match):
    axes = match.nodes["permute"]["axes"]
    if axes is not None and list(axes) != [1, 0]:
        raise Reject(f"permute_dims axes {list(axes)} is not a 2-D transpose")
    return {}


for _name, _transpose_b in (("simaccel.matmul", False), ("simaccel.dense", True)):
    _weight = relax_op("relax.permute_dims", "weight", name="permute") if _transpose_b else "weight"
    declare(OpFamily(
        name=_name,
        inputs=("data", "weight"),
        pattern=relax_op("relax.matmul", "data", _weight),
        from_relax=dense_from_relax if _transpose_b else None,
        infer=infer_matmul,
        reference=matmul,
        kernel="simaccel.kernels.matmul:launch_matmul",
        epilogue=True,
        flops=matmul_flops,
        fixed={"transpose_b": _transpose_b},
        bias="row",
        activations=("relu", "gelu"),
        doc="data (..., M, K) @ " + ("weight (N, K)^T" if _transpose_b else "weight (..., K, N), batch dims broadcast"),
    ))
