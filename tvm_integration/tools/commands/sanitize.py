"""`simaccel sanitize`: a script run under NVIDIA's compute-sanitizer, its kernels built with line information.

The work is tools/gpu_sanitizer.py's (`run_sanitize`).
"""

from __future__ import annotations

import argparse

NAME = "sanitize"


def add_parser(subparsers) -> None:
    from ..gpu_sanitizer import TOOLS  # imports the kernels' target (Numba): when the parser is built, not before

    sanitize = subparsers.add_parser(
        NAME,
        help="run a script under NVIDIA's compute-sanitizer, its kernels built with line information",
        description="Run COMMAND (e.g. python SCRIPT.py) under compute-sanitizer with SIMACCEL_LINEINFO=1, so the "
        "kernels compiled in it (the cuda engine's, native regions built there) carry line information and the "
        "reports name their source lines. Exits 1 when the tool reports an error, 2 when it is not installed.",
        usage="simaccel sanitize [--tool TOOL] [--option OPTION ...] -- COMMAND [ARGS ...]",
    )
    sanitize.add_argument("--tool", choices=TOOLS, default="memcheck", help="compute-sanitizer's tool (default memcheck)")
    sanitize.add_argument("--option", action="append", default=[], metavar="OPTION",
                          help="one more compute-sanitizer option, e.g. --option=--leak-check=full (repeatable)")
    sanitize.add_argument("run", nargs=argparse.REMAINDER, metavar="COMMAND", help="the command to run, after --")


def check(args) -> None:
    pass


def run(args) -> int:
    from ..gpu_sanitizer import run_sanitize

    return run_sanitize(args.run, tool=args.tool, options=args.option)
