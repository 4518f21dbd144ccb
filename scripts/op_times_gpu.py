"""Where a model's simaccel time goes, op by op, on a GPU: what holds a region back.

For each torch.export model of simaccel.tvm_integration.tools.torch_models (full size), the
model is partitioned and each region's Program is built the way the codegen builds it. Its
launch plan (simaccel.launch_plan, the launches native regions make) is replayed on the GPU
with random data, and every op's launches are timed with CUDA events: medians over
repeats, summed per op name. Writes op-times.json to OUT and prints the largest shares.

    python scripts/op_times_gpu.py OUT [--repeat N] [--models a,b]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from simaccel.tvm_integration.tools import torch_models


def region_programs(mod):
    from simaccel.tvm_integration.backend.codegen import region_program
    from simaccel.tvm_integration.backend.partition import partition_for_simaccel
    from simaccel.tvm_integration.backend.patterns import sync_patterns

    partitioned = partition_for_simaccel(mod)
    specs = sync_patterns()
    return [region_program(gv.name_hint, f, specs) for gv, f in partitioned.functions.items()
            if getattr(f, "attrs", None) and f.attrs.get("Codegen") == "simaccel"]


def op_times(program, repeat: int) -> dict:
    """Median milliseconds of each op of `program` (its recorded launches), by op index."""
    from numba import cuda

    from simaccel.kernels import KernelTarget
    from simaccel.launch_plan import WORKSPACE, LaunchPlan, replay

    rng = np.random.default_rng(0)
    stream = cuda.stream()
    target = KernelTarget("cuda", stream)
    arrays = {}
    for i, spec in enumerate(program.tensors):
        owner = program.views.get(i)
        if owner is None:
            arrays[i] = cuda.to_device(rng.standard_normal(spec.shape).astype(spec.dtype), stream=stream)
    for i, owner in program.views.items():
        arrays[i] = arrays[owner].reshape(program.tensors[i].shape)
    plan = LaunchPlan.of(program)
    if plan.workspace:
        arrays[WORKSPACE] = cuda.device_array(plan.workspace, dtype=np.uint8, stream=stream)
    by_op = defaultdict(list)
    for launch in plan.launches:
        by_op[launch.op].append(launch)
    samples = defaultdict(list)
    for _ in range(repeat + 3):
        for index, launches in by_op.items():
            start, end = cuda.event(), cuda.event()
            start.record(stream)
            replay(launches, target, arrays)
            end.record(stream)
            end.synchronize()
            samples[index].append(cuda.event_elapsed_time(start, end))
    return {index: statistics.median(s[3:]) for index, s in samples.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--models", default=",".join(torch_models.MODEL_NAMES))
    args = parser.parse_args(argv)
    from numba import cuda

    device = cuda.get_current_device().name
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
              "device": device.decode() if isinstance(device, bytes) else device,
              "method": f"each op's launches between two CUDA events, median of {args.repeat} repeats",
              "models": {}}
    for name in args.models.split(","):
        mod = torch_models.load(name, "full").to_relax()
        per_name: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        for program in region_programs(mod):
            for index, ms in op_times(program, args.repeat).items():
                per_name[program.ops[index].op] += ms
                counts[program.ops[index].op] += 1
        total = sum(per_name.values())
        ranked = sorted(per_name.items(), key=lambda kv: -kv[1])
        report["models"][name] = {"total_ms": total, "ops": {op: {"ms": ms, "count": counts[op], "share": ms / total}
                                                             for op, ms in ranked}}
        print(name, f"{total:.3f} ms in simaccel kernels;",
              ", ".join(f"{op} x{counts[op]} {ms:.3f} ms ({ms / total:.0%})" for op, ms in ranked[:4]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "op-times.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
