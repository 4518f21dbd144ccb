"""`simaccel conformance`: a model zoo through the whole BYOC flow against TVM alone, for simaccel or any backend.

The work is tools/conformance/'s (`run_conformance`).
"""

from __future__ import annotations

from ....errors import SimAccelError
from .options import PARTITION_HELP, add_profile, check_at_least, check_partition, engine_names

NAME = "conformance"


def add_parser(subparsers) -> None:
    conformance = subparsers.add_parser(
        NAME,
        help="a model zoo through the whole BYOC flow, against TVM alone (simaccel or any backend)",
        description="For every model of the zoo (the project's Relax models; torch.export models of torchvision's "
        "and transformer families when the torch extra is installed; users' models with --models): the partition "
        "report, the backend's build, a run on each engine compared with TVM alone (and torch), a sample exported "
        "and run again in a fresh process, and on a GPU the time against TVM alone. Models run one per task, here "
        "or on a Dask cluster (--jobs, --cluster). Writes OUT/conformance.json, .md and .html; exits 1 when a model "
        "fails or, with --compare, something regressed.",
    )
    conformance.add_argument("--zoo", default="relax,torch", help="built-in models, comma-separated: relax, torch "
                             "(default both; torch is left out where it is not installed)")
    conformance.add_argument("--models", action="append", default=[], metavar="PATH|MODULE:FUNCTION",
                             help="users' models too: a folder of model files (each defines `mod`, as simaccel build "
                             "reads it), a MODEL.py, or an entry point returning an IRModule or a dict of them "
                             "(repeatable); --zoo '' for only these")
    conformance.add_argument("--only", metavar="NAMES", help="only models whose name matches, comma-separated "
                             "names or shell patterns (e.g. 'resnet*,demo_cnn')")
    conformance.add_argument("--engine", help="engines, comma-separated, as fuzz takes them (default: native on a "
                             "GPU, else ref; with --partition: cuda on a GPU, else cpu)")
    conformance.add_argument("--size", choices=["small", "full"], default="small",
                             help="torch models' size: small inputs and widths (the default) or the real ones")
    conformance.add_argument("--partition", metavar="MODULE:FUNCTION", help=PARTITION_HELP)
    conformance.add_argument("--out", default="conformance-out", help="folder for the results (default conformance-out)")
    conformance.add_argument("--reload-every", type=int, default=3,
                             help="export every Nth model and run it in a fresh process (0: never; default 3)")
    conformance.add_argument("--repeat", type=int, default=20, help="timed warm calls per model on a GPU, medians "
                             "against TVM alone interleaved (0: no timing; default 20)")
    conformance.add_argument("--seed", type=int, default=0, help="seed of weights and inputs (default 0)")
    conformance.add_argument("--jobs", type=int, default=1,
                             help="worker processes: more than 1 runs on a local Dask cluster (default 1)")
    conformance.add_argument("--cluster", metavar="SPEC", help="where the models run: local[:N] or tcp://HOST:PORT "
                             "(a running Dask scheduler, which must answer within $SIMACCEL_CLUSTER_CONNECT_SECONDS, default "
                             "10 s); needs the dask extra (default: this process)")
    conformance.add_argument("--model-seconds", type=float, default=1800,
                             help="on a cluster, a model running longer ends its worker and is reported as a hang "
                             "(default 1800)")
    conformance.add_argument("--compare", metavar="OLD.json",
                             help="an earlier run's conformance.json: flag models that passed there and fail now, and "
                             "times against TVM alone more than 10%% worse")
    add_profile(conformance)


def check(args) -> None:
    check_at_least(("--reload-every", args.reload_every, 0), ("--repeat", args.repeat, 0), ("--seed", args.seed, 0),
                   ("--jobs", args.jobs, 1), ("--model-seconds", args.model_seconds, 1))
    if args.engine is not None:
        known = engine_names(args)
        if any(item not in known for item in args.engine.split(",")):
            raise SimAccelError(f"--engine {args.engine}: choose from {', '.join(known)} (comma-separated)")
    check_partition(args)


def run(args) -> int:
    from ..backends import SIMACCEL
    from ..conformance import run_conformance

    return run_conformance(sources=[s for s in args.zoo.split(",") if s], user_models=args.models,
                           engines=args.engine.split(",") if args.engine else None,
                           partition=args.partition or SIMACCEL, size=args.size, only=args.only, out_dir=args.out,
                           reload_every=args.reload_every, repeat=args.repeat, seed=args.seed, cluster=args.cluster,
                           jobs=args.jobs, model_seconds=args.model_seconds, compare_with=args.compare)
