"""Many `simaccel` command lines at the cost of one interpreter start (tests only).

Each command-line process imports TVM, numba and, through tvm-ffi, torch: about 2.5 s of CPU
before the first argument is read, which a catalogue of seventy bad invocations pays seventy
times. `run_commands` starts one helper process that imports the CLI once, then forks a
child per command line: each child gets the command's environment, working folder and its
own stdout and stderr files, runs `cli.main(argv)` and exits with its status, as a fresh
`python -m simaccel.tvm_integration.tools.cli ...` would. What it cannot show is a warning
printed while importing (the helper imports before forking): tests/test_imports.py checks
those in fresh processes, and a command whose environment may act at import gets one here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CLI = "simaccel.tvm_integration.tools.cli"


# What the CLI reads from the environment when it runs, not when it is imported: a forked child
# sees these as a fresh process would. A command that sets anything else gets a process of its own.
READ_AT_RUN = {"SIMACCEL_DEBUG"}


def run_commands(commands: list[dict], parallel: int | None = None) -> list[subprocess.CompletedProcess]:
    """Run each {"argv": [...], "env": {...}, "cwd": "/"} and return its result (returncode,
    stdout, stderr), in order. `env` is added to this process's environment; a command whose
    `env` sets a variable outside READ_AT_RUN (one that may act at import) runs in a process
    of its own, the others as forks of the helper, `parallel` at a time."""
    envs = [{**os.environ, **(c.get("env") or {})} for c in commands]
    own = [i for i, c in enumerate(commands) if set(c.get("env") or {}) - READ_AT_RUN]
    forked = [i for i in range(len(commands)) if i not in own]
    results: list = [None] * len(commands)
    with tempfile.TemporaryDirectory() as folder:
        jobs_file = Path(folder) / "jobs.json"
        jobs_file.write_text(json.dumps([{**commands[i], "env": envs[i], "out": f"{folder}/{i}"} for i in forked]))
        helper = subprocess.Popen([sys.executable, __file__, str(jobs_file), str(parallel or os.cpu_count() or 2)],
                                  cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in own:
            results[i] = subprocess.run([sys.executable, "-m", CLI, *commands[i]["argv"]], capture_output=True,
                                        text=True, timeout=600, env=envs[i], cwd=commands[i].get("cwd", "/"))
        out, err = helper.communicate(timeout=900)
        if helper.returncode != 0:
            raise RuntimeError(f"the command helper failed (status {helper.returncode}): {out}{err}")
        statuses = json.loads(out.splitlines()[-1])
        for i in forked:
            results[i] = subprocess.CompletedProcess(commands[i]["argv"], statuses[str(i)],
                                                     Path(f"{folder}/{i}.out").read_text(),
                                                     Path(f"{folder}/{i}.err").read_text())
    return results


def _child(job: dict, main) -> None:
    """In the forked child: the job's environment, folder and output files; never returns."""
    status = 1
    try:
        os.environ.clear()
        os.environ.update(job["env"])
        os.chdir(job.get("cwd", "/"))
        for fd, suffix in ((1, ".out"), (2, ".err")):
            target = os.open(job["out"] + suffix, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        try:
            status = main(job["argv"])
        except SystemExit as e:  # argparse's usage errors and --help
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _serve(jobs_file: str, parallel: int) -> None:
    from simaccel.tvm_integration.tools.cli import main  # the imports every command pays, once

    jobs = json.loads(Path(jobs_file).read_text())
    statuses, running = {}, {}
    for job in jobs:
        while len(running) >= parallel:
            pid, status = os.wait()
            statuses[running.pop(pid)] = os.waitstatus_to_exitcode(status)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(job, main)
        running[pid] = Path(job["out"]).name
    while running:
        pid, status = os.wait()
        statuses[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    print(json.dumps(statuses))


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
