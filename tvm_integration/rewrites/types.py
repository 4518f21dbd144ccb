"""Reading Relax types: the static shape and dtype of a tensor expression (every layer above uses it).

Symbolic dims are read by the backend (simaccel.tvm_integration.backend.sizes).
"""

from __future__ import annotations

from tvm import relax


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

