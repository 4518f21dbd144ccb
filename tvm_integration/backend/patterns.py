"""Relax patterns for simaccel, derived from the ISA's declarations and registered with TVM.

Every op of the ISA (simaccel.ops: built-in and users' own) gets one pattern: the family's
`RelaxPattern` made into a dataflow pattern, wrapped in a ``relax.add`` for a ``_bias``
variant and in the activation's Relax op for an ``_<activation>`` variant. A built-in op's
name is also its pattern and composite function name; a user op ``ns.op`` is
``simaccel.ns.op`` there (`composite_name`). Every pattern has the same check function: the
active device profile, the shapes (static, or symbolic: simaccel Dims, the profile's limits at
the size vars' upper bounds), the family's `from_relax` (attributes, or the reason to stay on
TVM), its shape rule, and the result Relax computes. A rejection is recorded
with its one-line reason, which `partition_report` shows.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix, register_patterns
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl import is_op, wildcard
from tvm.relax.transform import PatternCheckContext

from ...errors import OpDeclarationError, SimAccelError
from ...ops import OpDef, RelaxMatch, RelaxPattern, RelaxTuple, RelaxValue, Reject, families, get_op
from ...ops.activation import ACTIVATIONS
from ...profile import DEFAULT_PROFILE, DeviceProfile
from ...requirements import assuming, same_shape
from ...shapes import Dim, SymbolicError, at_upper_bounds, shape_text, shape_vars
from .sizes import dim_of, is_size_expression, plain_vars, tensor_dims, value_dims

logger = logging.getLogger("simaccel.partition")

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
    # The var of a named inner call of the match, not its root (a transpose or a repeat folded
    # into a larger op): an op kept on TVM for the reason its larger pattern was refused.
    inner: bool = False


_size_bounds: contextvars.ContextVar[dict] = contextvars.ContextVar("simaccel_size_bounds", default={})


@contextlib.contextmanager
def checking(profile: DeviceProfile, rejections: list, bounds: dict | None = None):
    """Within the block, check functions read `profile` and the size vars' `bounds` (name ->
    (lower, upper or None), `tir_var_*_bound`) and append Rejections to `rejections`."""
    p_token = _active_profile.set(profile)
    r_token = _rejections.set(rejections)
    b_token = _size_bounds.set(dict(bounds or {}))
    try:
        yield
    finally:
        _active_profile.reset(p_token)
        _rejections.reset(r_token)
        _size_bounds.reset(b_token)


def largest(shape, role: str):
    """`shape` at its size vars' upper bounds (a static shape as it is), what the profile's
    limits are checked against; a var with no upper bound at its lower bound, except where the
    profile limits bytes (Reject naming the var): each call's sizes are checked when bound."""
    bounds = _size_bounds.get()
    unbounded = sorted(n for n in shape_vars(shape) if bounds.get(n, (0, None))[1] is None)
    profile = _active_profile.get()
    if unbounded and profile.limits_bytes:
        raise Reject(f"{role}'s size var {unbounded[0]} has no upper bound (tir_var_upper_bound), and profile "
                     f"{profile.name} limits bytes, checked at the upper bounds")
    return at_upper_bounds(shape, bounds)


# -- reading Relax expressions -------------------------------------------------------------
def python_value(value):
    """A Relax attribute value as plain Python: ints, floats, bools, strings, lists, None."""
    from tvm import tirx

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tirx.IntImm):
        return bool(value.value) if str(value.expr_ty()) == "bool" else int(value.value)
    if isinstance(value, tirx.FloatImm):
        return float(value.value)
    if isinstance(value, (list, tuple, tvm_ffi.Array)):
        return [python_value(v) for v in value]
    return str(value)  # dtypes, layouts


def constant_value(expr):
    """A value argument as Python, or None where it is not a constant: a static shape as a
    list of ints, a number (``T.float64(6.0)``) or a scalar constant as an int or float."""
    from tvm import tirx

    if isinstance(expr, relax.ShapeExpr) or isinstance(expr, relax.Var) and isinstance(expr.ty, relax.ShapeType):
        return value_dims(expr)  # a shape (or a shape argument), its dims ints or symbolic sizes (Dim)
    if isinstance(expr, (tirx.IntImm, tirx.FloatImm)):
        return python_value(expr)
    if isinstance(expr, relax.Tuple):  # a tuple of numbers (strided_slice's axes, begins, ...)
        values = [constant_value(f) for f in expr.fields]
        return values if all(isinstance(v, (int, float, Dim)) for v in values) else None
    if is_size_expression(expr):  # a size (a slice's `n - 1`)
        try:
            return dim_of(expr)
        except ValueError:
            return None
    if isinstance(expr, tvm.ir.GenericConst) and expr.value.numpy().ndim == 0:
        return expr.value.numpy().item()
    return None


class _Attrs(dict):
    """A matched call's attributes as Python values, read on first access."""

    def __init__(self, call):
        super().__init__()
        self._attrs = call.attrs

    def __missing__(self, key):
        if self._attrs is None or not hasattr(self._attrs, key):
            raise KeyError(key)
        value = self[key] = python_value(getattr(self._attrs, key))
        return value

    def __contains__(self, key):
        return dict.__contains__(self, key) or (self._attrs is not None and hasattr(self._attrs, key))

    def get(self, key, default=None):
        """dict.get, reading the attribute as [] does (dict.get alone never calls __missing__)."""
        return self[key] if key in self else default


# -- patterns derived from the ISA ---------------------------------------------------------
@dataclass(frozen=True)
class OpPattern:
    """The dataflow pattern of one op, with its annotations: input roles and named nodes."""

    op: OpDef
    pattern: object
    annotations: dict  # role or node name ("root" = the family's outermost call) -> pattern

    @property
    def size(self) -> int:
        """How many Relax calls it matches."""
        return len(self.op.family.pattern.nodes()) + self.op.bias + (self.op.activation != "none")


def op_pattern(op: OpDef) -> OpPattern:
    annotations: dict = {}

    def build(node: RelaxPattern):
        args = []
        for arg in node.args:
            if isinstance(arg, RelaxPattern):
                args.append(build(arg))
            elif isinstance(arg, RelaxValue):  # checked to be a constant by `program_attrs`
                args.append(annotations.setdefault(arg.name, wildcard()))
            elif isinstance(arg, RelaxTuple):  # any arity; `matched_inputs` checks it is a tuple
                args.append(annotations.setdefault(arg.role, wildcard()))
            else:  # a role: the same wildcard wherever it appears (x * sigmoid(x))
                args.append(annotations.setdefault(arg, wildcard()))
        call = is_op(node.op)(*args)
        if node.name:
            annotations[node.name] = call
        return call

    out = annotations["root"] = build(op.family.pattern)
    if op.bias:
        annotations["bias"] = wildcard()
        out = is_op("relax.add")(out, annotations["bias"])
    if op.activation != "none":
        out = is_op(ACTIVATIONS[op.activation][0])(out)
    return OpPattern(op, out, annotations)


CODEGEN = "simaccel"


def composite_name(op: str) -> str:
    """The pattern (and composite function) name of op `op`: the op name itself for built-in
    ops; ``simaccel.<op>`` for others, because TVM names a region's codegen after the first
    part of its composites' names, and every simaccel op must land in ``relax.ext.simaccel``
    regions (mixed with built-in ops)."""
    return op if op.startswith(CODEGEN + ".") else f"{CODEGEN}.{op}"


def op_name(composite: str) -> str:
    """The op a composite function computes (op names have exactly one dot)."""
    return composite.split(".", 1)[1] if composite.count(".") == 2 else composite


_PATTERNS: dict[str, OpPattern] = {}  # by composite name
_LOCK = threading.Lock()


def sync_patterns() -> dict[str, OpPattern]:
    """The patterns of every op now in the ISA, by composite name; ops declared (or replaced)
    since the last call get theirs derived and registered with TVM first.

    A replaced op (a test's planted fault) gets a new pattern under the same name; the
    registry then holds both, and `registered_patterns` takes the newest.
    """
    current = {composite_name(v.name): get_op(v.name) for family in families() for v in family.variants()}
    with _LOCK:
        new = []
        for name, op in current.items():
            spec = _PATTERNS.get(name)
            if spec is None or spec.op is not op:
                _PATTERNS[name] = op_pattern(op)
                new.append(_PATTERNS[name])
        if new:
            register_patterns([(composite_name(p.op.name), p.pattern, p.annotations, _check_function(p)) for p in new])
        return {name: _PATTERNS[name] for name in current}


def _check_function(spec: OpPattern):
    return lambda context: check(spec, context)


def registered_patterns():
    """simaccel's entries in TVM's pattern registry, in priority order (tried first first).

    Larger patterns first (an op with its fused bias add and activation before the add or
    the activation alone; a pattern of two calls before one of the two), and among patterns
    of one size the later declared first (users' ops before built-in ones), so the order of the
    built-in modules does not matter.
    """
    ours = sync_patterns()
    newest = {}
    for pattern in get_patterns_with_prefix(""):  # the registry's order: newest first
        if pattern.name in ours:
            newest.setdefault(pattern.name, pattern)
    order = list(ours)
    return [newest[name] for name in sorted(order, key=lambda n: (-ours[n].size, -order.index(n)))]


def check(spec: OpPattern, context: PatternCheckContext) -> bool:
    """The check function for `spec`: True to offload, else record why and return False."""
    reason = why_not(spec, context.annotated_expr, context)
    if reason is None:
        return True
    var = context.value_to_bound_var.get(context.matched_expr)
    name = var.name if var is not None else "?"
    logger.info("%s stays on TVM (%s): %s", name, spec.op.name, reason)
    rejections = _rejections.get()
    if rejections is not None:
        rejections.append(Rejection(name, spec.op.name, reason))
        for node in spec.op.family.pattern.nodes()[1:]:
            inner = context.value_to_bound_var.get(context.annotated_expr.get(node.name)) if node.name else None
            if inner is not None:
                rejections.append(Rejection(inner.name, spec.op.name, reason, inner=True))
    return False


def matched_inputs(op: OpDef, annotated) -> list[tuple[str, object]]:
    """The op's input expressions in one match, in call order, with their names: a tuple
    role's fields one by one (``data[0]``, ``data[1]``, ...). Reject where a tuple role matched
    anything but a tuple written in the call (FuseOpsByPattern makes its fields the
    composite's parameters; a tuple-valued variable would arrive whole)."""
    if not op.family.variadic:
        return [(role, annotated[role]) for role in op.inputs]
    role = op.inputs[0]
    value = annotated["root"].args[op.family.pattern.args.index(RelaxTuple(role))]
    if not isinstance(value, relax.Tuple) or not value.fields:
        what = f"the variable {value.name}" if isinstance(value, relax.Var) else type(value).__name__
        raise Reject(f"{role} is {what}, not a tuple of tensors written in the call")
    return list(zip(op.roles(len(value.fields)), value.fields))


def match_infos(op: OpDef, infos: list) -> tuple[dict, dict]:
    """`RelaxMatch.shapes` and `.dtypes` from the (shape, dtype) of each of one match's
    `matched_inputs`, in order: by role, and for a tuple role a list with one entry per field."""
    if op.family.variadic:
        return {op.inputs[0]: [s for s, _ in infos]}, {op.inputs[0]: [d for _, d in infos]}
    return ({role: s for role, (s, _) in zip(op.inputs, infos)},
            {role: d for role, (_, d) in zip(op.inputs, infos)})


def program_attrs(spec: OpPattern, annotated, shapes: dict, dtypes: dict) -> dict:
    """The Program attributes of one match (the family's `from_relax`); Reject to stay on TVM."""
    value_names = spec.op.family.pattern.values()
    values = {}
    for name in value_names:
        values[name] = value = constant_value(annotated[name])
        if value is None:
            raise Reject(f"{name} is not a constant ({annotated[name]})")
    from_relax = spec.op.family.from_relax
    if from_relax is None:
        return {}
    nodes = {name: _Attrs(annotated[name]) for name in spec.annotations
             if name == "root" or name not in spec.op.inputs and name not in value_names}
    try:
        attrs = from_relax(RelaxMatch(nodes, shapes, dtypes, values))
    except (Reject, SimAccelError):
        raise
    except SymbolicError as e:  # the family reads a size that is only known per call
        raise Reject(f"{spec.op.family.name} needs the value of a symbolic size: {e}") from None
    except Exception as e:  # a bug in the declaration, not in the model: say whose
        raise OpDeclarationError(f"{spec.op.family.name}: from_relax failed on a match with input shapes "
                                 f"{dict(shapes)}: {type(e).__name__}: {e}") from e
    if not isinstance(attrs, dict):
        raise OpDeclarationError(f"{spec.op.family.name}: from_relax returned {type(attrs).__name__}, not a dict")
    return attrs


def check_attrs(op: OpDef, attrs: dict) -> None:
    """The Program attributes `from_relax` gave for one match, checked as the Program's
    validation will check them (simaccel.program), so that what partitioning offloads the
    codegen can compile: other attribute names than the family declares are the declaration's
    bug (OpDeclarationError); a value its kind refuses (simaccel.ops.attrs: a dtype the ISA
    lacks, a stride of 0) keeps this match on TVM (Reject, saying what from_relax gave)."""
    wrong = op.check_attr_names(attrs)
    if wrong:
        raise OpDeclarationError(f"{op.family.name}: from_relax returned attributes {sorted(attrs)}, which "
                                 f"{wrong}")
    for name, kind in op.attrs.items():
        if name not in attrs:  # left out for its default
            continue
        try:
            kind(attrs[name])
        except ValueError as e:
            raise Reject(f"{op.name}: attribute {name} read from the Relax call {e}") from None


def why_not(spec: OpPattern, annotated, context=None) -> str | None:
    """The reason the match `annotated` (annotation name -> matched expression) stays on TVM, or None."""
    op = spec.op
    profile = _active_profile.get()
    reason = profile.why_not_op(op.name, op.family.name) or profile.why_not_alignment()
    if reason:
        return reason
    if context is not None and has_leaking_intermediate_variables(context):
        return "an intermediate result of the fused ops is also used outside them"
    try:
        inputs = matched_inputs(op, annotated)
    except Reject as e:
        return str(e)
    # Constants are fine: with bind_constants=False they become region parameters, which TVM
    # materialises and passes like any other tensor.
    infos = []
    for role, expr in inputs:
        shape, dtype, why = tensor_dims(expr)
        if shape is None:
            return f"{role} has {why}"
        infos.append((shape, dtype))
    reason = undefined_size_vars(annotated, inputs)
    if reason:
        return reason
    try:
        for (role, _), (shape, dtype) in zip(inputs, infos):
            reason = profile.why_not_tensor(role, largest(shape, role), dtype)
            if reason:
                return reason
        in_shapes, in_dtypes = [s for s, _ in infos], [d for _, d in infos]
        op.check_dtypes(in_dtypes)  # the family's rules only ever see dtypes it takes
        # Equalities of sizes that only some values make true are assumed, and checked by the
        # region at every call (simaccel.requirements).
        with assuming(_size_bounds.get()) as assumed:
            attrs = program_attrs(spec, annotated, *match_infos(op, infos))
            check_attrs(op, attrs)
            shape, dtype = op.infer(in_shapes, in_dtypes, **op.all_attrs(attrs))
        if context is not None:
            # The fused op must compute what the matched Relax ops compute; its shape and dtype
            # are the first things that would differ (a bias whose broadcasting grows the result,
            # an out_dtype other than the inputs'). Symbolic dims compare as expressions.
            relax_shape, relax_dtype, _ = tensor_dims(context.matched_expr)
            if relax_shape is None or not same_shape(shape, relax_shape, assumed.made) or dtype != relax_dtype:
                return (f"{op.name} would give {shape_text(shape)} {dtype} where Relax gives "
                        f"{shape_text(relax_shape) if relax_shape is not None else 'an unknown shape'} {relax_dtype}")
        reason = profile.why_not_tensor("output", largest(shape, "output"), dtype)
        if reason:
            return reason
        if profile.max_region_bytes is None:
            return None
        nbytes = sum(tensor_bytes(largest(s, "input"), d) for s, d in zip(in_shapes, in_dtypes))
        nbytes += tensor_bytes(largest(shape, "output"), dtype)
    except OpDeclarationError:
        raise  # the declaration is wrong: stop, do not quietly keep every match on TVM
    except (Reject, SimAccelError) as e:
        return str(e)
    return profile.why_not_region(nbytes, f"{op.name} alone")


def undefined_size_vars(annotated, inputs) -> str | None:
    """Why a match whose index values (strided_slice's begin and end) read a size
    var that no input has as a whole dim stays on TVM, or None. FuseOpsByPattern cannot make a
    function of it: TVM 0.27 fails inside (``Cannot find the FInferType attribute registered
    to op: prim.if_then_else``), as for ``y[:, :s]`` of a (b, s + 1) tensor. A shape value
    (reshape's) is no such case: it becomes a parameter that defines its vars."""
    defined = set().union(*(plain_vars(expr) for _, expr in inputs))
    for name, expr in annotated.items():
        value = constant_value(expr) if isinstance(expr, relax.Tuple) or is_size_expression(expr) else None
        used = set(shape_vars(value if isinstance(value, list) else [value]))
        if used - defined:
            return (f"its {name} reads the size var(s) {', '.join(sorted(used - defined))}, which no input has as a "
                    "whole dim (TVM cannot make a composite function of it)")
    return None


def tensor_bytes(shape, dtype: str) -> int:
    """Bytes of a tensor of static `shape` and `dtype`."""
    import numpy as np

    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
