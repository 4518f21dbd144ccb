"""Launch some of `simaccel bench --ops`'s cases once each, for Nsight Compute to profile.

    ncu --section SpeedOfLight --section Occupancy ... python scripts/profile_ops_gpu.py "conv 56x56x64->64 3x3 b8" ...

Each case named (a label of simaccel.tvm_integration.tools.bench_ops.CASES) is launched
through its op's own launcher on random data, once after a warm-up launch (which compiles
it): profile with `--launch-skip-before-match`/`-c` or a kernel-name filter as needed.
"""

from __future__ import annotations

import sys

from numba import cuda

from simaccel.data import random_arrays
from simaccel.kernels import KernelTarget
from simaccel.ops import get_op
from simaccel.tvm_integration.tools.bench_ops import CASES


def main(labels: list[str]) -> int:
    cases = {c.label: c for c in CASES}
    unknown = [label for label in labels if label not in cases]
    if unknown:
        print(f"unknown cases {unknown}; known: {list(cases)}", file=sys.stderr)
        return 2
    target = KernelTarget("cuda")
    for label in labels:
        case = cases[label]
        op = get_op(case.op)
        attrs = op.all_attrs(case.attrs)
        arrays = random_arrays([(f"t{i}", s, case.dtype) for i, s in enumerate(case.shapes)], seed=1)
        shape, dtype = op.infer([a.shape for a in arrays], [case.dtype] * len(arrays), **attrs)
        inputs = [cuda.to_device(a) for a in arrays]
        out = cuda.device_array(shape, dtype=dtype)
        for _ in range(2):
            op.kernel(target, out, *inputs, **attrs)
        cuda.synchronize()
        print(f"launched {label} twice")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
