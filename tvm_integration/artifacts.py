"""Prebuilt GPU libraries: build here (full TVM), run there (runtime-only TVM is enough).

`python -m simaccel.tvm_integration.artifacts DIR` compiles every case below for a CUDA
target twice, with simaccel and with TVM alone, exports both libraries into DIR and writes
DIR/manifest.json (parameter specs, regions, seeds). The GPU tests (`tests/test_gpu.py`)
and `simaccel bench` load these, generate the same seeded inputs (simaccel.data) and compare
the two builds on the GPU. A GPU machine with the full TVM can skip this step: the tests
then build in-process.

For the runtime-only check of `simaccel run`, the demo case also gets its inputs and the
output of the TVM-only CPU build as .npz files.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def _models():
    from . import models  # needs tvm.relax (full TVM); loading artifacts does not

    return models


CASES = {
    "demo_f32": lambda: _models().demo_cnn("float32", batch=8),
    "demo_f16": lambda: _models().demo_cnn("float16", batch=8),
    "hetero_f32": lambda: _models().hetero_chain("float32"),
    "hetero_f16": lambda: _models().hetero_chain("float16"),
    "upstream_f32": lambda: _models().long_upstream("float32"),
    "mm8": lambda: _models().matmul_relu(8),
    "mm1024": lambda: _models().matmul_relu(1024),
    "mm4096": lambda: _models().matmul_relu(4096),
}
CROSS_CHECK = "demo_f32"  # also checked against the CPU build, through `simaccel run`
MANIFEST = "manifest.json"


def build_artifacts(out_dir, target=None, cases=None, log=print) -> Path:
    """Build and export every case (or those named in `cases`) into `out_dir`."""
    from .partition import partition_report
    from .pipeline import build, build_tvm_only, default_target

    models = _models()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = target or default_target("cuda")
    manifest = {"target": str(target), "built": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cases": {}}
    for name in cases or CASES:
        start = time.perf_counter()
        mod = CASES[name]()
        _, report = partition_report(mod)
        build(mod, target).export_library(str(out / f"{name}.simaccel.so"))
        build_tvm_only(mod, target).export_library(str(out / f"{name}.tvm.so"))
        manifest["cases"][name] = {
            "params": [[n, list(s), d] for n, s, d in models.param_specs(mod)],
            "regions": report.regions,
            "kept": [list(k) for k in report.kept],
            "seed": 0,
        }
        if name == CROSS_CHECK:
            _write_cpu_check(out, name, mod)
        log(f"built {name} in {time.perf_counter() - start:.1f} s")
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return out


def _write_cpu_check(out: Path, name: str, mod) -> None:
    import tvm
    from tvm import relax

    from .pipeline import build_tvm_only

    inputs = _models().random_inputs(mod, 0)
    vm = relax.VirtualMachine(build_tvm_only(mod), tvm.cpu())
    want = vm["main"](*[tvm.runtime.tensor(a) for a in inputs]).numpy()
    np.savez(out / f"{name}.inputs.npz", **{f"arg{i}": a for i, a in enumerate(inputs)})
    np.savez(out / f"{name}.expect_cpu.npz", arg0=want)


def load_manifest(directory) -> dict:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        from ..errors import SimAccelError

        raise SimAccelError(
            f"no {MANIFEST} in {directory}: build the GPU libraries first with "
            f"`python -m simaccel.tvm_integration.artifacts {directory}` (needs the full TVM)"
        )
    return json.loads(path.read_text())


def case_inputs(manifest: dict, name: str, seed: int | None = None) -> list[np.ndarray]:
    from ..data import random_arrays

    case = manifest["cases"][name]
    return random_arrays(case["params"], case["seed"] if seed is None else seed)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--cases", nargs="*", choices=sorted(CASES), help="default: all")
    args = parser.parse_args(argv)
    build_artifacts(args.out_dir, cases=args.cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
