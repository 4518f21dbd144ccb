"""The `simaccel` command line: `simaccel demo`, `simaccel ops`."""

from __future__ import annotations

import argparse
import sys

from .errors import SimAccelError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="simaccel",
        description="simaccel: a simulated on-GPU accelerator for testing TVM BYOC flows.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser(
        "demo",
        help="build, partition, run and verify the demo model against TVM alone",
        description="Partition a small CNN+MLP model for simaccel, compile it, run it and check it "
        "against the same model built by TVM alone. Exits 1 on a mismatch.",
    )
    demo.add_argument(
        "--engine",
        choices=["auto", "ref", "sim"],
        default="auto",
        help="simaccel engine: ref (numpy, fast), sim (Numba CUDA kernels on the simulator, slow); "
        "auto picks ref for CPU tensors (default: auto, or $SIMACCEL_ENGINE)",
    )
    demo.add_argument("--seed", type=int, default=0, help="seed for the random inputs and weights (default 0)")
    demo.add_argument("--dtype", choices=["float32", "float16"], default="float32", help="model dtype (default float32)")

    commands.add_parser("ops", help="list the accelerator's ops")

    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            from .tvm_integration.demo import run_demo

            return run_demo(engine=args.engine, seed=args.seed, dtype=args.dtype)
        if args.command == "ops":
            from .ops import get_op, list_ops

            for name in list_ops():
                op = get_op(name)
                print(f"{name}({', '.join(op.inputs)}){'  attrs: ' + ', '.join(op.attrs) if op.attrs else ''}")
            return 0
    except SimAccelError as e:
        print(f"simaccel: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
