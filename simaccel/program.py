"""Program: what the codegen makes of one offloaded region and what the runtime executes.

A Program lists its tensors (shape, dtype), which of them are the region's inputs and DPS
outputs (in call order), and the ops in execution order, each reading tensor ids and
writing one. Tensors that are neither inputs nor outputs are intermediates, allocated by
the runtime once per plan, or constants (a `value`: the region's own scalars, filled once
per plan). The JSON form is versioned; the same Program is executed
in-process after `tvm.compile` and after export and load.

A Program with symbolic shapes (`vars`: its size vars, each with its bounds) has dims that are
`simaccel.shapes.Dim` expressions over them (`n*s`, `m + 1`), in its tensors' shapes and its
ops' shape attributes. It is checked once with the dims as expressions (the shape rules run on
them) and against the profile at the vars' upper bounds; each call binds the vars from the
tensors it is given (`bind_tensors`, naming the var, its two values and the two tensors where
they disagree) and runs the static Program of those sizes (`bind`), checked again for them.
Version 2 of the JSON form adds `vars` and dims written as text; a static Program is still
written as version 1, byte for byte as before.

`requires` (version 2): equalities of sizes its ops' shape rules hold for only at some values
of the vars (a matmul of (31, n) by (5, 8) needs n == 5; simaccel.requirements). `validate`
runs the rules assuming such equalities and checks that the Program requires each one it
needed (`requiring` adds them); each call checks them once its vars are bound.

`sanitize` true (`build(..., sanitize=True)`) makes every call of the region run under the
sanitizer (simaccel.debug.sanitize); the JSON has the field only when it is true, so the
fingerprints of other Programs are what they were.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ProgramError, ShapeError, SimAccelError
from .kernels.dtypes import is_float
from .profile import DEFAULT_PROFILE, DeviceProfile
from .requirements import RELATIONS, Requirement, assuming, same_shape
from .shapes import (Dim, SymbolicError, at_upper_bounds, bind_shape, bind_vars, parse, shape_text, shape_vars,
                     sizes_text, var_name)

FORMAT = "simaccel.program"
VERSION = 2  # what this simaccel writes for a symbolic Program and reads; a static one is written as 1
STATIC_VERSION = 1


@dataclass(frozen=True)
class SizeVar:
    """A size var of a symbolic Program: its name and the values it may take, `lower` to
    `upper` inclusive (`upper` None: no bound given; `tir_var_lower_bound` / `_upper_bound`)."""

    name: str
    lower: int = 0
    upper: int | None = None

    def __str__(self) -> str:
        return f"{self.name} in [{self.lower}, {'inf' if self.upper is None else self.upper}]"

    def to_dict(self) -> dict:
        entry = {"name": self.name, "lower": self.lower}
        if self.upper is not None:
            entry["upper"] = self.upper
        return entry


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a Program. `value` is set for a constant: a 0-d tensor the region itself
    holds (a scalar constant of an op, ``x * 0.5``'s 0.5), filled once per plan, never an
    argument of the region."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    value: Any = None

    @functools.cached_property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        """Its bytes (a static shape only: a symbolic one raises SymbolicError)."""
        count = 1
        for dim in self.shape:
            count *= int(dim)
        return count * self.np_dtype.itemsize

    def __str__(self) -> str:
        text = f"{self.name}: {self.shape} {self.dtype}"
        return text if self.value is None else f"{text} = {self.value!r}"

    def value_array(self) -> np.ndarray:
        """The constant as a 0-d array of its dtype."""
        return np.asarray(self.value, dtype=self.np_dtype)

    def to_dict(self) -> dict:
        entry = {"name": self.name, "shape": _json_dims(self.shape), "dtype": self.dtype}
        if self.value is not None:
            entry["value"] = _json_scalar(self.value)
        return entry


@dataclass(frozen=True)
class OpNode:
    op: str
    inputs: tuple[int, ...]
    output: int
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Program:
    name: str
    tensors: tuple[TensorSpec, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    ops: tuple[OpNode, ...]
    sanitize: bool = False
    vars: tuple[SizeVar, ...] = ()
    # Shape arguments of a symbolic region's call (TVM passes a region the values of size vars its
    # tensors do not show plainly, as `R.shape([s27, s77])`): (position among the call's
    # arguments, dims it holds). The tensors fill the other positions, inputs then outputs.
    shape_args: tuple[tuple[int, tuple], ...] = ()
    requires: tuple[Requirement, ...] = ()

    @property
    def intermediates(self) -> tuple[int, ...]:
        """Tensors the ops write that are not outputs (the runtime allocates them per plan)."""
        boundary = set(self.inputs) | set(self.outputs) | set(self.constants)
        return tuple(i for i in range(len(self.tensors)) if i not in boundary)

    @property
    def constants(self) -> tuple[int, ...]:
        """Tensors with a `value`: the region's own scalar constants (filled once per plan)."""
        return tuple(i for i, t in enumerate(self.tensors) if t.value is not None)

    @functools.cached_property
    def views(self) -> dict[int, int]:
        """Intermediates that are views of another tensor's memory: tensor id -> the id of the
        tensor that owns the memory (never itself a view).

        The output of a view op (a reshape: same elements, same order) is not computed when it
        is an intermediate: it is the input's memory under another shape, so no kernel runs
        and nothing is copied. A view op whose output is a region output copies, since that
        output is the caller's own buffer.
        """
        from .ops import get_op

        boundary = set(self.inputs) | set(self.outputs)
        views: dict[int, int] = {}
        for node in self.ops:
            if node.output not in boundary and get_op(node.op).family.view:
                views[node.output] = views.get(node.inputs[0], node.inputs[0])
        return views

    @functools.cached_property
    def derived(self) -> dict:
        """Values the layers above derive from this Program, kept as long as it lives, by key
        (simaccel.launch_plan keeps its LaunchPlans here: recorded once per Program)."""
        return {}

    # -- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict:
        data = {
            "format": FORMAT,
            "version": VERSION if self.vars else STATIC_VERSION,
            "name": self.name,
            "tensors": [t.to_dict() for t in self.tensors],
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "ops": [{"op": n.op, "inputs": list(n.inputs), "output": n.output, "attrs": _json_attrs(n.attrs)}
                    for n in self.ops],
        }
        if self.sanitize is not False:  # only when set: other Programs' JSON and fingerprints stay the same
            data["sanitize"] = self.sanitize
        if self.vars:
            data["vars"] = [v.to_dict() for v in self.vars]
        if self.shape_args:
            data["shape_args"] = [{"position": k, "shape": _json_dims(dims)} for k, dims in self.shape_args]
        if self.requires:
            data["requires"] = [str(r) for r in self.requires]
        return data

    def to_json(self) -> str:
        return self._json

    def fingerprint(self) -> str:
        """Short content hash: two Programs with the same fingerprint execute the same way."""
        return self._fingerprint

    @functools.cached_property
    def _json(self) -> str:
        try:
            return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ProgramError(f"Program {self.name!r} cannot be written as JSON: {e}") from e

    @functools.cached_property
    def _fingerprint(self) -> str:
        return hashlib.sha256(self._json.encode()).hexdigest()[:16]

    @classmethod
    def from_json(cls, text: str) -> "Program":
        try:
            data = json.loads(text)
        except (TypeError, ValueError, RecursionError) as e:
            raise ProgramError(f"Program is not valid JSON: {e}") from e
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict) -> "Program":
        """The Program `data` describes; ProgramError naming the field for anything malformed.

        Types are checked strictly (a dim is an int, never a string, float or bool; ids are
        ints; names are strings), so nothing is silently reinterpreted.
        """
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ProgramError(f"not a simaccel Program (expected format {FORMAT!r})")
        name = data.get("name")
        label = repr(name) if isinstance(name, str) else "(unnamed)"
        version = data.get("version")
        if type(version) is not int:
            raise ProgramError(f"Program {label}: version must be an integer, got {version!r} ({type(version).__name__})")
        if version not in (STATIC_VERSION, VERSION):
            raise ProgramError(
                f"Program {label} has version {version}, this simaccel reads versions {STATIC_VERSION} and "
                f"{VERSION}: rebuild the model with this simaccel, or install the simaccel version that built it"
            )
        read = _Reader(label, symbolic=version >= 2)
        read.keys(data, "Program", {"format", "version", "name", "tensors", "inputs", "outputs", "ops"},
                  {"sanitize", "vars", "shape_args", "requires"} if version >= 2 else {"sanitize"})
        size_vars = read.size_vars(data.get("vars", []))
        shape_args = []
        for i, entry in enumerate(read.items(data.get("shape_args", []), "shape_args")):
            read.keys(entry, f"shape_args[{i}]", {"position", "shape"})
            shape_args.append((read.integer(entry["position"], f"shape_args[{i}].position"),
                               read.dims(entry["shape"], f"shape_args[{i}].shape")))
        requires = tuple(read.requirement(text, f"requires[{i}]")
                         for i, text in enumerate(read.items(data.get("requires", []), "requires")))
        tensors = []
        for i, t in enumerate(read.items(data["tensors"], "tensors")):
            where = f"tensors[{i}]"
            read.keys(t, where, {"name", "shape", "dtype"}, optional={"value"})
            dtype = read.dtype(t["dtype"], f"{where}.dtype")
            value = read.scalar(t["value"], dtype, f"{where}.value") if "value" in t else None
            tensors.append(TensorSpec(read.text(t["name"], f"{where}.name"), read.dims(t["shape"], f"{where}.shape"),
                                      dtype, value))
        ops = []
        for i, n in enumerate(read.items(data["ops"], "ops")):
            where = f"ops[{i}]"
            read.keys(n, where, {"op", "inputs", "output", "attrs"})
            op = read.text(n["op"], f"{where}.op")
            ops.append(OpNode(op, read.ids(n["inputs"], f"{where}.inputs"),
                              read.integer(n["output"], f"{where}.output"), read.attrs(op, n["attrs"], f"{where}.attrs")))
        return cls(
            name=read.text(name, "name"),
            tensors=tuple(tensors),
            inputs=read.ids(data["inputs"], "inputs"),
            outputs=read.ids(data["outputs"], "outputs"),
            ops=tuple(ops),
            sanitize=read.boolean(data.get("sanitize", False), "sanitize"),
            vars=size_vars,
            shape_args=tuple(shape_args),
            requires=requires,
        )

    # -- validation ----------------------------------------------------------------------
    def validate(self, profile: DeviceProfile = DEFAULT_PROFILE) -> "Program":
        """Check ids, dataflow, every op's shape rule and the profile; return self.

        Raises ProgramError for structure problems, and the op's own SimAccelError
        (ShapeError, DtypeError, UnsupportedOpError) for an op the accelerator cannot run; a
        ShapeError where a rule holds only at sizes the Program does not require (`requiring`).
        """
        unrequired = self._unrequired(self._check(profile))
        if unrequired:
            requirement, where = unrequired[0]
            raise ShapeError(f"Program {self.name}: {where}'s shape rule holds only where {requirement}, which the "
                             "Program does not require")
        return self

    def requiring(self, profile: DeviceProfile = DEFAULT_PROFILE) -> "Program":
        """This Program, validated, with the requirements its ops' shape rules need added to `requires`."""
        unrequired = self._unrequired(self._check(profile))
        if not unrequired:
            return self
        return dataclasses.replace(self, requires=self.requires + tuple(r for r, _ in unrequired)).validate(profile)

    def _unrequired(self, needed: dict) -> list:
        declared = {r.key for r in self.requires}
        return [(r, where) for key, (r, where) in needed.items() if key not in declared]

    def _check(self, profile: DeviceProfile) -> dict:
        """What `validate` checks; returns the requirements the shape rules needed, by key, each
        with the op that first needed it ("op 0 (simaccel.matmul)")."""
        from .ops import get_op

        count = len(self.tensors)
        if not isinstance(self.sanitize, bool):
            raise ProgramError(f"Program {self.name}: sanitize must be true or false, got {self.sanitize!r}")

        def check_id(i: int, where: str) -> None:
            if not 0 <= i < count:
                raise ProgramError(f"Program {self.name}: {where} refers to tensor {i}, but there are {count}")

        for i in self.inputs + self.outputs:
            check_id(i, "the boundary")
        if len(set(self.inputs + self.outputs)) != len(self.inputs) + len(self.outputs):
            raise ProgramError(f"Program {self.name}: a tensor is listed twice among inputs and outputs")
        if not self.outputs:
            raise ProgramError(f"Program {self.name}: has no outputs")
        self._check_vars()
        self._check_bounded(profile)
        bounds = {v.name: (v.lower, v.upper) for v in self.vars}
        needed: dict = {}
        for i in self.constants:
            spec = self.tensors[i]
            if i in self.inputs or i in self.outputs:
                raise ProgramError(f"Program {self.name}: constant {spec.name} cannot be an input or output of the region")
            if spec.shape != ():
                raise ProgramError(f"Program {self.name}: constant {spec.name} must be 0-d (a scalar), got shape {spec.shape}")

        ready = set(self.inputs) | set(self.constants)
        for index, node in enumerate(self.ops):
            where = f"op {index} ({node.op})"
            op = get_op(node.op)
            reason = profile.why_not_op(node.op, op.family.name)
            if reason:
                raise ProgramError(f"Program {self.name}: {reason}")
            for i in node.inputs + (node.output,):
                check_id(i, where)
            if not op.takes(len(node.inputs)):
                wanted = f"one or more inputs ({op.inputs[0]}...)" if op.family.variadic else f"{len(op.inputs)} inputs {op.inputs}"
                raise ProgramError(f"Program {self.name}: {where} takes {wanted}, got {len(node.inputs)}")
            self._check_attrs(where, op, node.attrs)
            unready = [self.tensors[i].name for i in node.inputs if i not in ready]
            if unready:
                raise ProgramError(f"Program {self.name}: {where} reads {unready} before they are written")
            if node.output in ready:
                raise ProgramError(f"Program {self.name}: {where} writes {self.tensors[node.output].name}, already written")
            ins = [self.tensors[i] for i in node.inputs]
            out = self.tensors[node.output]
            for role, spec in zip(op.roles(len(ins)), ins):
                profile.check_tensor(node.op, role, self.largest(spec.shape), spec.dtype)
            profile.check_tensor(node.op, "output", self.largest(out.shape), out.dtype)
            try:
                with assuming(bounds) as assumed:
                    shape, dtype = op.infer([t.shape for t in ins], [t.dtype for t in ins], **op.all_attrs(node.attrs))
            except SymbolicError as e:
                raise ShapeError(f"Program {self.name}: {where}'s shape rule needs a size's value: {e}") from e
            except (TypeError, ValueError, IndexError, ZeroDivisionError) as e:
                raise ProgramError(f"Program {self.name}: {where} cannot be checked with attributes {node.attrs}: {e}") from e
            for key, requirement in assumed.made.items():
                needed.setdefault(key, (requirement, where))
            if not same_shape(shape, out.shape, assumed.made) or dtype != out.dtype:
                raise ProgramError(
                    f"Program {self.name}: {where} produces {tuple(shape)} {dtype}, but its output "
                    f"{out} is declared differently"
                )
            ready.add(node.output)
        unwritten = [self.tensors[i].name for i in self.outputs if i not in ready]
        if unwritten:
            raise ProgramError(f"Program {self.name}: outputs {unwritten} are never written")
        if profile.max_region_bytes is not None:
            reason = profile.why_not_region(self.nbytes, f"Program {self.name}")
            if reason:
                raise ProgramError(reason)
        self.derived["requirement_ops"] = {key: where for key, (_, where) in needed.items()}
        return needed

    @property
    def nbytes(self) -> int:
        """Bytes of all its tensors (views take none of their own): what the region needs of the
        accelerator's scratchpad; a symbolic Program's at its vars' upper bounds."""
        return sum(int(math.prod(self.largest(t.shape))) * t.np_dtype.itemsize
                   for i, t in enumerate(self.tensors) if i not in self.views)

    # -- symbolic shapes -----------------------------------------------------------------
    @functools.cached_property
    def upper_bounds(self) -> dict[str, int | None]:
        return {v.name: v.upper for v in self.vars}

    def largest(self, shape) -> tuple[int, ...]:
        """`shape` at the vars' upper bounds (a static shape as it is): what the profile's limits
        are checked against at build time. A var with no upper bound counts at its lower bound
        here; each call's sizes are checked against every limit when the call binds them."""
        return at_upper_bounds(shape, {v.name: (v.lower, v.upper) for v in self.vars})

    def _check_bounded(self, profile: DeviceProfile) -> None:
        """A profile that limits bytes (per tensor, per region) needs every var bounded above."""
        unbounded = [v.name for v in self.vars if v.upper is None]
        if unbounded and profile.limits_bytes:
            raise ShapeError(f"Program {self.name}: size var {unbounded[0]} has no upper bound, and profile "
                             f"{profile.name} limits the bytes of tensors or regions, checked at the upper bounds")

    def _check_vars(self) -> None:
        """The vars: distinct names, sane bounds; every dim reads only them; each is a dim of an
        input or output, so that a call can bind it."""
        names = [v.name for v in self.vars]
        if len(set(names)) != len(names):
            raise ProgramError(f"Program {self.name}: a size var is declared twice ({names})")
        for v in self.vars:
            if type(v.lower) is not int or v.lower < 0 or (v.upper is not None and (type(v.upper) is not int
                                                                                   or v.upper < v.lower)):
                raise ProgramError(f"Program {self.name}: size var {v} has bounds that are not 0 <= lower <= upper")
        used = frozenset().union(*(shape_vars(t.shape) for t in self.tensors),
                                 *(shape_vars(v) for n in self.ops for v in n.attrs.values()
                                   if isinstance(v, (list, tuple))))
        undeclared = sorted(used - set(names))
        if undeclared:
            raise ProgramError(f"Program {self.name}: dims read size vars {undeclared}, which it does not declare")
        bounds = {v.name: (v.lower, v.upper) for v in self.vars}
        for r in self.requires:
            if not r.vars() <= set(names):
                raise ProgramError(f"Program {self.name}: requirement {r} reads size vars "
                                   f"{sorted(r.vars() - set(names))}, which it does not declare")
            if r.relation not in RELATIONS:
                raise ProgramError(f"Program {self.name}: requirement {r} has relation {r.relation!r}, not one of "
                                   f"{RELATIONS}")
            if r.holds_nowhere(bounds):
                raise ShapeError(f"Program {self.name}: requirement {r} holds at no sizes within the vars' bounds")
        boundary = [self.tensors[i] for i in self.inputs + self.outputs]
        bindable = {var_name(d) for t in boundary for d in t.shape} - {None}
        bindable |= {var_name(d) for _, dims in self.shape_args for d in dims} - {None}
        positions = [k for k, _ in self.shape_args]
        arity = len(self.inputs) + len(self.outputs) + len(positions)
        if len(set(positions)) != len(positions) or not all(0 <= k < arity for k in positions):
            raise ProgramError(f"Program {self.name}: shape argument positions {positions} are not distinct "
                               f"positions among its {arity} arguments")
        unbound = sorted(set(names) - bindable)
        if unbound:
            raise ProgramError(f"Program {self.name}: size var {unbound[0]} is no dim of an input or output, so no "
                               "call can bind it")

    def bind_tensors(self, shapes, shape_values=()) -> dict[str, int]:
        """The vars' values from the shapes of one call's tensors (inputs, then outputs) and the
        values of its shape arguments (`shape_args` order), checked: every dim of every tensor is
        what its expression gives, and each var is in its bounds. ShapeError naming the region,
        the tensor, the var and the values where they are not."""
        boundary = [self.tensors[i] for i in self.inputs + self.outputs]
        boundary += [TensorSpec(f"shape argument {k}", dims, "int64") for k, dims in self.shape_args]
        shapes = list(shapes) + [tuple(v) for v in shape_values]
        for spec, shape in zip(boundary, shapes):
            if len(shape) != len(spec.shape):
                raise ShapeError(f"region {self.name}: {spec.name} has shape {tuple(shape)}, expected rank "
                                 f"{len(spec.shape)} ({shape_text(spec.shape)})")
        values, source = bind_vars(((spec.name, spec.shape, shape) for spec, shape in zip(boundary, shapes)),
                                   f"region {self.name}")
        for v in self.vars:
            value = values[v.name]
            if value < v.lower or (v.upper is not None and value > v.upper):
                raise ShapeError(f"region {self.name}: size var {v.name} = {value} (from {source[v.name]}) is outside "
                                 f"its bounds [{v.lower}, {'inf' if v.upper is None else v.upper}]")
        for spec, shape in zip(boundary, shapes):
            want = bind_shape(spec.shape, values)
            if tuple(int(d) for d in shape) != want:
                raise ShapeError(f"region {self.name}: {spec.name} has shape {tuple(shape)}, but "
                                 f"{shape_text(spec.shape)} is {want} where {sizes_text(values)}")
        for r in self.requires:
            if not r.holds(values):
                given = "; ".join(f"{name} = {values[name]} (from {source[name]})" for name in sorted(r.vars()))
                by = self.derived.get("requirement_ops", {}).get(r.key, "an op")
                raise ShapeError(f"region {self.name}: {given} breaks {r}, which {by}'s shape rule needs at every call")
        return values

    def bind(self, values: dict[str, int]) -> "Program":
        """The static Program this one is where each size var has its value in `values` (from
        `bind_tensors`): its shapes and shape attributes evaluated. Its name is this one's."""
        from .ops import get_op

        if not self.vars:
            return self
        tensors = tuple(TensorSpec(t.name, bind_shape(t.shape, values), t.dtype, t.value) for t in self.tensors)
        ops = []
        for node in self.ops:
            kinds = get_op(node.op).attrs
            attrs = {k: bind_shape(v, values) if _is_shape_attr(kinds.get(k)) else v for k, v in node.attrs.items()}
            ops.append(OpNode(node.op, node.inputs, node.output, attrs))
        return Program(self.name, tensors, self.inputs, self.outputs, tuple(ops), self.sanitize)

    def _check_attrs(self, where: str, op, attrs) -> None:
        """Exactly the op's attributes, each of its declared kind (simaccel.ops.attrs)."""
        if not isinstance(attrs, dict):
            raise ProgramError(f"Program {self.name}: {where} attributes must be a mapping, got {attrs!r}")
        wrong = op.check_attr_names(attrs)
        if wrong:
            raise ProgramError(f"Program {self.name}: {where} {wrong}")
        for name, kind in op.attrs.items():
            if name not in attrs:  # left out: it has a default (simaccel.ops.declare OpFamily.defaults)
                continue
            try:
                kind(attrs[name])
            except ValueError as e:
                raise ProgramError(f"Program {self.name}: {where} attribute {name} {e}") from e


MAX_DIM = 2**63 - 1


class _Reader:
    """Strict readers for the fields of a Program's JSON form (each raises ProgramError);
    `symbolic` (version 2): dims may be size expressions, written as text."""

    def __init__(self, label: str, symbolic: bool = False):
        self.label = label
        self.symbolic = symbolic

    def size_vars(self, value) -> tuple[SizeVar, ...]:
        found = []
        for i, v in enumerate(self.items(value, "vars")):
            where = f"vars[{i}]"
            self.keys(v, where, {"name", "lower"}, optional={"upper"})
            name = self.text(v["name"], f"{where}.name")
            if not name.isidentifier():
                self.fail(f"{where}.name", f"must be an identifier, got {name!r}")
            upper = self.integer(v["upper"], f"{where}.upper") if "upper" in v else None
            found.append(SizeVar(name, self.integer(v["lower"], f"{where}.lower"), upper))
        return tuple(found)

    def dim(self, value, what: str):
        """One dim: an int, or (symbolic) a size expression's text."""
        if self.symbolic and isinstance(value, str):
            try:
                return parse(value)
            except ValueError as e:
                self.fail(what, str(e))
        return self.integer(value, what)

    def attrs(self, op: str, value, what: str) -> dict:
        """An op's attributes; in a symbolic Program, the dims of its shape attributes parsed."""
        if not isinstance(value, dict):
            self.fail(what, f"must be an object, got {value!r}")
        if not self.symbolic:
            return dict(value)
        from .ops import get_op

        try:
            kinds = get_op(op).attrs
        except SimAccelError:
            return dict(value)  # the validation names the unknown op
        return {k: [self.dim(d, f"{what}.{k}[{i}]") for i, d in enumerate(v)]
                if _is_shape_attr(kinds.get(k)) and isinstance(v, list) else v for k, v in value.items()}

    def fail(self, what: str, problem: str):
        raise ProgramError(f"Program {self.label}: {what} {problem}")

    def keys(self, obj, what: str, expected: set, optional: frozenset = frozenset()) -> None:
        if not isinstance(obj, dict):
            self.fail(what, f"must be an object, got {obj!r}")
        missing, unknown = expected - set(obj), set(obj) - expected - set(optional)
        if missing:
            self.fail(what, f"lacks {sorted(missing)}")
        if unknown:
            self.fail(what, f"has unknown fields {sorted(unknown)}")

    def items(self, value, what: str) -> list:
        if not isinstance(value, list):
            self.fail(what, f"must be a list, got {value!r}")
        return value

    def text(self, value, what: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(what, f"must be a non-empty string, got {value!r}")
        return value

    def boolean(self, value, what: str) -> bool:
        if type(value) is not bool:
            self.fail(what, f"must be true or false, got {value!r} ({type(value).__name__})")
        return value

    def integer(self, value, what: str) -> int:
        if type(value) is not int:
            self.fail(what, f"must be an integer, got {value!r} ({type(value).__name__})")
        return value

    def ids(self, value, what: str) -> tuple[int, ...]:
        return tuple(self.integer(v, f"{what}[{i}]") for i, v in enumerate(self.items(value, what)))

    def dims(self, value, what: str) -> tuple:
        dims = tuple(self.dim(v, f"{what}[{i}]") for i, v in enumerate(self.items(value, what)))
        for i, d in enumerate(dims):
            if not isinstance(d, Dim) and not 0 <= d <= MAX_DIM:
                self.fail(f"{what}[{i}]", f"must be between 0 and 2**63-1, got {d}")
        return dims

    def requirement(self, value, what: str) -> Requirement:
        try:
            return Requirement.parse(self.text(value, what))
        except ValueError as e:
            self.fail(what, str(e))

    def dtype(self, value, what: str) -> str:
        self.text(value, what)
        try:
            np.dtype(value)
        except TypeError:
            self.fail(what, f"is not a dtype: {value!r}")
        return value

    def scalar(self, value, dtype: str, what: str):
        """A constant's value: a JSON number (or true/false for bool, "nan"/"inf"/"-inf" for a
        float) that its dtype holds exactly as written."""
        kind = "f" if is_float(dtype) else np.dtype(dtype).kind  # bfloat16's numpy kind is "V"
        if kind == "f" and value in _NON_FINITE:
            return float(value)
        ok = {"b": type(value) is bool, "i": type(value) is int, "u": type(value) is int,
              "f": type(value) in (int, float)}.get(kind, False)
        if not ok:
            self.fail(what, f"is not a {dtype} value: {value!r}")
        if kind in "iu":
            info = np.iinfo(dtype)
            if not info.min <= value <= info.max:
                self.fail(what, f"{value!r} does not fit {dtype}")
            return value
        if kind == "f":
            with np.errstate(all="ignore"):
                if not np.isfinite(value) or not np.isfinite(np.asarray(value, dtype=dtype)):
                    self.fail(what, f"{value!r} does not fit {dtype}")
            return float(value)
        return value


_NON_FINITE = ("nan", "inf", "-inf")


def _is_shape_attr(kind) -> bool:
    from .ops.attrs import shape

    return kind is shape


def _json_dims(shape) -> list:
    return [str(d) if isinstance(d, Dim) else d for d in shape]


def _json_attrs(attrs: dict) -> dict:
    """Attributes as JSON holds them: the symbolic dims of shape attributes as their text."""
    if not any(isinstance(v, (list, tuple)) and any(isinstance(d, Dim) for d in v) for v in attrs.values()):
        return attrs
    return {k: _json_dims(v) if isinstance(v, (list, tuple)) else v for k, v in attrs.items()}


def _json_scalar(value):
    """`value` as the Program's JSON holds it (non-finite floats as strings)."""
    if isinstance(value, float) and not np.isfinite(value):
        return "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")
    return value
