"""Time examples/decoder.py's model on a GPU: simaccel's build against TVM alone's and torch's.

    python3 scripts/decoder_gpu.py OUT_DIR [--repeat 30] [--profile]

On a machine with the full TVM (docs/gpu.md): the decoder at its GPU size (examples/decoder.py
`GPU`: 2 layers, hidden 512, 8 query heads of 64 over 2 key/value heads, vocabulary 1024), in
float16 and bfloat16, built for CUDA by simaccel (native regions) and by TVM alone (its
default GPU schedules), and written again in torch with the same weights (SDPA with
enable_gqa; examples/decoder.py `torch_twin`). Each case is a prefill of S tokens onto an empty cache, or a decode step of one
token onto a cache of M; each is checked (simaccel against torch and TVM alone, logits and
caches; TVM alone against torch too, so a step where simaccel matches torch and TVM alone
matches neither is "TVM numerically off", as `simaccel conformance` judges it; exit status 1
where a step fails) and then timed: wall time of one call and a device sync, medians of interleaved
rounds (tvm_integration/tools/model_bench.py `timed`). Writes OUT_DIR/decoder.json and prints
the table. --profile: each case's simaccel call is also traced once with torch.profiler, and
its kernels (count, summed GPU time, the longest) recorded beside the wall time.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from pathlib import Path

import numpy as np

from simaccel.tvm_integration.tools.common.verdicts import FAIL, PASS, TVM_OFF

CASES = [("prefill", 128, 0), ("prefill", 512, 0), ("decode", 1, 128), ("decode", 1, 129), ("decode", 1, 500),
         ("decode", 1, 1000)]  # (kind, S, M)


def traced_kernels(call, path: Path) -> dict:
    """One call of `call` under torch.profiler: its GPU kernels' count, summed time and longest."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from simaccel.tvm_integration.tools.model_bench import kernels_from_trace

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path) + ".json")
    kernels = sorted(kernels_from_trace(json.loads(Path(str(path) + ".json").read_text())), key=lambda k: -k[1])
    Path(str(path) + ".json").unlink()
    return {"count": len(kernels), "gpu_us": round(sum(t for _, t in kernels), 1),
            "longest": [(name[:60], round(t, 1)) for name, t in kernels[:3]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--profile", action="store_true", help="trace each case's simaccel call's kernels")
    parser.add_argument("--dtypes", default="float16,bfloat16")
    args = parser.parse_args()

    import torch
    import tvm
    from tvm import relax

    from simaccel.compare import array_difference
    from simaccel.tvm_integration import build, build_tvm_only
    from simaccel.tvm_integration.tools.model_bench import timed

    from simaccel.tvm_integration.tools import decoder as example
    config = example.GPU
    dev = tvm.cuda(0)
    rows, failed = [], 0
    for dtype in args.dtypes.split(","):
        mod = example.decoder(dtype, config)
        vms = {name: relax.VirtualMachine(b(mod, "nvidia/nvidia-h100"), dev)
               for name, b in (("simaccel", build), ("tvm", build_tvm_only))}
        rng = np.random.default_rng(0)
        weights = example.random_weights(dtype, rng, config)
        params = [tvm.runtime.tensor(a, dev) for a in weights]
        torch_step = example.torch_twin(weights, dtype, config, device="cuda")
        for kind, s, m in CASES:
            tokens = rng.integers(0, config.vocab, (1, s)).astype("int64")
            tables = example.rotary_tables(m, s, dtype, config)
            caches = [(rng.standard_normal((1, m, config.kv_heads, config.head_dim))).astype(dtype)
                      for _ in range(2 * config.layers)]
            tvm_args = [tvm.runtime.tensor(a, dev) for a in (tokens, *tables, *caches)] + params
            to_torch = lambda a: torch.from_numpy(np.asarray(a, np.float32)).to("cuda", getattr(torch, dtype))  # noqa: E731
            torch_args = (torch.from_numpy(tokens).cuda(), *map(to_torch, tables), [to_torch(c) for c in caches])
            outputs = {name: [o.numpy() for o in vm["main"](*tvm_args)] for name, vm in vms.items()}
            outputs["torch"] = [o.float().cpu().numpy() for o in torch_step(*torch_args)]
            checks = {}
            for peer in ("tvm", "torch"):
                found = [array_difference(np.asarray(g, np.float32), np.asarray(w, np.float32), dtype=dtype, scaled=True)
                         for g, w in zip(outputs["simaccel"], outputs[peer])]
                checks[peer] = {"ok": all(f.ok for f in found), "logits_error": float(found[0].scaled_error),
                                "reason": next((f.reason for f in found if not f.ok), "")}
            found = [array_difference(np.asarray(g, np.float32), np.asarray(w, np.float32), dtype=dtype, scaled=True)
                     for g, w in zip(outputs["tvm"], outputs["torch"])]
            tvm_vs_torch = all(f.ok for f in found)
            verdict = step_verdict(checks["tvm"]["ok"], checks["torch"]["ok"], tvm_vs_torch)
            failed += verdict == FAIL
            times = timed({"simaccel": lambda: vms["simaccel"]["main"](*tvm_args),
                           "tvm": lambda: vms["tvm"]["main"](*tvm_args),
                           "torch": lambda: torch_step(*torch_args)},
                          lambda: (dev.sync(), torch.cuda.synchronize()), args.repeat)
            row = {"dtype": dtype, "case": kind, "S": s, "M": m, "us": times, "vs_tvm": times["simaccel"] / times["tvm"],
                   "vs_torch": times["simaccel"] / times["torch"], "checks": checks, "tvm_matches_torch": tvm_vs_torch,
                   "verdict": verdict}
            if args.profile:
                row["kernels"] = traced_kernels(lambda: vms["simaccel"]["main"](*tvm_args), args.out / f"{dtype}-{kind}-{s}-{m}")
                print(f"  simaccel's kernels: {row['kernels']}")
            rows.append(row)
            print(f"{dtype:9s} {kind:8s} S={s:4d} M={m:5d} | simaccel {times['simaccel']:9.1f} us | TVM alone "
                  f"{times['tvm']:9.1f} us ({row['vs_tvm']:.2f}x) | torch {times['torch']:9.1f} us ({row['vs_torch']:.2f}x) | "
                  f"vs torch {'ok' if checks['torch']['ok'] else 'MISMATCH ' + checks['torch']['reason']}, "
                  f"vs TVM alone {'ok' if checks['tvm']['ok'] else 'MISMATCH ' + checks['tvm']['reason']} | {verdict}")
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
              "config": dataclasses.asdict(config), "rows": rows}
    (args.out / "decoder.json").write_text(json.dumps(result, indent=1, default=str))
    return 1 if failed else 0


def step_verdict(matches_tvm: bool, matches_torch: bool, tvm_matches_torch: bool) -> str:
    """A step's verdict, as `simaccel conformance` judges a model: passed where simaccel
    matches TVM alone and torch; TVM numerically off where simaccel matches torch and TVM alone
    matches neither (TVM alone sums bfloat16 in bfloat16); else failed."""
    if matches_tvm and matches_torch:
        return PASS
    if matches_torch and not tvm_matches_torch:
        return TVM_OFF
    return FAIL


if __name__ == "__main__":
    sys.exit(main())
