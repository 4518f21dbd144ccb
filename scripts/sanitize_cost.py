"""What the sanitizer costs on the host engines: median time of a region call, sanitized and not.

Runs a small MLP-like region (a reshape view, dense with bias, tanh, add, exp: the clean region
of tests/test_sanitize.py) on "ref" and "sim", and a larger one on "ref" alone (the simulator
interprets every CUDA thread in Python), each call repeated; prints the medians and their
ratio. The numbers in docs/debugging.md ("Sanitizer", cost) come from this script.

    python scripts/sanitize_cost.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import simaccel
from simaccel.debug import sanitize
from simaccel.program import OpNode, Program, TensorSpec


def region(batch: int, features: int, hidden: int) -> Program:
    tensors = (TensorSpec("x", (batch, 3, features), "float32"), TensorSpec("w", (hidden, 3 * features), "float32"),
               TensorSpec("b", (hidden,), "float32"), TensorSpec("xr", (batch, 3 * features), "float32"),
               TensorSpec("h", (batch, hidden), "float32"), TensorSpec("t", (batch, hidden), "float32"),
               TensorSpec("y", (batch, hidden), "float32"), TensorSpec("z", (batch, hidden), "float32"))
    ops = (OpNode("simaccel.reshape", (0,), 3, {"shape": [batch, 3 * features]}), OpNode("simaccel.dense_bias", (3, 1, 2), 4),
           OpNode("simaccel.tanh", (4,), 5), OpNode("simaccel.add", (5, 4), 6), OpNode("simaccel.exp", (5,), 7))
    return Program(f"mlp_{batch}x{features}x{hidden}", tensors, (0, 1, 2), (6, 7), ops)


def medians(program: Program, engine: str, repeat: int) -> tuple[float, float]:
    """Median seconds of a call without and with the sanitizer, the two interleaved (so that a
    busy machine's drift hits both alike)."""
    runtime = simaccel.get_runtime()
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(program.tensors[i].shape).astype("float32") for i in program.inputs]
    arrays += [np.zeros(program.tensors[i].shape, "float32") for i in program.outputs]
    times = {False: [], True: []}
    with runtime.use_engine(engine):
        for on in (False, True):
            with sanitize(on):
                runtime.run(program, *arrays)  # warm: plan, scratch, kernels wrapped
        for _ in range(repeat):
            for on in (False, True):
                with sanitize(on):
                    start = time.perf_counter()
                    runtime.run(program, *arrays)
                    times[on].append(time.perf_counter() - start)
    return statistics.median(times[False]), statistics.median(times[True])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    cases = [("ref", region(2, 4, 5)), ("sim", region(2, 4, 5)), ("ref", region(256, 256, 512))]
    print(f"{'engine':6} {'region':20} {'plain':>10} {'sanitized':>10} {'ratio':>6}")
    for engine, program in cases:
        plain, checked = medians(program, engine, args.repeat)
        print(f"{engine:6} {program.name:20} {plain * 1e3:8.3f}ms {checked * 1e3:8.3f}ms {checked / plain:6.2f}")


if __name__ == "__main__":
    main()
