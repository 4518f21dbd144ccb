"""Symbolic models on a GPU: one build of each, native symbolic regions against TVM alone's
dynamic-shape build of the same module, at small, middle and upper-bound sizes (the models of
simaccel.tvm_integration.tools.dynamic_models at their "bench" size).

For each model and size: both builds' results compared (and with torch), then the two timed
in interleaved rounds (simaccel.tvm_integration.tools.model_bench.timed: medians of `--repeat`
calls each, each call synchronised). Also the per-call cost of binding sizes natively: a
one-op model built static and symbolic, timed at the same size. Writes OUT/symbolic-bench.json
(date, device, commit, every figure) and prints a table.

Usage (on the GPU machine, the full TVM, the project installed): python3 -P
scripts/symbolic_bench_gpu.py OUT [--repeat 50]
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import tvm
from tvm import relax
from tvm.script import relax as R, tirx as T

from simaccel.compare import array_difference
from simaccel.tvm_integration.backend.pipeline import build, build_tvm_only, default_target
from simaccel.tvm_integration.tools import dynamic_models
from simaccel.tvm_integration.tools.model_bench import timed


def tiny(static: bool):
    """relu of an (n, 16) tensor: n symbolic (upper bound 64) or 4."""
    if static:
        @tvm.script.ir_module
        class Static:
            @R.function
            def main(x: R.Tensor((4, 16), "float32")) -> R.Tensor((4, 16), "float32"):
                with R.dataflow():
                    y = R.nn.relu(x)
                    R.output(y)
                return y
        return Static

    @tvm.script.ir_module
    class Symbolic:
        @R.function
        def main(x: R.Tensor(("n", 16), "float32")) -> R.Tensor(("n", 16), "float32"):
            n = T.int64()
            R.func_attr({"tir_var_upper_bound": {"n": 64}})
            with R.dataflow():
                y = R.nn.relu(x)
                R.output(y)
            return y
    return Symbolic


class PythonRegions(logging.Handler):
    """Counts the build's messages that a region is a Python region, not a native one."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = []

    def emit(self, record):
        if "Python region" in record.getMessage():
            self.messages.append(record.getMessage())


def build_ours(mod, target):
    handler = PythonRegions()
    logger = logging.getLogger("simaccel.codegen")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        return build(mod, target), handler.messages
    finally:
        logger.removeHandler(handler)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target, gpu = default_target("cuda"), tvm.cuda(0)
    sync = gpu.sync
    result = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "device": torch.cuda.get_device_name(0), "commit": os.environ.get("SIMACCEL_COMMIT", "unknown"),
              "repeat": args.repeat, "models": [], "binding": {}}
    for name in dynamic_models.NAMES:
        model = dynamic_models.load(name, "bench")
        mod = model.to_relax()
        ours, python_regions = build_ours(mod, target)
        theirs = build_tvm_only(mod, target)
        vms = {"simaccel": relax.VirtualMachine(ours, gpu), "TVM alone": relax.VirtualMachine(theirs, gpu)}
        for size in model.sizes:
            x = model.inputs(size)
            xd = tvm.runtime.tensor(x, gpu)
            got = {k: vm["main"](xd).numpy() for k, vm in vms.items()}
            want = model.run(x)
            checks = {"vs TVM alone": array_difference(got["simaccel"], got["TVM alone"], scaled=True),
                      "vs torch": array_difference(got["simaccel"], want, scaled=True)}
            times = timed({k: (lambda vm=vm: vm["main"](xd)) for k, vm in vms.items()}, sync, args.repeat)
            row = {"model": name, "size": list(size), "python_regions": python_regions,
                   "matches": {k: bool(v.ok) for k, v in checks.items()},
                   "simaccel_us": round(times["simaccel"], 1), "tvm_us": round(times["TVM alone"], 1),
                   "ratio": round(times["simaccel"] / times["TVM alone"], 3)}
            result["models"].append(row)
            print(f"{name:24s} {str(size):10s} simaccel {row['simaccel_us']:9.1f} us  TVM alone {row['tvm_us']:9.1f} us  "
                  f"ratio {row['ratio']:.3f}  match {row['matches']}  python regions {len(python_regions)}", flush=True)
    # The per-call cost of binding sizes natively: the same one-op region, static and symbolic.
    vms, notes = {}, {}
    for kind in ("static", "symbolic"):
        executable, notes[kind] = build_ours(tiny(kind == "static"), target)
        vms[kind] = relax.VirtualMachine(executable, gpu)
    xd = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((4, 16)).astype("float32"), gpu)
    rounds = [timed({k: (lambda vm=vm: vm["main"](xd)) for k, vm in vms.items()}, sync, 2000) for _ in range(3)]
    static = float(np.median([r["static"] for r in rounds]))
    symbolic = float(np.median([r["symbolic"] for r in rounds]))
    result["binding"] = {"static_us": round(static, 2), "symbolic_us": round(symbolic, 2),
                         "cost_us": round(symbolic - static, 2), "ratio": round(symbolic / static, 3),
                         "python_regions": notes["symbolic"]}
    print(f"binding: static {static:.2f} us, symbolic {symbolic:.2f} us a call (relu (4, 16), 3 x 2000 calls)")
    (out / "symbolic-bench.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
