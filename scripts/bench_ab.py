"""Two builds of simaccel timed against each other on one GPU: the native path "within noise".

Where it sits: the check behind a restructuring that must not change speed. `simaccel bench`
(tvm_integration/tools/commands/bench.py) times prebuilt regions natively, through the Python
engine and host-staged, beside TVM alone, all interleaved in one process. Run it on the
artifacts each build made (its own libraries, its own installed package), alternating A B B A
..., then this script reads the bench.json files and writes, per case, each run's native time
over TVM alone's (the ratio cancels most of the machine's drift), the median per build, and
B's median over A's. The device and date are the run folder's (devices.txt, date.txt). A change is "within noise" when B's ratio sits inside the spread of A's
own runs, or the two medians differ by less than the larger of 5% and that spread.

Usage: python scripts/bench_ab.py OUT.json LABEL=RUN [LABEL=RUN ...]
(RUN: a bench.json, or the log of the `simaccel bench` run; the label before '=' names the
build, e.g. old=run1/bench.json new=run2/bench.json).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

MODE, PEER = "simaccel_native", "tvm_only"


def medians(path: str) -> dict[str, dict[str, float]]:
    """case -> mode -> median us, from a bench.json or from the log `simaccel bench` printed
    ("CASE: MODE 12.3 us, MODE 4.5 us, ...")."""
    if path.endswith(".json"):
        cases = json.loads(Path(path).read_text())["cases"]
        return {name: {mode: m["median_us"] for mode, m in case.get("modes", {}).items()} for name, case in cases.items()}
    found = {}
    for line in Path(path).read_text().splitlines():
        case, colon, rest = line.partition(": ")
        if colon and rest.endswith(" us") and " " not in case:
            found[case] = {mode: float(us) for mode, us in (item.removesuffix(" us").split(" ") for item in rest.split(", "))}
    return found


def ratios(path: str) -> dict[str, float]:
    """Each case's native median over TVM alone's median, from one run."""
    return {name: modes[MODE] / modes[PEER] for name, modes in medians(path).items() if MODE in modes and PEER in modes}


def summary(runs: list[tuple[str, str]]) -> dict:
    """{labels, method, runs, cases: {case: {label: [ratios], label_median: ..., change, spread, within_noise}}}."""
    labels = list(dict.fromkeys(label for label, _ in runs))
    if len(labels) != 2:
        raise SystemExit(f"bench_ab: give runs of exactly two builds, got {labels}")
    per_run = [(label, ratios(path)) for label, path in runs]
    cases = {}
    for case in per_run[0][1]:
        values = {label: [r[case] for l, r in per_run if l == label and case in r] for label in labels}
        a, b = (statistics.median(values[label]) for label in labels)
        spread = max((max(v) - min(v)) / statistics.median(v) for v in values.values())
        change = b / a - 1
        cases[case] = {"ratios": values, "median": {labels[0]: a, labels[1]: b}, "change": change,
                       "spread": spread, "within_noise": abs(change) <= max(0.05, spread)}
    return {"labels": labels, "method": f"{MODE} median over {PEER} median per run of `simaccel bench` (medians of "
            "its interleaved timed calls); runs alternate between the builds",
            "runs": [f"{label}={path}" for label, path in runs], "cases": cases}


def table(result: dict) -> str:
    a, b = result["labels"]
    lines = [f"| case | {a}: native / TVM alone | {b}: native / TVM alone | {b} / {a} | spread of one build | within noise |",
             "|---|---|---|---|---|---|"]
    for case, c in result["cases"].items():
        lines.append(f"| {case} | {c['median'][a]:.3f} | {c['median'][b]:.3f} | {c['change']:+.1%} | "
                     f"{c['spread']:.1%} | {'yes' if c['within_noise'] else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or any("=" not in a for a in argv[1:]):
        print(__doc__.split("Usage: ")[1], file=sys.stderr)
        return 2
    runs = [tuple(a.split("=", 1)) for a in argv[1:]]
    result = summary(runs)
    Path(argv[0]).write_text(json.dumps(result, indent=1))
    print(table(result))
    return 0 if all(c["within_noise"] for c in result["cases"].values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
