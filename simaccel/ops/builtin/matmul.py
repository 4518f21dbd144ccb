"""Matmul families: ``simaccel.matmul`` and ``simaccel.dense``, each with ``_bias`` and
``_relu`` / ``_gelu`` variants.

`matmul` multiplies data (..., M, K) by a weight (K, N), or by a stack of them (..., K, N)
whose batch dims broadcast with data's (attention's Q @ K^T and A @ V); `dense` is the
torch-style linear form, weight (N, K) used as W^T (Relax: ``permute_dims`` of the weight,
then ``matmul``).
A bias adds one value per output column; accumulation is float32.

The result has the operands' dtype unless the optional attribute ``out_dtype`` says otherwise
(Relax matmul's own ``out_dtype``): float32 for float16 or bfloat16 operands (the float32
sums stored unrounded), and int32 for int8 operands, which an int8 matmul must give: int8
products summed exactly in int32, wrapping as int32 arithmetic does (the int8 GEMMs of
quantized models; kernels/matmul_int8.py). A fused bias or activation computes in float, so
those variants take float operands only.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import DtypeError, ShapeError
from ...shapes import broadcast_shapes
from .. import attrs as kinds
from ..declare import OpFamily, Reject, relax_op
from ..registry import declare
from ..rules import FLOAT_DTYPES, check_rank, f32

# operand dtype -> the output dtypes out_dtype may name besides the operands' own
WIDER = {"float16": ("float32",), "bfloat16": ("float32",), "int8": ("int32",)}


def infer_matmul(shapes, *, transpose_b, out_dtype=None):
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


def matmul(data, weight, *, transpose_b, out_dtype=None):
    """data @ weight (or weight^T) in float32, batch dims broadcast; int8 operands exactly (in
    int64: cast to the int32 output, that wraps as int32 sums do)."""
    if np.asarray(data).dtype == np.int8:
        d, w = np.asarray(data, np.int64), np.asarray(weight, np.int64)
        return np.matmul(d, w.T if transpose_b else w)
    w = f32(weight)
    return np.matmul(f32(data), w.T if transpose_b else w)


def matmul_out_dtype(name: str):
    """The family's out_dtype rule: `out_dtype` where given and taken (WIDER), else the operands' dtype."""
    def rule(dtypes, *, out_dtype=None, **_):
        given = dtypes[0]
        if out_dtype is None:
            if given == "int8":
                raise DtypeError(f"{name}: int8 operands need out_dtype int32 (their products are summed in int32)")
            return given
        takes = WIDER.get(given, ()) + (() if given == "int8" else (given,))  # int8 sums never fit int8
        if out_dtype not in takes:
            raise DtypeError(f"{name}: out_dtype {out_dtype} for {given} operands; it takes {' or '.join(takes)}")
        return out_dtype

    return rule


def matmul_from_relax(match):
    """Relax matmul's out_dtype, where it is not the operands' dtype (None, or their own: left out)."""
    out_dtype = match.nodes["root"].get("out_dtype")
    given = match.dtypes["data"]
    return {} if out_dtype in (None, "", "void") or str(out_dtype) == given else {"out_dtype": str(out_dtype)}


def matmul_flops(shapes, out_shape, **attrs):
    """A multiply-add per output element and step along K."""
    return 2 * math.prod(out_shape) * shapes[0][-1]


def dense_from_relax(match):
    axes = match.nodes["permute"]["axes"]
    if axes is not None and list(axes) != [1, 0]:
        raise Reject(f"permute_dims axes {list(axes)} is not a 2-D transpose")
    return matmul_from_relax(match)


for _name, _transpose_b in (("simaccel.matmul", False), ("simaccel.dense", True)):
    _weight = relax_op("relax.permute_dims", "weight", name="permute") if _transpose_b else "weight"
    declare(OpFamily(
        name=_name,
        inputs=("data", "weight"),
        pattern=relax_op("relax.matmul", "data", _weight),
        from_relax=dense_from_relax if _transpose_b else matmul_from_relax,
        infer=infer_matmul,
        reference=matmul,
        kernel="simaccel.kernels.matmul:launch_matmul",
        epilogue=True,
        flops=matmul_flops,
        attrs={"out_dtype": kinds.dtype},
        defaults={"out_dtype": None},
        dtypes=FLOAT_DTYPES + ("int8",),
        out_dtype=matmul_out_dtype(_name),
        fixed={"transpose_b": _transpose_b},
        bias="row",
        activations=("relu", "gelu"),
        doc="data (..., M, K) @ " + ("weight (N, K)^T" if _transpose_b else "weight (..., K, N), batch dims broadcast"),
    ))
