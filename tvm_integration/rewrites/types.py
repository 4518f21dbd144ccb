"""Reading Relax types: the static shape and dtype of a tensor expression (every layer above uses it).

Symbolic dims are read by the backend (simaccel.tvm_integration.backend.sizes).
"""

from __future__ import annotations

from tvm import relax


def axis_length(expr, axis: int) -> tuple[int | None, int | None]:
    """(axis made non-negative, its static length) of a Relax tensor expression of known rank;
    the length None where the axis is symbolic, (None, None) where the rank is unknown."""
    ty = expr.ty
    rank = getattr(ty, "ndim", -1) if isinstance(ty, relax.TensorType) else -1
    if rank is None or rank < 0 or not -rank <= axis < rank:
        return None, None
    axis %= rank
    shape = ty.shape
    dim = shape.values[axis] if shape is not None and hasattr(shape, "values") else None
    return axis, int(dim.value) if hasattr(dim, "value") else None


def tensor_info(expr) -> tuple[tuple[int, ...] | None, str | None]:
    """(static shape or None, dtype or None) of a Relax tensor expression."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType):
        return None, None
    dtype = str(ty.dtype)
    shape = ty.shape
    if shape is None or not hasattr(shape, "values"):
        return None, dtype
    dims = []
    for dim in shape.values:
        if not hasattr(dim, "value"):
            return None, dtype
        dims.append(int(dim.value))
    return tuple(dims), dtype

