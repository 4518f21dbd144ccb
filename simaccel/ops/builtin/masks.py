"""Mask and index families: what causal and padding masks are made of.

Where it sits: built-in declarations (simaccel.ops.declare), beside the float elementwise
families, for the integer and bool arithmetic that attention masks compile to
(``torch.ones(T, T).tril()`` exports as arange / expand_dims / subtract / less_equal,
``arange(T) < lengths[:, None]`` as less, ``masked_fill`` as where):

* comparisons ``simaccel.less``, ``less_equal``, ``greater``, ``greater_equal``, ``equal``,
  ``not_equal``: two inputs of one dtype (float, integer or bool), numpy broadcasting, a
  bool result (`out_dtype`);
* ``simaccel.logical_not``, ``logical_and``, ``logical_or``, ``bitwise_not``, ``bitwise_and``
  and ``bitwise_or`` of bools (``~mask`` exports as bitwise_not; transformers' ``and_masks``
  as bitwise_and);
* ``simaccel.where``: a bool condition (`role_dtypes`) and two branches of one dtype, all
  three broadcast;
* integer arithmetic (``simaccel.integer_add``, ...) is declared in discrete.py;
* ``simaccel.astype``: a cast to the ``dtype`` attribute (C's conversions, as TVM's);
* ``simaccel.full``, ``full_like``, ``zeros_like``, ``ones_like``: a tensor of one value
  (`full`'s value a 0-d tensor; the ``*_like`` ones read only their input's shape).

``relax.arange``, ``zeros``, ``ones`` and ``full`` of a constant read no tensor, so in a model
with static shapes they are constants: they and every mask op over constants only are
computed once at build time (tvm_integration/rewrites/constants.py), as TVM alone does, and
their consumers offload. Kernels: simaccel.kernels.masks.
"""

from __future__ import annotations

import numpy as np

from .. import attrs as kinds
from ..declare import OpFamily, relax_op, relax_value
from ..registry import declare
from ..rules import BROADCAST_RANK, ISA_DTYPES, broadcast_result, check_rank

KERNELS = "simaccel.kernels.masks"
MAX_RANK = BROADCAST_RANK  # results of rank <= 6 in at most 4 broadcast dims once merged (rules.broadcast_result)


def broadcast(shapes, **_):
    """numpy broadcasting of any count of inputs (simaccel.ops.rules.broadcast_result)."""
    return broadcast_result(shapes)


COMPARISONS = {"less": np.less, "less_equal": np.less_equal, "greater": np.greater,
               "greater_equal": np.greater_equal, "equal": np.equal, "not_equal": np.not_equal}

for _name, _fn in COMPARISONS.items():
    declare(OpFamily(
        name=f"simaccel.{_name}",
        inputs=("lhs", "rhs"),
        pattern=relax_op(f"relax.{_name}", "lhs", "rhs"),
        infer=broadcast,
        reference=lambda lhs, rhs, *, operation, _fn=_fn: _fn(np.asarray(lhs), np.asarray(rhs)),
        kernel=f"{KERNELS}:launch_compare",
        fixed={"operation": _name},
        dtypes=ISA_DTYPES,
        out_dtype="bool",
        doc=f"{_name} with numpy broadcasting, a bool result, rank <= {MAX_RANK} (at most 4 broadcast dims once merged)",
    ))

LOGICAL = {"logical_and": ("lhs", "rhs"), "logical_or": ("lhs", "rhs"), "logical_not": ("data",),
           "bitwise_not": ("data",), "bitwise_and": ("lhs", "rhs"), "bitwise_or": ("lhs", "rhs")}


def logical(*arrays, operation):
    a = np.asarray(arrays[0], dtype=bool)
    if operation in ("logical_not", "bitwise_not"):
        return ~a
    b = np.asarray(arrays[1], dtype=bool)
    return a & b if operation.endswith("_and") else a | b


for _name, _roles in LOGICAL.items():
    declare(OpFamily(
        name=f"simaccel.{_name}",
        inputs=_roles,
        pattern=relax_op(f"relax.{_name}", *_roles),
        infer=broadcast,
        reference=logical,
        kernel=f"{KERNELS}:launch_logical",
        fixed={"operation": _name},
        dtypes=("bool",),
        doc=f"{_name} of bools" + (" (numpy broadcasting)" if len(_roles) == 2 else ""),
    ))

declare(OpFamily(
    name="simaccel.where",
    inputs=("condition", "lhs", "rhs"),
    pattern=relax_op("relax.where", "condition", "lhs", "rhs"),
    infer=broadcast,
    reference=lambda condition, lhs, rhs: np.where(np.asarray(condition, dtype=bool), lhs, rhs),
    kernel=f"{KERNELS}:launch_where",
    dtypes=ISA_DTYPES,
    role_dtypes={"condition": ("bool",)},
    doc=f"where(condition, lhs, rhs): a bool condition, branches of one dtype, broadcast, rank <= {MAX_RANK} (at most 4 broadcast dims once merged)",
))

def _dtype_attr(match, default: str) -> str:
    dtype = match.attrs["dtype"]
    return default if dtype in (None, "", "void") else str(dtype)


def astype(data, *, dtype):
    x = np.asarray(data)
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(dtype)


declare(OpFamily(
    name="simaccel.astype",
    inputs=("data",),
    pattern=relax_op("relax.astype", "data"),
    attrs={"dtype": kinds.dtype},
    from_relax=lambda match: {"dtype": _dtype_attr(match, match.dtypes["data"])},
    infer=lambda shapes, **_: tuple(shapes[0]),
    reference=astype,
    kernel=f"{KERNELS}:launch_astype",
    dtypes=ISA_DTYPES,
    out_dtype=lambda dtypes, *, dtype: dtype,
    doc="astype: a cast (float to integer truncates, to bool is != 0), any ISA dtype",
))


def full_infer(shapes, *, shape, dtype):
    check_rank("fill", shapes[0], 0, 0)
    return tuple(shape)


declare(OpFamily(
    name="simaccel.full",
    inputs=("fill",),
    pattern=relax_op("relax.full", relax_value("shape"), "fill"),
    attrs={"shape": kinds.shape, "dtype": kinds.dtype},
    from_relax=lambda match: {"shape": list(match.values["shape"]), "dtype": _dtype_attr(match, match.dtypes["fill"])},
    infer=full_infer,
    reference=lambda fill, *, shape, dtype: np.full(tuple(shape), np.asarray(fill).astype(dtype), dtype),
    kernel=f"{KERNELS}:launch_fill",
    dtypes=ISA_DTYPES,
    out_dtype=lambda dtypes, *, shape, dtype: dtype,
    doc="full(shape, value): a tensor of one value (a 0-d tensor), cast to dtype",
))


def like_infer(shapes, **_):
    check_rank("data", shapes[0], 0, 6)
    if len(shapes) > 1:
        check_rank("fill", shapes[1], 0, 0)
    return tuple(shapes[0])


def like_out_dtype(dtypes, *, dtype, **_):
    return dtype or dtypes[0]


for _name, _roles, _value in (("full_like", ("data", "fill"), None), ("zeros_like", ("data",), 0),
                              ("ones_like", ("data",), 1)):
    declare(OpFamily(
        name=f"simaccel.{_name}",
        inputs=_roles,
        pattern=relax_op(f"relax.{_name}", *_roles),
        attrs={"dtype": kinds.dtype},
        from_relax=lambda match: {"dtype": _dtype_attr(match, match.dtypes["data"])},
        infer=like_infer,
        reference=(lambda data, fill, *, dtype: np.full(np.shape(data), np.asarray(fill).astype(dtype), dtype))
        if _value is None else (lambda data, *, dtype, value, _v=_value: np.full(np.shape(data), _v, dtype)),
        kernel=f"{KERNELS}:launch_fill",
        fixed={} if _value is None else {"value": _value},
        dtypes=ISA_DTYPES,
        role_dtypes={role: ISA_DTYPES for role in _roles},
        out_dtype=like_out_dtype,
        doc=f"{_name}: a tensor of one value" + (" (a 0-d tensor)" if _value is None else f" ({_value})")
        + " in its input's shape, which is all it reads of it",
    ))
