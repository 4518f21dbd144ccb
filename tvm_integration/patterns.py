"""Relax patterns for simaccel, registered with TVM's BYOC pattern registry.

One pattern per op of the ISA, under the op's own name (``simaccel.dense_bias_relu`` is the
op key, the pattern name and the composite function name). Each pattern has a check
function that reads the active device profile (the same one the runtime enforces) and the
op's own shape rule; a rejection is recorded with a one-line reason, which
`partition_for_simaccel` reports.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from dataclasses import dataclass
from typing import Callable

from tvm import relax
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix, register_patterns
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl import is_op, wildcard
from tvm.relax.transform import PatternCheckContext

from ..errors import SimAccelError
from ..kernels.window import padding4
from ..ops import get_op, list_ops
from ..ops.matmul import ACTIVATIONS, matmul_name
from ..ops.conv2d import conv2d_name
from ..profile import DEFAULT_PROFILE, DeviceProfile

logger = logging.getLogger("simaccel.partition")

PREFIX = "simaccel"

_active_profile: contextvars.ContextVar[DeviceProfile] = contextvars.ContextVar(
    "simaccel_profile", default=DEFAULT_PROFILE
)
_rejections: contextvars.ContextVar[list | None] = contextvars.ContextVar("simaccel_rejections", default=None)


@dataclass(frozen=True)
class Rejection:
    """Why one candidate match stayed on TVM."""

    var: str  # name of the Relax variable the match would have produced
    pattern: str
    reason: str


@contextlib.contextmanager
def checking(profile: DeviceProfile, rejections: list):
    """Within the block, check functions read `profile` and append Rejections to `rejections`."""
    p_token = _active_profile.set(profile)
    r_token = _rejections.set(rejections)
    try:
        yield
    finally:
        _active_profile.reset(p_token)
        _rejections.reset(r_token)


# -- reading Relax expressions -------------------------------------------------------------
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


def ints(values) -> list[int]:
    return [int(v) for v in values]


def conv2d_attrs(call) -> dict:
    a = call.attrs
    return {"strides": ints(a.strides), "padding": list(padding4(ints(a.padding), "conv2d")), "dilation": ints(a.dilation)}


def pool2d_attrs(call) -> dict:
    a = call.attrs
    attrs = {
        "pool_size": ints(a.pool_size),
        "strides": ints(a.strides),
        "padding": list(padding4(ints(a.padding), "pool2d")),
        "dilation": ints(a.dilation),
    }
    if call.op.name == "relax.nn.avg_pool2d":
        attrs["count_include_pad"] = bool(a.count_include_pad)
    return attrs


def layer_norm_attrs(call) -> dict:
    return {"epsilon": float(call.attrs.epsilon)}


# -- per-family checks: a reason string, or None -------------------------------------------
def _why_not_matmul(ann) -> str | None:
    out_dtype = ann["root"].attrs.out_dtype
    data_dtype = tensor_info(ann["data"])[1]
    if out_dtype is not None and str(out_dtype) not in ("", "void", data_dtype):
        return f"matmul out_dtype {out_dtype} differs from the input dtype {data_dtype}"
    if "permute" in ann:
        axes = ann["permute"].attrs.axes
        if axes is not None and ints(axes) != [1, 0]:
            return f"permute_dims axes {ints(axes)} is not a 2-D transpose"
    return None


def _why_not_conv2d(ann) -> str | None:
    a = ann["root"].attrs
    if int(a.groups) != 1:
        return f"conv2d groups={int(a.groups)} (only groups=1 is supported)"
    layouts = (str(a.data_layout), str(a.kernel_layout), str(a.out_layout))
    if layouts != ("NCHW", "OIHW", "NCHW"):
        return f"conv2d layouts {layouts} (only NCHW data, OIHW weight, NCHW output)"
    data_dtype = tensor_info(ann["data"])[1]
    if a.out_dtype is not None and str(a.out_dtype) not in ("", "void", data_dtype):
        return f"conv2d out_dtype {a.out_dtype} differs from the input dtype {data_dtype}"
    return None


def _why_not_pool2d(ann) -> str | None:
    a = ann["root"].attrs
    if bool(a.ceil_mode):
        return "pooling with ceil_mode=True is not supported"
    if (str(a.layout), str(a.out_layout)) != ("NCHW", "NCHW"):
        return f"pooling layout {a.layout}/{a.out_layout} (only NCHW)"
    return None


def _why_not_softmax(ann) -> str | None:
    rank = len(tensor_info(ann["data"])[0])
    axis = int(ann["root"].attrs.axis)
    if axis not in (-1, rank - 1):
        return f"softmax over axis {axis} (only the last axis)"
    return None


def _why_not_layer_norm(ann) -> str | None:
    a = ann["root"].attrs
    rank = len(tensor_info(ann["data"])[0])
    if [x % rank for x in ints(a.axes)] != [rank - 1]:
        return f"layer_norm over axes {ints(a.axes)} (only the last axis)"
    if not (bool(a.center) and bool(a.scale)):
        return "layer_norm without center or scale is not supported"
    return None


@dataclass(frozen=True)
class PatternSpec:
    name: str  # = op name
    pattern: object
    annotations: dict
    why_not: Callable | None  # family-specific check: reason or None
    attrs: Callable | None  # root call -> Program attributes


def check(spec: PatternSpec, context: PatternCheckContext) -> bool:
    """The check function for `spec`: True to offload, else record why and return False."""
    reason = why_not(spec, context.annotated_expr, context)
    if reason is None:
        return True
    var = context.value_to_bound_var.get(context.matched_expr)
    name = var.name if var is not None else "?"
    logger.info("%s stays on TVM (%s): %s", name, spec.name, reason)
    rejections = _rejections.get()
    if rejections is not None:
        rejections.append(Rejection(name, spec.name, reason))
    return False


def why_not(spec: PatternSpec, ann, context=None) -> str | None:
    profile = _active_profile.get()
    reason = profile.why_not_op(spec.name)
    if reason:
        return reason
    if context is not None and has_leaking_intermediate_variables(context):
        return "an intermediate result of the fused ops is also used outside them"
    op = get_op(spec.name)
    shapes, dtypes = [], []
    for role in op.inputs:
        # Constants are fine: with bind_constants=False they become region parameters, which
        # TVM materialises and passes like any other tensor.
        shape, dtype = tensor_info(ann[role])
        if shape is None:
            return f"{role} has a dynamic or unknown shape"
        reason = profile.why_not_tensor(role, shape, dtype)
        if reason:
            return reason
        shapes.append(shape)
        dtypes.append(dtype)
    if spec.why_not is not None:
        reason = spec.why_not(ann)
        if reason:
            return reason
    attrs = spec.attrs(ann["root"]) if spec.attrs else {}
    try:
        shape, dtype = op.infer(shapes, dtypes, **op.all_attrs(attrs))
    except SimAccelError as e:
        return str(e)
    if context is not None:
        # The fused op must compute what the matched Relax ops compute; its shape is the
        # first thing that would differ (e.g. a bias whose broadcasting grows the result).
        relax_shape, relax_dtype = tensor_info(context.matched_expr)
        if (tuple(shape), dtype) != (relax_shape, relax_dtype):
            return f"{spec.name} would give {tuple(shape)} {dtype} where Relax gives {relax_shape} {relax_dtype}"
    return profile.why_not_tensor("output", shape, dtype)


# -- the pattern table -----------------------------------------------------------------------
def _matmul_spec(transpose_b: bool, bias: bool, activation: str) -> PatternSpec:
    data, weight = wildcard(), wildcard()
    ann = {"data": data, "weight": weight}
    rhs = weight
    if transpose_b:
        rhs = ann["permute"] = is_op("relax.permute_dims")(weight)
    out = ann["root"] = is_op("relax.matmul")(data, rhs)
    if bias:
        ann["bias"] = wildcard()
        out = is_op("relax.add")(out, ann["bias"])
    if activation != "none":
        out = is_op(f"relax.nn.{activation}")(out)
    return PatternSpec(matmul_name(transpose_b, bias, activation), out, ann, _why_not_matmul, None)


def _conv2d_spec(bias: bool, activation: str) -> PatternSpec:
    data, weight = wildcard(), wildcard()
    out = is_op("relax.nn.conv2d")(data, weight)
    ann = {"data": data, "weight": weight, "root": out}
    if bias:
        ann["bias"] = wildcard()
        out = is_op("relax.add")(out, ann["bias"])
    if activation != "none":
        out = is_op(f"relax.nn.{activation}")(out)
    return PatternSpec(conv2d_name(bias, activation), out, ann, _why_not_conv2d, conv2d_attrs)


def _single_spec(name: str, relax_op: str, roles: tuple[str, ...], why=None, attrs=None) -> PatternSpec:
    args = {role: wildcard() for role in roles}
    root = is_op(relax_op)(*args.values())
    return PatternSpec(name, root, {**args, "root": root}, why, attrs)


def pattern_specs() -> list[PatternSpec]:
    """Every simaccel pattern, lowest priority first (later entries win overlaps)."""
    specs = [
        _single_spec("simaccel.relu", "relax.nn.relu", ("data",)),
        _single_spec("simaccel.gelu", "relax.nn.gelu", ("data",)),
        _single_spec("simaccel.add", "relax.add", ("lhs", "rhs")),
        _single_spec("simaccel.multiply", "relax.multiply", ("lhs", "rhs")),
        _single_spec("simaccel.softmax", "relax.nn.softmax", ("data",), _why_not_softmax),
        _single_spec("simaccel.layer_norm", "relax.nn.layer_norm", ("data", "gamma", "beta"),
                     _why_not_layer_norm, layer_norm_attrs),
        _single_spec("simaccel.max_pool2d", "relax.nn.max_pool2d", ("data",), _why_not_pool2d, pool2d_attrs),
        _single_spec("simaccel.avg_pool2d", "relax.nn.avg_pool2d", ("data",), _why_not_pool2d, pool2d_attrs),
    ]
    for bias in (False, True):  # more fused forms later, so they win
        for activation in ("none", "relu"):
            specs.append(_conv2d_spec(bias, activation))
        for activation in ACTIVATIONS:
            for transpose_b in (False, True):
                specs.append(_matmul_spec(transpose_b, bias, activation))
    return specs


SPECS: dict[str, PatternSpec] = {spec.name: spec for spec in pattern_specs()}

if sorted(SPECS) != list_ops():
    raise RuntimeError(f"simaccel patterns and ops differ: {sorted(set(SPECS) ^ set(list_ops()))}")

register_patterns(
    [
        (spec.name, spec.pattern, spec.annotations, (lambda context, spec=spec: check(spec, context)))
        for spec in SPECS.values()
    ]
)


def registered_patterns():
    """simaccel's entries in TVM's pattern registry, in priority order."""
    return get_patterns_with_prefix(PREFIX)
