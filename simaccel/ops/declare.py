"""Op declarations: everything simaccel knows about an instruction, written once.

An `OpFamily` says which Relax expression the instruction replaces (`pattern`, data built
with `relax_op`), how the matched Relax attributes become the Program's attributes and when
the match must stay on TVM (`from_relax`), the output shape (`infer`), the numpy reference
and the Numba kernel launcher. Variants come from two flags: `bias` (a fused bias add) and
`activations` (fused activations). `declare` derives one `OpDef` per variant and registers
it; the TVM backend derives the Relax patterns and their checks from the same objects, the
runtime validates and executes Programs with them, and `simaccel ops` lists them. Built-in
ops (simaccel/ops/builtin/) are declared this way too.

Nothing here imports TVM or Numba: patterns are data, attributes arrive as plain Python
values, and a kernel given as ``"module:function"`` is imported on first launch.
"""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from ..errors import DtypeError, OpDeclarationError, ShapeError, SimAccelError
from ..kernels.dtypes import is_float
from ..shapes import Dim, SymbolicError, broadcast_shapes
from .activation import ACTIVATIONS, activate
from .rules import FLOAT_DTYPES, ISA_DTYPES, is_bias_for, is_dtype_name

BIAS_KINDS = ("channel", "row")  # one value per NCHW channel (axis 1) / per column (last axis)
_NAME = re.compile(r"^[A-Za-z_]\w*\.[A-Za-z_]\w*$")


@dataclass(frozen=True)
class RelaxValue:
    """A call argument that is a value, not a tensor: a shape (``R.shape([...])``), a
    ``PrimValue`` or a scalar constant (a 0-d ``R.const``, matched where the Relax op takes a
    tensor: ``relax_op("relax.multiply", "data", relax_value("slope"))``). `from_relax` reads
    it as Python in ``match.values[name]``; it is not an input of the op, and a match where it
    is not a constant (a variable, a constant of rank 1 or more) stays on TVM."""

    name: str


def relax_value(name: str) -> RelaxValue:
    """A value argument of a Relax call: e.g. ``relax_op("relax.reshape", "data", relax_value("shape"))``."""
    return RelaxValue(name)


@dataclass(frozen=True)
class RelaxTuple:
    """A call argument that is a tuple of tensors, each an input of the op, as many as the
    model gives: ``relax_op("relax.concat", relax_tuple("data"))``. The family then has this
    one input role, an argument of the outermost call; a Program op of it takes one or more inputs, named ``data[0]``,
    ``data[1]``, ..., and its `infer`, `reference` and `kernel` get them all."""

    role: str


def relax_tuple(role: str) -> RelaxTuple:
    """A tuple-of-tensors argument of a Relax call: every field becomes an input of the op."""
    return RelaxTuple(role)


@dataclass(frozen=True)
class RelaxPattern:
    """A Relax call to match: `op` applied to `args`, each a role name (any expression, which
    becomes that op input), a `relax_value` or a nested RelaxPattern. `name` lets `from_relax`
    read this node's attributes (the outermost node is always ``"root"``)."""

    op: str
    args: tuple
    name: str = ""

    def roles(self) -> list[str]:
        found = []
        for arg in self.args:
            if isinstance(arg, RelaxPattern):
                found += arg.roles()
            elif isinstance(arg, RelaxTuple):
                found.append(arg.role)
            elif not isinstance(arg, RelaxValue):
                found.append(arg)
        return found

    def tuple_roles(self) -> list[str]:
        """Roles given as `relax_tuple` (tuples of tensors), nested calls' too."""
        found = []
        for arg in self.args:
            if isinstance(arg, RelaxPattern):
                found += arg.tuple_roles()
            elif isinstance(arg, RelaxTuple):
                found.append(arg.role)
        return found

    def values(self) -> list[str]:
        """Names of the value arguments, nested calls' too."""
        found = []
        for arg in self.args:
            if isinstance(arg, RelaxPattern):
                found += arg.values()
            elif isinstance(arg, RelaxValue):
                found.append(arg.name)
        return found

    def nodes(self) -> list["RelaxPattern"]:
        return [self] + [n for a in self.args if isinstance(a, RelaxPattern) for n in a.nodes()]


def relax_op(op: str, *args, name: str = "") -> RelaxPattern:
    """The Relax call `op(*args)`: e.g. ``relax_op("relax.matmul", "data", relax_op("relax.permute_dims", "weight"))``;
    an argument is a role name, `relax_value`, `relax_tuple` or another `relax_op`."""
    return RelaxPattern(op, tuple(args), name)


class Reject(Exception):
    """Raised by a `from_relax` function: this match stays on TVM, for the reason given."""


@dataclass(frozen=True)
class RelaxMatch:
    """What `from_relax` sees of one match: attributes of the matched nodes, and the static
    shapes and dtypes of the op's inputs (by role)."""

    nodes: Mapping[str, Mapping[str, Any]]  # node name -> its attributes as Python values
    shapes: Mapping[str, tuple[int, ...]]
    dtypes: Mapping[str, str]
    values: Mapping[str, Any] = field(default_factory=dict)  # `relax_value` name -> Python value

    @property
    def attrs(self) -> Mapping[str, Any]:
        """The outermost matched call's attributes (e.g. conv2d's strides)."""
        return self.nodes["root"]


@dataclass(frozen=True)
class OpFamily:
    """One instruction of the accelerator, with its fused variants.

    Parameters
    ----------
    name:
        ``"namespace.op"``, e.g. ``"simaccel.conv2d"`` or ``"myaccel.rms_norm"``; variants
        append ``_bias`` and ``_<activation>``.
    inputs:
        Input roles in call order; each appears in `pattern`. A role given there as
        `relax_tuple` (a tuple of tensors: concat's) must be the family's only input; its
        ops then take one or more inputs.
    pattern:
        The Relax expression replaced (`relax_op`).
    infer:
        ``infer(shapes, **attrs) -> shape`` of the output (its dtype is the inputs' dtype);
        raises ShapeError saying what is wrong with shapes the op does not take (simaccel
        puts the op's name in front).
    reference:
        ``reference(*arrays, **attrs) -> array``: the numpy semantics. The result is cast to
        the output dtype; compute in float32 (the accelerator's accumulator) or wider. It
        must be a numpy array (or numpy scalar) of the output's shape, never one numpy would
        broadcast, in a float, integer or bool dtype (cast to the output's as a kernel rounds
        on store: a float op applied to integers computes in float32 too); anything
        else (None, a list, a tuple) is an OpDeclarationError naming the op when it runs.
    kernel:
        ``kernel(target, out, *arrays, **attrs) -> launches``, or ``"module:function"``
        imported on first launch. Arrays are device arrays (Numba) of validated shapes;
        `target.launch(fn, grid, block, *args)` launches a module-level kernel function.
    attrs:
        Program attributes: name -> kind (simaccel.ops.attrs), which validates a value.
    defaults:
        Attributes a Program may leave out: name -> the value rules and kernels then get
        (matmul's ``out_dtype``: None, the inputs' dtype). A value given is checked by its
        kind; a default is not, and is never written into a Program.
    from_relax:
        ``from_relax(match: RelaxMatch) -> dict`` of Program attributes; raises `Reject`
        when the match must stay on TVM. Default: no attributes.
    fixed:
        Attributes fixed for the family (passed like Program attributes).
    bias:
        None, or the kind of bias add fused in ``*_bias`` variants: "channel" (one value per
        axis 1 of an NCHW result) or "row" (one value per last-axis column).
    activations:
        Activations (simaccel.ops.activation) fused in ``*_<activation>`` variants; the
        kernel then gets ``activation=`` ("none" for the plain variant).
    dtypes:
        The dtypes it computes in: its inputs share one of them, and so does the output
        unless `out_dtype` says otherwise. Float ones by default; integer and bool ones
        (`simaccel.ops.rules.ISA_DTYPES`) for index and mask ops, which compute exactly.
    role_dtypes:
        Inputs with dtypes of their own, not shared with the others: role -> the dtypes it
        takes (``where``'s ``{"condition": ("bool",)}``).
    out_dtype:
        The output's dtype where it is not the shared input dtype: a dtype (comparisons:
        ``"bool"``) or ``out_dtype(dtypes, **attrs) -> dtype`` (the inputs' dtypes in call
        order and the Program attributes: ``astype``'s ``dtype`` attribute). Where the rule
        gives a dtype outside the ISA (a cast to float64), the match stays on TVM, the reason
        saying what it gave; a rule that fails or gives no dtype is an OpDeclarationError.
    view:
        True for an op whose output is its one input's elements in the same order under
        another shape (reshape, squeeze, expand_dims, flatten). Such an op runs no kernel
        and copies nothing where its output is an intermediate: the runtime gives the
        output the input's memory (`Program.views`). Its `kernel` runs only where the output
        is a region output (the caller's buffer), and must copy.
    elementwise:
        For an elementwise op (every input broadcasts to the output, each output element a
        function of the inputs' elements at its index): that function of float32 scalars,
        ``f(*values, <numeric attributes>) -> value`` (the attributes it names are passed by
        name, as ordinary parameters: Numba refuses keyword-only ones), written so that Numba can compile it as a
        device function (plain arithmetic, `math`, other such functions), or
        ``"module:function"``. With it the op fuses into the epilogue of the kernel that
        produces its input, and runs of such ops into one kernel (simaccel/fusion.py); it
        must compute what the op's kernel computes, bit for bit.
    epilogue:
        True where the family's launcher takes ``epilogue=`` (a simaccel.fusion.Epilogue,
        applied at its store: kernels/epilogue.py) so that elementwise ops after it fuse.
    flops:
        Optional, for the timing model (simaccel.timing): ``flops(shapes, out_shape, **attrs)
        -> number`` of operations one call does (a multiply-add is 2). Without it: one per
        output element for an elementwise op, none for a view, one per input element for the
        rest; a fused bias and activation add one each per output element.
    fuzz:
        Optional, for `simaccel fuzz`: ``fuzz(shape, draw) -> (shapes, relax_kwargs)`` to
        apply the op to a value of `shape` (its first input): shapes of the other inputs by
        role, and keyword arguments of the outermost Relax call, each `relax_value` by its
        name (a 0-d numpy array for a scalar ``R.const``) and a named inner call's keyword
        arguments (a dict) by its name; None when it does not apply.
    doc:
        One line for `simaccel ops`.
    """

    name: str
    inputs: tuple[str, ...]
    pattern: RelaxPattern
    infer: Callable[..., tuple[int, ...]]
    reference: Callable[..., Any]
    kernel: Callable[..., int] | str
    attrs: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    from_relax: Callable[[RelaxMatch], dict] | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    bias: str | None = None
    activations: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = FLOAT_DTYPES
    role_dtypes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    out_dtype: str | Callable[..., str] | None = None
    view: bool = False
    elementwise: Callable | str | None = None
    epilogue: bool = False
    flops: Callable | None = None
    fuzz: Callable | None = None
    doc: str = ""

    @property
    def namespace(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def variadic(self) -> bool:
        """Whether its one input role is a tuple of tensors (`relax_tuple`): any count of inputs."""
        return bool(self.pattern.tuple_roles())

    def check(self) -> None:
        """Raise OpDeclarationError for a declaration simaccel could not derive an op from."""
        def bad(problem: str):
            raise OpDeclarationError(f"op family {self.name!r}: {problem}")

        if not isinstance(self.name, str) or not _NAME.match(self.name):
            bad("the name must be 'namespace.op' (letters, digits, underscores)")
        if not isinstance(self.pattern, RelaxPattern):
            bad("pattern must be made with simaccel.ops.relax_op(...)")
        inputs = tuple(self.inputs)
        if not inputs or len(set(inputs)) != len(inputs) or not all(isinstance(r, str) and r for r in inputs):
            bad(f"inputs must be distinct role names, got {inputs!r}")
        if set(self.pattern.roles()) != set(inputs):
            bad(f"the pattern's roles {sorted(set(self.pattern.roles()))} differ from inputs {sorted(inputs)}")
        if "bias" in inputs and self.bias:
            bad("'bias' is the role of the fused bias; name the family's own input differently")
        names = [n.name for n in self.pattern.nodes()[1:] if n.name]
        if "root" in names or len(set(names)) != len(names):
            bad("pattern node names must be distinct and not 'root'")
        values = self.pattern.values()
        if len(set(values)) != len(values) or set(values) & (set(names) | set(inputs) | {"root", "bias"}):
            bad(f"value names {values} must be distinct, and differ from the roles and node names")
        for fn_name in ("infer", "reference"):
            if not callable(getattr(self, fn_name)):
                bad(f"{fn_name} must be callable")
        if not (callable(self.kernel) or (isinstance(self.kernel, str) and ":" in self.kernel)):
            bad("kernel must be a callable or 'module:function'")
        for attr, kind in self.attrs.items():
            if not callable(kind):
                bad(f"attribute {attr!r} needs a kind (a checker from simaccel.ops.attrs)")
        if self.bias not in (None, *BIAS_KINDS):
            bad(f"bias must be None or one of {BIAS_KINDS}, got {self.bias!r}")
        unknown = [a for a in self.activations if a not in ACTIVATIONS]
        if unknown:
            bad(f"unknown activations {unknown}; the ISA's are {sorted(ACTIVATIONS)}")
        if {"sin", "cos"} & set(self.activations):  # kernels' fused activations: apply_activation's, not sin and cos
            bad("sin and cos are elementwise ops, not fused activation variants (they fuse as epilogues)")
        if self.activations and "activation" in {*self.attrs, *self.fixed}:
            bad("'activation' is set by the variant; do not declare it as an attribute")
        if not set(self.defaults) <= set(self.attrs):
            bad(f"defaults {sorted(set(self.defaults) - set(self.attrs))} name no declared attribute")
        clash = set(self.attrs) & set(self.fixed)
        if clash:
            bad(f"attributes {sorted(clash)} are both declared and fixed")
        if not self.dtypes or any(d not in ISA_DTYPES for d in self.dtypes):
            bad(f"dtypes must be a non-empty subset of {ISA_DTYPES}")
        for role, allowed in self.role_dtypes.items():
            if role not in inputs or not allowed or any(d not in ISA_DTYPES for d in allowed):
                bad(f"role_dtypes[{role!r}] must name an input and a non-empty subset of {ISA_DTYPES}")
        if self.out_dtype is None and set(inputs) <= set(self.role_dtypes):
            bad("every input has role_dtypes of its own: say the output's dtype with out_dtype")
        if isinstance(self.out_dtype, str) and self.out_dtype not in ISA_DTYPES:
            bad(f"out_dtype {self.out_dtype!r} is not one of {ISA_DTYPES}")
        if self.out_dtype is not None and not isinstance(self.out_dtype, str) and not callable(self.out_dtype):
            bad("out_dtype must be None, a dtype or a callable")
        if (self.bias or self.activations) and not any(d in FLOAT_DTYPES for d in self.dtypes):
            bad("a fused bias or activation computes in float: dtypes must include float ones")
        if self.elementwise is not None and not (callable(self.elementwise) or
                                                 (isinstance(self.elementwise, str) and ":" in self.elementwise)):
            bad("elementwise must be a callable or 'module:function'")
        if self.elementwise is not None and (self.view or self.variadic):
            bad("a view op or one with a tuple of inputs is not elementwise")
        if self.view and (len(inputs) != 1 or self.bias or self.activations):
            bad("a view op takes exactly one input and has no fused bias or activation")
        tuples = self.pattern.tuple_roles()
        if tuples and (len(inputs) != 1 or len(tuples) != 1 or self.pattern.roles().count(tuples[0]) != 1
                       or RelaxTuple(tuples[0]) not in self.pattern.args):
            bad(f"a tuple role ({tuples}) must be the family's only input, an argument of the outermost call")
        if tuples and (self.bias or self.view):
            bad("a family with a tuple of inputs has no fused bias and is not a view")
        if tuples and self.fuzz is not None:
            bad("`simaccel fuzz` does not draw families with a tuple of inputs yet; leave out `fuzz`")

    def variants(self) -> list["OpDef"]:
        """One OpDef per (bias, activation) variant, the plain op first."""
        ops = []
        for bias in (False, True) if self.bias else (False,):
            for activation in ("none", *self.activations):
                name = self.name + ("_bias" if bias else "") + ("" if activation == "none" else f"_{activation}")
                fixed = dict(self.fixed)
                if self.activations:
                    fixed["activation"] = activation
                ops.append(OpDef(name, self, tuple(self.inputs) + (("bias",) if bias else ()), bias, activation, fixed))
        return ops


@dataclass(frozen=True)
class OpDef:
    """One op of the ISA (a variant of an `OpFamily`): what Programs name and engines run."""

    name: str
    family: OpFamily
    inputs: tuple[str, ...]
    bias: bool
    activation: str
    fixed: Mapping[str, Any]

    @property
    def attrs(self) -> Mapping[str, Callable[[Any], Any]]:
        return self.family.attrs

    def roles(self, count: int) -> tuple[str, ...]:
        """The names of a call's `count` inputs: its roles, or ``data[0]``, ``data[1]``, ... for a
        tuple of inputs."""
        if self.family.variadic:
            return tuple(f"{self.inputs[0]}[{k}]" for k in range(count))
        return self.inputs

    def takes(self, count: int) -> bool:
        """Whether a call of it may have `count` inputs."""
        return count >= 1 if self.family.variadic else count == len(self.inputs)

    def all_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """The Program's attributes, the defaults of those it leaves out and the variant's fixed
        ones (what rules and kernels get)."""
        return {**self.family.defaults, **attrs, **self.fixed}

    def check_attr_names(self, names) -> str | None:
        """What is wrong with a call giving attributes `names`, or None: every declared one
        given unless it has a default, and no other."""
        missing = [a for a in self.attrs if a not in names and a not in self.family.defaults]
        if missing:
            return f"lacks attributes {missing}"
        unknown = sorted(set(names) - set(self.attrs))
        if unknown:
            return f"has unknown attributes {unknown} (it takes {list(self.attrs)})"
        return None

    def check_dtypes(self, dtypes) -> None:
        """DtypeError naming the op and the input unless inputs of `dtypes` (call order) are
        ones it takes: each one of its dtypes (or its role's own), the shared ones equal.
        Partitioning checks this before the family's `from_relax` runs, so that a family's
        rules only ever see inputs it claims to take."""
        roles = self.roles(len(dtypes))
        own = self.family.role_dtypes
        shared = [d for r, d in zip(roles, dtypes) if r.split("[")[0] not in own]
        first = shared[0] if shared else None
        fused = self.bias or self.activation != "none"  # a fused bias or activation computes in float
        for role, dtype in zip(roles, dtypes):
            allowed = own.get(role.split("[")[0], self.family.dtypes)
            if fused and role.split("[")[0] not in own:
                allowed = tuple(d for d in allowed if d in FLOAT_DTYPES)
            if dtype not in allowed:
                why = " (a fused bias or activation computes in float)" if dtype in self.family.dtypes else ""
                raise DtypeError(f"{self.name}: {role} has dtype {dtype}; it takes {' or '.join(allowed)}{why}")
            if role.split("[")[0] not in own and dtype != first:
                raise DtypeError(
                    f"{self.name}: inputs must share one dtype, got "
                    + ", ".join(f"{r}={d}" for r, d in zip(roles, dtypes) if r.split("[")[0] not in own)
                )

    def infer(self, shapes, dtypes, **attrs) -> tuple[tuple[int, ...], str]:
        """(output shape, dtype); DtypeError / ShapeError naming the op and the input (or the
        output dtype, where the family's `out_dtype` rule gives one the ISA does not have)."""
        self.check_dtypes(dtypes)
        core = self._core(len(shapes))
        shape = self._core_shape(shapes, attrs)
        if self.family.view and math.prod(shape) != math.prod(shapes[0]):
            raise OpDeclarationError(f"{self.name}: a view op, but its shape rule gives {shape} "
                                     f"({math.prod(shape)} elements) for data {tuple(shapes[0])}")
        if self.bias and not is_bias_for(self.family.bias, shapes[core], shape):
            raise ShapeError(f"{self.name}: bias {tuple(shapes[core])} is not one value per "
                             f"{'output channel' if self.family.bias == 'channel' else 'output column'} "
                             f"of the {shape} result (numpy broadcasting would change the result)")
        return shape, self.result_dtype(dtypes, attrs)

    def _core_shape(self, shapes, attrs) -> tuple[int, ...]:
        """The family's shape rule on the core inputs' `shapes`: ShapeError naming the op (the
        variant) for shapes it does not take, OpDeclarationError where the rule itself fails."""
        core = self._core(len(shapes))
        try:
            shape = self.family.infer([tuple(s) for s in shapes[:core]], **self._core_attrs(attrs))
            return tuple(d if isinstance(d, Dim) else int(d) for d in shape)
        except SymbolicError as e:  # the rule needs a size that is only known per call
            raise ShapeError(f"{self.name}: its shape rule needs the value of a symbolic size: {e}") from None
        except ShapeError as e:  # name the op (the variant) once, whatever the rule said
            text = str(e)
            text = text[len(self.family.name) + 2:] if text.startswith(self.family.name + ": ") else text
            raise ShapeError(text if text.startswith(self.name + ":") else f"{self.name}: {text}") from None
        except SimAccelError:
            raise
        except Exception as e:  # a bug in the declaration's rule, not bad input: say whose
            raise OpDeclarationError(f"{self.name}: its shape rule (infer) failed on shapes {list(shapes)} with "
                                     f"attributes {attrs}: {type(e).__name__}: {e}") from e

    def result_dtype(self, dtypes, attrs) -> str:
        """The output's dtype for inputs of `dtypes` (call order): the shared one, or `out_dtype`'s.

        Where the `out_dtype` rule gives a dtype the ISA does not compute in (a cast to
        float64, a ``full`` of bfloat16), DtypeError saying what the rule gave: the call stays
        on TVM. A rule that fails, or gives something that is no dtype, is the declaration's
        bug: OpDeclarationError.
        """
        rule = self.family.out_dtype
        if rule is None:
            own = self.family.role_dtypes
            return next(d for r, d in zip(self.roles(len(dtypes)), dtypes) if r.split("[")[0] not in own)
        if isinstance(rule, str):
            return rule
        inputs = ", ".join(f"{r}={d}" for r, d in zip(self.roles(len(dtypes)), dtypes))
        core_attrs = self._core_attrs(attrs)
        given_for = f"for inputs {inputs}" + (f" and attributes {core_attrs}" if core_attrs else "")
        try:
            given = rule(list(dtypes), **core_attrs)
        except SimAccelError:
            raise
        except Exception as e:  # a bug in the declaration's rule, not bad input: say whose
            raise OpDeclarationError(f"{self.name}: its out_dtype rule failed {given_for}: {type(e).__name__}: {e}") from e
        dtype = str(given) if isinstance(given, (str, np.dtype)) else None
        if dtype is None or not is_dtype_name(dtype):
            raise OpDeclarationError(f"{self.name}: its out_dtype rule gave {given!r} {given_for}, which is no dtype")
        if dtype not in ISA_DTYPES:
            raise DtypeError(f"{self.name}: its out_dtype rule gave {dtype} {given_for}, a dtype the ISA does not "
                             f"compute in ({', '.join(ISA_DTYPES)})")
        return dtype

    def reference(self, *arrays, **attrs) -> np.ndarray:
        """The numpy result: the family's reference, then the fused bias and activation, in float32.

        The family's own result is checked first (`_check_result`): a numpy array of the
        output's shape in a dtype that casts to the output's; else OpDeclarationError naming
        the op, what the reference returned and what the output is.
        """
        core = self._core(len(arrays))
        y = self.family.reference(*arrays[:core], **self._core_attrs(attrs))
        plain = self.family.out_dtype is None and not self.family.role_dtypes  # most ops: the first input's
        out_dtype = (np.asarray(arrays[0]).dtype if plain else
                     np.dtype(self.result_dtype([str(np.asarray(a).dtype) for a in arrays], attrs)))
        self._check_result(y, arrays, attrs, out_dtype)
        if self.bias or self.activation != "none":
            y = np.asarray(y, dtype=np.float32)
            if self.bias:
                b = np.asarray(arrays[core], dtype=np.float32).reshape(-1)
                y = y + (b.reshape(1, -1, 1, 1) if self.family.bias == "channel" else b)
            y = activate(y, self.activation)
        return np.asarray(y).astype(out_dtype)

    def _check_result(self, result, arrays, attrs, out_dtype: np.dtype) -> None:
        """OpDeclarationError unless the family's reference gave a numpy array (or numpy scalar)
        of the output's shape (the family's shape rule on `arrays`) in a float, integer or bool
        dtype, which is cast to the output's as a kernel's store rounds (the built-in float ops
        compute in float32 for any input, integers included). A result of another shape is
        never broadcast: numpy would spread a wrong answer silently."""
        shape = self._core_shape([np.shape(a) for a in arrays], attrs)
        wanted = f"an array of shape {shape} and dtype {out_dtype}"
        inputs = ", ".join(f"{r}={np.shape(a)} {np.asarray(a).dtype}"
                           for r, a in zip(self.roles(len(arrays)), arrays))

        def bad(returned: str):
            raise OpDeclarationError(f"{self.name}: its numpy reference returned {returned} for inputs {inputs}; "
                                     f"the output is {wanted}")

        if not isinstance(result, (np.ndarray, np.generic)):
            bad(f"{_describe(result)}, not a numpy array")
        if result.shape != shape:
            bad(f"an array of shape {result.shape}" + (" (numpy broadcasting would spread it silently)"
                                                       if _broadcasts(result.shape, shape) else ""))
        if result.dtype.kind not in "biu" and not is_float(result.dtype):
            bad(f"an array of dtype {result.dtype}, which does not cast to {out_dtype} (an output takes a float, "
                "integer or bool result)")

    def kernel(self, target: "LaunchTarget", out, *arrays, **attrs) -> int:
        """Launch the family's kernel: `arrays` in role order (the bias last), every attribute."""
        return _launcher(self.family.kernel)(target, out, *arrays, **attrs)

    def _core(self, count: int) -> int:
        """How many of a call's `count` inputs the family's own rules take (not the fused bias)."""
        return count if self.family.variadic else len(self.family.inputs)

    def _core_attrs(self, attrs):
        """What the family's own infer and reference take: not the fused activation."""
        return {k: v for k, v in attrs.items() if k != "activation" or not self.family.activations}


def _describe(value) -> str:
    """What a reference returned, in a few words on one line: None, ``float (2.0)``, ``a tuple of 2
    (array (2, 3) float32, array (2, 3) float32)``."""
    if value is None:
        return "None"
    if isinstance(value, (tuple, list)):
        items = [f"array {v.shape} {v.dtype}" if isinstance(v, np.ndarray) else type(v).__name__ for v in value[:3]]
        return f"a {type(value).__name__} of {len(value)} ({', '.join(items)}{', ...' if len(value) > 3 else ''})"
    text = " ".join(repr(value).split())
    return f"{type(value).__name__} ({text if len(text) <= 40 else text[:37] + '...'})"


def _broadcasts(shape, target) -> bool:
    try:
        return broadcast_shapes(tuple(shape), tuple(target)) == tuple(target)
    except ValueError:
        return False


class LaunchTarget(Protocol):
    """What an op's launcher (`OpFamily.kernel`) launches through: `launch` runs a module-level
    kernel function with a grid and a block on the target's stream, `reshape` views one of its
    arrays under another shape (never a copy), and with `dtype` as another dtype of the same
    item size, `workspace` gives scratch memory for the op's own launches (a shape of plain
    numbers; the region's one workspace, which its ops share: simaccel.launch_plan).
    simaccel.kernels.target.KernelTarget ("sim", "cuda") is the one calls replay launches on;
    simaccel.launch_plan records a launcher's launches once per Program on another."""

    name: str
    stream: Any

    def launch(self, fn, grid, block, *args, shared_bytes: int = 0) -> None: ...

    def reshape(self, array, shape, dtype=None): ...

    def workspace(self, shape, dtype): ...


_LAUNCHERS: dict[str, Callable] = {}


def _launcher(kernel) -> Callable:
    """`kernel` itself, or the function a ``"module:function"`` names (imported once)."""
    if callable(kernel):
        return kernel
    launcher = _LAUNCHERS.get(kernel)
    if launcher is None:
        module, _, function = kernel.partition(":")
        launcher = _LAUNCHERS[kernel] = getattr(importlib.import_module(module), function)
    return launcher
