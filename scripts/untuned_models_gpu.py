"""Models nobody tuned for, on the GPU: simaccel's native regions against TVM alone (issue 21).

A benchmark script for a GPU machine with the full TVM, torch, torchvision and numba-cuda.
For each model of simaccel.tvm_integration.tools.torch_models (default: UNTUNED_NAMES and then
the four MODEL_NAMES; seeded random weights, batch-norm statistics calibrated) it

1. exports the model with torch.export, imports it with TVM's `from_exported_program` and
   records the partition (`partition_report`: regions, ops offloaded, ops kept on TVM by kind
   with the reasons);
2. builds it with simaccel for the GPU (native regions) and with TVM alone, and checks
   simaccel against TVM alone and TVM alone against torch (on the CPU, float32), both by
   simaccel.compare's rule for whole outputs: float32's tolerance against TVM alone, against
   torch (a witness) conformance's absolute tolerance, as `simaccel conformance` does;
3. times TVM alone, simaccel and torch interleaved, one call of each in turn, each followed
   by a device synchronisation: medians of `--repeat` warm calls;
4. profiles each mode alone under torch.profiler's CUDA activity (CUPTI records every kernel of
   the process, TVM's too): kernel µs and launches per call, and the kernels that take the
   most time, so a model that misses says which kernel limits it.

Writes OUT/untuned-models.json (after each model, so a run cut short keeps what it measured)
and OUT/untuned-models.md (the table and every model's partition summary).

    python scripts/untuned_models_gpu.py OUT [--models all|untuned|tuned|a,b] [--repeat N]
    python scripts/untuned_models_gpu.py OUT --device cpu --size small --models gpt_decoder --repeat 3

`--device cpu` (a smoke run: llvm, the `ref` engine, no kernel profile) checks the script
itself on a machine without a GPU. The exit status is 1 when a model failed (a simaccel
build that fails still leaves TVM alone's time and the partition in its row) or mismatched.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from simaccel.tvm_integration.tools import model_bench, torch_models

MODEL_SETS = {"untuned": torch_models.UNTUNED_NAMES, "tuned": torch_models.MODEL_NAMES,
              "all": torch_models.UNTUNED_NAMES + torch_models.MODEL_NAMES}


def model_list(spec: str) -> list[str]:
    """`--models`: a set's name (untuned, tuned, all) or model names separated by commas."""
    if spec in MODEL_SETS:
        return list(MODEL_SETS[spec])
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in torch_models.ALL_NAMES]
    if unknown:
        raise SystemExit(f"unknown models {unknown}; known: {', '.join(torch_models.ALL_NAMES)} "
                         f"or a set: {', '.join(MODEL_SETS)}")
    return names


def max_abs(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))) if np.size(a) else 0.0


def build_model(name: str, args, out: Path) -> dict:
    """Phase 1 (one process per model with --jobs): export, partition, build both ways and
    export the libraries to OUT/libs, with the input and torch's result beside them."""
    import tvm

    from simaccel.tvm_integration import build, build_tvm_only, default_target, partition_report

    start = time.perf_counter()
    model = torch_models.load(name, args.size)
    x = np.random.default_rng(1).standard_normal(model.input_shape).astype(np.float32)
    libs = out / "libs"
    libs.mkdir(parents=True, exist_ok=True)
    np.save(libs / f"{name}-input.npy", x)
    np.save(libs / f"{name}-torch.npy", model.run(x))
    mod = model.to_relax()
    partitioned, report = partition_report(mod)
    partition = model_bench.partition_summary(report, partitioned)
    print(model_bench.format_partition(name, partition), flush=True)
    target = default_target(args.device)
    paths = {"tvm_only": str(libs / f"{name}-tvm.so"), "simaccel": str(libs / f"{name}-simaccel.so")}
    build_tvm_only(mod, target).export_library(paths["tvm_only"])
    build_error = None
    try:
        build(mod, target).export_library(paths["simaccel"])
    except Exception as e:  # the row still shows TVM alone, torch and the partition
        build_error = f"simaccel build: {type(e).__name__}: {e}"
        print(f"{name}: {build_error}", file=sys.stderr, flush=True)
        paths["simaccel"] = None
    return {"paths": paths, "partition": partition, "build_s": time.perf_counter() - start, "error": build_error}


def build_in_worker(name: str, args, out: Path) -> dict:
    try:
        return build_model(name, args, out)
    except Exception as e:
        return {"failed": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}


def measure(name: str, args, out: Path, built: dict | None = None) -> dict:
    """Phase 2: the built model checked, timed and profiled; its row of the report."""
    import tvm

    gpu = args.device == "cuda"
    if built is None:
        built = build_model(name, args, out)
    if "failed" in built:
        raise RuntimeError(built["failed"])
    model = torch_models.load(name, args.size)
    libs = out / "libs"
    x = np.load(libs / f"{name}-input.npy")
    dev = tvm.cuda(0) if gpu else tvm.cpu()
    theirs, ours = load_vms(built["paths"], dev)
    data = tvm.runtime.tensor(x, dev)
    engine = None if gpu else args.engine  # on the GPU: native regions, no Python engine
    calls = {"tvm_only": lambda: theirs["main"](data)}
    if ours is not None:
        calls["simaccel_native"] = simaccel_caller(ours, data, engine)
    checks = check_outputs(calls, np.load(libs / f"{name}-torch.npy"))
    calls["torch"] = torch_caller(model, x, gpu)
    sync = device_sync(dev, gpu)
    medians = model_bench.timed(calls, sync, args.repeat, warmup=min(10, args.repeat))
    entry = {
        "input": list(model.input_shape),
        "size": args.size,
        "doc": model.doc,
        "build_s": built["build_s"],
        **checks,
        "median_us": medians,
        "ratio_vs_tvm_only": {k: v / medians["tvm_only"] for k, v in medians.items()},
        "kernels": kernel_profiles(name, calls, sync, args, out) if gpu and args.profile_calls > 0 else None,
        "partition": built["partition"],
    }
    if engine is not None:
        entry["engine"] = engine
    if built["error"] is not None:
        entry["error"], entry["check"] = built["error"], "-"
    return entry


def load_vms(paths: dict, dev):
    """(TVM alone's VM, simaccel's VM or None where its build failed) from the exported libraries."""
    import tvm
    from tvm import relax

    theirs = relax.VirtualMachine(tvm.runtime.load_module(paths["tvm_only"]), dev)
    ours = None
    if paths["simaccel"]:
        ours = relax.VirtualMachine(tvm.runtime.load_module(paths["simaccel"]), dev)
    return theirs, ours


def simaccel_caller(ours, data, engine: str | None):
    """One call of simaccel's build: native regions (`engine` None), else on that Python engine."""
    import simaccel

    runtime = simaccel.get_runtime()

    def simaccel_call():
        if engine is None:
            return ours["main"](data)
        with runtime.use_engine(engine):
            return ours["main"](data)

    return simaccel_call


def torch_caller(model, x, gpu: bool):
    """One call of the torch module, without gradients, on the GPU or the CPU."""
    import torch

    module = model.module.cuda() if gpu else model.module
    x_torch = torch.from_numpy(x).cuda() if gpu else torch.from_numpy(x)

    def torch_call():
        with torch.no_grad():
            module(x_torch)

    return torch_call


def device_sync(dev, gpu: bool):
    """Wait for TVM's device (and torch's stream on the GPU)."""
    import torch

    def sync():
        dev.sync()
        if gpu:
            torch.cuda.synchronize()

    return sync


def check_outputs(calls: dict, want_torch) -> dict:
    """The first output of simaccel (`calls["simaccel_native"]`, if there) against TVM alone's
    (`calls["tvm_only"]`), and TVM alone's against torch's `want_torch`: the report's fields."""
    from simaccel.compare import mismatch
    from simaccel.tvm_integration.tools.conformance.check import TORCH_ATOL
    from simaccel.tvm_integration.tools.deploy import outputs_as_list

    def first(result):
        return outputs_as_list(result)[0].numpy()

    want = first(calls["tvm_only"]())
    got = first(calls["simaccel_native"]()) if "simaccel_native" in calls else None
    scale = float(np.max(np.abs(want_torch))) or 1.0
    check = None if got is None else mismatch(got, want, dtype="float32", scaled=True)
    torch_check = mismatch(want, want_torch.astype(want.dtype), atol=TORCH_ATOL, scaled=True)
    return {
        "check": "ok" if check is None else "MISMATCH",
        "mismatch_vs_tvm_only": check,
        "max_abs_error_vs_tvm_only": None if got is None else max_abs(got, want),
        "tvm_only_vs_torch": torch_check,
        "max_abs_error_tvm_only_vs_torch": max_abs(want, want_torch),
        "output_scale": scale,
    }


def kernel_profiles(name: str, calls: dict, sync, args, out: Path) -> dict:
    """Each mode alone under the kernel profiler (CUPTI): its kernels, or the error where it failed."""
    kernels = {}
    for mode, go in calls.items():
        trace = out / "traces" / f"{name}-{mode}.json"
        try:
            kernels[mode] = model_bench.kernel_profile(go, sync, args.profile_calls, trace, top=args.top)
        except Exception as e:  # no CUPTI here, say: the timings stand without it
            kernels[mode] = {"error": f"{type(e).__name__}: {e}"}
        if not args.keep_traces and trace.exists():
            trace.unlink()
    return kernels


def write_report(out: Path, report: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "untuned-models.json").write_text(json.dumps(report, indent=1))
    lines = [f"# Models nobody tuned for: simaccel against TVM alone ({report['device']})", "",
             f"{report['date']}; {report['method']}.", "",
             model_bench.markdown_table(report["models"]), "", "## Partitions", ""]
    for name, entry in report["models"].items():
        if "partition" in entry:
            lines += ["```", model_bench.format_partition(name, entry["partition"]), "```", ""]
    top_sections = []
    for name, entry in report["models"].items():
        ours = (entry.get("kernels") or {}).get("simaccel_native")
        if ours:
            top_sections += [f"### {name}", "", "| simaccel kernel | µs per call | launches per call | share |",
                             "|---|---|---|---|"]
            top_sections += [f"| `{k['name'][:90]}` | {k['us_per_call']:,.1f} | {k['launches_per_call']:g} | "
                             f"{k['share']:.0%} |" for k in ours["top_kernels"]]
            top_sections.append("")
    if top_sections:
        lines += ["## simaccel's top kernels per model", ""] + top_sections
    (out / "untuned-models.md").write_text("\n".join(lines))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--models", default="all", help="all, untuned, tuned, or names separated by commas")
    parser.add_argument("--repeat", type=int, default=100, help="interleaved timed calls per mode")
    parser.add_argument("--profile-calls", type=int, default=20, help="calls per mode under the kernel profiler (0: none)")
    parser.add_argument("--top", type=int, default=10, help="kernels listed per mode")
    parser.add_argument("--size", choices=torch_models.SIZES, default="full")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--engine", default="ref", help="simaccel's engine for --device cpu")
    parser.add_argument("--keep-traces", action="store_true", help="keep the profiler's Chrome traces in OUT/traces")
    parser.add_argument("--jobs", type=int, default=1,
                        help="build the models in this many processes first, then time them one at a time")
    args = parser.parse_args(argv)
    names = model_list(args.models)
    out = Path(args.out)
    import torch

    if args.device == "cpu":
        torch.set_num_threads(1)  # a smoke run: torch's thread pool only competes with TVM's

    device = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    method = f"median of {args.repeat} interleaved warm calls per mode, each followed by a device sync"
    if args.device == "cuda" and args.profile_calls > 0:
        method += f"; kernel time from torch.profiler (CUPTI) over {args.profile_calls} calls per mode alone"
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": device, "size": args.size,
              "method": method, "models": {}}
    failed = 0
    builds = {}
    if args.jobs > 1:  # every build first, in parallel; the timings then run alone
        import concurrent.futures
        import multiprocessing

        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {name: pool.submit(build_in_worker, name, args, out) for name in names}
            for name, future in futures.items():
                builds[name] = future.result()
                print(f"{name}: built in {builds[name].get('build_s', 0):.0f} s", flush=True)
    for name in names:
        try:
            entry = measure(name, args, out, builds.get(name))
        except Exception as e:  # one model's failure is a row of the table, the run goes on
            entry = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
            print(f"{name} failed: {entry['error']}", file=sys.stderr, flush=True)
        failed += "error" in entry or entry.get("check") == "MISMATCH"
        report["models"][name] = entry
        summary = {k: entry.get(k) for k in ("check", "median_us", "ratio_vs_tvm_only", "error") if k in entry}
        print(name, json.dumps(summary), flush=True)
        write_report(out, report)
    print(model_bench.markdown_table(report["models"]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
