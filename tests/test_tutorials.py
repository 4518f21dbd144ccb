"""The tutorials in tutorials/ run as a reader runs them, and check themselves.

Each tutorial is a sphinx-gallery file (also a jupytext "percent" notebook) whose every claim is
an ``assert`` beside the code that computes it, exercises included: running it is its test. So
each runs here in a fresh Python, as ``python tutorials/NN_name.py`` would, from an empty folder,
within a time limit, and must exit 0. Without a GPU, 03_on_the_gpu.py must say of every GPU step
that it skipped it, and why. docs/tutorials.md says what each stage covers.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
# Each takes 20-40 s on a 2-core machine without a GPU (docs/tutorials.md); the limit leaves
# room for a machine busy with the rest of the suite.
SECONDS = 300
# Variables that change what simaccel does: a reader's shell has none of them set.
SETTINGS = ("SIMACCEL_OPS", "SIMACCEL_ENGINE", "SIMACCEL_PROFILE", "SIMACCEL_STAGED", "SIMACCEL_TRACE",
            "SIMACCEL_SANITIZE", "SIMACCEL_NATIVE")
NO_GPU = "skipped, TVM finds no CUDA GPU on this machine (tvm.cuda(0).exist is False)"


def test_the_track_has_three_stages():
    assert [t.name for t in TUTORIALS] == ["01_first_accelerator.py", "02_kernels_and_constraints.py",
                                           "03_on_the_gpu.py"]


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=lambda t: t.stem)
def test_a_tutorial_is_a_sphinx_gallery_file_with_checked_exercises(tutorial):
    text = tutorial.read_text()
    module = ast.parse(text)
    title, underline = ast.get_docstring(module).splitlines()[:2]  # sphinx-gallery's title: the docstring's
    assert underline == "=" * len(title), f"{tutorial.name}: the docstring does not open with a reST title"
    assert text.count("\n# %%\n") >= 10, f"{tutorial.name}: cells are separated by '# %%' lines"
    for heading, rule in re.findall(r"^# %%\n# (\S.*)\n# ([-=~]+)$", text, re.M):
        assert len(rule) == len(heading), f"{tutorial.name}: the underline of {heading!r} is not its length"
    assert "\n# Exercises\n# ---------\n" in text
    exercises = [f.name for f in module.body if isinstance(f, ast.FunctionDef) and f.name.startswith("exercise_")]
    assert 2 <= len(exercises) <= 3, exercises
    for name in exercises:  # each answer is called where an assert checks what it returns
        assert re.search(rf"^(assert .*|\S.* = ){name}\(", text, re.M), f"{tutorial.name}: {name}() is not checked"


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=lambda t: t.stem)
def test_a_tutorial_runs_and_its_checks_pass(tutorial, tmp_path):
    (tmp_path / "cwd").mkdir()
    (tmp_path / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    env["TMPDIR"] = str(tmp_path / "tmp")
    result = subprocess.run([sys.executable, str(tutorial)], cwd=tmp_path / "cwd", env=env, capture_output=True,
                            text=True, timeout=SECONDS)
    print(result.stdout[-6000:], result.stderr[-6000:])  # shown by pytest when the test fails
    assert result.returncode == 0, result.stderr[-2000:]
    assert not list((tmp_path / "cwd").iterdir()), "a tutorial writes only into its own temporary folder"
    if tutorial.name == "03_on_the_gpu.py":
        import tvm

        gpu_steps = tutorial.read_text().count("\nif GPU:\n")
        skipped = result.stdout.count(NO_GPU)
        assert skipped == (0 if tvm.cuda(0).exist else gpu_steps) and gpu_steps >= 6, (skipped, gpu_steps)
