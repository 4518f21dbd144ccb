"""Epilogue fusion: which ops of a Program run inside another op's kernel.

Where it sits: between a validated Program and its launch plan (simaccel/launch_plan.py).
`groups(program)` finds runs of consecutive ops that one kernel can compute:

- a *producer* (an op whose family has `epilogue=True`: matmul, dense, conv2d) followed by
  elementwise ops (families with `elementwise`, a scalar function) that read its value, each
  other's values, the region's other tensors (broadcast to the group's shape: a per-channel
  multiplier, a residual) or its scalar constants. The producer's launcher gets an `Epilogue`
  and writes the group's last value; the values in between are never stored;
- with no producer, two or more such elementwise ops: one generated elementwise kernel
  (kernels/epilogue.py `launch_group`).

A group is fused only where that computes exactly what its ops compute one by one: every op
of it has the group's shape and a float dtype; every value but the last is read only inside
the group (not a region output, not read by a later op or a view); at most
`MAX_EXTRAS` other tensors. Each step rounds to its op's output dtype, as the unfused op's
store does. Nothing here knows TVM or Numba; the kernel side is kernels/epilogue.py.

The sanitizer and the other debugging watchers run the unfused plan (every op's output
stored, so each op is checked on its own): `fuse=False` of `plan_launches`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ops import get_op
from .ops.attrs import INFINITIES
from .ops.rules import FLOAT_DTYPES
from .program import Program

MAX_EXTRAS = 3  # kernels/epilogue.py passes three tensors besides the producer's value


@dataclass(frozen=True)
class Step:
    """One elementwise op of a group: `function` (its family's `elementwise`) applied to
    `operands`, each ("value", k) (0: the producer's value, k: step k's result), ("extra", j)
    (the group's j-th other tensor) or ("const", number), with numeric attributes `attrs`,
    rounded to `dtype`."""

    function: object
    operands: tuple
    attrs: tuple
    dtype: str


@dataclass(frozen=True)
class Group:
    """Ops `members` (consecutive op indices) computed by one kernel: the first is the
    producer when `producer` is true; `output` is the last op's output tensor, `extras` the
    other tensors it reads (tensor ids), `steps` the elementwise ops as Steps."""

    producer: bool
    members: tuple[int, ...]
    output: int
    extras: tuple[int, ...]
    steps: tuple[Step, ...]
    producer_dtype: str | None

    @property
    def first(self) -> int:
        return self.members[0]

    @property
    def last(self) -> int:
        return self.members[-1]

    def fused_values(self, program: Program) -> tuple[int, ...]:
        """Tensors of the group never stored: every member's output but the last."""
        return tuple(program.ops[k].output for k in self.members[:-1])


@dataclass(frozen=True)
class Epilogue:
    """What a producer's launcher (or `launch_group`) gets: the group's steps, its extra
    tensors as the launcher's arrays, and `key`, the structure the generated code depends on."""

    name: str
    steps: tuple[Step, ...]
    extras: tuple
    producer_dtype: str | None

    @property
    def key(self) -> tuple:
        return (self.steps, self.producer_dtype, len(self.extras))


def elementwise(op_name: str):
    """The scalar function of op `op_name`, or None where it is not a plain elementwise op
    (no `elementwise` declared, or a variant with a fused bias or activation)."""
    op = get_op(op_name)
    if op.family.elementwise is None or op.bias or op.activation != "none":
        return None
    return op.family.elementwise


def is_producer(op_name: str) -> bool:
    return bool(get_op(op_name).family.epilogue)


def groups(program: Program) -> list[Group]:
    """Every group of `program` (a validated Program) that fuses, in op order, disjoint."""
    readers: dict[int, list[int]] = {}
    for k, node in enumerate(program.ops):
        for t in node.inputs:
            readers.setdefault(t, []).append(k)
    owners = set(program.views.values())
    outputs = set(program.outputs)
    found = []
    k = 0
    while k < len(program.ops):
        group = _grow(program, k, readers, owners, outputs)
        if group is None:
            k += 1
        else:
            found.append(group)
            k = group.last + 1
    return found


def _grow(program: Program, first: int, readers, owners, outputs) -> Group | None:
    ops, tensors = program.ops, program.tensors
    head = ops[first]
    if head.output in program.views or tensors[head.output].dtype not in FLOAT_DTYPES:
        return None
    producer = is_producer(head.op)
    if not producer and elementwise(head.op) is None:
        return None
    shape = tensors[head.output].shape
    if len(shape) > 4:  # the group kernels index a rank-4 space (kernels/epilogue.py)
        return None
    values = {head.output: 0} if producer else {}
    extras: list[int] = []
    steps: list[Step] = []
    members = [first]
    best = None
    k = first if not producer else first + 1
    while k < len(ops):
        node = ops[k]
        fn = elementwise(node.op)
        spec = tensors[node.output]
        if fn is None or spec.shape != shape or spec.dtype not in FLOAT_DTYPES or node.output in program.views:
            break
        operands, new_extras = [], []
        for t in node.inputs:
            if t in values:
                operands.append(("value", values[t]))
            elif tensors[t].value is not None and tensors[t].shape == ():
                operands.append(("const", float(tensors[t].value)))
            else:
                if len(tensors[t].shape) > 4 or not _broadcasts(tensors[t].shape, shape):
                    operands = None
                    break
                if t not in extras and t not in new_extras:
                    new_extras.append(t)
                operands.append(("extra", (extras + new_extras).index(t)))
        if operands is None or len(extras) + len(new_extras) > MAX_EXTRAS:
            break
        if not producer and k == first and not operands:
            break
        extras += new_extras
        attrs = tuple(sorted((a, _number(v)) for a, v in node.attrs.items() if _number(v) is not None))
        steps.append(Step(fn, tuple(operands), attrs, spec.dtype))
        values[node.output] = len(steps)
        if k != first:
            members.append(k)
        candidate = _closed(program, members, readers, owners, outputs)
        if candidate and (len(steps) >= 2 or producer):
            best = Group(producer, tuple(members), node.output, tuple(extras), tuple(steps),
                         tensors[head.output].dtype if producer else None)
        k += 1
    return best


def _number(value):
    """A numeric attribute as the generated code takes it (an open bound "inf" as a float), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if value in INFINITIES:
        return float(value)
    return None


def _closed(program: Program, members, readers, owners, outputs) -> bool:
    """Whether every member's output but the last is read by members only."""
    inside = set(members)
    for k in members[:-1]:
        t = program.ops[k].output
        if t in outputs or t in owners or any(r not in inside for r in readers.get(t, ())):
            return False
    return True


def _broadcasts(shape, to) -> bool:
    shape, to = tuple(shape), tuple(to)
    if len(shape) > len(to):
        return False
    for a, b in zip(reversed(shape), reversed(to)):
        if a != 1 and a != b:
            return False
    return True
