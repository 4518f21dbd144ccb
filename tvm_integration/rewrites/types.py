"""Reading Relax types: the static shape and dtype of a tensor expression, and the bounds a
function gives its size vars (every layer above uses them).

Symbolic dims are read by the backend (simaccel.tvm_integration.backend.sizes).
"""

from __future__ import annotations

from tvm import relax


def relax_dims(expr) -> list | None:
    """A tensor expression's dims as Relax writes them (IntImms or TIR size expressions), or None
    where its shape is unknown."""
    ty = expr.ty
    shape = ty.shape if isinstance(ty, relax.TensorType) else None
    return list(shape.values) if shape is not None and hasattr(shape, "values") else None


def axis_length(expr, axis: int) -> tuple[int | None, int | None]:
    """(axis made non-negative, its static length) of a Relax tensor expression of known shape;
    the length None where the axis is symbolic, (None, None) where the shape is unknown."""
    dims = relax_dims(expr)
    if dims is None or not -len(dims) <= axis < len(dims):
        return None, None
    axis %= len(dims)
    return axis, int(dims[axis].value) if hasattr(dims[axis], "value") else None


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


def size_bounds(func) -> dict[str, tuple[int, int | None]]:
    """name -> (lower, upper or None) of the size vars a Relax function bounds through its
    `tir_var_lower_bound` / `tir_var_upper_bound` attributes (what torch.export's Dim(max=...)
    and MLC-LLM give); a var with no lower bound gets 0."""
    attrs = func.attrs if func.attrs is not None else {}
    lower = {str(k): int(v) for k, v in (attrs.get("tir_var_lower_bound") or {}).items()}
    upper = {str(k): int(v) for k, v in (attrs.get("tir_var_upper_bound") or {}).items()}
    return {name: (max(lower.get(name, 0), 0), upper.get(name)) for name in set(lower) | set(upper)}
