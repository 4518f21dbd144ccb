"""The `simaccel` command line: demo, build, run, bench, fuzz, conformance, bisect, trace, sanitize, ops.

Exit status: 0 success, 1 results mismatch, 2 user error (argparse's usage errors, or a
SimAccelError as one line on stderr), 3 internal error (a bug in simaccel: one line, the
traceback too with SIMACCEL_DEBUG=1), 130 interrupted.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import traceback

from ...errors import SimAccelError
from .backends import SIMACCEL
from .torch_models import MODEL_NAMES as TORCH_MODELS

OK, MISMATCH, USER_ERROR, INTERNAL_ERROR, INTERRUPTED = 0, 1, 2, 3, 130
TRACE_HELP = ("write a timeline trace (Chrome trace-event JSON, for ui.perfetto.dev) of the run to PATH, TVM's VM "
              "calls included (default: $SIMACCEL_TRACE)")
PARTITION_HELP = ("check another BYOC backend instead of simaccel: its partition function (TVM's partition_for_<x> "
                  "convention; MODULE is a module name or a .py path), built with RunCodegen() and tvm.compile")
PROFILE_HELP = ("device profile to partition for and enforce: a JSON file of simaccel.DeviceProfile fields "
                "(default: $SIMACCEL_PROFILE, else every op, float32/float16, no size limits)")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # usage errors: argparse prints them and exits 2
    try:
        check_args(args)
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simaccel",
        description="simaccel: a simulated on-GPU accelerator for testing TVM BYOC flows.",
        epilog="exit status: 0 success, 1 results mismatch, 2 usage or input error (one line on stderr), "
        "3 internal error (SIMACCEL_DEBUG=1 prints the traceback), 130 interrupted",
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
    demo.add_argument("--profile", metavar="FILE", help=PROFILE_HELP)
    demo.add_argument("--trace", metavar="PATH", help=TRACE_HELP)
    demo.add_argument(
        "--model",
        choices=["cnn", *TORCH_MODELS],
        default="cnn",
        help="cnn: the built-in CNN + MLP model (default); the others are PyTorch models exported with "
        "torch.export and imported into TVM (needs pip install 'simaccel[torch]'), checked against TVM alone "
        "and shown beside torch's own result",
    )
    demo.add_argument(
        "--size",
        choices=["full", "small"],
        default="full",
        help="torch models: full (the real architecture at its usual input, the default) or small (a small "
        "input or a narrow copy: seconds on the CPU engines)",
    )

    build = commands.add_parser(
        "build",
        help="build a model file (or the demo model) into a library for `simaccel run`, with inputs and TVM's outputs",
        description="Partition the Relax IRModule that MODEL.py defines as `mod` (or `Module`, TVMScript's name), "
        "build it with simaccel and export it to LIB.so; write seeded random inputs to LIB.inputs.npz and the "
        "outputs of the same module built by TVM alone on the CPU to LIB.expect.npz, for "
        "`simaccel run LIB.so --inputs LIB.inputs.npz --expect LIB.expect.npz`.",
    )
    build.add_argument("model", nargs="?", metavar="MODEL.py",
                       help="a Python file defining a Relax IRModule `mod` whose main takes static shapes")
    build.add_argument("--demo", action="store_true", help="build the demo model (the CNN of `simaccel demo`) instead")
    build.add_argument("-o", "--output", required=True, metavar="LIB.so", help="the library to write")
    build.add_argument("--target", choices=["llvm", "cuda"], default="llvm",
                       help="llvm (CPU, the default) or cuda (the GPU present, else an H100; native regions with the aot extra)")
    build.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    build.add_argument("--profile", metavar="FILE", help=PROFILE_HELP)

    run = commands.add_parser(
        "run",
        help="run an exported library on inputs from an .npz, optionally checking the outputs",
        description="Load LIB (made by export_library; works with a runtime-only TVM), run its main "
        "function and, with --expect, compare. Exits 1 on a mismatch.",
    )
    run.add_argument("library", metavar="LIB.so", help="the exported library")
    run.add_argument("--inputs", required=True, metavar="IN.npz",
                     help=".npz with the arguments, named arg0, arg1, ... (or arr_0, ...)")
    run.add_argument("--expect", metavar="OUT.npz", help=".npz with the expected outputs in order (named like --inputs)")
    run.add_argument("--save", metavar="OUT.npz", help="write the outputs to this .npz")
    run.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    run.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of --expect (default 1e-4)")
    run.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance of --expect (default 1e-5)")
    run.add_argument("--trace", metavar="PATH", help=TRACE_HELP)
    run.add_argument("--sanitize", action="store_true",
                     help="check every region call for unwritten outputs, out-of-bounds writes, writes into inputs, "
                          "GPU faults and stream misuse (slow; docs/debugging.md)")

    bench = commands.add_parser(
        "bench",
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

    fuzz = commands.add_parser(
        "fuzz",
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
    fuzz.add_argument("--dtype", default="float32,float16", help="model dtypes, comma-separated (default both)")
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
    fuzz.add_argument("--replay", metavar="DIR", help="check a saved reproduction again instead of fuzzing")
    fuzz.add_argument("--partition", metavar="MODULE:FUNCTION", help=PARTITION_HELP)
    fuzz.add_argument("--profile", metavar="FILE", help=PROFILE_HELP)

    conformance = commands.add_parser(
        "conformance",
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
    conformance.add_argument("--profile", metavar="FILE", help=PROFILE_HELP)

    bisect = commands.add_parser(
        "bisect",
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
    bisect.add_argument("--rtol", type=float, help="relative tolerance (default: per dtype, float32 1e-4, float16 2e-2)")
    bisect.add_argument("--atol", type=float, help="absolute tolerance, times 1 + max |TVM alone| (default: per dtype, "
                        "float32 1e-5, float16 2e-2)")
    bisect.add_argument("-o", "--output", metavar="DIR",
                        help="folder for the reproducer (default: a fresh simaccel-bisect-<region>-<op>/ here)")
    bisect.add_argument("--max-bytes", type=int, help="most host memory the capture may hold (default 1 GiB, or "
                        "$SIMACCEL_CAPTURE_MAX_BYTES)")
    bisect.add_argument("--profile", metavar="FILE", help=PROFILE_HELP)

    trace = commands.add_parser(
        "trace",
        help="read a timeline trace: time per op kind and gaps between kernels (--summary), a PNG (--png)",
        description="Read a trace written by simaccel.trace / $SIMACCEL_TRACE / --trace: --summary prints the time "
        "per op kind (simaccel ops, TVM kernels and builtins) and the gaps between consecutive kernels on each track; "
        "--png draws a timeline, one row per track (needs pip install 'simaccel[trace]').",
    )
    trace.add_argument("trace_file", metavar="TRACE.json", help="the trace to read")
    trace.add_argument("--summary", action="store_true", help="print the summary (the default when --png is not given)")
    trace.add_argument("--png", metavar="OUT.png", help="draw the timeline into this PNG")

    from .gpu_sanitizer import TOOLS as SANITIZER_TOOLS

    sanitize = commands.add_parser(
        "sanitize",
        help="run a script under NVIDIA's compute-sanitizer, its kernels built with line information",
        description="Run COMMAND (e.g. python script.py) under compute-sanitizer with SIMACCEL_LINEINFO=1, so the "
        "kernels compiled in it (the cuda engine's, native regions built there) carry line information and the "
        "reports name their source lines. Exits 1 when the tool reports an error, 2 when it is not installed.",
        usage="simaccel sanitize [--tool TOOL] [--option OPTION ...] -- COMMAND [ARGS ...]",
    )
    sanitize.add_argument("--tool", choices=SANITIZER_TOOLS, default="memcheck",
                          help="compute-sanitizer's tool (default memcheck)")
    sanitize.add_argument("--option", action="append", default=[], metavar="OPTION",
                          help="one more compute-sanitizer option, e.g. --option=--leak-check=full (repeatable)")
    sanitize.add_argument("run", nargs=argparse.REMAINDER, metavar="COMMAND", help="the command to run, after --")

    whatif = commands.add_parser(
        "whatif",
        help="compare device profiles on a model by the timing model (modeled time per region, a roofline chart)",
        description="Partition MODEL.py's Relax IRModule (or the demo model) for each --profile, turn its regions "
        "into Programs and model each call's time on the accelerator the profile describes (its `performance` "
        "figures: peak operations per second per dtype, memory and scratchpad bandwidth, dispatch costs). "
        "Nothing runs. Each op left on TVM is listed with its reason (not modeled); a region called several times "
        "counts once per call.",
    )
    whatif.add_argument("model", nargs="?", metavar="MODEL.py",
                        help="a Python file defining a Relax IRModule `mod` whose main takes static shapes")
    whatif.add_argument("--demo", action="store_true", help="the demo model (the CNN of `simaccel demo`) instead")
    whatif.add_argument("--profile", action="append", default=[], metavar="FILE", dest="profiles",
                        help="a device profile with performance figures (repeat it to compare; see examples/profiles/)")
    whatif.add_argument("--png", metavar="FILE", help="also draw each profile's roofline with the model's ops on it")

    commands.add_parser(
        "ops",
        help="list the accelerator's ops: built-in ones and users' (from $SIMACCEL_OPS)",
        description="One line per op (every fused variant): its inputs, its attributes and the family it belongs "
        "to; built-in families first, then users' ones, declared in the modules or .py files named in "
        "$SIMACCEL_OPS (comma-separated).",
    )
    return parser


def check_args(args) -> None:
    """Refuse out-of-range option values before any work is done."""
    if args.command == "demo" and args.seed < 0:
        raise SimAccelError(f"--seed {args.seed}: must be >= 0 (numpy seeds are non-negative)")
    if args.command == "build" and (args.model is None) == (not args.demo):
        raise SimAccelError("build: give a model file (MODEL.py) or --demo" + (", not both" if args.demo else ""))
    if args.command == "whatif" and (args.model is None) == (not args.demo):
        raise SimAccelError("whatif: give either MODEL.py or --demo")
    if args.command == "whatif" and not args.profiles:
        raise SimAccelError("whatif: name at least one --profile FILE (a device profile with performance figures)")
    if args.command == "whatif" and args.png and not os.path.isdir(os.path.dirname(os.path.abspath(args.png))):
        raise SimAccelError(f"--png {args.png}: no folder {os.path.dirname(os.path.abspath(args.png))}")
    if args.command == "build" and args.seed < 0:
        raise SimAccelError(f"--seed {args.seed}: must be >= 0 (numpy seeds are non-negative)")
    if args.command == "bench" and args.repeat < 1:
        raise SimAccelError(f"--repeat {args.repeat}: must be >= 1")
    if args.command == "bench" and args.ops and (args.artifacts or args.report):
        raise SimAccelError("bench --ops: times the ISA's kernels alone; it takes no --artifacts or --report")
    if args.command == "bench" and not (args.ops or args.artifacts or args.report):
        raise SimAccelError("bench: say what to do: --artifacts DIR (time prebuilt libraries against TVM alone on a GPU), "
                            "--ops (time each op's kernel on a GPU) or --report NEW.json --compare OLD.json (compare "
                            "two finished runs, no GPU needed)")
    if args.command == "bench" and args.artifacts and args.report:
        raise SimAccelError("bench: give --artifacts (to time) or --report (to compare a finished run), not both")
    if args.command == "bench" and args.report and not args.compare:
        raise SimAccelError("bench --report: also give --compare OLD.json (the report to compare it with)")
    if args.command == "run":
        for flag, value in (("--rtol", args.rtol), ("--atol", args.atol)):
            if not (math.isfinite(value) and value >= 0):
                raise SimAccelError(f"{flag} {value}: must be a finite number >= 0")
    if args.command == "bisect":
        if (args.model is None) == (not args.demo):
            raise SimAccelError("bisect: give a model file (MODEL.py) or --demo" + (", not both" if args.demo else ""))
        if args.seed < 0:
            raise SimAccelError(f"--seed {args.seed}: must be >= 0 (numpy seeds are non-negative)")
        for flag, value in (("--rtol", args.rtol), ("--atol", args.atol), ("--max-bytes", args.max_bytes)):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise SimAccelError(f"{flag} {value}: must be a finite number >= 0")
    if args.command == "fuzz":
        for flag, value, low in (("--cases", args.cases, 1), ("--seed", args.seed, 0), ("--max-ops", args.max_ops, 1),
                                 ("--export-every", args.export_every, 0), ("--shrink-seconds", args.shrink_seconds, 0),
                                 ("--jobs", args.jobs, 1), ("--batch-size", args.batch_size or 1, 1),
                                 ("--case-seconds", args.case_seconds, 1)):
            if not value >= low:
                raise SimAccelError(f"{flag} {value}: must be >= {low}")
        for flag, value, known in (("--engine", args.engine, _engines(args)), ("--dtype", args.dtype, ("float32", "float16"))):
            items = (value or ",".join(known)).split(",")
            if not items or any(item not in known for item in items):
                raise SimAccelError(f"{flag} {value}: choose from {', '.join(known)} (comma-separated)")
    if args.command == "conformance":
        for flag, value, low in (("--reload-every", args.reload_every, 0), ("--repeat", args.repeat, 0),
                                 ("--seed", args.seed, 0), ("--jobs", args.jobs, 1),
                                 ("--model-seconds", args.model_seconds, 1)):
            if not value >= low:
                raise SimAccelError(f"{flag} {value}: must be >= {low}")
        if args.engine is not None:
            known = _engines(args)
            if any(item not in known for item in args.engine.split(",")):
                raise SimAccelError(f"--engine {args.engine}: choose from {', '.join(known)} (comma-separated)")
    if getattr(args, "partition", None):
        from .backends import parse_partition

        args.partition = parse_partition(args.partition)


def _engines(args) -> tuple:
    """The engines `--engine` may name: simaccel's, or another backend's devices (--partition)."""
    from .backends import BACKEND_ENGINES, ENGINE_DEVICE

    return tuple(BACKEND_ENGINES if getattr(args, "partition", None) else ENGINE_DEVICE)


def _dispatch(args) -> int:
    if getattr(args, "profile", None):
        from ...profile import PROFILE_ENV, active_profile

        os.environ[PROFILE_ENV] = os.path.abspath(args.profile)  # fuzz workers and replays inherit it
        active_profile().check_ops()  # a bad file or an op name the ISA lacks: one line and exit 2, before any work
    if args.command == "trace":
        return trace_command(args)
    trace_path = getattr(args, "trace", None) or (os.environ.get("SIMACCEL_TRACE") if args.command in ("demo", "run") else None)
    if trace_path:
        from ...debug.timeline import trace

        with trace(trace_path):
            return _run_command(args)
    return _run_command(args)


def _run_command(args) -> int:
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(engine=args.engine, seed=args.seed, dtype=args.dtype, device=args.device, staged=args.staged,
                        model=args.model, size=args.size)
    if args.command == "build":
        from .build_library import build_library

        return build_library(args.model, args.output, target=args.target, seed=args.seed)
    if args.command == "run":
        return run_library_command(args)
    if args.command == "bench":
        from .bench import compare_reports, run_bench

        if args.ops:
            from .bench_ops import run_bench_ops

            return run_bench_ops(args.out, repeat=args.repeat, compare_with=args.compare)
        if args.report:
            return compare_reports(args.report, args.compare)
        return run_bench(args.artifacts, args.out, repeat=args.repeat, compare_with=args.compare)
    if args.command == "sanitize":
        from .gpu_sanitizer import run_sanitize

        return run_sanitize(args.run, tool=args.tool, options=args.option)
    if args.command == "fuzz":
        from .fuzz import replay, run_fuzz

        if args.replay:
            return replay(args.replay)
        engine = args.engine or ("cpu" if args.partition else "ref")
        return run_fuzz(args.cases, args.seed, engine.split(","), args.dtype.split(","), args.max_ops,
                        args.out, args.export_every, args.shrink_seconds, args.jobs, cluster=args.cluster,
                        batch_size=args.batch_size, case_seconds=args.case_seconds, resume=args.resume,
                        partition=args.partition or SIMACCEL)
    if args.command == "conformance":
        from .conformance import run_conformance

        return run_conformance([s for s in args.zoo.split(",") if s], args.models,
                               args.engine.split(",") if args.engine else None, args.partition or SIMACCEL, args.size,
                               args.only, args.out, args.reload_every, args.repeat, args.seed, args.cluster, args.jobs,
                               args.model_seconds, args.compare)
    if args.command == "bisect":
        from .bisect import bisect_command

        return bisect_command(args)
    if args.command == "whatif":
        from .whatif import whatif_command

        return whatif_command(args)
    return list_ops_command()


def trace_command(args) -> int:
    """`simaccel trace`: the summary of a trace file and/or its PNG timeline."""
    from ...debug.timeline_summary import format_summary, load, summarize, write_png

    document = load(args.trace_file)
    if args.png:
        check_dir = os.path.dirname(os.path.abspath(args.png))
        if not os.path.isdir(check_dir):
            raise SimAccelError(f"--png {args.png}: no folder {check_dir}")
        write_png(document, args.png)
        print(f"wrote {args.png}")
    if args.summary or not args.png:
        print(format_summary(summarize(document)))
    return OK


def list_ops_command() -> int:
    """`simaccel ops`: every family (built-in first) with where it comes from and what it
    computes, then its ops (the variants) with their inputs and attributes, indented."""
    from ...ops import families, get_op

    for family in families():
        if family.namespace == "simaccel":
            origin = "built-in"
        else:
            origin = f"user op, namespace {family.namespace}, " + ("drawn by simaccel fuzz" if family.fuzz else "no fuzz hook")
        print(f"{family.name} family ({origin})" + (f": {family.doc}" if family.doc else ""))
        for variant in family.variants():
            op = get_op(variant.name)
            attrs = f"  attrs: {', '.join(op.attrs)}" if op.attrs else ""
            inputs = f"{op.inputs[0]}..." if family.variadic else ", ".join(op.inputs)
            print(f"  {op.name}({inputs}){attrs}")
    return OK


def run_library_command(args) -> int:
    """`simaccel run`: every argument is checked before the library runs."""
    from .common.arrays import check_writable, read_arrays, write_arrays
    from .deploy import parse_device, run_library

    parse_device(args.device)
    inputs = read_arrays(args.inputs, "--inputs")
    expected = read_arrays(args.expect, "--expect") if args.expect else None
    if args.save:
        check_writable(args.save, "--save")
    outputs = run_library(args.library, inputs, device=args.device, sanitize=args.sanitize)
    for i, out in enumerate(outputs):
        print(f"output {i}: {out.shape} {out.dtype}")
    if args.save:
        write_arrays(args.save, outputs, "--save")
    return OK if expected is None else compare(outputs, expected, args.rtol, args.atol)


def compare(outputs, expected, rtol: float, atol: float) -> int:
    """Print the error of each output against `expected`; OK when all match, else MISMATCH."""
    import numpy as np

    if len(expected) != len(outputs):
        print(f"RESULT: MISMATCH ({len(outputs)} outputs, {len(expected)} expected)")
        return MISMATCH
    ok = True
    for i, (got, want) in enumerate(zip(outputs, expected)):
        same = got.shape == want.shape and np.allclose(got, want, rtol=rtol, atol=atol)
        error = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.shape == want.shape else float("inf")
        print(f"output {i}: max abs error {error:.3g} (rtol {rtol}, atol {atol})")
        ok = ok and same
    print("RESULT: match" if ok else "RESULT: MISMATCH")
    return OK if ok else MISMATCH


if __name__ == "__main__":
    sys.exit(main())
