"""`simaccel whatif`: one model under several device profiles, by the timing model.

    simaccel whatif MODEL.py|--demo --profile a.json --profile b.json [--png roofline.png]

Where it sits: a tool over partitioning (each profile decides what goes to the accelerator and
how regions split), the codegen's Programs (`region_program`, what the runtime would run) and
simaccel.timing. Nothing runs: for each profile it prints the regions, numbered in the order the
model calls them, each with its whole name (TVM names a region after its ops, so names share
long prefixes), its ops, its modeled time per call, how often one run of the model calls it (TVM
makes one function of equal regions) and what bounds it; the total of a run split into dispatch
(the region and op dispatch counts said), compute and memory; and each op left on TVM with the reason (not modeled: it runs
where TVM runs it). `--png` draws, per profile, a roofline (its roofs and each op, numbered, at
its arithmetic intensity, with a key naming the numbers) and, beside them, each profile's
modeled time a run as a stacked bar of dispatch, compute and memory. The Python call is
`whatif(mod, profiles)`; a model with symbolic shapes is modeled at the sizes given
(`whatif(mod, profiles, {"b": 4, "s": 32})`, `--sizes b=4,s=32`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import SimAccelError
from ...timing import RegionTime, model_program, region_bound, region_shares

SHARES = ("dispatch", "compute", "memory")  # what a modeled time is spent on (simaccel.timing.region_shares)
# Light colors for the bars, apart from the saturated ones (matplotlib's cycle) of the regions' points.
SHARE_COLORS = {"dispatch": "#bdbdbd", "compute": "#9ecae1", "memory": "#fdd0a2"}


@dataclass
class ProfileTime:
    """The model of one profile on one module."""

    profile: object  # simaccel.DeviceProfile
    regions: list[RegionTime]  # in the order the module first calls them
    kept: list[tuple[str, str, str]]  # ops left on TVM, not modeled: (var, relax op, reason), as PartitionReport.kept
    calls: list[int] | None = None  # calls of each region in one run of the module (TVM gives equal regions one
    #                                 function, called where each was); None: one each

    def __post_init__(self):
        if self.calls is None:
            self.calls = [1] * len(self.regions)

    @property
    def seconds(self) -> float:
        """The modeled seconds of all region calls of one run of the module."""
        return sum(calls * region.seconds for calls, region in zip(self.calls, self.regions))

    @property
    def shares(self) -> dict[str, float]:
        """`seconds` split as `simaccel.timing.region_shares` splits a region's."""
        total = dict.fromkeys(SHARES, 0.0)
        for calls, region in zip(self.calls, self.regions):
            for key, seconds in region_shares(region).items():
                total[key] += calls * seconds
        return total

    def dispatches(self) -> str:
        """What the dispatch share is made of: "N region calls x S + M ops x S"."""
        perf = self.profile.performance
        ops = sum(calls * sum(1 for op in region.ops if op.bound != "dispatch")  # a view does no work, has no dispatch
                  for calls, region in zip(self.calls, self.regions))
        calls = sum(self.calls)
        return (f"{calls} region call{'s' if calls != 1 else ''} x {_us(perf.region_dispatch)} + "
                f"{ops} op{'s' if ops != 1 else ''} x {_us(perf.op_dispatch)}")


def whatif(mod, profiles, sizes: dict | None = None) -> list[ProfileTime]:
    """For each profile (with `performance`), the modeled time of every region of `mod`
    partitioned for it, and of all its calls in one run of `mod`; a symbolic region at `sizes`
    (its size vars' values)."""
    from ..backend.codegen import region_program
    from ..backend.partition import partition_report
    from ..backend.patterns import sync_patterns

    results = []
    for profile in profiles:
        if profile.performance is None:
            raise SimAccelError(f"profile {profile.name} has no performance figures to model (its `performance` field: "
                                "peak_flops, memory_bandwidth, ...; see examples/profiles/)")
        partitioned, report = partition_report(mod, profile)
        specs = sync_patterns()
        programs = [region_program(gvar.name_hint, func, specs) for gvar, func in partitioned.functions.items()
                    if func.attrs is not None and func.attrs.get("Codegen") == "simaccel"]
        programs = [_at_sizes(p, sizes or {}) for p in programs]
        calls = region_calls(partitioned)
        programs.sort(key=lambda p: (list(calls).index(p.name) if p.name in calls else len(calls), p.name))
        regions = [model_program(p, profile.performance) for p in programs]
        results.append(ProfileTime(profile, regions, list(report.kept), [calls.get(p.name, 1) for p in programs]))
    return results


def _at_sizes(program, sizes: dict):
    """`program`, or the static Program a symbolic one is at `sizes`; SimAccelError naming the
    vars `sizes` lacks."""
    missing = [v.name for v in program.vars if v.name not in sizes]
    if missing:
        raise SimAccelError(f"whatif: region {program.name} has symbolic sizes; give them with --sizes "
                            f"({', '.join(f'{name}=N' for name in missing)})")
    return program.bind({v.name: sizes[v.name] for v in program.vars}) if program.vars else program


def region_calls(mod) -> dict[str, int]:
    """Region name -> how many calls of it the module's other functions make (`main`'s first), in
    the order of their first call. TVM's FuseOpsByPattern makes one function of equal regions, so
    a region may be called several times in one run (each call site counts once)."""
    import tvm
    from tvm import relax

    calls: dict[str, int] = {}
    callers = sorted(((gv.name_hint, f) for gv, f in mod.functions.items()
                      if isinstance(f, relax.Function) and not (f.attrs is not None and f.attrs.get("Codegen"))),
                     key=lambda item: (item[0] != "main", item[0]))
    for _, func in callers:
        for block in getattr(func.body, "blocks", []):
            for binding in block.bindings:
                value = binding.value
                if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar):
                    calls[value.op.name_hint] = calls.get(value.op.name_hint, 0) + 1
    return calls


def _op_name(op: str) -> str:
    return op[len("simaccel."):] if op.startswith("simaccel.") else op


def _us(seconds: float) -> str:
    """Microseconds, to 0.01 us; three figures below 0.1 us (a small share is not shown as 0)."""
    us = seconds * 1e6
    return f"{us:.2f} us" if us >= 0.1 or us == 0 else f"{us:.3g} us"


def format_whatif(results: list[ProfileTime]) -> str:
    """What `simaccel whatif` prints: per profile its total a run and what it is spent on, each
    region (numbered, its whole name, its ops, time per call, calls, bound) and each op left on
    TVM with its reason; then each profile's total against the first's."""
    lines = []
    for result in results:
        p, shares = result.profile, result.shares
        lines.append(f"profile {p.name}: {len(result.regions)} region(s), modeled {_us(result.seconds)} a run: "
                     f"dispatch {_us(shares['dispatch'])} ({result.dispatches()}), compute {_us(shares['compute'])}, "
                     f"memory {_us(shares['memory'])}")
        if result.regions:
            lines.append(f"  {'#':>2s} {'per call':>11s} {'calls':>5s}  {'bound by':8s}  region, then its ops")
        for number, (calls, region) in enumerate(zip(result.calls, result.regions), 1):
            lines.append(f"  {number:2d} {_us(region.seconds):>11s} {calls:5d}  {region_bound(region):8s}  {region.region}")
            lines.append(f"  {'':2s} {'':11s} {'':5s}  {'':8s}    {' -> '.join(_op_name(op.op) for op in region.ops)}")
        if result.kept:
            lines.append(f"  left on TVM, not modeled: {len(result.kept)} op(s)")
            lines += [f"    {var} = {op}: {reason}" for var, op, reason in result.kept]
    if len(results) > 1 and all(r.seconds for r in results):
        base = results[0]
        for other in results[1:]:
            lines.append(f"{other.profile.name} / {base.profile.name}: {other.seconds / base.seconds:.2f}x the modeled time")
    return "\n".join(lines)


# -- the chart -------------------------------------------------------------------------------------------
KEY_LINE = 0.14  # inches from one line of a key to the next
KEY_CHAR = 6.5 * 0.6 / 72  # inches a character of a key takes (6.5-point monospace)
PANEL = 6.0  # inches of a roofline's column
DPI = 110


def roofline_points(result: ProfileTime) -> tuple[list[dict], list[str]]:
    """The points of a profile's roofline, numbered in the order of the ops: one per position,
    with what its key says (the ops there, their regions and bounds, the modeled time they take in
    a run); and the ops not drawn (an op that computes or moves nothing has no place on a
    log-log roofline)."""
    points: dict[tuple, dict] = {}
    skipped = []
    for r, (calls, region) in enumerate(zip(result.calls, result.regions), 1):
        for op in region.ops:
            if not op.flops or not math.isfinite(op.intensity):
                skipped.append(f"{_op_name(op.op)} (region {r})")
                continue
            rate = op.flops / max(op.compute, op.memory)
            key = (round(math.log10(op.intensity), 3), round(math.log10(rate), 3))
            point = points.setdefault(key, {"number": len(points) + 1, "x": op.intensity, "y": rate, "region": r,
                                            "ops": {}, "regions": [], "bounds": [], "seconds": 0.0})
            point["ops"][_op_name(op.op)] = point["ops"].get(_op_name(op.op), 0) + calls
            point["regions"] += [r] if r not in point["regions"] else []
            point["bounds"] += [op.bound] if op.bound not in point["bounds"] else []
            point["seconds"] += calls * op.seconds
    for point in points.values():
        ops = ", ".join(name + (f" x{n}" if n > 1 else "") for name, n in point["ops"].items())
        regions = ", ".join(map(str, point["regions"]))
        point["key"] = (f"{point['number']:>2d}  {ops}  (region{'s' if len(point['regions']) > 1 else ''} {regions}, "
                        f"{'/'.join(point['bounds'])}, {_us(point['seconds'])} a run)")
    return list(points.values()), skipped


def _key_lines(result: ProfileTime, points: list[dict], skipped: list[str]) -> list[str]:
    """A roofline's key: a line a point, then (in grey) the ops not drawn and those left on TVM."""
    lines = [point["key"] for point in points]
    if skipped:
        more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        lines.append("not drawn (no operations or no bytes): " + ", ".join(skipped[:3]) + more)
    if result.kept:
        lines.append(f"left on TVM, not modeled: {len(result.kept)} op(s) (simaccel whatif lists them)")
    return lines


def _key_columns(lines: list[str]) -> tuple[int, int]:
    """(columns, lines per column) of a key that fits a roofline's width."""
    widest = max([len(line) for line in lines] + [1]) * KEY_CHAR + 0.15
    columns = max(1, min(len(lines), int(PANEL * 0.9 // widest)))
    return columns, max(1, math.ceil(len(lines) / columns))


def write_roofline(results: list[ProfileTime], path: str) -> None:
    """A PNG: per profile, its roofs (peak per dtype, memory and scratchpad bandwidth) and the ops
    of its regions at (operations per byte, operations per second as modeled), each position
    numbered, the key to the numbers below; at the right, each profile's modeled time a run as a
    stacked bar of dispatch, compute and memory, and what its dispatch is made of."""
    import matplotlib.pyplot as plt

    fig, _ = roofline_figure(results)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def roofline_figure(results: list[ProfileTime]):
    """The figure `write_roofline` saves, and per roofline the pixel boxes of its points' number
    labels, of its points and of its legend (what no label may overlap) and of its frame."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SimAccelError("simaccel whatif --png draws with matplotlib, which is not installed; "
                            "install it with pip install matplotlib (or the 'trace' extra)") from None

    drawn = [roofline_points(result) for result in results]
    keys = [_key_lines(result, points, skipped) for result, (points, skipped) in zip(results, drawn)]
    count = len(results)
    rows = max([_key_columns(lines)[1] for lines in keys] + [1 + 2 * count])
    key_height = 0.2 + KEY_LINE * rows  # inches, as the rows below
    heights = [0.4, 4.2, 0.7, key_height]  # title, chart, its axis labels, key
    fig = plt.figure(figsize=(PANEL * count + 3.2, sum(heights)), dpi=DPI)
    grid = fig.add_gridspec(4, count + 1, height_ratios=heights, width_ratios=[PANEL] * count + [3.2],
                            left=0.06, right=0.98, top=1, bottom=0, wspace=0.3, hspace=0)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    axes = []
    for column, (result, (points, _), lines) in enumerate(zip(results, drawn, keys)):
        ax = fig.add_subplot(grid[1, column])
        axes.append(ax)
        _draw_roofs(ax, result, points, colors)
        key = fig.add_subplot(grid[3, column])
        key.axis("off")
        columns, per_column = _key_columns(lines)
        for i, text in enumerate(lines):
            place, row = divmod(i, per_column)
            color = colors[(points[i]["region"] - 1) % len(colors)] if i < len(points) else "0.35"
            key.text(place / columns, 1 - row * KEY_LINE / key_height, text, transform=key.transAxes, fontsize=6.5,
                     va="top", ha="left", color=color, family="monospace")
    _draw_shares(fig.add_subplot(grid[1, count]), results)
    note = fig.add_subplot(grid[3, count])
    note.axis("off")
    lines = ["dispatch in a run:"]
    for r in results:
        calls, ops = r.dispatches().split(" + ")
        lines += [f"{r.profile.name}: {calls}", f"{'':{len(r.profile.name)}s}  + {ops}"]
    for row, text in enumerate(lines):
        note.text(0, 1 - row * KEY_LINE / key_height, text, transform=note.transAxes, fontsize=6.5, va="top",
                  ha="left", family="monospace")
    fig.canvas.draw()  # the layout is final: labels are placed in its pixels
    renderer = fig.canvas.get_renderer()
    return fig, [_place_labels(ax, points, renderer) for ax, (points, _) in zip(axes, drawn)]


def _draw_roofs(ax, result: ProfileTime, points: list[dict], colors) -> None:
    perf = result.profile.performance
    lo = min([p["x"] for p in points] + [0.1]) / 3
    hi = max([p["x"] for p in points] + [1e3]) * 3
    xs = [lo * (hi / lo) ** (k / 100) for k in range(101)]
    styles = ["-", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 3))]
    for (dtype, peak), style in zip(sorted(perf.peak_flops, key=lambda item: -item[1]), styles):
        ax.plot(xs, [min(peak, x * perf.memory_bandwidth) for x in xs], color="0.25", linestyle=style, linewidth=1,
                label=f"{dtype}: {peak / 1e12:g} TFLOP/s, {perf.memory_bandwidth / 1e9:g} GB/s")
    if perf.scratchpad_bandwidth:  # an op whose tensors are all intermediates moves them at this rate
        top = max(peak for _, peak in perf.peak_flops)
        ax.plot(xs, [min(top, x * perf.scratchpad_bandwidth) for x in xs], color="0.6", linestyle="--", linewidth=1,
                label=f"scratchpad: {perf.scratchpad_bandwidth / 1e9:g} GB/s")
    for point in points:
        ax.scatter(point["x"], point["y"], s=18, zorder=3, color=colors[(point["region"] - 1) % len(colors)],
                   edgecolors="black", linewidths=0.4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    top = max(peak for _, peak in perf.peak_flops)
    bottom = min([p["y"] for p in points] + [lo * perf.memory_bandwidth]) / 3  # the roofs from where they start
    ax.set_ylim(bottom, top * 4)
    ax.set_xlabel("operations per byte")
    ax.set_ylabel("operations per second (modeled)")
    shares = result.shares
    ax.set_title(f"{result.profile.name}: {_us(result.seconds)} a run, {_us(shares['dispatch'])} of it dispatch",
                 fontsize=10)
    ax.legend(fontsize=7, loc="lower right")


def _draw_shares(ax, results: list[ProfileTime]) -> None:
    """Each profile's modeled time a run of the model, stacked: dispatch, compute, memory, in microseconds."""
    names = [r.profile.name for r in results]
    bottoms = [0.0] * len(results)
    top = max([r.seconds * 1e6 for r in results] + [1e-9])
    for key in SHARES:
        values = [r.shares[key] * 1e6 for r in results]
        ax.bar(names, values, bottom=bottoms, color=SHARE_COLORS[key], label=key, width=0.6)
        for i, value in enumerate(values):
            if value > 0.06 * top:  # room for its figure inside the bar
                ax.text(i, bottoms[i] + value / 2, f"{value:.1f}", ha="center", va="center", fontsize=7, color="white")
        bottoms = [b + v for b, v in zip(bottoms, values)]
    for i, total in enumerate(bottoms):
        ax.text(i, total, f"{total:.1f} us", ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, top * 1.15)
    ax.set_ylabel("modeled us a run of the model")
    ax.set_title("where a run's time goes", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)


def _place_labels(ax, points: list[dict], renderer) -> dict:
    """Each point's number beside it, where it overlaps no other label, point, the legend or the
    frame: the first free place of a ring of offsets, farther out ring by ring (a leader line
    from the second ring on); where none is free, the one that overlaps least. Returns the pixel
    boxes: "labels" (number -> box), "points", "legend", "frame"."""
    from matplotlib.transforms import Bbox

    frame = ax.get_window_extent(renderer)
    scale = ax.figure.dpi / 72  # points to pixels
    marks = []
    for point in points:
        px, py = ax.transData.transform((point["x"], point["y"]))
        marks.append(Bbox.from_bounds(px - 3 * scale, py - 3 * scale, 6 * scale, 6 * scale))
    legend = ax.get_legend().get_window_extent(renderer)
    taken = [*marks, legend]
    labels = {}
    for point in sorted(points, key=lambda p: (p["x"], p["y"])):
        label = ax.annotate(str(point["number"]), (point["x"], point["y"]), xytext=(4, 4), textcoords="offset points",
                            fontsize=7, ha="center", va="center", zorder=4)
        best = None
        for ring, radius in enumerate((7, 12, 18, 26, 36, 48)):
            for angle in (45, 135, -45, -135, 90, -90, 0, 180, 22, 158, -22, -158):
                offset = (radius * math.cos(math.radians(angle)), radius * math.sin(math.radians(angle)))
                label.xyann = offset
                box = label.get_window_extent(renderer)
                overlap = sum(_area(box.expanded(1.1, 1.15), other) for other in taken)
                inside = frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
                cost = overlap + (0 if inside else 1e6)
                if best is None or cost < best[0]:
                    best = (cost, offset, ring, box)
                if cost == 0:
                    break
            if best[0] == 0:
                break
        _, offset, ring, box = best
        label.xyann = offset
        if ring:  # away from its point: a line leads to it
            ax.annotate("", (point["x"], point["y"]), xytext=offset, textcoords="offset points",
                        arrowprops={"arrowstyle": "-", "color": "0.5", "linewidth": 0.5, "shrinkA": 4, "shrinkB": 2})
        taken.append(box)
        labels[point["number"]] = box
    return {"labels": labels, "points": marks, "legend": legend, "frame": frame}


def _area(a, b) -> float:
    """The area two boxes share (0 when apart)."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return width * height if width > 0 and height > 0 else 0.0
