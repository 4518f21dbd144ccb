"""Symbolic sizes: a tensor's dims as integer expressions over named size vars.

Where it sits: at the bottom of the core (the base layer), beside errors. A Program's tensor
shapes and its ops' shape attributes hold, for each dim, an int or a `Dim` (simaccel.program);
the ops' shape rules run on them unchanged (simaccel.ops), and the runtime binds the vars from
the tensors of each call (`Program.bind`).

A `Dim` is a polynomial with integer coefficients over atoms, an atom being a size var (`n`)
or an exact floor division or remainder of a polynomial by a positive int (`(h - 1) // 2`).
The polynomial is kept in one normal form, so two dims are equal (`==`) exactly when they are
the same polynomial: `n * s == s * n`, `(n + 1) * 2 - 2 == 2 * n`. Arithmetic whose result is a
constant gives a plain int. While shape rules run `assuming` (simaccel.requirements), an
equality that only some values make true is assumed and recorded, to be checked per call, and
an order (`n - 2 >= 1`) that the vars' bounds decide is decided.
What a dim cannot say without the vars' values (`n < 8`, `bool(n)`,
`int(n)`, `range(n)`) raises `SymbolicError` (a TypeError): a shape rule that needs the value
fails at build time, and what it checks stays on TVM with that reason.

Text form (the Program's JSON, messages): `n*s + 1`, `(m + 1)//2`, `h % 4`; `parse` reads it.
"""

from __future__ import annotations

import ast
import contextvars
import functools
import math
from dataclasses import dataclass

import numpy as np

Monomial = tuple  # the atoms of one term, sorted by their text, each as often as its power


class SymbolicError(TypeError):
    """A question about a symbolic dim that only its vars' values can answer."""


# While shape rules run under simaccel.requirements.assuming: its Assumptions, which answer an
# equality of two different dims that only some values of the vars make true.
_ASSUMING: contextvars.ContextVar = contextvars.ContextVar("simaccel_assuming", default=None)


@dataclass(frozen=True)
class _Atom:
    """A var (`name` set), or `numerator // divisor` / `numerator % divisor` (`op` '//' or '%')."""

    text: str
    name: str | None = None
    op: str | None = None
    numerator: "Dim | None" = None
    divisor: int = 0

    def evaluate(self, values: dict) -> int:
        if self.name is not None:
            try:
                return values[self.name]
            except KeyError:
                raise SymbolicError(f"size var {self.name} has no value") from None
        n = evaluate(self.numerator, values)
        return n // self.divisor if self.op == "//" else n % self.divisor

    def vars(self) -> frozenset:
        return frozenset({self.name}) if self.name is not None else self.numerator.vars()


class Dim:
    """A symbolic size: sum of coefficient * monomial (see the module's docstring)."""

    def __init__(self, terms: dict):
        self.terms = {m: c for m, c in terms.items() if c}  # monomial -> int coefficient, never 0

    # -- making -------------------------------------------------------------------------
    @staticmethod
    def var(name: str) -> "Dim":
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"a size var's name must be an identifier, got {name!r}")
        return Dim({(_Atom(name, name=name),): 1})

    @staticmethod
    def _make(terms: dict):
        """The normal form: a Dim, or an int where it has no atoms left."""
        terms = {m: c for m, c in terms.items() if c}
        if not terms:
            return 0
        if list(terms) == [()]:
            return terms[()]
        return Dim(terms)

    # -- arithmetic ---------------------------------------------------------------------
    def __add__(self, other):
        other = _terms(other)
        if other is None:
            return NotImplemented
        merged = dict(self.terms)
        for m, c in other.items():
            merged[m] = merged.get(m, 0) + c
        return Dim._make(merged)

    __radd__ = __add__

    def __neg__(self):
        return Dim._make({m: -c for m, c in self.terms.items()})

    def __sub__(self, other):
        other = _terms(other)
        return NotImplemented if other is None else self + Dim._make({m: -c for m, c in other.items()})

    def __rsub__(self, other):
        return -self + other

    def __mul__(self, other):
        other = _terms(other)
        if other is None:
            return NotImplemented
        product: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.items():
                m = tuple(sorted(m1 + m2, key=_atom_text))
                product[m] = product.get(m, 0) + c1 * c2
        return Dim._make(product)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        if not _is_int(other) and not isinstance(other, Dim):
            return NotImplemented
        divisor = _divisor(other, "//")
        if divisor == 1:
            return self
        whole, rest = _split(self, divisor)
        return whole + (_atom("//", rest, divisor) if isinstance(rest, Dim) else rest // divisor)

    def __mod__(self, other):
        if not _is_int(other) and not isinstance(other, Dim):
            return NotImplemented
        divisor = _divisor(other, "%")
        _, rest = _split(self, divisor)
        return _atom("%", rest, divisor) if isinstance(rest, Dim) else rest % divisor

    def __rfloordiv__(self, other):
        raise SymbolicError(f"{other} // ({self}): a division by a symbolic size")

    def __rmod__(self, other):
        raise SymbolicError(f"{other} % ({self}): a remainder by a symbolic size")

    def __truediv__(self, other):
        raise SymbolicError(f"({self}) / {other}: a size divides by // only")

    def __rtruediv__(self, other):
        raise SymbolicError(f"{other} / ({self}): a division by a symbolic size")

    # -- what needs the values ----------------------------------------------------------
    def _undecided(self, *_):
        raise SymbolicError(f"the size {self} has no value until its vars {sorted(self.vars())} are bound")

    __bool__ = __int__ = __index__ = __float__ = _undecided

    def _order(self, other, relation: str) -> bool:
        """`self <relation> other`: decided by the vars' bounds while rules run `assuming`, where
        it holds at every size within them or at none; else SymbolicError."""
        assumptions = _ASSUMING.get()
        if assumptions is not None and _terms(other) is not None:
            decided = assumptions.order(self - other, relation)
            if decided is not None:
                return decided
        self._undecided()

    def __lt__(self, other):
        return self._order(other, "<")

    def __le__(self, other):
        return self._order(other, "<=")

    def __gt__(self, other):
        return self._order(other, ">")

    def __ge__(self, other):
        return self._order(other, ">=")

    # -- equality, text -----------------------------------------------------------------
    def __eq__(self, other):
        """The same polynomial; or, while rules run `assuming` (simaccel.requirements), any other
        int or Dim but 0 and 1 that the vars' bounds allow, recorded as a requirement."""
        if isinstance(other, Dim) and self.terms == other.terms:
            return True
        assumptions = _ASSUMING.get()
        if assumptions is None or not (isinstance(other, Dim) or (_is_int(other) and other not in (0, 1))):
            return False
        return assumptions.equal(self, other)

    def __hash__(self):
        return hash(frozenset(self.terms.items()))

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:  # as its text, so that a shape in a message reads (n, s, 32)
        return self._text

    @functools.cached_property
    def _text(self) -> str:
        constant = self.terms.get((), 0)
        parts = []
        for m in sorted((m for m in self.terms if m), key=lambda m: (-len(m), [a.text for a in m])):
            c = self.terms[m]
            # A // or % goes in parentheses among factors, and where a leading minus would bind
            # tighter than it ("-n//2" reads as (-n)//2).
            alone = len(m) == 1 and (c == 1 or (c == -1 and parts))
            body = "*".join(a.text if a.name is not None or alone else f"({a.text})" for a in m)
            parts.append((c < 0, body if abs(c) == 1 else f"{abs(c)}*{body}"))
        if constant:
            parts.append((constant < 0, str(abs(constant))))
        text = ("-" if parts[0][0] else "") + parts[0][1]
        for negative, part in parts[1:]:
            text += f" {'-' if negative else '+'} {part}"
        return text

    def vars(self) -> frozenset:
        """The names of the size vars it reads."""
        return frozenset().union(*(a.vars() for m in self.terms for a in m))


def _is_int(value) -> bool:
    """A Python or numpy integer (never a bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _terms(value):
    if isinstance(value, Dim):
        return value.terms
    if _is_int(value):
        return {(): int(value)}
    return None


def _divisor(value, op: str) -> int:
    if isinstance(value, Dim):
        raise SymbolicError(f"{op} by the symbolic size {value}")
    value = int(value)
    if value <= 0:
        raise SymbolicError(f"{op} by {value}: a symbolic size is divided by positive ints only")
    return value


def _split(dim: Dim, divisor: int) -> tuple:
    """(whole, rest) with dim == divisor * whole + rest: the terms whose coefficient `divisor`
    divides, and the constant's multiple of it, go to `whole`; `rest` keeps the other terms and
    a constant in [0, divisor). So `(h - 2)//2 + 1` and `h//2` are one normal form."""
    whole, rest = {}, {}
    for m, c in dim.terms.items():
        if m == ():
            whole[m], rest[m] = divmod(c, divisor)
        elif c % divisor == 0:
            whole[m] = c // divisor
        else:
            rest[m] = c
    return Dim._make(whole), Dim._make(rest)


def _atom_text(atom: _Atom) -> str:
    return atom.text


def _atom(op: str, numerator: Dim, divisor: int) -> Dim:
    (monomial, coefficient), *more = numerator.terms.items()
    alone = not more and coefficient == 1 and len(monomial) == 1  # one atom: no parentheses
    inner = str(numerator) if alone else f"({numerator})"
    return Dim({(_Atom(f"{inner}{op}{divisor}", op=op, numerator=numerator, divisor=divisor),): 1})


# -- using dims --------------------------------------------------------------------------------
def var_name(dim) -> str | None:
    """The var's name where `dim` is one size var alone (`n`, not `n + 1`, `2*n` or `n//2`): a dim
    a tensor's size binds; else None."""
    if not isinstance(dim, Dim) or len(dim.terms) != 1:
        return None
    (monomial, coefficient), = dim.terms.items()
    return monomial[0].name if coefficient == 1 and len(monomial) == 1 else None


def bind_vars(entries, where: str) -> tuple[dict[str, int], dict[str, str]]:
    """The size vars' values that the dims of `entries` bind, (label, dims, actual shape) each:
    a dim that is one var alone takes the size it stands against. Returns (values, source), the
    source of each var saying where it was bound; ShapeError "`where`: size var n is 3 in ... but
    4 in ..." where two sizes disagree. Other dims are not checked here (`bind_shape` them)."""
    from .errors import ShapeError

    values: dict[str, int] = {}
    source: dict[str, str] = {}
    for label, dims, shape in entries:
        for axis, (dim, size) in enumerate(zip(dims, shape)):
            name = var_name(dim)
            if name is None:
                continue
            here = f"{label} (dim {axis} of {tuple(shape)})"
            if name in values and values[name] != size:
                raise ShapeError(f"{where}: size var {name} is {values[name]} in {source[name]} but {size} in {here}")
            values.setdefault(name, int(size))
            source.setdefault(name, here)
    return values, source


def at_upper_bounds(shape, bounds: dict) -> tuple[int, ...]:
    """`shape` with each size var at its upper bound, or at its lower one where it has none
    (`bounds`: name -> (lower, upper or None); a var it lacks counts as (0, None))."""
    values = {}
    for name in shape_vars(shape):
        lower, upper = bounds.get(name, (0, None))
        values[name] = lower if upper is None else upper
    return bind_shape(shape, values)


def shape_text(shape) -> str:
    """A shape as messages write it: (n*s, 16), (n,)."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def sizes_text(values: dict) -> str:
    """Size vars' values as messages write them: b = 3, s = 5."""
    return ", ".join(f"{k} = {v}" for k, v in sorted(values.items()))


def shape_vars(shape) -> frozenset:
    """The size vars the dims of `shape` read."""
    return frozenset().union(*(d.vars() for d in shape if isinstance(d, Dim)))


def evaluate(dim, values: dict) -> int:
    """The int a dim (int or Dim) is when each size var has its value in `values`."""
    if not isinstance(dim, Dim):
        return dim
    total = 0
    for m, c in dim.terms.items():
        total += c * math.prod(a.evaluate(values) for a in m)
    return total


def bind_shape(shape, values: dict) -> tuple[int, ...]:
    return tuple(evaluate(d, values) for d in shape)


# -- text ---------------------------------------------------------------------------------------
_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


def parse(text: str):
    """The dim `text` says (`n*s + 1`): a Dim, or an int where it has no vars. ValueError for
    anything else (another operator, a call, a float, a name that is not an identifier)."""
    if not isinstance(text, str):
        raise ValueError(f"a symbolic size is a string, got {text!r}")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError(f"{text!r} is not a size expression") from None

    def build(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            return Dim.var(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -build(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](build(node.left), build(node.right))
        raise ValueError(f"{text!r} is not a size expression: {ast.unparse(node)!r} is neither an int, a size "
                         "var nor +, -, *, // or % of them")

    try:
        return build(tree)
    except (SymbolicError, ZeroDivisionError) as e:
        raise ValueError(f"{text!r} is not a size expression: {e}") from None


def broadcast_shapes(*shapes) -> tuple:
    """numpy's broadcasting of `shapes`, with symbolic dims: per axis (from the right) the dims
    other than 1 must all be equal, structurally for a `Dim` (a symbolic dim is never taken to
    be 1, which only its value could tell). ValueError, as numpy's, where they are not."""
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(-rank, 0):
        dims = [s[axis] for s in shapes if len(s) >= -axis]
        others = [d for d in dims if isinstance(d, Dim) or d != 1]
        if any(d != others[0] for d in others):
            raise ValueError(f"shapes {', '.join(str(tuple(map(str, s))) for s in shapes)} do not broadcast "
                             f"(axis {axis}: {', '.join(map(str, others))})")
        result.append(others[0] if others else 1)
    return tuple(result)
