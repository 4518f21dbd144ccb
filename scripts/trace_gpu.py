"""Timeline traces on a GPU: the demo model (as `simaccel demo --device cuda`) and resnet18 from torch.export.

For a GPU machine with the full TVM (and torch for resnet18). Each model is built with simaccel
for the GPU (native regions where the aot extra is present) and with TVM alone, run once
untraced (plans, cubins, TVM's kernels loaded and warm), then once traced: the simaccel build's
VM with TVM's instrument (tools/trace_tvm.py), every region call, the ledger's counters. The
traced output is checked against TVM alone (simaccel.compare's rule for whole outputs). With `--python` the regions also run once more,
traced, on the Python cuda engine (ops timed by CUDA events on the stream). Writes to OUT, per
model: NAME.trace.json and NAME.summary.txt (`simaccel trace --summary`); make the PNGs on any
machine afterwards with `simaccel trace --png NAME.png NAME.trace.json`.

    python scripts/trace_gpu.py OUT [--models demo,resnet18] [--python] [--device cpu (a smoke test)]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def trace_model(name: str, mod, inputs, out: Path, python: bool, torch_run=None, device: str = "cuda") -> str:
    import tvm
    from tvm import relax

    import simaccel
    from simaccel.compare import array_difference
    from simaccel.debug.timeline_summary import format_summary, summarize
    from simaccel.tvm_integration import build, build_tvm_only, default_target
    from simaccel.tvm_integration.tools.deploy import outputs_as_list
    from simaccel.tvm_integration.tools.trace_tvm import instrument_vm

    target, dev = default_target(device), tvm.device(device, 0)
    runtime = simaccel.get_runtime()
    ours, theirs = build(mod, target), build_tvm_only(mod, target)
    tensors = [tvm.runtime.tensor(a, dev) for a in inputs]
    want = outputs_as_list(relax.VirtualMachine(theirs, dev)["main"](*tensors))[0].numpy()
    vm = instrument_vm(relax.VirtualMachine(ours, dev), dev)
    vm["main"](*tensors)  # warm: nothing traced (no trace is on)
    dev.sync()
    lines = []
    modes = [("native" if device == "cuda" else "ref", None)] + ([("python-cuda", "cuda")] if python else [])
    for mode, engine in modes:
        path = out / f"{name}{'' if engine is None else '-' + mode}.trace.json"
        if engine is not None:
            with runtime.use_engine(engine):
                vm["main"](*tensors)  # warm the Python engine's plans and numba's kernels
                dev.sync()
        with runtime.use_engine(engine) if engine else _nothing(), simaccel.trace(path):
            got = outputs_as_list(vm["main"](*tensors))[0].numpy()
            dev.sync()
        found = array_difference(got, want, scaled=True)  # simaccel.compare's rule for whole outputs
        summary = format_summary(summarize(_load(path)))
        header = (f"{name} ({mode}): max abs error vs TVM alone {found.max_error:.3g} "
                  f"({'match' if found.ok else 'MISMATCH: ' + found.reason})")
        if torch_run is not None:
            header += f"; vs torch {float(np.max(np.abs(got - torch_run))):.3g}"
        text = header + "\n" + summary + "\n"
        (out / path.name.replace(".trace.json", ".summary.txt")).write_text(text)
        lines.append(text)
    return "\n".join(lines)


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def _load(path):
    from simaccel.debug.timeline_summary import load

    return load(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--models", default="demo,resnet18")
    parser.add_argument("--python", action="store_true", help="also trace the regions on the Python cuda engine")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a smoke test of the script")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from simaccel.tvm_integration.tools import models

    for name in args.models.split(","):
        if name == "demo":
            mod = models.demo_cnn("float32")
            text = trace_model("demo", mod, models.random_inputs(mod, 0), out, args.python, device=args.device)
        else:
            from simaccel.tvm_integration.tools import torch_models

            model = torch_models.load(name, "full")
            mod = model.to_relax()
            x = models.random_inputs(mod, 0)[0]
            text = trace_model(name, mod, [x], out, args.python, torch_run=model.run(x), device=args.device)
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
