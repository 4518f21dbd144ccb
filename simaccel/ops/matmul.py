"""Matmul ops: ``simaccel.{matmul,dense}[_bias][_relu|_gelu]``.

`matmul` multiplies data (..., M, K) by a weight (K, N); `dense` is the torch-style linear
form, weight (N, K) used as W^T (Relax: ``permute_dims`` of the weight, then ``matmul``).
Bias (N,) or (1, N) and the activation are fused. Accumulation is float32.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from .common import activate, check_rank, f32, kernel, same_dtype
from .registry import register_op

ACTIVATIONS = ("none", "relu", "gelu")


def matmul_name(transpose_b: bool, bias: bool, activation: str) -> str:
    name = "simaccel.dense" if transpose_b else "simaccel.matmul"
    if bias:
        name += "_bias"
    if activation != "none":
        name += f"_{activation}"
    return name


def infer_matmul(shapes, dtypes, *, transpose_b, activation):
    op = matmul_name(transpose_b, len(shapes) == 3, activation)
    roles = ("data", "weight", "bias")[: len(shapes)]
    dtype = same_dtype(op, roles, dtypes)
    data, weight = shapes[0], shapes[1]
    check_rank(op, "data", data, 2, 4)
    check_rank(op, "weight", weight, 2, 2)
    k_w, n = (weight[1], weight[0]) if transpose_b else (weight[0], weight[1])
    if data[-1] != k_w:
        raise ShapeError(
            f"{op}: reduction sizes differ: data {tuple(data)} has K={data[-1]}, "
            f"weight {tuple(weight)} has K={k_w}"
        )
    out = tuple(data[:-1]) + (n,)
    if len(shapes) == 3 and not is_row_bias(shapes[2], len(out), n):
        raise ShapeError(
            f"{op}: bias {tuple(shapes[2])} is not one value per output column: numpy broadcasting "
            f"adds it to every row of the {out} result only as ({n},), (1, {n}), ..."
        )
    return out, dtype


def is_row_bias(shape, rank: int, columns: int) -> bool:
    """Whether adding `shape` to a rank-`rank` (..., N) result (numpy broadcasting) adds one value per column."""
    shape = tuple(shape)
    return 1 <= len(shape) <= rank and all(d == 1 for d in shape[:-1]) and shape[-1] == columns


def matmul(data, weight, bias=None, *, transpose_b, activation):
    """Numpy reference: act(data @ weight (+ bias)) in float32, cast to data's dtype."""
    w = f32(weight)
    y = f32(data) @ (w.T if transpose_b else w)
    if bias is not None:
        y = y + f32(bias).reshape(-1)
    return activate(y, activation).astype(np.asarray(data).dtype)


for _transpose_b in (False, True):
    for _bias in (False, True):
        for _activation in ACTIVATIONS:
            register_op(
                matmul_name(_transpose_b, _bias, _activation),
                inputs=("data", "weight", "bias") if _bias else ("data", "weight"),
                infer=infer_matmul,
                kernel=kernel("matmul", "launch_matmul"),
                fixed={"transpose_b": _transpose_b, "activation": _activation},
                reference=matmul,
            )
