"""Integer families: ``simaccel.integer_add``, ``integer_subtract``, ``integer_multiply``
(numpy broadcasting, as simaccel.ops.rules.broadcast_result allows) and ``simaccel.integer_max`` (relax.max over neighbouring axes).

Where it sits: built-in declarations (simaccel.ops.declare) for the index arithmetic of
masks (``arange(T)[None, :] - arange(T)[:, None]``; an "any" over a mask cast to int8 is a
max). They match the same Relax ops as the float families (simaccel.add, simaccel.max),
which compute in float32 and so hold integers exactly only up to 2**24: integers get
families of their own, computed exactly in their dtype and wrapping as TVM's. The module's
name sorts before elementwise.py on purpose: families declared first are tried last among
patterns of one size, so a float op that stays on TVM reports the float family's reason,
not "it takes int64". Kernels: simaccel.kernels.masks.
"""

from __future__ import annotations

import numpy as np

from .. import attrs as kinds
from ..declare import OpFamily, relax_op
from ..registry import declare
from ..rules import INT_DTYPES
from .masks import KERNELS, MAX_RANK, broadcast


def _reduction():
    """reduction.py's rules, imported on first use: importing it here would declare the float
    max before integer_max (see above)."""
    from . import reduction

    return reduction


def reduction_from_relax(match):
    return _reduction().reduction_from_relax(match)


def infer_reduction(shapes, **attrs):
    return _reduction().infer_reduction(shapes, **attrs)

INTEGER_OPS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply}

for _name, _fn in INTEGER_OPS.items():
    declare(OpFamily(
        name=f"simaccel.integer_{_name}",
        inputs=("lhs", "rhs"),
        pattern=relax_op(f"relax.{_name}", "lhs", "rhs"),
        infer=broadcast,
        reference=lambda lhs, rhs, *, operation, _fn=_fn: _fn(np.asarray(lhs), np.asarray(rhs)),
        kernel=f"{KERNELS}:launch_integer_binary",
        fixed={"operation": _name},
        dtypes=INT_DTYPES,
        doc=f"{_name} of integers, exact (wrapping), numpy broadcasting, rank <= {MAX_RANK} (at most 4 broadcast dims once merged)",
    ))


def integer_max(data, *, axes, keepdims):
    x = np.asarray(data)
    if any(x.shape[a] == 0 for a in axes):  # TVM's initial value (the dtype's lowest)
        shape = infer_reduction([x.shape], axes=axes, keepdims=keepdims, reduction="max")
        return np.full(shape, np.iinfo(x.dtype).min, x.dtype)
    return np.max(x, axis=tuple(axes), keepdims=keepdims)


declare(OpFamily(
    name="simaccel.integer_max",
    inputs=("data",),
    pattern=relax_op("relax.max", "data"),
    attrs={"axes": kinds.axes, "keepdims": kinds.flag},
    from_relax=reduction_from_relax,
    infer=lambda shapes, **attrs: infer_reduction(shapes, reduction="max", **attrs),
    reference=integer_max,
    kernel=f"{KERNELS}:launch_integer_max",
    dtypes=INT_DTYPES,
    doc="max of integers over neighbouring axes (exact), rank <= 6",
))
