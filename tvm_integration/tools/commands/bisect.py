"""`simaccel bisect`: the first region and op whose result differs from TVM alone, and a reproducer.

The work is tools/bisect.py's (`bisect`).
"""

from __future__ import annotations

from pathlib import Path

from ....errors import SimAccelError
from .options import add_profile, check_model_or_demo, check_non_negative, check_seed

NAME = "bisect"


def add_parser(subparsers) -> None:
    bisect = subparsers.add_parser(
        NAME,
        help="find the first region and op whose result differs from TVM alone, and write a reproducer",
        description="Build MODEL.py's Relax IRModule (as `simaccel build` reads it) with simaccel and with TVM alone, run "
        "it once capturing every region call, recompute each op from its captured inputs with its numpy reference and "
        "with TVM alone, and name the first op (or region) that leaves tolerance; its one-op module, inputs and a "
        "repro.py go to -o DIR. Exits 0 when everything matches, 1 when a culprit is found.",
    )
    bisect.add_argument("model", nargs="?", metavar="MODEL.py",
                        help="a Python file defining a Relax IRModule `mod` (or `Module`) whose main takes static shapes")
    bisect.add_argument("--demo", action="store_true", help="bisect the demo model (the CNN of `simaccel demo`) instead")
    bisect.add_argument("--inputs", metavar="NPZ", help="main's arguments, named arg0, arg1, ... (default: seeded random ones)")
    bisect.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    bisect.add_argument("--engine", choices=["auto", "ref", "sim", "cuda"], default="auto",
                        help="simaccel engine to run on (default: auto, or $SIMACCEL_ENGINE); sim: tiny models only")
    bisect.add_argument("--target", choices=["llvm", "cuda"], default="llvm", help="llvm (CPU, the default) or cuda")
    bisect.add_argument("--rtol", type=float, help="relative tolerance (default: per dtype, float32 1e-4, float16 2e-2, "
                        "bfloat16 5e-2)")
    bisect.add_argument("--atol", type=float, help="absolute tolerance, times 1 + max |TVM alone| (default: per dtype, "
                        "float32 1e-5, float16 2e-2, bfloat16 5e-2)")
    bisect.add_argument("-o", "--output", metavar="DIR",
                        help="folder for the reproducer (default: a fresh simaccel-bisect-<region>-<op>/ here)")
    bisect.add_argument("--max-bytes", type=int, help="most host memory the capture may hold (default 1 GiB, or "
                        "$SIMACCEL_CAPTURE_MAX_BYTES)")
    add_profile(bisect)


def check(args) -> None:
    check_model_or_demo(args, NAME)
    check_seed(args.seed)
    check_non_negative(("--rtol", args.rtol), ("--atol", args.atol), ("--max-bytes", args.max_bytes))


def run(args, out=print) -> int:
    """0 when everything matches, 1 when a culprit is found."""
    from .. import models
    from ..bisect import bisect
    from ..build_library import load_model
    from ..common.arrays import read_arrays

    mod = models.demo_cnn() if args.model is None else load_model(args.model)
    inputs = read_arrays(args.inputs, "--inputs") if args.inputs else models.random_inputs(mod, args.seed)
    if args.output:
        if Path(args.output).exists() and not Path(args.output).is_dir():
            raise SimAccelError(f"-o {args.output}: not a folder")
    report = bisect(mod, inputs, target=args.target, engine=None if args.engine == "auto" else args.engine,
                    rtol=args.rtol, atol=args.atol, out_dir=args.output, max_bytes=args.max_bytes, log=out)
    out(report.format())
    return 0 if report.culprit is None else 1
