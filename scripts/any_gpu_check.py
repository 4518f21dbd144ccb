"""Libraries built for other GPUs, run on this one: each must match TVM alone built the same way.

    python scripts/any_gpu_check.py build DIR        # here, full TVM, no GPU needed
    python3 -P scripts/any_gpu_check.py run DIR OUT  # the GPU machine (a runtime-only TVM is enough)

`build` exports each model for three builds, each with simaccel (native regions) and with TVM
alone for the same target (where TVM alone crashes building a case for a target, as it does
in `s_tir::Tensorize` for a float16 matmul for `nvidia/nvidia-a100`, the fat build's TVM-alone
library, for the H100 target, is that case's reference, and the manifest says so):
- `sm80`: `nvidia/nvidia-a100`, native regions with the sm_80 cubin and PTX only;
- `sm75`: `nvidia/geforce-rtx-2080-ti`, sm_75 (no tensor cores' mma, no cp.async: the float16
  matmul takes its float32-FMA path);
- `fat`: `nvidia/nvidia-h100` with `cuda_archs=["sm_75", "sm_80", "sm_90"]`.
On an sm_90 GPU the first two run through their PTX (JIT-compiled by the driver), the fat one
takes its sm_90 cubins. `run` runs every library on cuda:0 with seeded inputs, each in its own
process with $SIMACCEL_NATIVE_LOG=1 (so the library says which images it loaded), compares
simaccel's outputs with TVM alone's (simaccel.compare's rule for whole outputs, each output's
dtype's tolerance), and writes OUT/any-gpu.json with the date, the device, the
driver, each case's error and load line. It exits 1 when any case does not match.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

BUILDS = {"fat": ("nvidia/nvidia-h100", ["sm_75", "sm_80", "sm_90"]), "sm80": ("nvidia/nvidia-a100", None),
          "sm75": ("nvidia/geforce-rtx-2080-ti", None)}


def cases():
    from simaccel.tvm_integration.tools import models

    return {
        "demo_f32": lambda: models.demo_cnn("float32", batch=8),
        "demo_f16": lambda: models.demo_cnn("float16", batch=8),
        "hetero_f32": lambda: models.hetero_chain("float32"),
        "hetero_f16": lambda: models.hetero_chain("float16"),
        "mm1024_f32": lambda: models.matmul_relu(1024),  # the 128x128 float32 main loop
        "mm512_f16": lambda: models.matmul_relu(512, "float16"),  # tensor cores, or the FMA path on sm_75
        "conv28_f32": lambda: models.conv_bias_relu(8, 128, 28),  # the implicit GEMM
    }


def build(directory: str) -> None:
    from simaccel.tvm_integration import build as build_simaccel
    from simaccel.tvm_integration import build_tvm_only
    from simaccel.tvm_integration.tools.models import random_inputs

    os.makedirs(directory, exist_ok=True)
    manifest = {"built": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "builds": {}, "cases": [], "references": {}}
    for name, make in cases().items():
        mod = make()
        np.savez(f"{directory}/{name}.inputs.npz", **{f"arg{i}": a for i, a in enumerate(random_inputs(mod, 0))})
        manifest["cases"].append(name)
        for label, (target, archs) in BUILDS.items():
            start = time.perf_counter()
            build_simaccel(mod, target, cuda_archs=archs).export_library(f"{directory}/{label}-{name}.simaccel.so")
            # TVM alone in a process of its own: it may crash (a segfault is TVM's, not simaccel's).
            done = subprocess.run([sys.executable, __file__, "tvm-only", directory, label, name], capture_output=True,
                                  text=True)
            if done.returncode != 0:
                manifest["references"][f"{label}-{name}"] = f"fat-{name}"
                print(f"  TVM alone cannot build {name} for {target} (exit {done.returncode}): reference fat-{name}")
            manifest["builds"][label] = {"target": target, "cuda_archs": archs}
            print(f"built {label} {name} in {time.perf_counter() - start:.1f} s", flush=True)
    with open(f"{directory}/manifest.json", "w") as f:
        json.dump(manifest, f, indent=1)


def build_tvm_alone(directory: str, label: str, name: str) -> None:
    from simaccel.tvm_integration import build_tvm_only

    build_tvm_only(cases()[name](), BUILDS[label][0]).export_library(f"{directory}/{label}-{name}.tvm.so")


def run_one(directory: str, label: str, name: str, reference: str) -> None:
    """In a process of its own: both libraries of one case on cuda:0; prints one JSON line."""
    from simaccel.compare import array_difference
    from simaccel.tvm_integration.tools.common.arrays import read_arrays
    from simaccel.tvm_integration.tools.deploy import run_library

    inputs = read_arrays(f"{directory}/{name}.inputs.npz")
    got = run_library(f"{directory}/{label}-{name}.simaccel.so", inputs, "cuda")
    want = run_library(f"{directory}/{reference}.tvm.so", inputs, "cuda")
    errors = []
    for g, w in zip(got, want):
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        scale = float(np.max(np.abs(w64))) if w64.size else 0.0
        found = array_difference(g, w, scaled=True)
        errors.append({"shape": list(w.shape), "dtype": str(w.dtype), "max_abs_error": float(np.max(np.abs(g64 - w64))),
                       "scale": scale, "finite": bool(np.isfinite(g64).all() == np.isfinite(w64).all()),
                       "mismatch": None if found.ok else found.reason})
    print(json.dumps({"outputs": errors, "count": [len(got), len(want)]}))


def run(directory: str, out: str) -> int:
    from simaccel.tvm_integration.tools.deploy import gpu_name, prepare_cuda

    prepare_cuda()
    os.makedirs(out, exist_ok=True)
    with open(f"{directory}/manifest.json") as f:
        manifest = json.load(f)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                            text=True).stdout.strip()
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": gpu_name(), "driver": driver,
              "built": manifest["built"], "builds": manifest["builds"], "results": []}
    failed = 0
    for label in manifest["builds"]:
        for name in manifest["cases"]:
            env = dict(os.environ, SIMACCEL_NATIVE_LOG="1")
            reference = manifest["references"].get(f"{label}-{name}", f"{label}-{name}")
            done = subprocess.run([sys.executable, "-P", __file__, "one", directory, label, name, reference],
                                  capture_output=True, text=True, env=env)
            loads = [line for line in done.stderr.splitlines() if line.startswith("simaccel: region")]
            result = {"build": label, "case": name, "reference": reference, "loads": loads}
            try:
                result.update(json.loads(done.stdout.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                result["error"] = done.stderr[-3000:]
            ok = ("outputs" in result and result["count"][0] == result["count"][1]
                  and all(o["mismatch"] is None for o in result["outputs"]))
            result["match"] = bool(ok)
            failed += not ok
            report["results"].append(result)
            print(f"{label:5s} {name:12s} {'match' if ok else 'MISMATCH'} "
                  f"{[round(o['max_abs_error'], 7) for o in result.get('outputs', [])]} {loads[:1]}", flush=True)
    report["summary"] = {"cases": len(report["results"]), "failed": failed}
    with open(f"{out}/any-gpu.json", "w") as f:
        json.dump(report, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "build" and len(sys.argv) == 3:
        build(sys.argv[2])
    elif command == "run" and len(sys.argv) == 4:
        sys.exit(run(sys.argv[2], sys.argv[3]))
    elif command == "one" and len(sys.argv) == 6:
        run_one(*sys.argv[2:])
    elif command == "tvm-only" and len(sys.argv) == 5:
        build_tvm_alone(*sys.argv[2:])
    else:
        sys.exit(__doc__)
