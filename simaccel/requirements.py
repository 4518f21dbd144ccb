"""Requirements: equalities and ranges of sizes that a symbolic region's shape rules need, checked per call.

Where it sits: beside simaccel.shapes, in the base layer. A shape rule compares dims; two dims
that are the same expression are equal, and two whose difference can never be 0 within the
vars' bounds are not (`n + 1` and `n`, `2*n` and `5`, `n` and `70` where n <= 64). Any other
pair (`n` and `5`, `p` and `q`, `4*p` and `4*q`) is equal only for some values: while rules run
`assuming(bounds)`, such a comparison answers "equal" and records a `Requirement`, so that the
op is accepted and its region checks the requirement at every call (`Program.requires`,
`Program.bind_tensors`; native regions through their size plans' guards). Comparisons with 0 and
1 are not assumed: rules ask them to choose a case (an empty tensor, a broadcast axis), so a
symbolic dim is never taken to be 0 or 1 (simaccel.shapes).

An order of sizes (`n - 3 >= 0`, a convolution's output height) is decided by the bounds where
they decide it (`Assumptions.order`). Where they do not, a rule's range check written with
`at_least` (a slice inside its axis, a window's output at least 0) records a requirement
`lhs >= rhs`; any other order needs the values (SymbolicError: the op stays on TVM), since a
rule may ask it to choose a case. A requirement is only what TVM alone needs too, so that no
call it runs is refused: a limit of a kernel (attention's head dim) is an order the bounds must
decide, never a requirement.

A requirement reads `lhs == rhs` or `lhs >= rhs` in messages and in the Program's JSON; two are
the same when their relation is and their differences are the same up to a positive factor
(`4*p == 4*q` is `p == q`).
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

from .shapes import _ASSUMING, Dim, evaluate, parse


RELATIONS = ("==", ">=")


@dataclass(frozen=True)
class Requirement:
    """`lhs == rhs` or `lhs >= rhs` (`relation`), each side an int or a Dim, at least one symbolic."""

    lhs: object
    rhs: object
    relation: str = "=="

    @functools.cached_property
    def difference(self):
        """`lhs - rhs` in one normal form (`normal_difference`): the requirement is that it is 0, or at least 0."""
        return normal_difference(self.lhs, self.rhs, signed=self.relation != "==")

    @functools.cached_property
    def key(self) -> tuple:
        """What two requirements that are the same share: their relation and the terms of their difference."""
        return self.relation, difference_key(self.difference)

    def holds(self, values: dict) -> bool:
        difference = evaluate(self.lhs, values) - evaluate(self.rhs, values)
        return difference == 0 if self.relation == "==" else difference >= 0

    def vars(self) -> frozenset:
        return self.difference.vars()

    def holds_nowhere(self, bounds: dict) -> bool:
        """Whether no sizes within `bounds` (name -> (lower, upper or None)) satisfy it."""
        if self.relation == "==":
            return never_zero(self.difference, bounds)
        return _range(self.difference, bounds)[1] < 0

    def __str__(self) -> str:
        return f"{self.lhs} {self.relation} {self.rhs}"

    @staticmethod
    def parse(text: str) -> "Requirement":
        """The requirement `text` says ("n == 5", "n - 1 >= 0"); ValueError for anything else."""
        relations = [r for r in RELATIONS if isinstance(text, str) and text.count(r) == 1]
        if len(relations) != 1 or sum(text.count(r) for r in RELATIONS) != 1:
            raise ValueError(f"a requirement reads 'lhs == rhs' or 'lhs >= rhs', got {text!r}")
        lhs, rhs = (parse(side) for side in text.split(relations[0]))
        if not isinstance(lhs - rhs, Dim):
            raise ValueError(f"{text!r} is no requirement: it reads no size var")
        return Requirement(lhs, rhs, relations[0])


def normal_difference(lhs, rhs, signed: bool = False):
    """`lhs - rhs` divided by the gcd of its coefficients (an int where it is one); its first
    term made positive unless `signed` (an order's difference keeps its sign)."""
    difference = lhs - rhs
    if not isinstance(difference, Dim):
        return difference
    divisor = math.gcd(*difference.terms.values())
    first = min((m for m in difference.terms if m), key=lambda m: [a.text for a in m])
    if difference.terms[first] < 0 and not signed:
        divisor = -divisor
    return Dim({m: c // divisor for m, c in difference.terms.items()})


def difference_key(difference) -> frozenset:
    """A difference's terms as a set: a dict key that never compares Dims (which, `assuming`,
    would make requirements of their own)."""
    return frozenset(difference.terms.items()) if isinstance(difference, Dim) else frozenset({((), difference)})


class Assumptions:
    """The requirements made while rules run `assuming` (`made`, in order, each once)."""

    def __init__(self, bounds: dict):
        self.bounds = bounds  # name -> (lower, upper or None)
        self.made: dict = {}  # Requirement.key -> Requirement

    def equal(self, lhs, rhs) -> bool:
        """Whether `lhs == rhs` may be assumed: False where it can never hold within the bounds,
        else True, recording it."""
        difference = normal_difference(lhs, rhs)
        if not isinstance(difference, Dim):
            return difference == 0
        if never_zero(difference, self.bounds):
            return False
        self._make(Requirement(*_simplest(lhs, rhs)))  # 4*p == 4*q: p == q
        return True

    def at_least(self, lhs, rhs) -> bool:
        """Whether `lhs >= rhs` may be assumed: decided by the bounds where they decide it, else
        True, recorded."""
        decided = self.order(lhs - rhs, ">=")
        if decided is None:
            self._make(Requirement(*_simplest(lhs, rhs), ">="))
            return True
        return decided

    def _make(self, requirement: Requirement) -> None:
        self.made.setdefault(requirement.key, requirement)

    def order(self, difference, relation: str) -> bool | None:
        """Whether `difference <relation> 0` (relation "<", "<=", ">" or ">="): True where it holds
        at every size within the bounds, False where at none, None where the sizes decide."""
        low, high = _range(difference, self.bounds)
        always, never = {"<": (high < 0, low >= 0), "<=": (high <= 0, low > 0),
                         ">": (low > 0, high <= 0), ">=": (low >= 0, high < 0)}[relation]
        return True if always else False if never else None


def _simplest(lhs, rhs) -> tuple:
    """`lhs` and `rhs` divided by the gcd of all their coefficients (`4*p`, `4*q`: `p`, `q`)."""
    common = math.gcd(*(c for side in (lhs, rhs) for c in (side.terms.values() if isinstance(side, Dim) else [side])))
    return (lhs // common, rhs // common) if common > 1 else (lhs, rhs)


def at_least(lhs, rhs) -> bool:
    """Whether `lhs >= rhs`, for a shape rule's check that a size is in range (a slice's end
    within its axis, a window's output at least 0): ints compare; sizes are decided by the vars'
    bounds where they decide it, else, while rules run `assuming`, required at every call, else
    SymbolicError (the op stays on TVM)."""
    if not isinstance(lhs - rhs, Dim):
        return lhs - rhs >= 0
    assumptions = _ASSUMING.get()
    if assumptions is None:
        return (lhs - rhs) >= 0  # SymbolicError: the size has no value
    return assumptions.at_least(lhs, rhs)


@contextlib.contextmanager
def assuming(bounds: dict):
    """Run shape rules with equalities of sizes assumed (see the module's docstring); yields
    the `Assumptions`, whose `made` are the requirements the rules needed."""
    assumptions = Assumptions(bounds)
    token = _ASSUMING.set(assumptions)
    try:
        yield assumptions
    finally:
        _ASSUMING.reset(token)


def same_shape(shape, other, made: dict) -> bool:
    """Whether two shapes are equal: each pair of dims the same, or equal by a requirement in
    `made` (`Assumptions.made`): the shape a rule gave under the requirements it needed."""
    def equal(a, b) -> bool:
        difference = normal_difference(a, b)  # a plain int where the two are the same expression
        return difference == 0 if not isinstance(difference, Dim) else ("==", difference_key(difference)) in made

    return len(shape) == len(other) and all(equal(a, b) for a, b in zip(shape, other))


def never_zero(dim: Dim, bounds: dict) -> bool:
    """Whether `dim` differs from 0 at every value of its vars within `bounds` (name -> (lower,
    upper or None); a var it lacks counts as (0, None)): its constant is no multiple of its other
    coefficients' gcd, or its range excludes 0."""
    constant = dim.terms.get((), 0)
    step = math.gcd(*(c for m, c in dim.terms.items() if m))
    if constant % step:
        return True
    low, high = _range(dim, bounds)
    return low > 0 or high < 0


def _range(dim, bounds: dict) -> tuple[float, float]:
    """Bounds of `dim`'s values (math.inf where unbounded)."""
    if not isinstance(dim, Dim):
        return dim, dim
    low = high = 0
    for monomial, coefficient in dim.terms.items():
        term = (coefficient, coefficient)
        for atom in monomial:
            term = _product(term, _atom_range(atom, bounds))
        low, high = low + term[0], high + term[1]
    return low, high


def _atom_range(atom, bounds: dict) -> tuple[float, float]:
    if atom.name is not None:
        lower, upper = bounds.get(atom.name, (0, None))
        return lower, math.inf if upper is None else upper
    if atom.op == "%":
        return 0, atom.divisor - 1
    low, high = _range(atom.numerator, bounds)
    return (low // atom.divisor if low != -math.inf else low), (high // atom.divisor if high != math.inf else high)


def _product(a: tuple, b: tuple) -> tuple[float, float]:
    def times(x, y):
        return 0 if x == 0 or y == 0 else x * y

    values = [times(x, y) for x in a for y in b]
    return min(values), max(values)
