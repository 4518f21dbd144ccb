"""`simaccel bench --compare OLD.json`: flag every figure more than 10% worse than an earlier run.

A bench report (`bench.json`, written by simaccel.tvm_integration.tools.bench) holds, per case,
the median time of each mode; "tvm_only" is TVM alone in the same run. Machines and runs
differ in clocks and load, so a mode is compared by its ratio to TVM alone in its own run:
a mode whose ratio grew by more than the tolerance is a regression. TVM alone's own time is
shown beside it, so that a change of the machine is visible too. Cases or modes present in
only one of the two reports are listed, not compared.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ...errors import SimAccelError

PEER = "tvm_only"
TOLERANCE = 0.10


@dataclass(frozen=True)
class Change:
    """One mode of one case in both reports."""

    case: str
    mode: str
    old_ratio: float  # median / TVM alone's median, in the old run
    new_ratio: float
    old_us: float
    new_us: float

    @property
    def change(self) -> float:
        """Relative change of the ratio: +0.25 is 25% slower against TVM alone."""
        return self.new_ratio / self.old_ratio - 1

    def regressed(self, tolerance: float = TOLERANCE) -> bool:
        return self.change > tolerance


def load_report(path) -> dict:
    """A bench report's cases as {case: {mode: median_us}}; SimAccelError naming the file."""
    try:
        report = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SimAccelError(f"bench report {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SimAccelError(f"bench report {path}: cannot read it: {e}") from None
    except json.JSONDecodeError as e:
        raise SimAccelError(f"bench report {path}: not valid JSON ({e})") from None
    cases = report.get("cases") if isinstance(report, dict) else None
    if not isinstance(cases, dict) or not cases:
        raise SimAccelError(f'bench report {path}: no "cases" object (is it a bench.json?)')
    medians = {}
    for case, entry in cases.items():
        modes = entry.get("modes") if isinstance(entry, dict) else None
        try:
            medians[case] = {mode: float(value["median_us"]) for mode, value in modes.items()}
        except (AttributeError, KeyError, TypeError, ValueError):
            raise SimAccelError(f"bench report {path}: case {case!r} has no modes with a median_us each") from None
        if any(not us > 0 for us in medians[case].values()):
            raise SimAccelError(f"bench report {path}: case {case!r} has a median that is not > 0")
    return medians


def compare(new: dict, old: dict) -> tuple[list[Change], list[str]]:
    """The modes both reports (`load_report`) time against TVM alone, and a note for each case or
    mode only one of them has."""
    changes, notes = [], []
    for case in sorted(set(new) | set(old)):
        if case not in new or case not in old:
            notes.append(f"{case}: only in the {'new' if case in new else 'old'} report")
            continue
        if PEER not in new[case] or PEER not in old[case]:
            notes.append(f"{case}: no {PEER} time to compare against")
            continue
        for mode in sorted(set(new[case]) | set(old[case])):
            if mode == PEER:
                continue
            if mode not in new[case] or mode not in old[case]:
                notes.append(f"{case} {mode}: only in the {'new' if mode in new[case] else 'old'} report")
                continue
            changes.append(Change(case, mode, old[case][mode] / old[case][PEER], new[case][mode] / new[case][PEER],
                                  old[case][mode], new[case][mode]))
    return changes, notes


def format_comparison(changes: list[Change], notes: list[str], new: dict, old: dict,
                      tolerance: float = TOLERANCE) -> list[str]:
    """The comparison as lines of text: a table, then the notes and a verdict."""
    lines = [f"{'case':<12} {'mode':<20} {'old':>10} {'new':>10} {'x TVM old':>10} {'x TVM new':>10} {'change':>8}"]
    for c in changes:
        flag = "  REGRESSION" if c.regressed(tolerance) else ""
        lines.append(f"{c.case:<12} {c.mode:<20} {c.old_us:>8.1f}us {c.new_us:>8.1f}us {c.old_ratio:>10.2f} "
                     f"{c.new_ratio:>10.2f} {c.change:>+8.1%}{flag}")
    for case in sorted(set(new) & set(old)):
        if PEER in new[case] and PEER in old[case]:
            lines.append(f"{case:<12} {PEER:<20} {old[case][PEER]:>8.1f}us {new[case][PEER]:>8.1f}us "
                         "(the peer: its change is the machine's)")
    lines += notes
    worse = [c for c in changes if c.regressed(tolerance)]
    lines.append(f"{len(worse)} of {len(changes)} figures more than {tolerance:.0%} worse against TVM alone"
                 + (": " + ", ".join(f"{c.case} {c.mode}" for c in worse) if worse else ""))
    return lines
