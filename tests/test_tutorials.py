"""The tutorials in tutorials/ run as a reader runs them, and check themselves.

Each tutorial is a sphinx-gallery file (also a jupytext "percent" notebook) whose every claim is
an ``assert`` beside the code that computes it: running it is its test. Its exercises come
first as questions, and their answers, in a section of their own at the end, run only with
``--answers`` (or ``SIMACCEL_TUTORIAL_ANSWERS=1``), so each runs here with ``--answers``, in a
fresh Python, as ``python tutorials/NN_name.py --answers`` would, from an empty folder, within a
time limit, and must exit 0.

03_on_the_gpu.py's GPU steps run only where TVM finds a GPU and NVIDIA's compiler libraries
load (``simaccel.aot.toolchain_missing()``); elsewhere each shows what it printed in the
committed GPU run (tutorials/mynpu_recorded.py), and these tests check that what it shows is
that file's text, marked with the device and date the run's files hold. One run hides the
compiler libraries, as a fresh ``pip install ".[docs]"`` has none: the CUDA build is shown as
recorded too. docs/tutorials.md says what each stage covers.
"""

from __future__ import annotations

import ast
import csv
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
GPU_TUTORIAL = ROOT / "tutorials" / "03_on_the_gpu.py"
RECORDED = ROOT / "results" / "gpu" / "2026-12-03-h200-tutorials"
# Each takes 10-40 s on a 2-core machine without a GPU (docs/tutorials.md); the limit leaves
# room for a machine busy with the rest of the suite.
SECONDS = 300
# Variables that change what simaccel or a tutorial does: a reader's shell has none of them set.
SETTINGS = ("SIMACCEL_OPS", "SIMACCEL_ENGINE", "SIMACCEL_PROFILE", "SIMACCEL_STAGED", "SIMACCEL_TRACE",
            "SIMACCEL_SANITIZE", "SIMACCEL_NATIVE", "SIMACCEL_TUTORIAL_ANSWERS")
NOT_RUN = "answers: not run (run this file with --answers"
# A step shown from the recorded run: its header, then its lines indented by four spaces.
HEADER = re.compile(r"^(?P<step>\S.*?): not run here \((?P<why>[^)]*)\); recorded on (?P<device>[^,]+), "
                    r"(?P<date>\d{4}-\d\d-\d\d), (?P<file>\S+?):(?P<nothing> it printed nothing there.*)?$")
# Run a tutorial as a script where NVIDIA's compiler libraries do not load: the project's check
# says so, and NVRTC's loader fails as it does where the library is absent.
WITHOUT_COMPILERS = """
import runpy, sys
import simaccel.aot
from numba.cuda.cudadrv import nvrtc
def absent(*args, **kwargs):
    raise RuntimeError('Failure finding "libnvrtc.so.13 or libnvrtc.so.12" (hidden by the test)')
simaccel.aot.toolchain_missing = lambda: "the CUDA compiler toolchain is not installed (hidden by the test)"
nvrtc.get_supported_ccs = simaccel.aot.supported_archs = absent
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_the_track_has_three_stages():
    assert [t.name for t in TUTORIALS] == ["01_first_accelerator.py", "02_kernels_and_constraints.py",
                                           "03_on_the_gpu.py"]


def answers_checked_only_when_asked(module):
    """{exercise function: whether a statement under a top-level `if ANSWERS:` asserts or keeps
    what it returns}; fails for a call of one outside such a block."""
    checked = {}
    for node in module.body:
        if isinstance(node, ast.FunctionDef):
            continue
        gated = isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "ANSWERS"
        for statement in ast.walk(node):
            for call in ast.walk(statement):
                if isinstance(call, ast.Call) and getattr(call.func, "id", "").startswith("exercise_"):
                    assert gated, f"line {call.lineno}: {call.func.id}() runs without --answers"
                    if isinstance(statement, (ast.Assert, ast.Assign)):
                        checked[call.func.id] = True
                    checked.setdefault(call.func.id, False)
    return checked


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=lambda t: t.stem)
def test_a_tutorial_is_a_sphinx_gallery_file_whose_answers_come_after_the_exercises(tutorial):
    text = tutorial.read_text()
    module = ast.parse(text)
    title, underline = ast.get_docstring(module).splitlines()[:2]  # sphinx-gallery's title: the docstring's
    assert underline == "=" * len(title), f"{tutorial.name}: the docstring does not open with a reST title"
    assert text.count("\n# %%\n") >= 10, f"{tutorial.name}: cells are separated by '# %%' lines"
    for heading, rule in re.findall(r"^# %%\n# (\S.*)\n# ([-=~]+)$", text, re.M):
        assert len(rule) == len(heading), f"{tutorial.name}: the underline of {heading!r} is not its length"
    exercises_at, answers_at = text.find("\n# Exercises\n# ---------\n"), text.find("\n# Answers\n# -------\n")
    assert 0 < exercises_at < answers_at, f"{tutorial.name}: the exercises, then a section of answers"
    asked = re.findall(r"^# \*\*Exercise (\d)\b", text[exercises_at:answers_at], re.M)
    answered = re.findall(r"^# \*\*Exercise (\d)\.\*\*", text[answers_at:], re.M)
    assert asked == answered and 2 <= len(asked) <= 3, (asked, answered)
    assert 'ANSWERS = "--answers" in sys.argv[1:] or os.environ.get("SIMACCEL_TUTORIAL_ANSWERS") == "1"\n' in text
    functions = [f for f in module.body if isinstance(f, ast.FunctionDef) and f.name.startswith("exercise_")]
    assert [f.name for f in functions] == [f"exercise_{n}" for n in asked]
    assert all(f.lineno > text[:answers_at].count("\n") for f in functions), "an answer sits before 'Answers'"
    assert answers_checked_only_when_asked(module) == {f.name: True for f in functions}


def run(tutorial, tmp_path, *args, script=None):
    """Run `tutorial` as a reader does, from an empty folder; its completed process."""
    (tmp_path / "cwd").mkdir()
    (tmp_path / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    env["TMPDIR"] = str(tmp_path / "tmp")
    command = [sys.executable, str(tutorial), *args] if script is None else [sys.executable, "-c", script,
                                                                            str(tutorial), *args]
    result = subprocess.run(command, cwd=tmp_path / "cwd", env=env, capture_output=True, text=True, timeout=SECONDS)
    print(result.stdout[-6000:], result.stderr[-6000:])  # shown by pytest when the test fails
    assert result.returncode == 0, result.stderr[-2000:]
    assert not list((tmp_path / "cwd").iterdir()), "a tutorial writes only into its own temporary folder"
    return result


def recorded_blocks(stdout):
    """[(header match, [recorded lines])] of each step the output shows from the recorded run."""
    blocks, open_block = [], None
    for line in stdout.splitlines():
        if header := HEADER.match(line):
            blocks.append((header, []))
            open_block = None if header["nothing"] else blocks[-1][1]
        elif open_block is not None and line.startswith("    "):
            open_block.append(line[4:])
        else:  # a line of the tutorial's own ends the block
            open_block = None
    return blocks


def check_recorded(stdout, steps, first_line):
    """The output shows each of `steps` from the committed run, its lines exactly the file's lines
    from the one starting `first_line` up to the exercise 2 line, in order, with the run's device
    and date as its files hold them."""
    with open(RECORDED / "devices.txt", newline="") as f:
        [device] = [row["name"] for row in csv.DictReader(f, skipinitialspace=True)]
    date = datetime.strptime((RECORDED / "date.txt").read_text().strip(), "%a %b %d %I:%M:%S %p %Z %Y")
    blocks = recorded_blocks(stdout)
    assert [header["step"] for header, _ in blocks] == steps
    for header, lines in blocks:
        assert (header["device"], header["date"]) == (device, f"{date:%Y-%m-%d}") == ("NVIDIA H200", "2026-12-03")
        assert header["file"] == "results/gpu/2026-12-03-h200-tutorials/03_on_the_gpu.out"
        assert bool(lines) != bool(header["nothing"]), header.string
    committed = (RECORDED / "03_on_the_gpu.out").read_text().splitlines()
    start = next(i for i, line in enumerate(committed) if line.startswith(first_line))
    end = next(i for i, line in enumerate(committed) if line.startswith("inside the region call: "))
    gpu_lines = committed[start:end]
    if first_line.startswith("built for "):  # step 2 ran here, on the CPU: its lines are not shown
        trace_start = next(i for i, line in enumerate(gpu_lines) if line.startswith("time per kind"))
        trace_end = next(i for i, line in enumerate(gpu_lines) if line.startswith("{'offloaded_calls'"))
        gpu_lines = gpu_lines[:trace_start] + gpu_lines[trace_end:]
    assert [line for _, lines in blocks for line in lines] == gpu_lines


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=lambda t: t.stem)
def test_a_tutorial_runs_and_its_checks_pass_with_the_answers(tutorial, tmp_path):
    result = run(tutorial, tmp_path, "--answers")
    exercises = len(re.findall(r"^def exercise_\d", tutorial.read_text(), re.M))
    assert NOT_RUN not in result.stdout
    assert {int(n) for n in re.findall(r"^exercise (\d):", result.stdout, re.M)} == set(range(1, exercises + 1))
    if tutorial == GPU_TUTORIAL:
        import tvm

        from simaccel.aot import toolchain_missing

        gpu_steps = re.findall(r'mynpu_recorded\.show\("([^"]+)", ', tutorial.read_text())
        assert gpu_steps[:2] == ["a CUDA build", "the exported library"] and len(gpu_steps) >= 8, gpu_steps
        if tvm.cuda(0).exist and toolchain_missing() is None:  # every step ran: none is shown as recorded
            assert "recorded on" not in result.stdout and recorded_blocks(result.stdout) == []
        elif toolchain_missing() is None:  # the CUDA build ran, and each GPU step shows what it printed there
            check_recorded(result.stdout, gpu_steps[2:], "{'offloaded_calls'")
        else:
            check_recorded(result.stdout, gpu_steps, "built for ")


def test_the_gpu_tutorial_runs_without_the_cuda_compilers_and_shows_what_the_gpu_printed(tmp_path):
    """As in a fresh `pip install ".[docs]"`, where NVRTC is absent (the site runs it so), and
    without --answers: no answer runs, and the CUDA build shows its recorded output too."""
    result = run(GPU_TUTORIAL, tmp_path, script=WITHOUT_COMPILERS)
    assert "no CUDA compiler libraries: the CUDA compiler toolchain is not installed" in result.stdout
    assert NOT_RUN in result.stdout and not re.search(r"^exercise \d", result.stdout, re.M)
    steps = ["a CUDA build", "the exported library", "native regions against TVM alone",
             "zero-copy by pointer identity", "TVM's stream", "a CUDA graph", "the cost of host staging"]
    check_recorded(result.stdout, steps, "built for ")
    assert all(header["why"].startswith("no CUDA compiler libraries") for header, _ in recorded_blocks(result.stdout))
