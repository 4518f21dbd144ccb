"""Tuple-valued calls, as the single tensors simaccel's ops produce.

Where it sits: an inference rewrite (`prepare_for_inference`), below the backend.

* ``relax.split(x, sections or indices, axis)[i]`` becomes ``strided_slice(x, [axis],
  [begin_i], [end_i], [1])``, the same elements. A Program op has one output and the
  codegen maps one composite call to one tensor; a split offloaded as one op would need
  ops with several outputs through the Program format, the runtime, launch plans and native
  regions. As slices, each piece is one exact gather (the bytes a split kernel would move)
  and can be a region's own intermediate.
* a field of a tuple written out (``(a, b)[0]``: torch's max_pool2d_with_indices imports as
  the values and a zeros_like that nothing reads) is that field, by TVM's
  CanonicalizeBindings; the unused rest is dropped.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, is_tuple_get_item, rewrite_call, wildcard

from .types import axis_length


def split_bounds(length: int, indices_or_sections) -> list[tuple[int, int]]:
    """(begin, end) of each piece of Relax's split of `length` elements: `indices_or_sections`
    an int n (pieces of ceil(length / n), the last ones shorter or empty) or a list of split
    points (clamped to 0..length; a piece whose end is before its begin is empty)."""
    if isinstance(indices_or_sections, int):
        size = -(-length // indices_or_sections)
        points = [min(size * k, length) for k in range(1, indices_or_sections)]
    else:
        points = [min(max(int(p), 0), length) for p in indices_or_sections]
    edges = [0, *points, length]
    return [(edges[k], max(edges[k], edges[k + 1])) for k in range(len(edges) - 1)]


def split_rewrites(counts: dict) -> list:
    data = wildcard()
    split = is_op("relax.split")(data)

    def piece(expr, matches):
        call = matches[split]
        axis, length = axis_length(matches[data], int(call.attrs.axis))
        if length is None:  # the split axis is symbolic or unknown (other axes may be symbolic)
            return expr
        sections = call.attrs.indices_or_sections
        sections = int(sections.value) if hasattr(sections, "value") else [int(p.value if hasattr(p, "value") else p)
                                                                          for p in sections]
        bounds = split_bounds(length, sections)
        index = matches[get].index  # `expr` may be the var the get-item is bound to
        if not 0 <= index < len(bounds):
            return expr
        begin, end = bounds[index]
        counts["split"] += 1
        return relax.op.strided_slice(matches[data], [axis], [begin], [end], [1])

    get = is_tuple_get_item(split)
    return [(get, piece)]


def forward_tuple_fields(func: relax.Function) -> relax.Function:
    """`func` with every get-item of a tuple written out replaced by the field (TVM's
    CanonicalizeBindings), where it has one; else `func` itself."""
    found = []

    def visit(expr):
        if isinstance(expr, relax.TupleGetItem):
            value = expr.tuple_value
            if isinstance(value, relax.Tuple):
                found.append(expr)

    relax.analysis.post_order_visit(func.body, visit)
    bound = relax.analysis.get_var2val(func)
    if not found and not any(isinstance(v, relax.TupleGetItem) and isinstance(bound.get(v.tuple_value), relax.Tuple)
                             for v in bound.values()):
        return func
    mod = relax.transform.CanonicalizeBindings()(tvm.IRModule({"f": func}))
    return mod["f"]
