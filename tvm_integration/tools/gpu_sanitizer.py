"""`simaccel sanitize -- python script.py [args]`: a script run under NVIDIA's compute-sanitizer.

Where it sits: under `simaccel sanitize` (commands/sanitize.py). simaccel's own sanitizer
(simaccel.debug.sanitize) checks each op's output, guard bands and inputs between kernels;
compute-sanitizer checks every memory access inside them (memcheck), shared-memory races
(racecheck), reads of uninitialised memory (initcheck) and barrier misuse (synccheck). The
script runs with $SIMACCEL_LINEINFO=1 (simaccel.kernels.target.LINEINFO_ENV), so every kernel
compiled in it, by the cuda engine or for a native region built there, carries line
information and the reports name the kernel's source file and line (kernels/*.py), from which
the op follows. Kernels that call CUDA C++ (the matmul main loops) are named without lines, and
a library built before (without the variable) keeps its cubins as they were.

The tool is looked for on $PATH, in $CUDA_HOME/bin and $CUDA_PATH/bin, in NVIDIA's pip wheels
(`pip install "nvidia-cuda-sanitizer-api==13.0.*"`: nvidia/cu13/bin) and in /usr/local/cuda/bin.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from ...errors import EngineError
from ...kernels.target import LINEINFO_ENV

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
EXECUTABLE = "compute-sanitizer"
# Where NVIDIA's wheels put it, under a site-packages folder: CUDA 13's, then CUDA 12's.
WHEEL_DIRS = (("nvidia", "cu13", "bin"), ("nvidia", "cu12", "bin"), ("nvidia", "cuda_sanitizer_api", "compute-sanitizer"))
INSTALL = 'pip install "nvidia-cuda-sanitizer-api==13.0.*"'
SYSTEM_DIR = "/usr/local/cuda/bin"


def candidates(env=None, paths=None) -> list[str]:
    """Every place compute-sanitizer is looked for, in order (`paths`: the folders pip installs into)."""
    env = os.environ if env is None else env
    places = [os.path.join(d, EXECUTABLE) for d in env.get("PATH", "").split(os.pathsep) if d]
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(variable):
            places.append(os.path.join(env[variable], "bin", EXECUTABLE))
    for site in (sys.path if paths is None else paths):
        places += [os.path.join(site, *parts, EXECUTABLE) for parts in WHEEL_DIRS]
    places.append(os.path.join(SYSTEM_DIR, EXECUTABLE))
    return places


def find_compute_sanitizer(env=None, paths=None) -> str | None:
    for place in candidates(env, paths):
        if os.path.isfile(place) and os.access(place, os.X_OK):
            return place
    return None


def sanitizer_command(executable: str, tool: str, command: list[str], options=()) -> list[str]:
    """compute-sanitizer's command line: exit 1 where it reports an error, else the script's status."""
    if tool not in TOOLS:
        raise EngineError(f"sanitize --tool {tool!r}: choose one of {', '.join(TOOLS)}")
    return [executable, "--tool", tool, "--error-exitcode", "1", *options, *command]


def sanitizer_env(env=None) -> dict:
    """The script's environment: line information in every kernel it compiles."""
    return {**(os.environ if env is None else env), LINEINFO_ENV: "1"}


def run_sanitize(command: list[str], tool: str = "memcheck", options=(), env=None, paths=None) -> int:
    """Run `command` under compute-sanitizer's `tool`; its exit status (1: errors reported)."""
    command = command[1:] if command[:1] == ["--"] else list(command)
    if not command:
        raise EngineError("sanitize: give the command to run after --, e.g. simaccel sanitize -- python script.py")
    executable = find_compute_sanitizer(env, paths)
    if executable is None:
        raise EngineError(f"sanitize: {EXECUTABLE} was not found (looked on $PATH, in $CUDA_HOME/bin, $CUDA_PATH/bin, "
                          f"NVIDIA's pip wheels and /usr/local/cuda/bin); install it with {INSTALL} or the CUDA toolkit")
    full = sanitizer_command(executable, tool, command, options)
    print(f"simaccel: {LINEINFO_ENV}=1 {shlex.join(full)}", file=sys.stderr, flush=True)
    return subprocess.call(full, env=sanitizer_env(env))
