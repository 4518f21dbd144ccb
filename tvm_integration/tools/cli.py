"""The `simaccel` command line: demo, build, run, bench, fuzz, conformance, bisect, trace, sanitize, whatif, ops.

Where it sits: the console script `simaccel` (setup.py) and `python -m
simaccel.tvm_integration.tools.cli`. Each command is a module of tools/commands/ with
`add_parser`, `check` and `run(args)`; this module lists them and holds what every command
shares: parsing, the exit status, the device profile of --profile and the timeline trace of
--trace.

Exit status: 0 success, 1 results mismatch, 2 user error (argparse's usage errors, or a
SimAccelError as one line on stderr), 3 internal error (a bug in simaccel: one line, the
traceback too with SIMACCEL_DEBUG=1), 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from ...errors import SimAccelError
from .commands import INTERNAL_ERROR, INTERRUPTED, MISMATCH, OK, USER_ERROR
from .commands import bench, bisect, build, conformance, demo, fuzz, ops, run, sanitize, trace, whatif

# The commands, in the order `simaccel --help` and docs/cli.md list them.
COMMANDS = (demo, build, run, bench, fuzz, conformance, bisect, trace, sanitize, whatif, ops)
BY_NAME = {command.NAME: command for command in COMMANDS}

__all__ = ["COMMANDS", "INTERNAL_ERROR", "INTERRUPTED", "MISMATCH", "OK", "USER_ERROR", "build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # usage errors: argparse prints them and exits 2
    try:
        BY_NAME[args.command].check(args)
        status = _dispatch(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return status
    except SimAccelError as e:
        return _fail(USER_ERROR, f"error: {type(e).__name__}: {e}")
    except KeyboardInterrupt:
        return _fail(INTERRUPTED, "interrupted")
    except BrokenPipeError:  # the reader went away (`simaccel ops | head`): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return OK
    except Exception as e:
        return _fail(
            INTERNAL_ERROR,
            f"internal error: {type(e).__name__}: {e} (set SIMACCEL_DEBUG=1 for the traceback; please report it)",
        )


def _fail(status: int, message: str) -> int:
    """Print `message` as one line on stderr (after the traceback with SIMACCEL_DEBUG=1); return `status`."""
    if os.environ.get("SIMACCEL_DEBUG", "") not in ("", "0"):
        traceback.print_exc()
    print("simaccel: " + " ".join(line.strip() for line in message.splitlines() if line.strip()), file=sys.stderr)
    return status


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every command's options (docs/cli_reference.py writes docs/cli.md from it)."""
    parser = argparse.ArgumentParser(
        prog="simaccel",
        description="simaccel: a simulated on-GPU accelerator for testing TVM BYOC flows.",
        epilog="exit status: 0 success, 1 results mismatch, 2 usage or input error (one line on stderr), "
        "3 internal error (SIMACCEL_DEBUG=1 prints the traceback), 130 interrupted",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def _dispatch(args) -> int:
    """The command `args` name, run with what every command shares: --profile set for the whole
    process (and the processes it starts), and a command with --trace traced into it (else into
    $SIMACCEL_TRACE)."""
    command = BY_NAME[args.command]
    if getattr(args, "profile", None):
        from ...profile import PROFILE_ENV, active_profile

        os.environ[PROFILE_ENV] = os.path.abspath(args.profile)  # fuzz workers and replays inherit it
        active_profile().check_ops()  # a bad file or an op name the ISA lacks: one line and exit 2, before any work
    trace_path = getattr(args, "trace", None) or (os.environ.get("SIMACCEL_TRACE") if hasattr(args, "trace") else None)
    if trace_path:
        from ...debug.timeline import trace as tracing

        with tracing(trace_path):
            return command.run(args)
    return command.run(args)


if __name__ == "__main__":
    sys.exit(main())
