"""Program: what the codegen makes of one offloaded region and what the runtime executes.

A Program lists its tensors (shape, dtype), which of them are the region's inputs and DPS
outputs (in call order), and the ops in execution order, each reading tensor ids and
writing one. Tensors that are neither inputs nor outputs are intermediates, allocated by
the runtime once per plan, or constants (a `value`: the region's own scalars, filled once
per plan). The JSON form is versioned; the same Program is executed
in-process after `tvm.compile` and after export and load.

`sanitize` true (`build(..., sanitize=True)`) makes every call of the region run under the
sanitizer (simaccel.debug.sanitize); the JSON has the field only when it is true, so the
fingerprints of other Programs are what they were.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ProgramError
from .profile import DEFAULT_PROFILE, DeviceProfile

FORMAT = "simaccel.program"
VERSION = 1


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
        count = 1
        for dim in self.shape:
            count *= dim
        return count * self.np_dtype.itemsize

    def __str__(self) -> str:
        text = f"{self.name}: {self.shape} {self.dtype}"
        return text if self.value is None else f"{text} = {self.value!r}"

    def value_array(self) -> np.ndarray:
        """The constant as a 0-d array of its dtype."""
        return np.asarray(self.value, dtype=self.np_dtype)

    def to_dict(self) -> dict:
        entry = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
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
            "version": VERSION,
            "name": self.name,
            "tensors": [t.to_dict() for t in self.tensors],
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "ops": [{"op": n.op, "inputs": list(n.inputs), "output": n.output, "attrs": n.attrs} for n in self.ops],
        }
        if self.sanitize is not False:  # only when set: other Programs' JSON and fingerprints stay the same
            data["sanitize"] = self.sanitize
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
        if version != VERSION:
            raise ProgramError(
                f"Program {label} has version {version}, this simaccel reads version {VERSION}: rebuild the "
                "model with this simaccel, or install the simaccel version that built it"
            )
        read = _Reader(label)
        read.keys(data, "Program", {"format", "version", "name", "tensors", "inputs", "outputs", "ops"}, {"sanitize"})
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
            if not isinstance(n["attrs"], dict):
                raise ProgramError(f"Program {label}: {where}.attrs must be an object, got {n['attrs']!r}")
            ops.append(OpNode(read.text(n["op"], f"{where}.op"), read.ids(n["inputs"], f"{where}.inputs"),
                              read.integer(n["output"], f"{where}.output"), dict(n["attrs"])))
        return cls(
            name=read.text(name, "name"),
            tensors=tuple(tensors),
            inputs=read.ids(data["inputs"], "inputs"),
            outputs=read.ids(data["outputs"], "outputs"),
            ops=tuple(ops),
            sanitize=read.boolean(data.get("sanitize", False), "sanitize"),
        )

    # -- validation ----------------------------------------------------------------------
    def validate(self, profile: DeviceProfile = DEFAULT_PROFILE) -> "Program":
        """Check ids, dataflow, every op's shape rule and the profile; return self.

        Raises ProgramError for structure problems, and the op's own SimAccelError
        (ShapeError, DtypeError, UnsupportedOpError) for an op the accelerator cannot run.
        """
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
                profile.check_tensor(node.op, role, spec.shape, spec.dtype)
            profile.check_tensor(node.op, "output", out.shape, out.dtype)
            try:
                shape, dtype = op.infer([t.shape for t in ins], [t.dtype for t in ins], **op.all_attrs(node.attrs))
            except (TypeError, ValueError, IndexError, ZeroDivisionError) as e:
                raise ProgramError(f"Program {self.name}: {where} cannot be checked with attributes {node.attrs}: {e}") from e
            if tuple(shape) != out.shape or dtype != out.dtype:
                raise ProgramError(
                    f"Program {self.name}: {where} produces {tuple(shape)} {dtype}, but its output "
                    f"{out} is declared differently"
                )
            ready.add(node.output)
        unwritten = [self.tensors[i].name for i in self.outputs if i not in ready]
        if unwritten:
            raise ProgramError(f"Program {self.name}: outputs {unwritten} are never written")
        reason = profile.why_not_region(self.nbytes, f"Program {self.name}")
        if reason:
            raise ProgramError(reason)
        return self

    @property
    def nbytes(self) -> int:
        """Bytes of all its tensors (views take none of their own): what the region needs of the
        accelerator's scratchpad."""
        return sum(t.nbytes for i, t in enumerate(self.tensors) if i not in self.views)

    def _check_attrs(self, where: str, op, attrs) -> None:
        """Exactly the op's attributes, each of its declared kind (simaccel.ops.attrs)."""
        if not isinstance(attrs, dict):
            raise ProgramError(f"Program {self.name}: {where} attributes must be a mapping, got {attrs!r}")
        missing = [a for a in op.attrs if a not in attrs]
        if missing:
            raise ProgramError(f"Program {self.name}: {where} lacks attributes {missing}")
        unknown = sorted(set(attrs) - set(op.attrs))
        if unknown:
            raise ProgramError(f"Program {self.name}: {where} has unknown attributes {unknown} (it takes {list(op.attrs)})")
        for name, kind in op.attrs.items():
            try:
                kind(attrs[name])
            except ValueError as e:
                raise ProgramError(f"Program {self.name}: {where} attribute {name} {e}") from e


MAX_DIM = 2**63 - 1


class _Reader:
    """Strict readers for the fields of a Program's JSON form (each raises ProgramError)."""

    def __init__(self, label: str):
        self.label = label

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

    def dims(self, value, what: str) -> tuple[int, ...]:
        dims = self.ids(value, what)
        for i, d in enumerate(dims):
            if not 0 <= d <= MAX_DIM:
                self.fail(f"{what}[{i}]", f"must be between 0 and 2**63-1, got {d}")
        return dims

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
        kind = np.dtype(dtype).kind
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


def _json_scalar(value):
    """`value` as the Program's JSON holds it (non-finite floats as strings)."""
    if isinstance(value, float) and not np.isfinite(value):
        return "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")
    return value
