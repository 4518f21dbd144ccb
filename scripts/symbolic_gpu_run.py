"""Run, on a GPU machine, the libraries scripts/symbolic_gpu_build.py made (a runtime-only TVM
is enough): for each dynamic model, simaccel's build (native symbolic regions) against TVM
alone's dynamic-shape build at 1, a middle size and the upper bounds, both compared with torch
and with each other, then timed in interleaved rounds (medians); the bytes simaccel moved
through the host (none expected); a CUDA graph captured per shape and replayed; and the
per-call cost of binding sizes natively (a one-op model, static against symbolic).
Writes OUT/symbolic-gpu.json and prints a table.

Usage: python3 -P scripts/symbolic_gpu_run.py ARTIFACTS OUT [--repeat 50]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np

import simaccel
from simaccel.compare import array_difference
from simaccel.tvm_integration.tools import dynamic_models
from simaccel.tvm_integration.tools.deploy import gpu_name, load
from simaccel.tvm_integration.tools.model_bench import timed


def check(got, want) -> dict:
    found = array_difference(got, want, scaled=True)
    return {"ok": bool(found.ok), "max_error": float(found.max_error) if found.max_error is not None else None}


def graphs(vm, theirs, model, gpu) -> list[dict]:
    """A torch.cuda.graph captured on TVM's stream per shape; each replayed with new inputs."""
    import torch
    import tvm
    import tvm_ffi

    stream, held, rows = torch.cuda.Stream(), {}, []
    with tvm_ffi.use_raw_stream(gpu, stream.cuda_stream), torch.cuda.stream(stream):
        for size in model.sizes:
            x = tvm.runtime.tensor(model.inputs(size), gpu)
            for _ in range(3):
                vm["main"](x)
            stream.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                out = vm["main"](x)
            held[size] = (graph, x, out)
    for seed in (7, 8):
        for size, (graph, x, out) in held.items():
            x.copyfrom(model.inputs(size, seed))
            graph.replay()
            torch.cuda.synchronize()
            rows.append({"size": list(size), "seed": seed, **check(out.numpy(), theirs["main"](x).numpy())})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("artifacts")
    parser.add_argument("out")
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    folder, out = Path(args.artifacts), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((folder / "manifest.json").read_text())
    import tvm

    result = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "device": gpu_name(), "commit": manifest["commit"], "target": manifest["target"],
              "repeat": args.repeat, "models": [], "graphs": {}, "binding": {}}
    ledger = simaccel.get_runtime().ledger
    for name in manifest["models"]:
        model = dynamic_models.load(name, "bench")
        ours, gpu = load(folder / f"{name}.simaccel.so", "cuda")
        theirs, _ = load(folder / f"{name}.tvm.so", "cuda")
        for size in model.sizes:
            x = model.inputs(size)
            xd = tvm.runtime.tensor(x, gpu)
            ledger.reset()
            got = ours["main"](xd).numpy()
            moved = ledger.snapshot()["bytes"]
            want = theirs["main"](xd).numpy()
            times = timed({"simaccel": lambda: ours["main"](xd), "TVM alone": lambda: theirs["main"](xd)}, gpu.sync,
                          args.repeat)
            row = {"model": name, "size": list(size), "vs_tvm": check(got, want), "vs_torch": check(got, model.run(x)),
                   "tvm_vs_torch": check(want, model.run(x)), "host_bytes": moved["host_to_device"] + moved["device_to_host"],
                   "simaccel_us": round(times["simaccel"], 1), "tvm_us": round(times["TVM alone"], 1),
                   "ratio": round(times["simaccel"] / times["TVM alone"], 3)}
            result["models"].append(row)
            print(f"{name:12s} {str(tuple(size)):11s} simaccel {row['simaccel_us']:9.1f} us  TVM alone "
                  f"{row['tvm_us']:9.1f} us  ratio {row['ratio']:.3f}  vs TVM {row['vs_tvm']['ok']}  vs torch "
                  f"{row['vs_torch']['ok']}  host bytes {row['host_bytes']}", flush=True)
        if name == "dyn_mlp":
            try:
                result["graphs"][name] = graphs(ours, theirs, model, gpu)
            except Exception as e:  # noqa: BLE001 - said in the result
                result["graphs"][name] = [{"error": f"{type(e).__name__}: {e}"}]
            print(f"graphs per shape ({name}): {result['graphs'][name]}", flush=True)
    vms = {kind: load(folder / f"tiny_{kind}.simaccel.so", "cuda")[0] for kind in ("static", "symbolic")}
    gpu = tvm.cuda(0)
    xd = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((4, 16)).astype("float32"), gpu)
    rounds = [timed({k: (lambda vm=vm: vm["main"](xd)) for k, vm in vms.items()}, gpu.sync, 2000) for _ in range(3)]
    static = float(np.median([r["static"] for r in rounds]))
    symbolic = float(np.median([r["symbolic"] for r in rounds]))
    result["binding"] = {"static_us": round(static, 2), "symbolic_us": round(symbolic, 2),
                         "cost_us": round(symbolic - static, 2), "ratio": round(symbolic / static, 3),
                         "rounds": rounds}
    print(f"binding: static {static:.2f} us, symbolic {symbolic:.2f} us a call (relu (4, 16), 3 x 2000 calls each)")
    (out / "symbolic-gpu.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
