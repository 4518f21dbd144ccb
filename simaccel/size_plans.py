"""Size plans: a symbolic Program's kernel launches as expressions over its size vars, each
plan valid where its guards hold, so that a native region binds sizes per call with no Python.

Where it sits: beside simaccel.launch_plan, whose recording it runs (and which takes its
`Traced` sizes as they are), below the native source generator (simaccel.native.source),
which writes a symbolic region's plans into C++ tables that sizes.h evaluates per call (grids,
blocks, shared memory, every kernel parameter).

How a plan is found: the launchers run (simaccel.launch_plan's recording) against the
Program bound at a sample point, its sizes `Traced` (simaccel.traced): ints that carry, besides
their value at that point, the `Dim` they are. Arithmetic keeps the Dim; each question whose
answer depends on the sizes is answered at the point and recorded as a `Guard`; a conversion
to a plain value pins it (a guard that it is that value). So a plan's guards are exactly the conditions under which every
launcher makes the choices it made at its point (which kernel, which tiling), and its launches,
evaluated at any sizes where the guards hold, are what the launchers would record there.

Sample points cover each var's bounds: both ends, their neighbours, the middle, and powers of two
and their neighbours in between, combined over the vars (all combinations where they are few;
else each var along its own points with the others at their ends, the lower end's neighbour
and the middle, then random combinations). Each point is covered by a plan
(traced there when none covers it yet) and checked: the covering plan evaluated at the point
must equal the launch plan recorded from the static Program of those sizes, or the Program has
no size plans (SizePlanError, and its region stays on the Python runtime). Sizes no plan
covers at run time go to the Python runtime too.
"""

from __future__ import annotations

import itertools
import math
import random
import struct
from dataclasses import dataclass

from .errors import SimAccelError
from .launch_plan import Launch, View, _build, dims3
from .program import Program
from .shapes import Dim, evaluate
from .traced import Guard, Traced, TracedFloat, float_value, recording

MAX_PLANS = 64  # a Program whose launchers choose among more size cases keeps its Python runtime
MAX_POINTS = 160  # sample points per Program (all combinations where there are this few)


class SizePlanError(SimAccelError):
    """A symbolic Program whose launches cannot be written as size plans."""


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
        def plain(x):
            if isinstance(x, Traced):
                return evaluate(x.dim, values)
            if isinstance(x, TracedFloat):
                return float_value(x.code, values)
            if isinstance(x, View):
                return View(x.tensor, tuple(plain(d) for d in x.shape), x.dtype)
            if isinstance(x, (tuple, list)):
                return tuple(plain(d) for d in x)
            return x

        return tuple(Launch(launch.op, launch.kernel, plain(launch.grid), plain(launch.block),
                            plain(launch.shared_bytes), tuple(plain(a) for a in launch.args))
                     for launch in self.launches)


def groups_of(program: Program):
    """The fused groups of a symbolic Program: chosen on its dims, the same at every size (found
    once per Program, `Program.derived`: every sample point's trace and record reads them)."""
    from . import fusion
    from .ops.registry import generation

    key = ("fusion_groups", generation())
    if key not in program.derived:
        program.derived[key] = tuple(fusion.groups(program))
    return program.derived[key]


def trace(program: Program, point: dict, fuse: bool = True) -> SizePlan:
    """The size plan of `program` traced at `point` (a value per size var)."""
    values = {v.name: Traced(point[v.name], Dim.var(v.name)) for v in program.vars}
    with recording() as guards:
        bound = program.bind(values)
        launches = _build(bound, groups_of(program) if fuse else ()).launches
    # The Program's requirements hold wherever a plan does: sizes that break one are no plan's,
    # and the Python runtime, which such a call goes to, names the requirement in its error.
    required = [Guard(r.difference, r.relation) for r in program.requires]
    return SizePlan(tuple(dict.fromkeys(required + guards)), launches, tuple(sorted(point.items())))


def recorded(program: Program, point: dict, fuse: bool = True) -> tuple:
    """The launches recorded from the static Program of `point`'s sizes, grouped as `program`."""
    return _build(program.bind(point), groups_of(program) if fuse else ()).launches


def sample_points(program: Program, seed: int = 0) -> list[dict]:
    """Points inside the vars' bounds (every var bounded above) where the Program's requirements
    hold: ends, neighbours, middle, powers of two, combined over the vars; a var a requirement
    gives in terms of the others (`n == 5`, `q == p`) takes that value at each point."""
    solved = _solved(program)
    free = [v for v in program.vars if v.name not in solved]
    axes = []
    for v in free:
        lo, hi = v.lower, v.upper
        picks = {lo, lo + 1, hi - 1, hi, (lo + hi) // 2, (lo + hi) // 2 + 1}
        p = 1
        while p <= hi:
            picks |= {p - 1, p, p + 1}
            p *= 2
        axes.append(sorted(x for x in picks if lo <= x <= hi))
    names = [v.name for v in free]
    if math.prod(len(a) for a in axes) <= MAX_POINTS:
        combos = list(itertools.product(*axes))
    else:
        rng = random.Random(seed)
        chosen = set()
        # Each var along its axis, the others at their ends, their lower end's neighbour (a
        # decode step's one token, a cache of one) and middle.
        for k, axis in enumerate(axes):
            for pick in (lambda a: a[0], lambda a: a[min(1, len(a) - 1)], lambda a: a[-1], lambda a: a[len(a) // 2]):
                for x in axis:
                    chosen.add(tuple(x if j == k else pick(a) for j, a in enumerate(axes)))
        while len(chosen) < MAX_POINTS:
            chosen.add(tuple(rng.choice(a) for a in axes))
        combos = sorted(chosen)
    bounds = {v.name: (v.lower, v.upper) for v in program.vars}
    points = []
    for combo in combos:
        point = dict(zip(names, combo))
        for _ in solved:  # a solved var's value may read another's
            point.update({name: evaluate(value, point) for name, value in solved.items()
                          if name not in point and (not isinstance(value, Dim) or value.vars() <= point.keys())})
        if len(point) == len(program.vars) and all(bounds[k][0] <= x <= bounds[k][1] for k, x in point.items()) and \
                all(r.holds(point) for r in program.requires):
            points.append({v.name: point[v.name] for v in program.vars})
    return points


def _solved(program: Program) -> dict[str, object]:
    """Var -> its value in terms of other vars, from each requirement that has a var alone in a
    term of coefficient 1 or -1 and nowhere else (`n == 5`: n is 5; `q == p`: q is p)."""
    solved: dict[str, object] = {}
    for r in (r for r in program.requires if r.relation == "=="):
        difference = r.difference
        for monomial, coefficient in difference.terms.items():
            name = monomial[0].name if len(monomial) == 1 and abs(coefficient) == 1 else None
            if name is None or name in solved:
                continue
            rest = difference - coefficient * Dim.var(name)
            if not isinstance(rest, Dim) or name not in rest.vars():
                solved[name] = -coefficient * rest  # coefficient * name + rest == 0
                break
    return solved


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
    points = sample_points(program)
    if not points:
        raise SizePlanError(f"region {program.name}: no sample point holds its requirements "
                            f"({', '.join(map(str, program.requires))})")
    plans: list[SizePlan] = []
    for point in points:
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
        if dims3(a.grid) != dims3(b.grid) or dims3(a.block) != dims3(b.block):
            return False
        for x, y in zip(a.args, b.args):
            if isinstance(y, float) or isinstance(x, float):
                if not (isinstance(x, float) and isinstance(y, float)) or struct.pack("<d", x) != struct.pack("<d", y):
                    return False
            elif type(x) is not type(y) or x != y:
                return False
    return True


def _text(point: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in sorted(point.items()))
