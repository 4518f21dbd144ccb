"""A user's op in a native region on the GPU, where simaccel does not know the op.

    SIMACCEL_OPS=examples/rms_norm_op.py python scripts/user_op_native_gpu.py build DIR   # here, full TVM
    python scripts/user_op_native_gpu.py run DIR                                          # GPU machine

`build` exports examples/user_op.py's model (myaccel.rms_norm -> dense_bias_relu, one region)
for the CUDA target, with simaccel (native regions) and with TVM alone, in float32 and
float16, with seeded inputs. `run` (with $SIMACCEL_OPS unset: the op is only in the
library's compiled kernels) runs both on the GPU and prints the error and the ledger; the
verdict is simaccel.compare's rule for whole outputs (the dtype's tolerance).
"""

from __future__ import annotations

import os
import sys

import numpy as np

DTYPES = ("float32", "float16")


def build(directory: str) -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    import user_op  # declares myaccel.rms_norm

    from simaccel.tvm_integration import build as build_simaccel
    from simaccel.tvm_integration import build_tvm_only, default_target
    from simaccel.tvm_integration.tools.models import random_inputs

    os.makedirs(directory, exist_ok=True)
    for dtype in DTYPES:
        mod, target = user_op.model(dtype), default_target("cuda")
        build_simaccel(mod, target).export_library(f"{directory}/user_{dtype}.simaccel.so")
        build_tvm_only(mod, target).export_library(f"{directory}/user_{dtype}.tvm.so")
        np.savez(f"{directory}/user_{dtype}.inputs.npz", **{f"arg{i}": a for i, a in enumerate(random_inputs(mod, 0))})


def run(directory: str) -> int:
    import tvm

    from simaccel import get_runtime
    from simaccel.compare import array_difference
    from simaccel.tvm_integration.tools import deploy

    if os.environ.get("SIMACCEL_OPS"):
        print("unset SIMACCEL_OPS: the point is that simaccel does not know the op here", file=sys.stderr)
        return 2
    runtime, ok = get_runtime(), True
    for dtype in DTYPES:
        vm, dev = deploy.load(f"{directory}/user_{dtype}.simaccel.so", "cuda")
        reference, _ = deploy.load(f"{directory}/user_{dtype}.tvm.so", "cuda")
        arrays = np.load(f"{directory}/user_{dtype}.inputs.npz")
        tensors = [tvm.runtime.tensor(arrays[f"arg{i}"], dev) for i in range(len(arrays.files))]
        runtime.ledger.reset()
        got = deploy.outputs_as_list(vm["main"](*tensors))[0].numpy()
        ledger = runtime.ledger.snapshot()
        want = deploy.outputs_as_list(reference["main"](*tensors))[0].numpy()
        found = array_difference(got, want, scaled=True)
        ok &= found.ok
        print(dtype, "max abs error", found.max_error, "ops", ledger["ops"], "bytes", ledger["bytes"],
              *([] if found.ok else ["MISMATCH:", found.reason]))
    print("RESULT: match" if ok else "RESULT: MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    command, directory = sys.argv[1:3]
    if command == "build":
        build(directory)
        sys.exit(0)
    sys.exit(run(directory))
