"""Users' ops in the fuzzer's models: a declared family with a fuzz hook as a model's node.

Where it sits: beside the built-in ops (fuzz/vocabulary.py), for every declared family outside
the ``simaccel`` namespace that has a `fuzz` hook (simaccel.ops.OpFamily.fuzz; $SIMACCEL_OPS
names their modules). The builder (fuzz/build.py) asks a family's hook for its other inputs'
shapes and its values (`hook_answer`); its Relax call is the family's pattern applied to them
(`relax_call`), its output shape Relax's own shape inference (`relax_shape`), and its float64
reference the family's numpy reference on what simaccel's partitioning reads from the call
(`UserFuzzOp`).
"""

from __future__ import annotations

import numpy as np

from .vocabulary import resolve


def is_user_op(name: str) -> bool:
    """Whether a node's op is a user's family (``namespace.op``) rather than a built-in FuzzOp."""
    return "." in name


def user_families() -> list:
    """Declared families outside the ``simaccel`` namespace that have a fuzz hook (the
    modules named in $SIMACCEL_OPS are imported first)."""
    from ....ops import families

    return [f for f in families() if f.namespace != "simaccel" and f.fuzz is not None]


def hook_answer(family, answer) -> tuple[dict, dict]:
    """The fuzz hook's (shapes by role, values and Relax kwargs), checked: every other input role
    has a shape, every `relax_value` a value, and a named inner call's kwargs are a dict. A
    value given as a 0-d numpy array (a scalar ``R.const``) is kept as ``{"const": number}``."""
    from ....errors import OpDeclarationError

    def bad(problem):
        return OpDeclarationError(f"op family {family.name!r}: its fuzz hook {problem}")

    try:
        shapes, kwargs = answer
        shapes = {str(r): tuple(int(d) for d in s) for r, s in dict(shapes).items()}
        kwargs = dict(kwargs or {})
    except (TypeError, ValueError) as e:
        raise bad(f"must return (shapes by role, Relax kwargs) or None, got {answer!r}") from e
    missing = [r for r in family.inputs[1:] if r not in shapes]
    if missing:
        raise bad(f"gave no shape for input(s) {missing}")
    values = family.pattern.values()
    missing = [v for v in values if v not in kwargs]
    if missing:
        raise bad(f"gave no value for relax_value(s) {missing} (give each by its name, with the Relax kwargs)")
    for name in values:
        value = kwargs[name]
        if isinstance(value, np.ndarray):
            if value.ndim != 0:
                raise bad(f"gave relax_value {name!r} an array of shape {value.shape}; a constant value is 0-d")
            kwargs[name] = {"const": value.item()}
    for name in _node_names(family):
        if name in kwargs and not isinstance(kwargs[name], dict):
            raise bad(f"gave {kwargs[name]!r} for the inner call {name!r}; its Relax kwargs are a dict")
    return shapes, kwargs


def _node_names(family) -> list[str]:
    """The names of the pattern's named inner calls (whose Relax kwargs a fuzz hook may give)."""
    return [n.name for n in family.pattern.nodes()[1:] if n.name]


def _relax_function(op: str):
    """The Relax builder a pattern node names: ``relax.nn.rms_norm`` -> tvm.relax.op.nn.rms_norm."""
    from tvm import relax

    from ....errors import OpDeclarationError

    if not op.startswith("relax."):
        raise OpDeclarationError(f"pattern op {op!r}: the fuzzer builds only Relax ops (relax.*)")
    try:
        return resolve(relax.op, op[len("relax."):])
    except AttributeError:
        raise OpDeclarationError(f"pattern op {op!r}: tvm.relax.op has no {op[len('relax.'):]}") from None


def _call(family, node, args, kwargs, dtype, root: bool):
    """The Relax call of pattern node `node` on `args` (its built tensor arguments, `None` where
    the pattern has a value): values from `kwargs` (a ``{"const": number}`` as ``R.const`` of
    `dtype`, anything else as it stands), and the node's Relax kwargs (the root's: every other
    key of `kwargs`; an inner named call's: ``kwargs[name]``)."""
    from tvm import relax

    from ....ops import RelaxValue

    values = family.pattern.values()
    args = [args[i] if not isinstance(a, RelaxValue) else
            relax.const(kwargs[a.name]["const"], dtype) if isinstance(kwargs[a.name], dict) else kwargs[a.name]
            for i, a in enumerate(node.args)]
    if root:
        own = {k: v for k, v in kwargs.items() if k not in values and k not in _node_names(family)}
    else:
        own = kwargs.get(node.name, {}) if node.name else {}
    return _relax_function(node.op)(*args, **own)


def relax_call(family, exprs, kwargs, dtype) -> tuple:
    """The family's pattern applied to `exprs` (one per input role, in order), with the values
    and Relax kwargs a fuzz hook gave (`hook_answer`). Returns (root call, annotations): the
    named nodes' calls ("root" the outermost) and each value's Relax expression, by name."""
    from ....ops import RelaxPattern, RelaxValue

    by_role = dict(zip(family.inputs, exprs))
    nodes = {}

    def build(node, root: bool):
        args = [build(a, False) if isinstance(a, RelaxPattern) else None if isinstance(a, RelaxValue) else by_role[a]
                for a in node.args]
        call = _call(family, node, args, kwargs, dtype, root)
        for a, expr in zip(node.args, call.args):
            if isinstance(a, RelaxValue):
                nodes[a.name] = expr  # as the Relax call holds it (a number becomes a PrimValue)
        if root or node.name:
            nodes["root" if root else node.name] = call
        return call

    return build(family.pattern, True), nodes


def _placeholders(family, shapes, dtype) -> list:
    from tvm import relax

    return [relax.Var(role, relax.TensorType(tuple(shape), dtype)) for role, shape in zip(family.inputs, shapes)]


def relax_shape(family, shapes, kwargs, dtype) -> tuple[int, ...]:
    """The output shape of the family's Relax call on inputs of `shapes`, by Relax's own shape
    inference; an exception where Relax refuses them or the result is no static-shape tensor."""
    from tvm import relax

    from ....ops import RelaxPattern, RelaxValue

    builder = relax.BlockBuilder()
    by_role = dict(zip(family.inputs, _placeholders(family, shapes, dtype)))

    def infer(node, root: bool):  # node by node, each on variables: no scope to leave open on a refusal
        args = [infer(a, False) if isinstance(a, RelaxPattern) else None if isinstance(a, RelaxValue) else by_role[a]
                for a in node.args]
        ty = builder.normalize(_call(family, node, args, kwargs, dtype, root)).ty
        return ty if root else relax.Var("t", ty)

    ty = infer(family.pattern, True)
    if not isinstance(ty, relax.TensorType) or ty.shape is None or not hasattr(ty.shape, "values"):
        raise ValueError(f"{family.name}: Relax gives {ty}, not a tensor of static shape")
    return tuple(int(d.value) for d in ty.shape.values)


class UserFuzzOp:
    """A user family as a node: `relax`, `shape` and `numpy` like a FuzzOp; the numpy side is the
    family's own reference on the Program attributes its `from_relax` reads from the call."""

    def __init__(self, name: str):
        from ....ops import get_op

        self.name = name
        self.family = get_op(name).family  # UnsupportedOpError (naming $SIMACCEL_OPS) if undeclared

    def relax(self, exprs, attrs, dtype):
        return relax_call(self.family, exprs, attrs, dtype)[0]

    def shape(self, shapes, attrs, dtype: str = "float32"):
        return relax_shape(self.family, shapes, attrs, dtype)

    def program_attrs(self, shapes, attrs, dtype) -> dict:
        """What simaccel's op gets from this call: what partitioning reads from it (the family's
        `from_relax`, through the backend's `program_attrs`); Reject where it stays on TVM."""
        from ...backend.patterns import composite_name, program_attrs, sync_patterns

        params = _placeholders(self.family, shapes, dtype)
        _, nodes = relax_call(self.family, params, attrs, dtype)
        roles = dict(zip(self.family.inputs, shapes))
        spec = sync_patterns()[composite_name(self.name)]
        return program_attrs(spec, nodes, roles, {r: dtype for r in roles})

    def exact_for(self, shapes, attrs, dtype) -> bool:
        """Whether the family's reference states this call's semantics: its `from_relax` takes it."""
        from ....errors import OpDeclarationError, SimAccelError
        from ....ops import Reject

        try:
            self.program_attrs(shapes, attrs, dtype)
        except OpDeclarationError:
            raise  # a from_relax that cannot read this call: the declaration's bug, not a rejection
        except (Reject, SimAccelError):  # the call stays on TVM, as partitioning would say
            return False
        return True

    def numpy(self, xs, attrs, dtype):
        from ....ops import get_op

        op = get_op(self.name)  # looked up each time: a test may plant a fault in the reference
        program = self.program_attrs([x.shape for x in xs], attrs, dtype)
        return op.reference(*xs, **op.all_attrs(program))
