"""Traced sizes: ints and floats a launcher computes from a symbolic Program's sizes, carrying
the expressions they are, and the guards their questions record.

Where it sits: in the plan layer, below simaccel.launch_plan (whose recording takes Traced
sizes as they are) and simaccel.size_plans (which traces launch plans with them). A `Traced`
is an int at a sample point together with its `Dim` (simaccel.shapes); arithmetic keeps the
Dim. A question whose answer depends on the sizes (a comparison, `bool`, `min`/`max`) is
answered at the point and recorded as a `Guard`; a conversion to a plain value (`int`,
`operator.index`, `float`, `hash`, text, a division by a size) records that the Dim equals its
value there (it is pinned). Guards are recorded inside `recording()`.
"""

from __future__ import annotations

import contextlib
import math
import operator
import threading
from dataclasses import dataclass

import numpy as np

from .shapes import Dim, evaluate

RELATIONS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
             ">=": operator.ge}
_NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


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


class _Sized:
    """What Traced and TracedFloat share: +, - and * through the class's `_arith`, the six
    comparisons through its `_compare`, and the conversions to text and hash, which pin."""

    __slots__ = ()

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

    def __hash__(self):
        return hash(_pin(self))

    def __format__(self, spec):
        return format(_pin(self), spec)

    def __str__(self):
        return str(_pin(self))


class Traced(_Sized):
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

    def __repr__(self):
        return f"Traced({self.value}, {self.dim})"

    def bit_length(self):
        return _pin(self).bit_length()


class TracedFloat(_Sized):
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

    def __truediv__(self, other):
        return self._arith(other, operator.truediv)

    def __rtruediv__(self, other):
        return self._arith(other, operator.truediv, True)

    def __neg__(self):
        return TracedFloat(-self.value, self.code + (("neg",),))

    def __float__(self):
        return _pin(self)

    def __int__(self):
        return int(_pin(self))

    def __bool__(self):
        return bool(_pin(self))

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


_FLOAT_OPERATORS = {symbol: op for op, symbol in TracedFloat._OPS.items()}


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
            stack.append(_FLOAT_OPERATORS[item[0]](a, b))
    [result] = stack
    return result


@contextlib.contextmanager
def recording():
    """Within the block, Traced questions record their guards into the list it gives."""
    _state.guards = guards = []
    try:
        yield guards
    finally:
        del _state.guards
