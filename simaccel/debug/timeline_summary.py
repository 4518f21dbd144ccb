"""Reading a timeline trace back: time per op kind, gaps between kernels, a PNG timeline.

Where it sits: beside `simaccel.debug.timeline` (`simaccel.trace`), which writes the JSON; `simaccel trace --summary`
and `simaccel trace --png` call `summarize` / `format_summary` and `write_png`. Works on any
Chrome trace-event JSON whose spans ("X" events) carry simaccel's categories; a document that
is JSON but not such a trace (an event that is not an object, a span without a name or with a
time that is not a finite number, a track name without its args, ...) is a SimAccelError naming
the event and field (`check_document`), not a crash halfway through. The PNG's legend sits
above the axes, outside them, so it hides no span.

Kinds: a simaccel op's kind is its op name (`simaccel.conv2d_bias_relu`), a TVM kernel's its
symbol, a builtin's its name; views (reshapes that launch nothing) are counted apart. Kernels,
for the gaps, are the leaf work on a track: simaccel ops that launch something and TVM's
kernels (builtins and region calls are not kernels). A gap is the time between one kernel's
end and the next one's start on the same track, when positive.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict

from ..errors import SimAccelError
from ..json_file import read_json
from .timeline import LAUNCH, OP, REGION, VM_BUILTIN, VM_CALL, VM_REGION

KERNEL_CATEGORIES = (OP, VM_CALL)
KIND_CATEGORIES = (OP, VM_CALL, VM_BUILTIN, VM_REGION, REGION, LAUNCH)


def load(path) -> dict:
    """A trace file's document, or a SimAccelError naming the file and what is wrong with it."""
    document = read_json(path, f"trace {path}")
    if isinstance(document, dict) and "traceEvents" not in document:
        raise SimAccelError(f"trace {path}: no traceEvents list (not a Chrome trace-event file)")
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        what = (f"traceEvents is {_kind(events)}, not a list" if isinstance(document, dict)
                else f"the top level is {_kind(document)}, not an object with traceEvents (or a list of events)")
        raise SimAccelError(f"trace {path}: {what} (not a Chrome trace-event file)")
    document = {"traceEvents": events}
    check_document(document, f"trace {path}")
    return document


def check_document(document: dict, where: str = "trace") -> None:
    """A SimAccelError naming the first event (its index, and name where it has one) and field
    that the summary or the PNG could not read; what they do not read is not checked.

    Every event: an object with a string `ph`. Spans ("X"): a string `name`, finite numbers
    `ts` and `dur` (`dur` >= 0; `ts` may be negative, as Chrome's format allows), `pid` and
    `tid` (integers or strings), and where present a string `cat` and an object `args` (its
    `modeled_us` a finite number). Track names ("M" events named process_name or thread_name):
    `pid` (and for a thread `tid`), and `args` an object whose `name` is a string."""
    events = document.get("traceEvents") if isinstance(document, dict) else None
    if not isinstance(events, list):
        raise SimAccelError(f"{where}: no traceEvents list (not a Chrome trace-event document)")
    for i, event in enumerate(events):
        if not isinstance(event, dict):
            raise SimAccelError(f"{where}: event {i} is {_kind(event)}, not an object")
        label = f"event {i}" + (f" ({event['name']!r})" if isinstance(event.get("name"), str) else "")

        def bad(field, want):
            got = "missing" if field not in event else f"{_kind(event[field])} {_shown(event[field])}"
            return SimAccelError(f"{where}: {label}, field {field!r}: expected {want}, got {got}")

        phase = event.get("ph")
        if not isinstance(phase, str):
            raise bad("ph", "a string (the event's phase: X, M, C, i, ...)")
        if phase == "X":
            if not isinstance(event.get("name"), str):
                raise bad("name", "a string")
            for field in ("ts", "dur"):
                if not _finite(event.get(field)):
                    raise bad(field, "a finite number of microseconds")
            if event["dur"] < 0:
                raise bad("dur", "a duration >= 0")
            _check_track(event, ("pid", "tid"), bad)
            if "cat" in event and not isinstance(event["cat"], str):
                raise bad("cat", "a string")
            if "args" in event:
                if not isinstance(event["args"], dict):
                    raise bad("args", "an object")
                if "modeled_us" in event["args"] and not _finite(event["args"]["modeled_us"]):
                    raise SimAccelError(f"{where}: {label}, field 'args.modeled_us': expected a finite number, got "
                                        f"{_kind(event['args']['modeled_us'])} {_shown(event['args']['modeled_us'])}")
        elif phase == "M" and event.get("name") in ("process_name", "thread_name"):
            _check_track(event, ("pid",) if event["name"] == "process_name" else ("pid", "tid"), bad)
            if not isinstance(event.get("args"), dict):
                raise bad("args", "an object holding the track's name")
            if not isinstance(event["args"].get("name"), str):
                raise SimAccelError(f"{where}: {label}, field 'args.name': expected a string, got "
                                    + ("missing" if "name" not in event["args"] else _kind(event["args"]["name"])))


def _track_order(key: tuple) -> tuple:
    """A sort key for (pid, tid) whose ids may be integers or strings (never compared with each other)."""
    return tuple((isinstance(v, str), v) for v in key)


def _check_track(event: dict, fields, bad) -> None:
    for field in fields:
        value = event.get(field)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise bad(field, "an integer or a string (the track's id)")


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _shown(value) -> str:
    text = json.dumps(value)  # NaN and Infinity as JSON files write them
    return text if len(text) <= 40 else text[:37] + "..."


def _spans(document: dict) -> list[dict]:
    return [e for e in document["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]


def track_names(document: dict) -> dict:
    """(pid, tid) -> "process / thread" from the metadata events."""
    processes, threads = {}, {}
    for e in document["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            processes[e["pid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    names = {}
    for e in _spans(document):
        key = (e["pid"], e["tid"])
        names[key] = f"{processes.get(key[0], key[0])} / {threads.get(key, key[1])}"
    return names


def summarize(document: dict, largest: int = 5) -> dict:
    """Per kind: count and total microseconds; per track: kernels, busy and idle time, largest gaps."""
    check_document(document)
    kinds: dict[tuple[str, str], dict] = {}
    for e in _spans(document):
        cat = e.get("cat", "")
        if cat not in KIND_CATEGORIES:
            continue
        if cat == OP and e.get("args", {}).get("view"):
            cat = OP + " (view)"
        entry = kinds.setdefault((cat, e["name"]), {"category": cat, "kind": e["name"], "count": 0, "total_us": 0.0,
                                                    "modeled_us": None})
        entry["count"] += 1
        entry["total_us"] += float(e.get("dur", 0.0))
        if "modeled_us" in e.get("args", {}):  # traced under a profile with performance figures (simaccel.timing)
            entry["modeled_us"] = (entry["modeled_us"] or 0.0) + float(e["args"]["modeled_us"])
    names = track_names(document)
    by_track = defaultdict(list)
    for e in _spans(document):
        if e.get("cat") in KERNEL_CATEGORIES and not e.get("args", {}).get("view"):
            by_track[(e["pid"], e["tid"])].append(e)
    tracks = []
    for key, kernels in sorted(by_track.items(), key=lambda item: _track_order(item[0])):
        kernels.sort(key=lambda e: e["ts"])
        gaps = []
        for before, after in zip(kernels, kernels[1:]):
            gap = float(after["ts"]) - (float(before["ts"]) + float(before.get("dur", 0.0)))
            if gap > 0:
                gaps.append({"gap_us": gap, "after": before["name"], "before": after["name"], "at_us": float(after["ts"])})
        gaps.sort(key=lambda g: -g["gap_us"])
        first, last = kernels[0], max(kernels, key=lambda e: e["ts"] + e.get("dur", 0.0))
        tracks.append({
            "track": names.get(key, f"{key[0]} / {key[1]}"), "pid": key[0], "tid": key[1], "kernels": len(kernels),
            "busy_us": sum(float(e.get("dur", 0.0)) for e in kernels),
            "span_us": float(last["ts"]) + float(last.get("dur", 0.0)) - float(first["ts"]),
            "idle_us": sum(g["gap_us"] for g in gaps), "gaps": len(gaps), "largest_gaps": gaps[:largest],
        })
    ordered = sorted(kinds.values(), key=lambda k: (KIND_CATEGORIES.index(k["category"].split(" ")[0]), -k["total_us"]))
    return {"kinds": ordered, "tracks": tracks}


def format_summary(summary: dict) -> str:
    modeled = any(k.get("modeled_us") is not None for k in summary["kinds"])
    lines = ["time per kind (spans; microseconds" + ("; modeled: the timing model's total, simaccel.timing" if modeled else "")
             + "):", f"  {'category':<22} {'count':>6} {'total us':>12} {'mean us':>10}"
             + (f" {'modeled us':>11}" if modeled else "") + "  kind"]
    for k in summary["kinds"]:
        model = "" if not modeled else f" {k['modeled_us']:>11.2f}" if k.get("modeled_us") is not None else f" {'-':>11}"
        lines.append(f"  {k['category']:<22} {k['count']:>6} {k['total_us']:>12.1f} {k['total_us'] / k['count']:>10.1f}"
                     f"{model}  {_short(k['kind'])}")
    lines.append("gaps between kernels (simaccel ops and TVM kernels), per track:")
    if not summary["tracks"]:
        lines.append("  (no kernels)")
    for t in summary["tracks"]:
        lines.append(f"  {t['track']}: {t['kernels']} kernels, busy {t['busy_us']:.1f} us of {t['span_us']:.1f} us, "
                     f"idle {t['idle_us']:.1f} us in {t['gaps']} gaps")
        for g in t["largest_gaps"]:
            lines.append(f"    {g['gap_us']:>10.1f} us  after {_short(g['after'], 40)}  before {_short(g['before'], 40)}")
    return "\n".join(lines)


def _short(name: str, width: int = 70) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


COLOURS = {OP: "tab:blue", LAUNCH: "tab:cyan", REGION: "tab:green", VM_CALL: "tab:orange", VM_REGION: "tab:olive",
           VM_BUILTIN: "tab:gray"}


def write_png(document: dict, out) -> None:
    """A timeline (one row per track, spans drawn by nesting depth) as a PNG; needs matplotlib."""
    fig = draw_timeline(document)
    import matplotlib.pyplot as plt  # there: draw_timeline says so where matplotlib is missing

    try:
        fig.savefig(os.fspath(out), dpi=110, bbox_inches="tight")  # "tight": the legend outside the axes is kept
    except OSError as e:
        raise SimAccelError(f"--png {out}: cannot write it ({e.strerror or e})") from None
    finally:
        plt.close(fig)


def draw_timeline(document: dict):
    """The matplotlib figure `write_png` saves (close it with matplotlib.pyplot.close)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SimAccelError("simaccel trace --png draws with matplotlib, which is not installed; "
                            "install it with pip install 'simaccel[trace]'") from None
    check_document(document)
    names = track_names(document)
    rows = sorted(names, key=_track_order)
    spans = _spans(document)
    fig, ax = plt.subplots(figsize=(14, 1 + 0.9 * max(len(rows), 1)))
    for row, key in enumerate(rows):
        events = sorted((e for e in spans if (e["pid"], e["tid"]) == key), key=lambda e: (e["ts"], -e.get("dur", 0)))
        open_ends: list[float] = []
        for e in events:
            while open_ends and open_ends[-1] <= e["ts"]:
                open_ends.pop()
            depth = len(open_ends)
            open_ends.append(e["ts"] + e.get("dur", 0.0))
            height = 0.8 / (1 + depth) ** 0.5
            ax.broken_barh([(e["ts"] / 1e3, max(e.get("dur", 0.0), 0.0) / 1e3)], (row - height / 2, height),
                           facecolors=COLOURS.get(e.get("cat"), "tab:purple"), edgecolor="black", linewidth=0.2)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([names[key] for key in rows])
    ax.set_xlabel("time since the trace began (ms)")
    ax.invert_yaxis()
    from matplotlib.patches import Patch

    # The legend above the axes, outside them (inside, it hid spans): the categories drawn, in one row.
    drawn = {e.get("cat") for e in spans}
    handles = [Patch(color=c, label=cat) for cat, c in COLOURS.items() if cat in drawn]
    if drawn - set(COLOURS):
        handles.append(Patch(color="tab:purple", label="other"))
    if handles:
        ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.02), ncol=len(handles), borderaxespad=0,
                  fontsize="small", frameon=False)
    fig.tight_layout()
    return fig
