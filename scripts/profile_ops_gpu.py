"""Launch some of `simaccel bench --ops`'s cases once each, for Nsight Compute to profile.

    ncu --section SpeedOfLight --section Occupancy ... python scripts/profile_ops_gpu.py "conv 56x56x64->64 3x3 b8" ...

Each case named (a label of simaccel.tvm_integration.tools.bench_ops.CASES) is launched
through its op's own launcher on random data, once after a warm-up launch (which compiles
it): profile with `--launch-skip-before-match`/`-c` or a kernel-name filter as needed.
"""

from __future__ import annotations

import sys

from numba import cuda

from simaccel.kernels import KernelTarget
from simaccel.tvm_integration.tools.bench_ops import CASES, prepare_case


def main(labels: list[str]) -> int:
    cases = {c.label: c for c in CASES}
    unknown = [label for label in labels if label not in cases]
    if unknown:
        print(f"unknown cases {unknown}; known: {list(cases)}", file=sys.stderr)
        return 2
    target = KernelTarget("cuda")
    for label in labels:
        run = prepare_case(cases[label], target)
        for _ in range(2):
            run.launch()
        cuda.synchronize()
        print(f"launched {label} twice")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
