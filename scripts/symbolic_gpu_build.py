"""Build, on this machine, the libraries scripts/symbolic_gpu_run.py runs on a GPU machine
with a runtime-only TVM: each dynamic model (simaccel.tvm_integration.tools.dynamic_models at
its "bench" size) built once by simaccel (native symbolic regions, checked: no region is a
Python one) and by TVM alone (its dynamic-shape build), and a one-op model built static and
symbolic for the per-call cost of binding sizes. Writes OUT/<model>.simaccel.so,
OUT/<model>.tvm.so and OUT/manifest.json.

Usage: python scripts/symbolic_gpu_build.py OUT
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import tvm
from tvm.script import relax as R, tirx as T

from simaccel.tvm_integration.backend.pipeline import build, build_tvm_only, default_target
from simaccel.tvm_integration.tools import dynamic_models


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
    """The build's messages that a region is a Python region, not a native one."""

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
        executable = build(mod, target)
    finally:
        logger.removeHandler(handler)
    if handler.messages:
        raise SystemExit("a region is not native: " + "; ".join(handler.messages))
    return executable


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    target = default_target("cuda")  # no GPU here: nvidia/nvidia-h100, host llvm
    manifest = {"commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
                "target": str(target), "models": {}}
    for name in dynamic_models.NAMES:
        model = dynamic_models.load(name, "bench")
        mod = model.to_relax()
        build_ours(mod, target).export_library(str(out / f"{name}.simaccel.so"))
        build_tvm_only(mod, target).export_library(str(out / f"{name}.tvm.so"))
        manifest["models"][name] = {"sizes": [list(s) for s in model.sizes], "doc": model.doc}
        print(f"{name}: built, sizes {model.sizes}", flush=True)
    for kind in ("static", "symbolic"):
        build_ours(tiny(kind == "static"), target).export_library(str(out / f"tiny_{kind}.simaccel.so"))
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
