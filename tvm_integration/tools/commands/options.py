"""Options and checks several commands share: --profile, --trace, --partition, --engine, seeds,
tolerances, a model file or --demo.

Where it sits: under the command modules (tools/commands/), which add these options and call
these checks from their `add_parser` and `check`; tools/cli.py acts on --profile and --trace
for every command that has them.
"""

from __future__ import annotations

import math

from ....errors import SimAccelError

TRACE_HELP = ("write a timeline trace (Chrome trace-event JSON, for ui.perfetto.dev) of the run to PATH, TVM's VM "
              "calls included (default: $SIMACCEL_TRACE)")
PARTITION_HELP = ("check another BYOC backend instead of simaccel: its partition function (TVM's partition_for_<x> "
                  "convention; MODULE is a module name or a .py path), built with RunCodegen() and tvm.compile")
PROFILE_HELP = ("device profile to partition for and enforce: a JSON file of simaccel.DeviceProfile fields "
                "(default: $SIMACCEL_PROFILE, else every op, every dtype of the ISA, no size limits)")
MODEL_HELP = "a Python file defining a Relax IRModule `mod` whose main takes static shapes"


def add_profile(parser) -> None:
    parser.add_argument("--profile", metavar="FILE", help=PROFILE_HELP)


def add_trace(parser) -> None:
    """--trace PATH: tools/cli.py traces the whole command into it (else into $SIMACCEL_TRACE)."""
    parser.add_argument("--trace", metavar="PATH", help=TRACE_HELP)


def check_seed(seed: int) -> None:
    if seed < 0:
        raise SimAccelError(f"--seed {seed}: must be >= 0 (numpy seeds are non-negative)")


def check_model_or_demo(args, command: str) -> None:
    """A model file (MODEL.py) or --demo: one of the two."""
    if (args.model is None) == (not args.demo):
        raise SimAccelError(f"{command}: give a model file (MODEL.py) or --demo" + (", not both" if args.demo else ""))


def check_non_negative(*flags) -> None:
    """Each (flag, value) given (not None) is a finite number >= 0."""
    for flag, value in flags:
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise SimAccelError(f"{flag} {value}: must be a finite number >= 0")


def check_at_least(*flags) -> None:
    """Each (flag, value, low) has value >= low."""
    for flag, value, low in flags:
        if not value >= low:
            raise SimAccelError(f"{flag} {value}: must be >= {low}")


def engine_names(args) -> tuple:
    """The engines `--engine` may name: simaccel's, or another backend's devices (--partition)."""
    from ..backends import BACKEND_ENGINES, ENGINE_DEVICE

    return tuple(BACKEND_ENGINES if getattr(args, "partition", None) else ENGINE_DEVICE)


def check_partition(args) -> None:
    """--partition MODULE:FUNCTION checked for form, its path made absolute (in `args`)."""
    if args.partition:
        from ..backends import parse_partition

        args.partition = parse_partition(args.partition)
