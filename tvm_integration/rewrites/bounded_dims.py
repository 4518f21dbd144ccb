"""Dims that a function's size bounds decide: ``min(1, s)`` is 1 where s >= 1.

Where it sits: `prepare_for_inference` (inference.py) runs it first on each Relax function.

TVM types a slice of a symbolic dim with min and max expressions (``x[:, :1]`` of a (b, s)
tensor is (b, min(1, s)); ``x[:, 1:s + 1]`` of a (b, s + 1) one is (b, max(s, 0)) after its
own simplification at best). Two such results that are equal within the function's bounds are
not equal to TVM without them, so an op reading both is typed by rank only, and so is
everything after it: nothing can read those shapes, and TVM alone cannot build a scan of such
a tensor ("non-symbolic shape is not supported"). transformers' mask code over a symbolic
sequence is made of these (its packed-sequence check slices, concatenates and subtracts the
positions, then takes a cumsum).

Each binding whose type has a min or max that the bounds (``tir_var_lower_bound`` /
``tir_var_upper_bound``, as torch.export's Dim(min=..., max=...) gives them) remove, by TVM's
own arithmetic analyzer, is followed by a ``match_cast`` to the simplified dims, and its
readers read the cast: the same tensor, its shape checked by TVM's VM at every call (a call
outside the bounds is an error there, never a wrong shape).
"""

from __future__ import annotations

import tvm_ffi
from tvm import relax, sym, tirx

from .types import size_bounds


def bound_dims(func: relax.Function) -> tuple[relax.Function, int]:
    """`func` with a match_cast after each binding whose min/max dims its bounds decide, and how
    many it added."""
    bounds = size_bounds(func)
    if not bounds or not any(_min_max_count(ty) for ty in _var_types(func)):
        return func, 0
    analyzer = sym.Analyzer()
    for var in relax.analysis.defined_symbolic_vars(func):
        lower, upper = bounds.get(var.name, (0, None))
        analyzer.update(var, sym.ConstIntBound(lower, sym.ConstIntBound.POS_INF if upper is None else upper))
    mutator = _CastBounded(analyzer)
    return mutator.visit_expr(func), mutator.count


def _var_types(func) -> list:
    found = []
    relax.analysis.post_order_visit(func, lambda e: found.append(e.ty) if isinstance(e, relax.Var) else None)
    return found


def _min_max_count(ty) -> int:
    """How many min and max expressions the dims of a tensor type hold."""
    if not isinstance(ty, relax.TensorType) or not hasattr(ty.shape, "values"):
        return 0
    return sum(_min_max_in(dim) for dim in ty.shape.values)


def _min_max_in(expr) -> int:
    operands = (expr.a, expr.b) if hasattr(expr, "a") and hasattr(expr, "b") else ()
    return isinstance(expr, (tirx.Min, tirx.Max)) + sum(_min_max_in(e) for e in operands)


@relax.expr_functor.mutator
class _CastBounded(relax.PyExprMutator):
    def __init__(self, analyzer):
        super().__init__()
        self.analyzer, self.count = analyzer, 0

    def visit_var_binding_(self, binding):
        value = self.visit_expr(binding.value)
        var = binding.var
        if not value.same_as(binding.value) and not tvm_ffi.structural_equal(var.ty, value.ty):  # inputs cast above
            var = type(binding.var)(binding.var.name, value.ty)
            self.set_var_remap(binding.var, var)
        self.builder_.emit_normalized(relax.VarBinding(var, value))
        dims = self._bounded(var.ty)
        if dims is None:
            return
        cast = type(binding.var)(binding.var.name, relax.TensorType(dims, var.ty.dtype))
        self.builder_.emit_normalized(relax.MatchCast(cast, var, cast.ty))
        self.set_var_remap(binding.var, cast)
        self.count += 1

    def _bounded(self, ty):
        """The dims of `ty` with each min/max the bounds decide simplified away; None if none is.
        A dim that would become a bare size var (``min(8, s)`` where s <= 8) is left as it is:
        TVM 0.27's build of a match_cast to it recurses without end (KillAfterLastUse, a
        segfault)."""
        before = _min_max_count(ty)
        if not before:
            return None
        dims = [d if isinstance(new, tirx.Var) else new for d, new in
                ((d, self.analyzer.simplify(d)) for d in ty.shape.values)]
        return dims if _min_max_count(relax.TensorType(dims, ty.dtype)) < before else None
