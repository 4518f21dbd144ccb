"""`simaccel build`: a model file (or the demo model) built into a library, with seeded inputs and TVM alone's outputs.

The work is tools/build_library.py's (`build_library`).
"""

from __future__ import annotations

from .options import add_profile, check_model_or_demo, check_seed

NAME = "build"


def add_parser(subparsers) -> None:
    build = subparsers.add_parser(
        NAME,
        help="build a model file (or the demo model) into a library for `simaccel run`, with inputs and TVM's outputs",
        description="Partition the Relax IRModule that MODEL.py defines as `mod` (or `Module`, TVMScript's name), "
        "build it with simaccel and export it to LIB.so; write seeded random inputs to LIB.inputs.npz and the "
        "outputs of the same module built by TVM alone on the CPU to LIB.expect.npz, for "
        "`simaccel run LIB.so --inputs LIB.inputs.npz --expect LIB.expect.npz`.",
    )
    build.add_argument("model", nargs="?", metavar="MODEL.py",
                       help="a Python file defining a Relax IRModule `mod` whose main takes static shapes, or "
                       "symbolic ones given values with --sizes")
    build.add_argument("--demo", action="store_true", help="build the demo model (the CNN of `simaccel demo`) instead")
    build.add_argument("-o", "--output", required=True, metavar="LIB.so", help="the library to write")
    build.add_argument("--target", choices=["llvm", "cuda"], default="llvm",
                       help="llvm (CPU, the default) or cuda (the GPU present, else an H100; native regions with the aot extra)")
    build.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    build.add_argument("--sizes", metavar="NAME=N,...",
                       help="values of the model's size vars for the inputs written (symbolic shapes; the library "
                       "runs at any sizes inside their bounds)")
    add_profile(build)


def check(args) -> None:
    from ..build_library import parse_sizes

    check_model_or_demo(args, NAME)
    check_seed(args.seed)
    args.sizes = parse_sizes(args.sizes)


def run(args) -> int:
    from ..build_library import build_library

    return build_library(args.model, args.output, target=args.target, seed=args.seed, sizes=args.sizes)
