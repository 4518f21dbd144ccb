"""What binding a symbolic region's sizes costs per call on the Python runtime.

Where it sits: a measurement behind docs/symbolic-shapes.md. The same region (reshape ->
matmul_relu -> reshape) as a static Program and as a symbolic one (vars b, s), run on the
"ref" engine at the same sizes, interleaved in rounds; each call of the symbolic one binds its
vars from the tensors, checks every dim and looks up the validated static Program of those
sizes in the runtime's LRU. Tiny tensors, so the call's fixed cost is what is measured.

Usage: python scripts/bind_cost.py OUT.json [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np

import simaccel
from simaccel.program import OpNode, Program, SizeVar, TensorSpec
from simaccel.shapes import Dim


def region(b, s, size_vars=()) -> Program:
    tensors = (TensorSpec("x", (b, s, 16), "float32"), TensorSpec("w", (16, 4), "float32"),
               TensorSpec("h", (b * s, 16), "float32"), TensorSpec("y", (b * s, 4), "float32"),
               TensorSpec("out", (b, s, 4), "float32"))
    ops = (OpNode("simaccel.reshape", (0,), 2, {"shape": [b * s, 16]}), OpNode("simaccel.matmul_relu", (2, 1), 3, {}),
           OpNode("simaccel.reshape", (3,), 4, {"shape": [b, s, 4]}))
    return Program("bind_cost", tensors, (0, 1), (4,), ops, vars=size_vars).validate()


def per_call_us(runtime, program, arrays, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        runtime.run(program, *arrays)
    return (time.perf_counter() - start) / calls * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    runtime = simaccel.get_runtime()
    static = region(3, 5)
    symbolic = region(Dim.var("b"), Dim.var("s"), (SizeVar("b", 1, 64), SizeVar("s", 1, 512)))
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 5, 16)).astype("float32"), rng.standard_normal((16, 4)).astype("float32"),
              np.zeros((3, 5, 4), "float32")]
    times = {"static": [], "symbolic": []}
    with runtime.use_engine("ref"):
        for program in (static, symbolic):  # warm: parsed, validated, planned
            runtime.run(program, *arrays)
        for _ in range(args.rounds):
            for name, program in (("static", static), ("symbolic", symbolic)):
                times[name].append(per_call_us(runtime, program, arrays, args.calls))
    medians = {name: statistics.median(values) for name, values in times.items()}
    result = {"what": "per-call wall clock of one region on the ref engine, static vs symbolic (b, s bound per call)",
              "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "machine": platform.processor() or platform.machine(),
              "python": platform.python_version(), "calls_per_round": args.calls, "rounds": args.rounds,
              "median_us": {k: round(v, 2) for k, v in medians.items()},
              "binding_us": round(medians["symbolic"] - medians["static"], 2),
              "ratio": round(medians["symbolic"] / medians["static"], 3), "rounds_us": times}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"static {medians['static']:.1f} us, symbolic {medians['symbolic']:.1f} us a call: binding costs "
          f"{result['binding_us']:.1f} us ({result['ratio']:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
