"""`simaccel fuzz`: random Relax models built with simaccel (or another backend) and with TVM alone, compared.

The work is tools/fuzz/'s (`run_fuzz`, `replay`).
"""

from __future__ import annotations

from ....errors import SimAccelError
from ....ops.rules import FLOAT_DTYPES
from .options import PARTITION_HELP, add_profile, check_at_least, check_partition, engine_names

NAME = "fuzz"


def add_parser(subparsers) -> None:
    fuzz = subparsers.add_parser(
        NAME,
        help="differential fuzzing: random Relax models, simaccel vs TVM alone",
        description="Draw seeded random Relax models, build each with simaccel and with TVM alone, run both on "
        "the same inputs and compare; a sample also after export and load in a fresh process. Cases run in "
        "batches, in this process or on a Dask cluster (--jobs, --cluster); failures are grouped by signature "
        "(stage, error, op kinds), one of each is shrunk and saved as a runnable reproduction under OUT/failures/, "
        "and OUT/fuzz-report.md sums the campaign up. Exits 1 when a case fails.",
    )
    fuzz.add_argument("--cases", type=int, default=100, help="how many models (default 100)")
    fuzz.add_argument("--seed", type=int, default=0, help="seed of the run (default 0): same seed, same models")
    fuzz.add_argument("--engine", help="engines, comma-separated: ref, sim (small models), cuda (the Python "
                      "engine on the GPU), native (native regions on the GPU) (default ref); with --partition: cpu, "
                      "cuda (default cpu)")
    fuzz.add_argument("--dtype", default="float32,float16", help="model dtypes, comma-separated, of float32, "
                      "float16 and bfloat16 (default float32,float16: the draws committed campaigns were made with)")
    fuzz.add_argument("--max-ops", type=int, default=8, help="most op groups drawn per model (default 8)")
    fuzz.add_argument("--out", default="fuzz-out", help="folder for fuzz-summary.json and reproductions")
    fuzz.add_argument("--export-every", type=int, default=25,
                      help="export every Nth case and run it in a fresh process (0: never; default 25)")
    fuzz.add_argument("--shrink-seconds", type=float, default=300, help="time allowed to shrink a failure (default 300)")
    fuzz.add_argument("--jobs", type=int, default=1,
                      help="worker processes: more than 1 runs on a local Dask cluster (--cluster local:N; default 1)")
    fuzz.add_argument("--cluster", metavar="SPEC", help="where the cases run: local[:N] (a Dask cluster of N worker "
                      "processes here; one per GPU with dask-cuda) or tcp://HOST:PORT (a running Dask scheduler, which must "
                      "answer within $SIMACCEL_CLUSTER_CONNECT_SECONDS, default 10 s); "
                      "needs the dask extra (default: this process)")
    fuzz.add_argument("--batch-size", type=int, help="cases per task (default: about four tasks per worker, at most 10)")
    fuzz.add_argument("--case-seconds", type=float, default=600,
                      help="on a cluster, a case running longer ends its worker and is reported as a hang (default 600)")
    fuzz.add_argument("--resume", action="store_true",
                      help="continue the campaign saved in --out (its settings; only the batches not done run)")
    fuzz.add_argument("--symbolic", action="store_true",
                      help="give each model that can take them symbolic sizes: the first input's leading dim a size "
                           "var n in [1, 2 * drawn + 3] and, where it has rank 3 or more, its axis 1 a var s likewise; "
                           "built once and run at 1, the drawn sizes, the middle and the upper bounds (and each var at "
                           "1 with the other at its bound), each against TVM alone")
    fuzz.add_argument("--replay", metavar="DIR", help="check a saved reproduction again instead of fuzzing")
    fuzz.add_argument("--partition", metavar="MODULE:FUNCTION", help=PARTITION_HELP)
    add_profile(fuzz)


def check(args) -> None:
    check_at_least(("--cases", args.cases, 1), ("--seed", args.seed, 0), ("--max-ops", args.max_ops, 1),
                   ("--export-every", args.export_every, 0), ("--shrink-seconds", args.shrink_seconds, 0),
                   ("--jobs", args.jobs, 1), ("--batch-size", args.batch_size or 1, 1),
                   ("--case-seconds", args.case_seconds, 1))
    for flag, value, known in (("--engine", args.engine, engine_names(args)),
                               ("--dtype", args.dtype, FLOAT_DTYPES)):
        items = (value or ",".join(known)).split(",")
        if not items or any(item not in known for item in items):
            raise SimAccelError(f"{flag} {value}: choose from {', '.join(known)} (comma-separated)")
    check_partition(args)


def run(args) -> int:
    from ..backends import SIMACCEL
    from ..fuzz import replay, run_fuzz

    if args.replay:
        return replay(args.replay)
    engine = args.engine or ("cpu" if args.partition else "ref")
    return run_fuzz(cases=args.cases, seed=args.seed, engines=engine.split(","), dtypes=args.dtype.split(","),
                    max_ops=args.max_ops, out_dir=args.out, export_every=args.export_every,
                    shrink_seconds=args.shrink_seconds, jobs=args.jobs, cluster=args.cluster,
                    batch_size=args.batch_size, case_seconds=args.case_seconds, resume=args.resume,
                    partition=args.partition or SIMACCEL, symbolic=args.symbolic)
