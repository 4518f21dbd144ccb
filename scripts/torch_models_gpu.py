"""PyTorch models through torch.export on the GPU: simaccel (native and Python regions) vs TVM alone.

A benchmark script for a GPU machine with the full TVM and torch: each model of
simaccel.tvm_integration.tools.torch_models (random weights, full size) is exported with
torch.export, imported with TVM's `from_exported_program`, built with simaccel for the GPU
(native regions) and with TVM alone, checked against TVM alone (and torch), then timed: one
call of each mode in turn, each followed by a device synchronisation, medians after warm-up.
Writes torch-models.json to OUT.

    python scripts/torch_models_gpu.py OUT [--repeat N] [--models a,b]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from simaccel.tvm_integration.tools import torch_models
from simaccel.tvm_integration.tools.model_bench import timed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--models", default=",".join(torch_models.MODEL_NAMES))
    args = parser.parse_args(argv)
    import torch
    import tvm
    from tvm import relax

    import simaccel
    from simaccel.tvm_integration import build, build_tvm_only, default_target, partition_report
    from simaccel.tvm_integration.tools.deploy import outputs_as_list

    runtime = simaccel.get_runtime()
    target, dev = default_target("cuda"), tvm.cuda(0)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": torch.cuda.get_device_name(0),
              "method": f"median of {args.repeat} interleaved calls after warm-up, each followed by a device sync",
              "models": {}}
    for name in args.models.split(","):
        start = time.perf_counter()
        model = torch_models.load(name, "full")
        module, shape = model.module, model.input_shape
        x = torch.randn(*shape)
        want_torch = model.run(x.numpy())
        mod = model.to_relax()
        _, partition = partition_report(mod)
        ours = relax.VirtualMachine(build(mod, target), dev)
        theirs = relax.VirtualMachine(build_tvm_only(mod, target), dev)
        built = time.perf_counter() - start
        data = tvm.runtime.tensor(x.numpy(), dev)

        def first(result):
            return outputs_as_list(result)[0].numpy()

        want = first(theirs["main"](data))
        got = first(ours["main"](data))
        with runtime.use_engine("cuda"):
            python = first(ours["main"](data))
        model_gpu = module.cuda()
        x_gpu = x.cuda()

        def torch_call():
            with torch.no_grad():
                model_gpu(x_gpu)

        def python_call():
            with runtime.use_engine("cuda"):
                ours["main"](data)

        medians = timed({"tvm_only": lambda: theirs["main"](data), "simaccel_native": lambda: ours["main"](data),
                         "simaccel_python": python_call, "torch": torch_call},
                        lambda: (dev.sync(), torch.cuda.synchronize()), args.repeat)
        entry = {
            "input": list(shape),
            "regions": len(partition.regions),
            "kept_on_tvm": len(partition.kept),
            "rewritten": partition.rewritten,
            "build_s": built,
            "max_abs_error_vs_tvm_only": float(np.max(np.abs(got.astype(np.float64) - want))),
            "max_abs_error_tvm_only_vs_torch": float(np.max(np.abs(want - want_torch))),
            "native_equals_python": bool(np.array_equal(got, python)),
            "median_us": medians,
            "ratio_vs_tvm_only": {k: v / medians["tvm_only"] for k, v in medians.items()},
        }
        report["models"][name] = entry
        print(name, json.dumps(entry), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "torch-models.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
