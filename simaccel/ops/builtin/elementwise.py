"""Elementwise families: ``simaccel.add`` and ``simaccel.multiply`` (numpy broadcasting,
rank <= 4) and one op per ISA activation (``simaccel.relu``, ``simaccel.gelu``). Computed
in float32, stored in the input dtype."""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..activation import ACTIVATIONS, activate
from ..declare import OpFamily, relax_op
from ..registry import declare
from ..rules import check_rank, f32


def broadcast_shape(shapes):
    try:
        shape = np.broadcast_shapes(tuple(shapes[0]), tuple(shapes[1]))
    except ValueError:
        raise ShapeError(f"shapes {tuple(shapes[0])} and {tuple(shapes[1])} do not broadcast") from None
    check_rank("result", shape, 0, 4)
    return tuple(shape)


def same_shape(shapes, **_):
    check_rank("data", shapes[0], 0, 4)
    return tuple(shapes[0])


for _name, _fn in (("add", np.add), ("multiply", np.multiply)):
    declare(OpFamily(
        name=f"simaccel.{_name}",
        inputs=("lhs", "rhs"),
        pattern=relax_op(f"relax.{_name}", "lhs", "rhs"),
        infer=broadcast_shape,
        reference=lambda lhs, rhs, _fn=_fn: _fn(f32(lhs), f32(rhs)),
        kernel=f"simaccel.kernels.elementwise:launch_{_name}",
        doc=f"{_name} with numpy broadcasting, rank <= 4",
    ))

for _name, (_relax, _) in ACTIVATIONS.items():
    declare(OpFamily(
        name=f"simaccel.{_name}",
        inputs=("data",),
        pattern=relax_op(_relax, "data"),
        infer=same_shape,
        reference=lambda data, *, activation: activate(f32(data), activation),
        kernel="simaccel.kernels.elementwise:launch_activation",
        fixed={"activation": _name},
        doc=f"{_name}, elementwise",
    ))
