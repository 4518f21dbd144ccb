"""The `simaccel` command line: demo, run, bench, ops."""

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
        choices=["auto", "ref", "sim", "cuda"],
        default="auto",
        help="simaccel engine: ref (numpy, fast), sim (Numba CUDA kernels on the simulator, slow), "
        "cuda (the kernels on the GPU); auto: ref for CPU tensors, cuda for GPU tensors "
        "(default: auto, or $SIMACCEL_ENGINE)",
    )
    demo.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="where the model runs: cpu (llvm target) or cuda (CUDA target); auto: cuda when TVM finds a GPU",
    )
    demo.add_argument("--staged", action="store_true", help="GPU only: copy region tensors through host memory (comparison mode)")
    demo.add_argument("--seed", type=int, default=0, help="seed for the random inputs and weights (default 0)")
    demo.add_argument("--dtype", choices=["float32", "float16"], default="float32", help="model dtype (default float32)")

    run = commands.add_parser(
        "run",
        help="run an exported library on inputs from an .npz, optionally checking the outputs",
        description="Load LIB (made by export_library; works with a runtime-only TVM), run its main "
        "function and, with --expect, compare. Exits 1 on a mismatch.",
    )
    run.add_argument("library", help="the exported .so")
    run.add_argument("--inputs", required=True, help=".npz with the arguments, named arg0, arg1, ... (or arr_0, ...)")
    run.add_argument("--expect", help=".npz with the expected outputs in order (named like --inputs)")
    run.add_argument("--save", help="write the outputs to this .npz")
    run.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    run.add_argument("--rtol", type=float, default=1e-4)
    run.add_argument("--atol", type=float, default=1e-5)

    bench = commands.add_parser(
        "bench",
        help="benchmark TVM alone vs simaccel zero-copy vs host-staged on a GPU (writes JSON and PNG)",
        description="Times, on one GPU, prebuilt libraries (see --artifacts) as medians of repeated runs.",
    )
    bench.add_argument("--artifacts", required=True, help="folder made by `python -m simaccel.tvm_integration.artifacts`")
    bench.add_argument("--out", default="bench", help="output folder for bench.json and bench.png")
    bench.add_argument("--repeat", type=int, default=50, help="timed runs per case (median reported)")

    commands.add_parser("ops", help="list the accelerator's ops")

    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            from .tvm_integration.demo import run_demo

            return run_demo(engine=args.engine, seed=args.seed, dtype=args.dtype, device=args.device, staged=args.staged)
        if args.command == "run":
            return run_library_command(args)
        if args.command == "bench":
            from .tvm_integration.bench import run_bench

            return run_bench(args.artifacts, args.out, repeat=args.repeat)
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


def run_library_command(args) -> int:
    import numpy as np

    from .tvm_integration.deploy import read_arrays, run_library

    outputs = run_library(args.library, read_arrays(args.inputs), device=args.device)
    for i, out in enumerate(outputs):
        print(f"output {i}: {out.shape} {out.dtype}")
    if args.save:
        np.savez(args.save, **{f"arg{i}": out for i, out in enumerate(outputs)})
    if not args.expect:
        return 0
    expected = read_arrays(args.expect)
    if len(expected) != len(outputs):
        print(f"RESULT: MISMATCH ({len(outputs)} outputs, {len(expected)} expected)")
        return 1
    ok = True
    for i, (got, want) in enumerate(zip(outputs, expected)):
        same = got.shape == want.shape and np.allclose(got, want, rtol=args.rtol, atol=args.atol)
        error = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.shape == want.shape else float("inf")
        print(f"output {i}: max abs error {error:.3g} (rtol {args.rtol}, atol {args.atol})")
        ok = ok and same
    print("RESULT: match" if ok else "RESULT: MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
