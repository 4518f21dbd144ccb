"""`simaccel bench --compare OLD.json`: flag every figure more than 10% worse than an earlier run.

Two kinds of report are compared, each with its peer timed in the same run:
- a region report (`bench.json`, simaccel.tvm_integration.tools.bench) holds, per case, the
  median time of each mode; its peer is "tvm_only", TVM alone;
- a kernel report (`ops.json`, simaccel.tvm_integration.tools.bench_ops) holds, per case, the
  simaccel kernel's median GPU time and its peer "torch", PyTorch's kernel.
Machines and runs differ in clocks and load, so a mode is compared by its ratio to the peer in
its own run: a mode whose ratio grew by more than the tolerance is a regression. The peer's own
time is shown beside it, so that a change of the machine is visible too. Cases or modes present
in only one of the two reports are listed, not compared.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import SimAccelError
from ...json_file import read_json

PEER = "tvm_only"  # a region report's peer
KERNEL_PEER = "torch"  # a kernel report's peer
PEER_NAMES = {PEER: "TVM alone", KERNEL_PEER: "torch"}
SLOWER_BY = 0.10  # a figure more than this fraction worse against its peer is a regression


@dataclass(frozen=True)
class Report:
    """A report's medians, {case: {mode: median_us}}, and the mode every other is divided by."""

    peer: str
    medians: dict


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

    def regressed(self, tolerance: float = SLOWER_BY) -> bool:
        return self.change > tolerance


def load_report(path) -> Report:
    """A region report (bench.json) or a kernel report (ops.json); SimAccelError naming the file."""
    report = read_json(path, f"bench report {path}")
    if isinstance(report, dict) and isinstance(report.get("ops"), dict) and report["ops"]:
        return Report(KERNEL_PEER, _kernel_medians(path, report["ops"]))
    cases = report.get("cases") if isinstance(report, dict) else None
    if not isinstance(cases, dict) or not cases:
        raise SimAccelError(f'bench report {path}: no "cases" object (bench.json) or "ops" object (ops.json)')
    medians = {}
    for case, entry in cases.items():
        modes = entry.get("modes") if isinstance(entry, dict) else None
        try:
            medians[case] = {mode: float(value["median_us"]) for mode, value in modes.items()}
        except (AttributeError, KeyError, TypeError, ValueError):
            raise SimAccelError(f"bench report {path}: case {case!r} has no modes with a median_us each") from None
    _check_positive(path, medians)
    return Report(PEER, medians)


def _kernel_medians(path, ops: dict) -> dict:
    """An ops.json's cases as {case: {"simaccel": us, "torch": us}} (torch where it was timed)."""
    medians = {}
    for case, row in ops.items():
        try:
            medians[case] = {"simaccel": float(row["median_us"])}
            if row.get("torch_us") is not None:
                medians[case][KERNEL_PEER] = float(row["torch_us"])
        except (AttributeError, KeyError, TypeError, ValueError):
            raise SimAccelError(f"bench report {path}: op case {case!r} has no median_us") from None
    _check_positive(path, medians)
    return medians


def _check_positive(path, medians: dict) -> None:
    for case, modes in medians.items():
        if any(not us > 0 for us in modes.values()):
            raise SimAccelError(f"bench report {path}: case {case!r} has a median that is not > 0")


def peer_ratio_changes(new: Report, old: Report) -> tuple[list[Change], list[str]]:
    """The modes both reports time against their peer, and a note for each case or mode only one
    of them has."""
    if new.peer != old.peer:
        raise SimAccelError(f"bench --compare: a report against {PEER_NAMES[new.peer]} cannot be compared with "
                            f"one against {PEER_NAMES[old.peer]} (bench.json with bench.json, ops.json with ops.json)")
    peer, changes, notes = new.peer, [], []
    for case in sorted(set(new.medians) | set(old.medians)):
        if case not in new.medians or case not in old.medians:
            notes.append(f"{case}: only in the {'new' if case in new.medians else 'old'} report")
            continue
        now, before = new.medians[case], old.medians[case]
        if peer not in now or peer not in before:
            notes.append(f"{case}: no {peer} time to compare against")
            continue
        for mode in sorted(set(now) | set(before)):
            if mode == peer:
                continue
            if mode not in now or mode not in before:
                notes.append(f"{case} {mode}: only in the {'new' if mode in now else 'old'} report")
                continue
            changes.append(Change(case, mode, before[mode] / before[peer], now[mode] / now[peer],
                                  before[mode], now[mode]))
    return changes, notes


def format_comparison(changes: list[Change], notes: list[str], new: Report, old: Report,
                      tolerance: float = SLOWER_BY) -> list[str]:
    """The comparison as lines of text: a table, then the notes and a verdict."""
    peer, short = new.peer, "TVM" if new.peer == PEER else new.peer
    width = max([12] + [len(c.case) for c in changes])
    lines = [f"{'case':<{width}} {'mode':<20} {'old':>10} {'new':>10} {'x ' + short + ' old':>10} "
             f"{'x ' + short + ' new':>10} {'change':>8}"]
    for c in changes:
        flag = "  REGRESSION" if c.regressed(tolerance) else ""
        lines.append(f"{c.case:<{width}} {c.mode:<20} {c.old_us:>8.1f}us {c.new_us:>8.1f}us {c.old_ratio:>10.2f} "
                     f"{c.new_ratio:>10.2f} {c.change:>+8.1%}{flag}")
    for case in sorted(set(new.medians) & set(old.medians)):
        if peer in new.medians[case] and peer in old.medians[case]:
            lines.append(f"{case:<{width}} {peer:<20} {old.medians[case][peer]:>8.1f}us "
                         f"{new.medians[case][peer]:>8.1f}us (the peer: its change is the machine's)")
    lines += notes
    worse = [c for c in changes if c.regressed(tolerance)]
    lines.append(f"{len(worse)} of {len(changes)} figures more than {tolerance:.0%} worse against {PEER_NAMES[peer]}"
                 + (": " + ", ".join(f"{c.case} {c.mode}" for c in worse) if worse else ""))
    return lines
