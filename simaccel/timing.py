"""Timing model: how long the accelerator a device profile describes would take.

Where it sits: beside the profile (simaccel.profile), in the core (no TVM). A profile may carry
a `Performance`: peak throughput per dtype, memory and scratchpad bandwidth, a dispatch cost per
op and per region call, and the DMA that host-staged data would cross. The model is a
roofline per op, read off a Program and its ops' declarations (the figures are checked against
`SCHEMA` whenever a `Performance` is made: a profile's JSON, a dict, Python):

    op      = op_dispatch + max(flops / peak[dtype], boundary bytes / memory + scratch bytes / scratchpad)
    region  = region_dispatch + sum of its ops (+ staging: 2 transfers' latency + boundary bytes / DMA)

An op's FLOPs are its family's `flops(shapes, out_shape, **attrs)` where it declares one
(matmul, convolution, pooling), else one per output element for an elementwise op, nothing for
a view, and one per input element read for the rest (reductions, normalizations, layout);
a fused bias and activation add one each per output element. Its bytes are every input read
once and its output written once: those of the region's boundary tensors (inputs, outputs)
move at the memory's bandwidth, intermediates at the scratchpad's (where the profile names
one; else at the memory's). A view moves nothing.

Used by the ledger and `simaccel demo --profile` (modeled beside measured time per region),
`simaccel whatif` (one model under several profiles, with a roofline chart) and validated
against the GPU itself: with the H200's own figures (examples/profiles/h200.json) the modeled
time of each `simaccel bench --ops` case is compared with its measured kernel time
(tests/test_timing.py, docs/timing-model.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import SimAccelError

# A profile's performance fields, its schema: name -> (kind, required, what it is). Kinds: RATE, a
# positive finite number per second; TIME, a finite number of seconds >= 0; PER_DTYPE, an object
# of ISA dtypes (simaccel.ops.rules.ISA_DTYPES) to RATEs. Checked by `Performance` whenever one is
# made (from a profile's JSON, a dict or Python), each error naming the field's path.
RATE, TIME, PER_DTYPE = "rate", "time", "per-dtype rate"
SCHEMA = {
    "peak_flops": (PER_DTYPE, True, "operations per second, per dtype"),
    "memory_bandwidth": (RATE, True, "bytes per second between the accelerator and the memory its regions' tensors are in"),
    "scratchpad_bandwidth": (RATE, False, "bytes per second of the scratchpad holding a region's intermediates"),
    "op_dispatch": (TIME, False, "seconds to start one op"),
    "region_dispatch": (TIME, False, "seconds to start one region call"),
    "dma_bandwidth": (RATE, False, "bytes per second of the DMA that host-staged data crosses"),
    "dma_latency": (TIME, False, "seconds each host-staged transfer waits before moving data"),
}
# name -> what it is, for messages and `simaccel whatif`.
FIELDS = {name: what for name, (_, _, what) in SCHEMA.items()}


@dataclass(frozen=True)
class Performance:
    """The performance figures of a simulated accelerator (all rates per second, times in
    seconds). `peak_flops` maps a dtype of the ISA to its peak operations per second (a dict, or
    (dtype, figure) pairs); ops of a dtype it does not name are modeled at its lowest figure.
    Every field is checked against `SCHEMA`: SimAccelError naming ``performance.FIELD`` and what
    is wrong with it."""

    peak_flops: tuple[tuple[str, float], ...]
    memory_bandwidth: float
    scratchpad_bandwidth: float | None = None
    op_dispatch: float = 0.0
    region_dispatch: float = 0.0
    dma_bandwidth: float | None = None
    dma_latency: float = 0.0

    def __post_init__(self):
        for name, (kind, required, _) in SCHEMA.items():
            value = getattr(self, name)
            if value is None and not required and kind == RATE:  # an optional rate: not given
                continue
            object.__setattr__(self, name, _checked(name, kind, value))

    @classmethod
    def from_dict(cls, data) -> "Performance":
        """From a profile's JSON object of `SCHEMA`'s fields (every one checked)."""
        if not isinstance(data, dict):
            raise SimAccelError(f"performance: must be an object of the fields {', '.join(SCHEMA)}, "
                                f"got {shown(data)}")
        unknown = [name for name in data if name not in SCHEMA]
        if unknown:
            raise SimAccelError("performance: " + unknown_names("field", unknown, "fields", SCHEMA))
        for name, (_, required, what) in SCHEMA.items():
            if required and name not in data:
                raise SimAccelError(f"performance.{name}: missing ({what})")
        return cls(**data)

    def to_dict(self) -> dict:
        data = {"peak_flops": dict(self.peak_flops), "memory_bandwidth": self.memory_bandwidth}
        for name in ("scratchpad_bandwidth", "op_dispatch", "region_dispatch", "dma_bandwidth", "dma_latency"):
            data[name] = getattr(self, name)
        return data

    def peak(self, dtype: str) -> float:
        """Peak operations per second for `dtype` (the lowest figure for a dtype not named)."""
        peaks = dict(self.peak_flops)
        return peaks.get(dtype, min(peaks.values()))


def unknown_names(kind: str, names, known_label: str, known) -> str:
    """"unknown field 'x' (fields: a, b)" / "unknown dtypes 'p', 'q' (known: ...)", for a message."""
    return (f"unknown {kind}{'s' if len(names) > 1 else ''} {', '.join(map(repr, names))} "
            f"({known_label}: {', '.join(known)})")


def shown(value) -> str:
    """A value read from a profile's JSON, in a message: a number as it is, anything else with its
    JSON type; cut to some 60 characters."""
    text = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return text
    kind = {bool: "a boolean", str: "a string", list: "a list", tuple: "a list", dict: "an object",
            type(None): "null"}.get(type(value), f"a {type(value).__name__}")
    return kind if value is None else f"{kind}: {text}"


def _number(path: str, kind: str, what: str, value) -> float:
    """`value` as a float if it is a finite number in `kind`'s range, else SimAccelError naming `path`."""
    want = "a positive finite number" if kind == RATE else "a finite number >= 0"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SimAccelError(f"{path}: must be {want} ({what}), got {shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        number = math.inf
    if not math.isfinite(number) or number < 0 or (kind == RATE and number == 0):
        raise SimAccelError(f"{path}: must be {want} ({what}), got {shown(value)}")
    return number


def _checked(name: str, kind: str, value):
    """Field `name`'s value checked against its `kind`, in its stored form."""
    path, what = f"performance.{name}", FIELDS[name]
    if kind != PER_DTYPE:
        return _number(path, kind, what, value)
    from .ops.rules import ISA_DTYPES  # the dtypes an op may declare: the ISA's (users' ops too)

    pairs = value
    if isinstance(value, dict):
        pairs = list(value.items())
    elif not isinstance(value, (list, tuple)) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        raise SimAccelError(f"{path}: must be an object of dtype -> {what.split(',')[0]} "
                            f"(e.g. {{\"float32\": 1e12}}), got {shown(value)}")
    if not pairs:
        raise SimAccelError(f"{path}: names no dtype; give at least one (e.g. {{\"float32\": 1e12}})")
    seen = {}
    for dtype, figure in pairs:
        if dtype not in ISA_DTYPES:
            raise SimAccelError(f"{path}: unknown dtype {dtype!r} (known: {', '.join(ISA_DTYPES)})")
        if dtype in seen:
            raise SimAccelError(f"{path}: dtype {dtype!r} given twice")
        seen[dtype] = _number(f"{path}.{dtype}", RATE, what, figure)
    return tuple(sorted(seen.items()))


@dataclass(frozen=True)
class OpTime:
    """One op's modeled time and what it is made of."""

    index: int  # the op's index in its Program
    op: str
    dtype: str
    flops: float
    boundary_bytes: int  # of the region's inputs and outputs it reads and writes
    scratch_bytes: int  # of intermediates
    compute: float  # seconds: flops at the dtype's peak
    memory: float  # seconds: its bytes at the bandwidths
    dispatch: float

    @property
    def seconds(self) -> float:
        return self.dispatch + max(self.compute, self.memory)

    @property
    def bound(self) -> str:
        """What limits it: "compute", "memory" or "dispatch" (no work at all)."""
        if self.compute == self.memory == 0:
            return "dispatch"
        return "compute" if self.compute >= self.memory else "memory"

    @property
    def intensity(self) -> float:
        """Operations per byte moved (the roofline's x axis); inf for an op that moves nothing."""
        moved = self.boundary_bytes + self.scratch_bytes
        return self.flops / moved if moved else math.inf


@dataclass(frozen=True)
class RegionTime:
    """A region call's modeled time: its dispatch, its ops and, host-staged, the transfers."""

    region: str
    ops: tuple[OpTime, ...]
    dispatch: float
    staging: float = 0.0

    @property
    def seconds(self) -> float:
        return self.dispatch + self.staging + sum(op.seconds for op in self.ops)


def op_work(program, index: int) -> tuple[float, int, int]:
    """(FLOPs, boundary bytes, scratch bytes) of op `index` of `program` (see the module docstring)."""
    from .ops import get_op

    node = program.ops[index]
    op = get_op(node.op)
    family = op.family
    tensors = program.tensors
    if node.output in program.views:  # the input's memory under another shape: no work at all
        return 0.0, 0, 0
    shapes = [tuple(tensors[i].shape) for i in node.inputs]
    out_shape = tuple(tensors[node.output].shape)
    out_elements = math.prod(out_shape)
    if family.flops is not None:
        flops = float(family.flops(shapes, out_shape, **op.all_attrs(node.attrs)))
    elif family.elementwise is not None:
        flops = float(out_elements)
    elif family.view:
        flops = 0.0  # a view whose output is the caller's buffer: a copy
    else:
        flops = float(sum(math.prod(s) for s in shapes))
    flops += out_elements * (int(op.bias) + int(op.activation != "none"))
    boundary = set(program.inputs) | set(program.outputs) | set(program.constants)
    moved = {}
    for i in (*node.inputs, node.output):
        owner = program.views.get(i, i)
        moved[i] = (owner in boundary, tensors[i].nbytes)
    boundary_bytes = sum(n for at_boundary, n in moved.values() if at_boundary)
    scratch_bytes = sum(n for at_boundary, n in moved.values() if not at_boundary)
    return flops, boundary_bytes, scratch_bytes


def model_program(program, performance: Performance, staged: bool = False) -> RegionTime:
    """The modeled time of one call of `program` on an accelerator of `performance`; `staged`:
    its boundary tensors cross the DMA (host-staged mode), which needs `dma_bandwidth`."""
    ops = []
    for index, node in enumerate(program.ops):
        flops, boundary_bytes, scratch_bytes = op_work(program, index)
        dtype = program.tensors[node.output].dtype
        scratch = performance.scratchpad_bandwidth or performance.memory_bandwidth
        memory = boundary_bytes / performance.memory_bandwidth + scratch_bytes / scratch
        compute = flops / performance.peak(dtype)
        dispatch = performance.op_dispatch if (flops or boundary_bytes or scratch_bytes) else 0.0
        ops.append(OpTime(index, node.op, dtype, flops, boundary_bytes, scratch_bytes, compute, memory, dispatch))
    staging = 0.0
    if staged:
        if performance.dma_bandwidth is None:
            raise SimAccelError(f"region {program.name}: host-staged time needs the profile's dma_bandwidth "
                                f"({FIELDS['dma_bandwidth']})")
        moved = sum(program.tensors[i].nbytes for i in (*program.inputs, *program.outputs))
        staging = 2 * performance.dma_latency + moved / performance.dma_bandwidth
    return RegionTime(program.name, tuple(ops), performance.region_dispatch, staging)


@dataclass
class Comparison:
    """Modeled beside measured time of the regions a run called (`compare`)."""

    rows: list[dict] = field(default_factory=list)  # region, calls, measured_s, modeled_s (per call), bound
    missing: list[str] = field(default_factory=list)  # regions not modeled, each with the reason

    def format(self) -> str:
        """A table, one region a row: its numbers first, then its whole name (names TVM gives
        regions share long prefixes; cut, two regions would look alike)."""
        lines = [f"{'calls':>5s} {'measured/call':>14s} {'modeled/call':>13s} {'bound by':>9s}  region"]
        for row in self.rows:
            lines.append(f"{row['calls']:5d} {row['measured_s'] * 1e6:11.1f} us {row['modeled_s'] * 1e6:10.2f} us "
                         f"{row['bound']:>9s}  {row['region']}")
        measured = sum(row["calls"] * row["measured_s"] for row in self.rows)
        modeled = sum(row["calls"] * row["modeled_s"] for row in self.rows)
        lines.append(f"{sum(r['calls'] for r in self.rows):5d} {measured * 1e6:11.1f} us {modeled * 1e6:10.2f} us "
                     f"{'':>9s}  all calls")
        lines += [f"not modeled: {reason}" for reason in self.missing]
        return "\n".join(lines)


def region_shares(region: RegionTime) -> dict[str, float]:
    """A region call's modeled seconds split by what they are spent on: "dispatch" (the region's
    and its ops' dispatch, and host-staged transfers), "compute" and "memory" (each op's roofline
    time, under what bounds it). They add up to `region.seconds`."""
    share = {"compute": 0.0, "memory": 0.0, "dispatch": region.dispatch + region.staging}
    for op in region.ops:
        share["dispatch"] += op.dispatch
        if op.bound != "dispatch":
            share[op.bound] += max(op.compute, op.memory)
    return share


def region_bound(region: RegionTime) -> str:
    """What bounds most of a region's modeled time: "compute", "memory" or "dispatch"."""
    share = region_shares(region)
    return max(share, key=share.get)


def modeled_beside_measured(snapshot: dict, programs: dict, performance: Performance, staged: bool = False) -> Comparison:
    """Each region of a ledger snapshot whose Program is known (`programs`: name -> Program),
    its measured time per call beside the model's."""
    result = Comparison()
    for name, counts in snapshot.get("regions", {}).items():
        if not counts["calls"]:
            continue
        program = programs.get(name)
        if program is None:
            result.missing.append(f"region {name}: its Program is unknown here")
            continue
        try:
            modeled = model_program(program, performance, staged)
        except SimAccelError as e:  # an op this process has not declared, no DMA figures for staging
            result.missing.append(f"region {name}: {e}")
            continue
        result.rows.append({"region": name, "calls": counts["calls"], "measured_s": counts["seconds"] / counts["calls"],
                            "modeled_s": modeled.seconds, "bound": region_bound(modeled)})
    return result


compare = modeled_beside_measured  # its earlier name (docs/api.md documents this module)
