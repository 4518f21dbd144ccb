"""Prebuilt GPU libraries: build here (full TVM), run there (runtime-only TVM is enough).

`python -m simaccel.tvm_integration.tools.artifacts DIR` compiles every case below for a CUDA
target twice, with simaccel and with TVM alone, exports both libraries into DIR and writes
DIR/manifest.json (parameter specs, regions, seeds). The GPU tests (`tests/test_gpu_libraries.py`)
and `simaccel bench` load these, generate the same seeded inputs (simaccel.data) and compare
the two builds on the GPU. A GPU machine with the full TVM can skip this step: the tests
then build in-process.

For the runtime-only check of `simaccel run`, the demo case also gets its inputs and the
output of the TVM-only CPU build as .npz files. `load_manifest` and `require_cases` refuse
a folder whose manifest is missing, not JSON or incomplete, or whose libraries are missing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from ...errors import SimAccelError
from ...json_file import read_json
from ...kernels.dtypes import is_float


def _models():
    from . import models  # needs tvm.relax (full TVM); loading artifacts does not

    return models


CASES = {
    "demo_f32": lambda: _models().demo_cnn("float32", batch=8),
    "demo_f16": lambda: _models().demo_cnn("float16", batch=8),
    "hetero_f32": lambda: _models().hetero_chain("float32"),
    "hetero_f16": lambda: _models().hetero_chain("float16"),
    "hetero_bf16": lambda: _models().hetero_chain("bfloat16"),
    "mm1024_bf16": lambda: _models().matmul_relu(1024, "bfloat16"),
    "conv28_bf16": lambda: _models().conv_bias_relu(8, 128, 28, dtype="bfloat16"),
    "upstream_f32": lambda: _models().long_upstream("float32"),
    "mm8": lambda: _models().matmul_relu(8),
    "mm1024": lambda: _models().matmul_relu(1024),
    "mm4096": lambda: _models().matmul_relu(4096),
    "conv56": lambda: _models().conv_bias_relu(8, 64, 56),
    "conv28": lambda: _models().conv_bias_relu(8, 128, 28),
    "conv14": lambda: _models().conv_bias_relu(8, 256, 14),
    "dwconv112": lambda: _models().conv_bias_relu(8, 32, 112, groups=32),
    "graph_f32": lambda: _weights_static(_models().long_upstream("float32", size=128)),
}
# Built with TVM's CUDA graphs on (relax.backend.use_cuda_graph): the simaccel regions are
# captured into the graph with TVM's own kernels and replayed without the host.
CUDA_GRAPH_CASES = {"graph_f32"}
CROSS_CHECK = "demo_f32"  # also checked against the CPU build, through `simaccel run`
MANIFEST = "manifest.json"


def build_artifacts(out_dir, target=None, cases=None, log=print) -> Path:
    """Build and export every case (or those named in `cases`) into `out_dir`."""
    from ..backend.partition import partition_report
    from ..backend.pipeline import build, build_tvm_only, default_target

    models = _models()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = target or default_target("cuda")
    manifest = {"target": str(target), "built": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cases": {}}
    for name in cases or CASES:
        start = time.perf_counter()
        mod = CASES[name]()
        _, report = partition_report(mod)
        with _pass_context(name):
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


def _weights_static(mod):
    """Parameters after the first are weights (`num_input` = 1): TVM captures only what reads
    weights and memory it allocated itself, so the region can be part of a CUDA graph."""
    mod["main"] = mod["main"].with_attr("num_input", 1)
    return mod


def _pass_context(name: str):
    import tvm

    return tvm.transform.PassContext(config={"relax.backend.use_cuda_graph": name in CUDA_GRAPH_CASES})


def _write_cpu_check(out: Path, name: str, mod) -> None:
    import tvm
    from tvm import relax

    from ..backend.pipeline import build_tvm_only

    inputs = _models().random_inputs(mod, 0)
    vm = relax.VirtualMachine(build_tvm_only(mod), tvm.cpu())
    want = vm["main"](*[tvm.runtime.tensor(a) for a in inputs]).numpy()
    np.savez(out / f"{name}.inputs.npz", **{f"arg{i}": a for i, a in enumerate(inputs)})
    np.savez(out / f"{name}.expect_cpu.npz", arg0=want)


CASE_KEYS = ("params", "regions", "seed")  # what the tests and the bench read from each case


def load_manifest(directory) -> dict:
    """DIR/manifest.json, checked: a "cases" object whose cases have params, regions and a seed."""
    path = Path(directory) / MANIFEST
    if not Path(directory).is_dir():
        raise SimAccelError(f"artifacts folder {directory}: no such folder; {_build_hint(directory)}")
    if not path.is_file():
        raise SimAccelError(f"no {MANIFEST} in {directory}: {_build_hint(directory)}")
    manifest = read_json(path, str(path), _build_hint(directory))
    problem = _manifest_problem(manifest)
    if problem:
        raise SimAccelError(f"{path}: {problem}; {_build_hint(directory)}")
    return manifest


def _manifest_problem(manifest) -> str | None:
    cases = manifest.get("cases") if isinstance(manifest, dict) else None
    if not isinstance(cases, dict):
        return 'no "cases" object'
    for name, case in cases.items():
        missing = [key for key in CASE_KEYS if not isinstance(case, dict) or key not in case]
        if missing:
            return f"case {name!r} lacks {', '.join(missing)}"
        if not isinstance(case["params"], list) or not all(map(_spec_ok, case["params"])):
            return f"case {name!r}: params must be a list of [name, shape, dtype]"
        if not _is_count(case["seed"]):
            return f"case {name!r}: seed must be an integer >= 0"
    return None


def _spec_ok(spec) -> bool:
    """[name, shape, dtype]: a string, a list of sizes, a numeric numpy dtype name."""
    if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str) and isinstance(spec[2], str)):
        return False
    try:
        numeric = np.dtype(spec[2]).kind in "biu" or is_float(spec[2])
    except TypeError:
        return False
    return numeric and isinstance(spec[1], list) and all(map(_is_count, spec[1]))


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def require_cases(directory, manifest: dict, names) -> None:
    """Refuse, before anything runs, cases that the manifest lacks or whose libraries are missing."""
    absent = [name for name in names if name not in manifest["cases"]]
    if absent:
        raise SimAccelError(f"{Path(directory) / MANIFEST} has no case {', '.join(absent)}; {_build_hint(directory)}")
    files = [f"{name}.{build}.so" for name in names for build in ("simaccel", "tvm")]
    missing = [f for f in files if not (Path(directory) / f).is_file()]
    if missing:
        raise SimAccelError(f"artifacts folder {directory} lacks {', '.join(missing)}; {_build_hint(directory)}")


def _build_hint(directory) -> str:
    return f"build the GPU libraries with `python -m simaccel.tvm_integration.tools.artifacts {directory}` (needs the full TVM)"


def case_inputs(manifest: dict, name: str, seed: int | None = None) -> list[np.ndarray]:
    from ...data import random_arrays

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
