"""Tutorial 3's output on a GPU, step by step, for the machines that cannot run its GPU steps.

``03_on_the_gpu.py``'s GPU steps need a CUDA GPU and NVIDIA's compiler libraries (NVVM, NVRTC,
nvJitLink: the ``aot`` extra); its CUDA build needs the libraries. Where they are missing, each
such step shows instead what it printed in the run that
``results/current.json`` names as the current tutorials run (today
``results/gpu/2026-12-03-h200-tutorials/03_on_the_gpu.out``), the tutorial's whole output
on the GPU machine, marked with the device its ``devices.txt`` names and the date its
``date.txt`` holds. The lines are that run's own, as the tutorial printed them then.
tests/test_tutorials.py checks that what the tutorial shows is that file's text.
"""

import csv
import functools
import json
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository
# The run results/current.json names as the current tutorials run (docs/gpu.md's figures come
# from the same manifest).
_CURRENT = Path(ROOT / json.loads((ROOT / "results" / "current.json").read_text())["results"]["tutorials"]["file"])
RUN, OUTPUT = _CURRENT.parent, _CURRENT.name

# The steps of 03_on_the_gpu.py in the order they printed in that run, each with the start of
# the first line it printed there; a step's lines run up to the next step's first line. None:
# the step printed nothing there (its checks are asserts).
STEPS = (
    ("set-up", "GPU: "),
    ("a CUDA build", "built for "),
    ("the exported library", "mynpu_model_cuda.so: "),
    ("the trace of a run", "time per kind "),
    ("native regions against TVM alone", "{'offloaded_calls': "),
    ("zero-copy by pointer identity", "read ["),
    ("TVM's stream", "10 region calls traced"),
    ("a CUDA graph", "4 runs, "),
    ("the cost of host staging", "native "),
    ("exercise 1, checked against the ledger", None),
    ("exercise 2", "inside the region call: "),
    ("the time the run took (the shell's `time`)", "real\t"),
)


@functools.cache
def load(run=RUN):
    """The recorded run: {"device", "date" (YYYY-MM-DD), "file" (from the repository's root),
    "steps": {step: its non-blank lines}}."""
    path = run / OUTPUT
    text = path.read_text()
    if "Traceback" in text:  # a step that printed nothing passed only if the run went on to the end
        raise ValueError(f"{path}: the recorded run failed, so it cannot show what the steps print")
    starts = [(step, first) for step, first in STEPS if first is not None]
    steps = {step: [] for step, _ in STEPS}
    current = -1
    for line in text.splitlines():
        if current + 1 < len(starts) and line.startswith(starts[current + 1][1]):
            current += 1
        if current < 0:
            raise ValueError(f"{path} does not start with {starts[0][1]!r}, the first line {starts[0][0]} printed")
        if line.strip():
            steps[starts[current][0]].append(line)
    if current + 1 < len(starts):
        step, first = starts[current + 1]
        raise ValueError(f"{path} has no line starting {first!r} (the first line {step} printed) where expected")
    with open(run / "devices.txt", newline="") as f:
        [device] = [row["name"] for row in csv.DictReader(f, skipinitialspace=True)]
    date = datetime.strptime(" ".join((run / "date.txt").read_text().split()), "%a %b %d %I:%M:%S %p %Z %Y")
    return {"device": device, "date": f"{date:%Y-%m-%d}", "file": path.relative_to(ROOT).as_posix(), "steps": steps}


def where():
    """'NVIDIA H200, 2026-12-03, results/gpu/.../03_on_the_gpu.out': where and when the run was."""
    run = load()
    return f"{run['device']}, {run['date']}, {run['file']}"


def show(step, why):
    """Print what `step` printed in the recorded run, below a line saying why it did not run
    here and where and when it did."""
    lines = load()["steps"][step]
    if not lines:
        print(f"{step}: not run here ({why}); recorded on {where()}: it printed nothing there, "
              "and its checks (asserts) passed: that run went on to the end")
        return
    print(f"{step}: not run here ({why}); recorded on {where()}:")
    for line in lines:
        print("    " + line)
