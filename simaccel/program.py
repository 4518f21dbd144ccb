"""Program: what the codegen makes of one offloaded region and what the runtime executes.

A Program lists its tensors (shape, dtype), which of them are the region's inputs and DPS
outputs (in call order), and the ops in execution order, each reading tensor ids and
writing one. Tensors that are neither inputs nor outputs are intermediates, allocated by
the runtime once per plan. The JSON form is versioned; the same Program is executed
in-process after `tvm.compile` and after export and load.
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
    name: str
    shape: tuple[int, ...]
    dtype: str

    @functools.cached_property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * (2 if self.dtype == "float16" else 4)

    def __str__(self) -> str:
        return f"{self.name}: {self.shape} {self.dtype}"


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

    @property
    def intermediates(self) -> tuple[int, ...]:
        boundary = set(self.inputs) | set(self.outputs)
        return tuple(i for i in range(len(self.tensors)) if i not in boundary)

    # -- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "tensors": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in self.tensors],
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "ops": [{"op": n.op, "inputs": list(n.inputs), "output": n.output, "attrs": n.attrs} for n in self.ops],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def fingerprint(self) -> str:
        """Short content hash: two Programs with the same fingerprint execute the same way."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @classmethod
    def from_json(cls, text: str) -> "Program":
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as e:
            raise ProgramError(f"Program is not valid JSON: {e}") from e
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict) -> "Program":
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ProgramError(f"not a simaccel Program (expected format {FORMAT!r})")
        if data.get("version") != VERSION:
            raise ProgramError(
                f"Program {data.get('name')!r} has version {data.get('version')}, this simaccel reads "
                f"version {VERSION}: rebuild the model with this simaccel, or install the simaccel "
                "version that built it"
            )
        try:
            return cls(
                name=str(data["name"]),
                tensors=tuple(
                    TensorSpec(str(t["name"]), tuple(int(d) for d in t["shape"]), str(t["dtype"]))
                    for t in data["tensors"]
                ),
                inputs=tuple(int(i) for i in data["inputs"]),
                outputs=tuple(int(i) for i in data["outputs"]),
                ops=tuple(
                    OpNode(str(n["op"]), tuple(int(i) for i in n["inputs"]), int(n["output"]), dict(n["attrs"]))
                    for n in data["ops"]
                ),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ProgramError(f"malformed Program {data.get('name')!r}: {e!r}") from e

    # -- validation ----------------------------------------------------------------------
    def validate(self, profile: DeviceProfile = DEFAULT_PROFILE) -> "Program":
        """Check ids, dataflow, every op's shape rule and the profile; return self.

        Raises ProgramError for structure problems, and the op's own SimAccelError
        (ShapeError, DtypeError, UnsupportedOpError) for an op the accelerator cannot run.
        """
        from .ops import get_op

        count = len(self.tensors)

        def check_id(i: int, where: str) -> None:
            if not 0 <= i < count:
                raise ProgramError(f"Program {self.name}: {where} refers to tensor {i}, but there are {count}")

        for i in self.inputs + self.outputs:
            check_id(i, "the boundary")
        if len(set(self.inputs + self.outputs)) != len(self.inputs) + len(self.outputs):
            raise ProgramError(f"Program {self.name}: a tensor is listed twice among inputs and outputs")
        if not self.outputs:
            raise ProgramError(f"Program {self.name}: has no outputs")

        ready = set(self.inputs)
        for index, node in enumerate(self.ops):
            where = f"op {index} ({node.op})"
            op = get_op(node.op)
            reason = profile.why_not_op(node.op)
            if reason:
                raise ProgramError(f"Program {self.name}: {reason}")
            for i in node.inputs + (node.output,):
                check_id(i, where)
            if len(node.inputs) != len(op.inputs):
                raise ProgramError(
                    f"Program {self.name}: {where} takes {len(op.inputs)} inputs {op.inputs}, got {len(node.inputs)}"
                )
            missing = [a for a in op.attrs if a not in node.attrs]
            if missing:
                raise ProgramError(f"Program {self.name}: {where} lacks attributes {missing}")
            unready = [self.tensors[i].name for i in node.inputs if i not in ready]
            if unready:
                raise ProgramError(f"Program {self.name}: {where} reads {unready} before they are written")
            if node.output in ready:
                raise ProgramError(f"Program {self.name}: {where} writes {self.tensors[node.output].name}, already written")
            ins = [self.tensors[i] for i in node.inputs]
            out = self.tensors[node.output]
            for role, spec in zip(op.inputs, ins):
                profile.check_tensor(node.op, role, spec.shape, spec.dtype)
            profile.check_tensor(node.op, "output", out.shape, out.dtype)
            try:
                shape, dtype = op.infer([t.shape for t in ins], [t.dtype for t in ins], **op.all_attrs(node.attrs))
            except (TypeError, ValueError, IndexError) as e:
                raise ProgramError(f"Program {self.name}: {where} has bad attributes {node.attrs}: {e}") from e
            if tuple(shape) != out.shape or dtype != out.dtype:
                raise ProgramError(
                    f"Program {self.name}: {where} produces {tuple(shape)} {dtype}, but its output "
                    f"{out} is declared differently"
                )
            ready.add(node.output)
        unwritten = [self.tensors[i].name for i in self.outputs if i not in ready]
        if unwritten:
            raise ProgramError(f"Program {self.name}: outputs {unwritten} are never written")
        return self
