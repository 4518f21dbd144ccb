"""`simaccel bench`: prebuilt libraries timed on a GPU against TVM alone (or, with --ops, each
op's kernel against the GPU's limits and torch), and reports compared with earlier ones.

The work is tools/bench.py's, tools/bench_ops.py's and tools/bench_compare.py's.
"""

from __future__ import annotations

from ....errors import SimAccelError
from .options import check_at_least

NAME = "bench"


def add_parser(subparsers) -> None:
    bench = subparsers.add_parser(
        NAME,
        help="benchmark TVM alone vs simaccel native, Python zero-copy and host-staged on a GPU (writes JSON and PNG)",
        description="Times, on one GPU, prebuilt libraries (see --artifacts) as medians of repeated runs.",
    )
    bench.add_argument("--artifacts", help="folder made by `python -m simaccel.tvm_integration.tools.artifacts`")
    bench.add_argument("--compare", metavar="OLD.json",
                       help="an earlier bench.json (or, with --ops, ops.json): flag (and exit 1 on) every mode more than 10%% "
                       "slower against its peer in the same run (TVM alone; for kernels, torch)")
    bench.add_argument("--ops", action="store_true",
                       help="instead: each op's kernel at real sizes against the GPU's FP32 peak or memory bandwidth "
                       "(ops.json, ops.png in --out; needs no artifacts)")
    bench.add_argument("--report", metavar="NEW.json",
                       help="compare this bench.json with --compare instead of timing anything (no GPU needed)")
    bench.add_argument("--out", default="bench", help="output folder for bench.json and bench.png")
    bench.add_argument("--repeat", type=int, default=50, help="timed runs per case (median reported)")


def check(args) -> None:
    check_at_least(("--repeat", args.repeat, 1))
    if args.ops and (args.artifacts or args.report):
        raise SimAccelError("bench --ops: times the ISA's kernels alone; it takes no --artifacts or --report")
    if not (args.ops or args.artifacts or args.report):
        raise SimAccelError("bench: say what to do: --artifacts DIR (time prebuilt libraries against TVM alone on a GPU), "
                            "--ops (time each op's kernel on a GPU) or --report NEW.json --compare OLD.json (compare "
                            "two finished runs, no GPU needed)")
    if args.artifacts and args.report:
        raise SimAccelError("bench: give --artifacts (to time) or --report (to compare a finished run), not both")
    if args.report and not args.compare:
        raise SimAccelError("bench --report: also give --compare OLD.json (the report to compare it with)")


def run(args) -> int:
    from ..bench import compare_reports, run_bench

    if args.ops:
        from ..bench_ops import run_bench_ops

        return run_bench_ops(args.out, repeat=args.repeat, compare_with=args.compare)
    if args.report:
        return compare_reports(args.report, args.compare)
    return run_bench(args.artifacts, args.out, repeat=args.repeat, compare_with=args.compare)
