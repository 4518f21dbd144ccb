"""Size plans: a symbolic Program's kernel launches as expressions over its size vars, each
plan valid where its guards hold, so that a native region binds sizes per call with no Python.

Where it sits: above simaccel.launch_plan, below the native source generator
(simaccel.native.source), which writes a symbolic region's plans into C++ tables that
region.h evaluates per call (grids, blocks, shared memory, every kernel parameter).

How a plan is found: the launchers run (simaccel.launch_plan's recording) against the
Program bound at a sample point, its sizes `Traced`: ints that carry, besides their value at
that point, the `Dim` they are (simaccel.shapes). Arithmetic keeps the Dim. A question whose
answer depends on the sizes (a comparison, `bool`, `min`/`max`) is answered at the point and
recorded as a `Guard` (a Dim and the relation to 0 that held there). A conversion to a plain
value (`int`, `operator.index`, `float`, `hash`, text, a division by a size) records that the
Dim equals its value there. So a plan's guards are exactly the conditions under which every
launcher makes the choices it made at its point (which kernel, which tiling), and its launches,
evaluated at any sizes where the guards hold, are what the launchers would record there.

Sample points cover each var's bounds: both ends, their neighbours, the middle, and powers of two
and their neighbours in between, combined over the vars. Each point is covered by a plan
(traced there when none covers it yet) and checked: the covering plan evaluated at the point
must equal the launch plan recorded from the static Program of those sizes, or the Program has
no size plans (SizePlanError, and its region stays on the Python runtime). Sizes no plan
covers at run time go to the Python runtime too.
"""

from __future__ import annotations

import itertools
import math
import operator
import random
import struct
import threading
from dataclasses import dataclass

import numpy as np

from .errors import SimAccelError
from .program import Program
from .shapes import Dim, evaluate

MAX_PLANS = 32  # a Program whose launchers choose among more size cases keeps its Python runtime
MAX_POINTS = 160  # sample points per Program (all combinations where there are this few)
RELATIONS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
             ">=": operator.ge}
_NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


class SizePlanError(SimAccelError):
    """A symbolic Program whose launches cannot be written as size plans."""


@dataclass(frozen=True)
class Guard:
    """`dim <relation> 0`, which held where the plan was traced."""

    dim: Dim
    relation: str

    def holds(self, values: dict) -> bool:
        return RELATIONS[self.relation](evaluate(self.dim, values), 0)

    def __str__(self) -> str:
        return f"{self.dim} {self.relation} 0"


_state = threading.local()  # .guards: the list a trace records into


def _guard(dim, relation: str) -> None:
    if isinstance(dim, Dim):
        _state.guards.append(Guard(dim, relation))


def _pin(value):
    """A Traced (or TracedFloat) as its plain value, recording that it is that value."""
    if isinstance(value, Traced):
        _guard(value.dim - value.value, "==")
        return value.value
    if isinstance(value, TracedFloat):
        for item in value.code:
            if item[0] == "i":
                _pin(item[2])
        return value.value
    return value


def traced(value: int, dim):
    """`value` carrying `dim`: a Traced, or the plain int where `dim` is a constant."""
    return dim if not isinstance(dim, Dim) else Traced(value, dim)


def _operands(x):
    """(value, dim) of an int-like operand, or None."""
    if isinstance(x, Traced):
        return x.value, x.dim
    if isinstance(x, (int, np.integer)):
        return int(x), int(x)
    return None


class Traced:
    """An int a launcher computes from the sizes: its value at the traced point and its Dim."""

    __slots__ = ("value", "dim")

    def __init__(self, value: int, dim: Dim):
        self.value, self.dim = int(value), dim

    # -- arithmetic keeps the Dim -------------------------------------------------------
    def _arith(self, other, op, reflected=False):
        o = _operands(other)
        if o is None:
            if isinstance(other, (float, TracedFloat)):
                return TracedFloat.of(self)._arith(other, op, reflected)
            return NotImplemented
        if reflected:
            return traced(op(o[0], self.value), op(o[1], self.dim))
        return traced(op(self.value, o[0]), op(self.dim, o[1]))

    def __add__(self, other):
        return self._arith(other, operator.add)

    def __radd__(self, other):
        return self._arith(other, operator.add, True)

    def __sub__(self, other):
        return self._arith(other, operator.sub)

    def __rsub__(self, other):
        return self._arith(other, operator.sub, True)

    def __mul__(self, other):
        return self._arith(other, operator.mul)

    def __rmul__(self, other):
        return self._arith(other, operator.mul, True)

    def __neg__(self):
        return traced(-self.value, -self.dim)

    def __pos__(self):
        return self

    def __abs__(self):
        return self if self >= 0 else -self

    def __floordiv__(self, other):
        if isinstance(other, (float, TracedFloat)):
            return TracedFloat.of(self)._arith(other, operator.floordiv)
        if isinstance(other, Traced) and other.value and self.value * other.dim == other.value * self.dim:
            # a fixed ratio of two sizes (`-total // (4 * total)`): its floor is the same wherever
            # the divisor keeps its sign
            _guard(other.dim, ">" if other.value > 0 else "<")
            return self.value // other.value
        divisor = _pin(other)
        if not isinstance(divisor, (int, np.integer)):
            return NotImplemented
        divisor = int(divisor)
        return traced(self.value // divisor, self.dim // divisor) if divisor > 0 else _pin(self) // divisor

    def __rfloordiv__(self, other):
        return other // _pin(self)

    def __mod__(self, other):
        divisor = _pin(other)
        if not isinstance(divisor, (int, np.integer)):
            return NotImplemented
        divisor = int(divisor)
        return traced(self.value % divisor, self.dim % divisor) if divisor > 0 else _pin(self) % divisor

    def __rmod__(self, other):
        return other % _pin(self)

    def __divmod__(self, other):
        return self // other, self % other

    def __truediv__(self, other):
        return TracedFloat.of(self)._arith(other, operator.truediv)

    def __rtruediv__(self, other):
        return TracedFloat.of(self)._arith(other, operator.truediv, True)

    def __pow__(self, k):
        k = _pin(k)
        if isinstance(k, int) and 0 <= k <= 8:
            return math.prod([self] * k) if k else 1
        return _pin(self) ** k

    def __rpow__(self, base):
        return base ** _pin(self)

    def __lshift__(self, k):
        k = _pin(k)
        return self * (1 << k) if isinstance(k, int) and k >= 0 else _pin(self) << k

    def __rlshift__(self, other):
        return other << _pin(self)

    def __rshift__(self, k):
        k = _pin(k)
        return self // (1 << k) if isinstance(k, int) and k >= 0 else _pin(self) >> k

    def __rrshift__(self, other):
        return other >> _pin(self)

    def __and__(self, other):
        return _pin(self) & _pin(other)

    __rand__ = __and__

    def __or__(self, other):
        return _pin(self) | _pin(other)

    __ror__ = __or__

    def __xor__(self, other):
        return _pin(self) ^ _pin(other)

    __rxor__ = __xor__

    def __invert__(self):
        return -self - 1

    def __round__(self, ndigits=None):
        return self

    __trunc__ = __floor__ = __ceil__ = __round__

    # -- questions answer at the point and become guards ---------------------------------
    def _compare(self, other, relation):
        o = _operands(other)
        if o is None:
            if isinstance(other, (float, TracedFloat)):
                return RELATIONS[relation](_pin(self), _pin(other))
            return NotImplemented
        held = RELATIONS[relation](self.value, o[0])
        _guard(self.dim - o[1], relation if held else _NEGATED[relation])
        return held

    def __lt__(self, other):
        return self._compare(other, "<")

    def __le__(self, other):
        return self._compare(other, "<=")

    def __gt__(self, other):
        return self._compare(other, ">")

    def __ge__(self, other):
        return self._compare(other, ">=")

    def __eq__(self, other):
        return self._compare(other, "==")

    def __ne__(self, other):
        return self._compare(other, "!=")

    def __bool__(self):
        held = self.value != 0
        _guard(self.dim, "!=" if held else "==")
        return held

    # -- conversions to plain values pin the value ---------------------------------------
    def __index__(self):
        return _pin(self)

    __int__ = __index__

    def __float__(self):
        return float(_pin(self))

    def __hash__(self):
        return hash(_pin(self))

    def __format__(self, spec):
        return format(_pin(self), spec)

    def __str__(self):
        return str(_pin(self))

    def __repr__(self):
        return f"Traced({self.value}, {self.dim})"

    def bit_length(self):
        return _pin(self).bit_length()


class TracedFloat:
    """A float a launcher computes from the sizes (`1.0 / n`): its value and its computation,
    postfix (("c", float) a constant, ("i", Dim, Traced) a size as a float, or an operator), in
    Python's own order of operations, so that the native region's evaluation gives the same bits."""

    __slots__ = ("value", "code")

    def __init__(self, value: float, code: tuple):
        self.value, self.code = float(value), code

    @staticmethod
    def of(x) -> "TracedFloat":
        if isinstance(x, TracedFloat):
            return x
        if isinstance(x, Traced):
            return TracedFloat(float(x.value), (("i", x.dim, x),))
        return TracedFloat(float(x), (("c", float(x)),))

    _OPS = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/"}

    def _arith(self, other, op, reflected=False):
        if not isinstance(other, (int, float, np.integer, np.floating, Traced, TracedFloat)) or op not in self._OPS:
            if isinstance(other, (int, float, Traced, TracedFloat)):  # floor division and the like: pinned
                return op(_pin(other), self.value) if reflected else op(self.value, _pin(other))
            return NotImplemented
        o = TracedFloat.of(other.item() if isinstance(other, np.generic) else other)
        a, b = (o, self) if reflected else (self, o)
        return TracedFloat(op(a.value, b.value), a.code + b.code + ((self._OPS[op],),))

    def __add__(self, other):
        return self._arith(other, operator.add)

    def __radd__(self, other):
        return self._arith(other, operator.add, True)

    def __sub__(self, other):
        return self._arith(other, operator.sub)

    def __rsub__(self, other):
        return self._arith(other, operator.sub, True)

    def __mul__(self, other):
        return self._arith(other, operator.mul)

    def __rmul__(self, other):
        return self._arith(other, operator.mul, True)

    def __truediv__(self, other):
        return self._arith(other, operator.truediv)

    def __rtruediv__(self, other):
        return self._arith(other, operator.truediv, True)

    def __neg__(self):
        return TracedFloat(-self.value, self.code + (("neg",),))

    def _plain(self, *_):
        return _pin(self)

    def __float__(self):
        return _pin(self)

    def __int__(self):
        return int(_pin(self))

    def __bool__(self):
        return bool(_pin(self))

    def __hash__(self):
        return hash(_pin(self))

    def __format__(self, spec):
        return format(_pin(self), spec)

    def __str__(self):
        return str(_pin(self))

    def __repr__(self):
        return f"TracedFloat({self.value})"

    def __round__(self, ndigits=None):
        return round(_pin(self), ndigits)

    def __trunc__(self):
        return math.trunc(_pin(self))

    def __floor__(self):
        return math.floor(_pin(self))

    def __ceil__(self):
        return math.ceil(_pin(self))

    def _compare(self, other, relation):
        return RELATIONS[relation](_pin(self), _pin(other))

    def __lt__(self, other):
        return self._compare(other, "<")

    def __le__(self, other):
        return self._compare(other, "<=")

    def __gt__(self, other):
        return self._compare(other, ">")

    def __ge__(self, other):
        return self._compare(other, ">=")

    def __eq__(self, other):
        return self._compare(other, "==")

    def __ne__(self, other):
        return self._compare(other, "!=")


def float_value(code: tuple, values: dict) -> float:
    """A TracedFloat's computation evaluated where the vars have `values`, in its own order."""
    stack: list[float] = []
    for item in code:
        if item[0] == "c":
            stack.append(item[1])
        elif item[0] == "i":
            stack.append(float(evaluate(item[1], values)))
        elif item[0] == "neg":
            stack.append(-stack.pop())
        else:
            b, a = stack.pop(), stack.pop()
            stack.append({"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}[item[0]](a, b))
    [result] = stack
    return result


# -- plans ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SizePlan:
    """The launches of a symbolic Program where `guards` hold: a LaunchPlan's launches whose
    grids, blocks, shared memory and arguments hold Traced and TracedFloat values; `point`, the
    sizes it was traced at."""

    guards: tuple[Guard, ...]
    launches: tuple
    point: tuple[tuple[str, int], ...]

    def covers(self, values: dict) -> bool:
        return all(g.holds(values) for g in self.guards)

    def at(self, values: dict) -> tuple:
        """Its launches at `values` (sizes its guards hold for), every value plain."""
        from .launch_plan import View, Launch

        def plain(x):
            if isinstance(x, Traced):
                return evaluate(x.dim, values)
            if isinstance(x, TracedFloat):
                return float_value(x.code, values)
            if isinstance(x, View):
                return View(x.tensor, tuple(plain(d) for d in x.shape))
            if isinstance(x, (tuple, list)):
                return tuple(plain(d) for d in x)
            return x

        return tuple(Launch(launch.op, launch.kernel, plain(launch.grid), plain(launch.block),
                            plain(launch.shared_bytes), tuple(plain(a) for a in launch.args))
                     for launch in self.launches)


def groups_of(program: Program):
    """The fused groups of a symbolic Program: chosen on its dims, the same at every size."""
    from . import fusion

    return fusion.groups(program)


def trace(program: Program, point: dict, fuse: bool = True) -> SizePlan:
    """The size plan of `program` traced at `point` (a value per size var)."""
    from .launch_plan import _build

    values = {v.name: Traced(point[v.name], Dim.var(v.name)) for v in program.vars}
    _state.guards = guards = []
    try:
        bound = program.bind(values)
        launches = _build(bound, groups_of(program) if fuse else ()).launches
    finally:
        del _state.guards
    return SizePlan(tuple(dict.fromkeys(guards)), launches, tuple(sorted(point.items())))


def recorded(program: Program, point: dict, fuse: bool = True) -> tuple:
    """The launches recorded from the static Program of `point`'s sizes, grouped as `program`."""
    from .launch_plan import _build

    return _build(program.bind(point), groups_of(program) if fuse else ()).launches


def sample_points(program: Program, seed: int = 0) -> list[dict]:
    """Points inside the vars' bounds (every var bounded above): ends, neighbours, middle, powers of two."""
    axes = []
    for v in program.vars:
        lo, hi = v.lower, v.upper
        picks = {lo, lo + 1, hi - 1, hi, (lo + hi) // 2, (lo + hi) // 2 + 1}
        p = 1
        while p <= hi:
            picks |= {p - 1, p, p + 1}
            p *= 2
        axes.append(sorted(x for x in picks if lo <= x <= hi))
    names = [v.name for v in program.vars]
    if math.prod(len(a) for a in axes) <= MAX_POINTS:
        return [dict(zip(names, combo)) for combo in itertools.product(*axes)]
    rng = random.Random(seed)
    points = set()
    for k, axis in enumerate(axes):  # each var along its axis, the others at their ends and middle
        for pick in (lambda a: a[0], lambda a: a[-1], lambda a: a[len(a) // 2]):
            for x in axis:
                points.add(tuple(x if j == k else pick(a) for j, a in enumerate(axes)))
    while len(points) < MAX_POINTS:
        points.add(tuple(rng.choice(a) for a in axes))
    return [dict(zip(names, combo)) for combo in sorted(points)]


def size_plans(program: Program, fuse: bool = True) -> tuple[SizePlan, ...]:
    """The size plans of a validated symbolic Program, every var bounded above; each sample
    point covered and checked against the launches recorded there (SizePlanError where one
    differs, or where more than MAX_PLANS plans would be needed)."""
    from .ops.registry import generation

    key = ("size_plans", fuse, generation())
    if key not in program.derived:
        program.derived[key] = _find(program, fuse)
    return program.derived[key]


def _find(program: Program, fuse: bool) -> tuple[SizePlan, ...]:
    unbounded = [v.name for v in program.vars if v.upper is None]
    if unbounded:
        raise SizePlanError(f"region {program.name}: size var {unbounded[0]} has no upper bound; native regions "
                            "size their memory for the upper bounds")
    plans: list[SizePlan] = []
    for point in sample_points(program):
        plan = next((p for p in plans if p.covers(point)), None)
        if plan is None:
            try:
                plan = trace(program, point, fuse)
            except SimAccelError as e:
                raise SizePlanError(f"region {program.name}: its launches at {_text(point)} cannot be traced: {e}") from e
            if not plan.covers(point):  # a launcher that asked the same question twice and changed its answer
                raise SizePlanError(f"region {program.name}: the plan traced at {_text(point)} does not hold there")
            plans.append(plan)
            if len(plans) > MAX_PLANS:
                raise SizePlanError(f"region {program.name}: its launches differ in more than {MAX_PLANS} size cases")
        try:
            want = recorded(program, point, fuse)
        except SimAccelError as e:
            raise SizePlanError(f"region {program.name}: its launches at {_text(point)} cannot be recorded: {e}") from e
        got = plan.at(point)
        if not _same(got, want):
            raise SizePlanError(f"region {program.name}: the size plan traced at {dict(plan.point)} does not give "
                                f"the launches recorded at {_text(point)}")
    return tuple(plans)


def _same(got: tuple, want: tuple) -> bool:
    """Same launches, float arguments compared by their bits."""
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        if (a.op, a.kernel, a.shared_bytes, len(a.args)) != (b.op, b.kernel, b.shared_bytes, len(b.args)):
            return False
        if _dims3(a.grid) != _dims3(b.grid) or _dims3(a.block) != _dims3(b.block):
            return False
        for x, y in zip(a.args, b.args):
            if isinstance(y, float) or isinstance(x, float):
                if not (isinstance(x, float) and isinstance(y, float)) or struct.pack("<d", x) != struct.pack("<d", y):
                    return False
            elif type(x) is not type(y) or x != y:
                return False
    return True


def _dims3(value) -> tuple:
    dims = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    return dims + (1,) * (3 - len(dims))


def _text(point: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in sorted(point.items()))
