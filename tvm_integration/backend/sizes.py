"""Symbolic sizes of Relax models, read as simaccel's: dims as `Dim`s, size vars and their bounds.

Where it sits: in the backend, for partitioning (patterns, partition) and the codegen. TVM
writes a symbolic dim as a TIR expression over size vars (`s77 * s27`); `dim_of` reads it as a
`simaccel.shapes.Dim` over the vars' names, `tensor_dims` a tensor's shape, `value_dims` a
shape value's and `plain_vars` the vars a parameter's type defines (the bounds a function gives
its vars are `rewrites.types.size_bounds`, docs/symbolic-shapes.md).
"""

from __future__ import annotations

import functools
import operator

from tvm import relax, tirx

from ...shapes import Dim, SymbolicError, var_name

_DIM_OPERATIONS = {tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b, tirx.Mul: lambda a, b: a * b,
                   tirx.FloorDiv: lambda a, b: a // b, tirx.FloorMod: lambda a, b: a % b}


def dim_of(value):
    """A Relax shape dim (a TIR expression) as simaccel holds it: an int, or a `Dim` over size vars
    named as TVM names them. ValueError saying what it is where simaccel cannot represent it
    (`max`, `min`, a truncating division, a division by a symbolic size)."""
    if isinstance(value, int):
        return value
    if isinstance(value, tirx.IntImm):
        return int(value.value)
    if isinstance(value, tirx.Var):
        return Dim.var(value.name)
    operation = _DIM_OPERATIONS.get(type(value))
    if operation is None:
        raise ValueError(f"the size {value} ({type(value).__name__}), which simaccel cannot represent")
    try:
        return operation(dim_of(value.a), dim_of(value.b))
    except SymbolicError as e:
        raise ValueError(f"the size {value}: {e}") from None


def is_size_expression(value) -> bool:
    """Whether `value` is a TIR size var or +, -, *, //, % of sizes (what `dim_of` reads)."""
    if not isinstance(value, (tirx.Var, *_DIM_OPERATIONS)):
        return False
    try:
        return str(value.expr_ty()).startswith("int")
    except TypeError:  # a Relax var of a tensor: Relax's and TIR's vars are one class in TVM 0.27
        return False


def tensor_dims(expr) -> tuple[tuple | None, str | None, str | None]:
    """(shape, dtype, why) of a Relax tensor expression, each dim an int or a `Dim` (`dim_of`);
    shape None where it is unknown or a dim cannot be represented, `why` then saying so."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType):
        return None, None, "no tensor type"
    dtype = str(ty.dtype)
    shape = ty.shape
    if shape is None or not hasattr(shape, "values"):
        return None, dtype, "an unknown shape (rank or dims not given)"
    try:
        return tuple(dim_of(d) for d in shape.values), dtype, None
    except ValueError as e:
        return None, dtype, f"a dim that is {e}"


def value_dims(expr) -> list | None:
    """The dims of a shape value, a `ShapeExpr` or a var of a shape type (``R.Shape([b, s])``),
    as ints and `Dim`s; None where they are not given or one cannot be represented."""
    values = expr.values if isinstance(expr, relax.ShapeExpr) else getattr(expr.ty, "values", None)
    if values is None:
        return None
    try:
        return [dim_of(d) for d in values]
    except ValueError:
        return None


def plain_vars(var) -> set[str]:
    """The size vars a Relax parameter's type defines: those that are a whole dim of its tensor
    shape or shape value (`n` in (n, 4); not in (n + 1, 4) or (n * s, 4))."""
    dims = (value_dims(var) if isinstance(var.ty, relax.ShapeType) else tensor_dims(var)[0]) or ()
    return {var_name(d) for d in dims} - {None}


def prim_of(dim, size_vars: dict):
    """A dim (int or `Dim`) as a TIR expression over `size_vars` (name -> tirx.Var): `dim_of`'s
    inverse. KeyError where a var it reads is not in `size_vars`."""
    if not isinstance(dim, Dim):
        return tirx.IntImm("int64", int(dim))
    total = None
    for monomial, coefficient in dim.terms.items():
        factors = [_atom_prim(atom, size_vars) for atom in monomial]
        if coefficient != 1 or not factors:
            factors.insert(0, tirx.IntImm("int64", coefficient))
        term = functools.reduce(operator.mul, factors)
        total = term if total is None else total + term
    return total


def _atom_prim(atom, size_vars: dict):
    if atom.name is not None:
        return size_vars[atom.name]
    numerator, divisor = prim_of(atom.numerator, size_vars), tirx.IntImm("int64", atom.divisor)
    return tirx.floordiv(numerator, divisor) if atom.op == "//" else tirx.floormod(numerator, divisor)
