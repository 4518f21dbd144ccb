"""The float32 matmul tilings side by side on one GPU, on the GEMMs of models nobody tuned for.

Each problem is a GEMM as kernels/matmul.py's `launch_gemm` sees it (M x N x K, the form of
B), taken from the launch shapes of results/gpu/2026-12-01-h200-untuned/launch-shapes/: the
pointwise convolutions of small stages (M = output channels, N = pixels, K = input
channels), gpt_decoder's linear layers, classifier heads. Every tiling ("large", "small",
"sliced", and "gemv" where M <= 4) runs each problem on the cuda engine's KernelTarget; CUDA events
give the median
of warm launches, each result is checked against numpy's float64 product (simaccel.compare's
rule for whole outputs, float32's tolerance; the exit status is 1 if any differs), and torch
(cuBLAS, TF32 off) runs the same problem in the same process. Times are GPU kernel time from CUPTI (torch.profiler):
these kernels take less time than the Python launch around them, so wall-clock events would
time the launch. Writes gemm-tiling.json and gemm-tiling.md to OUT.

    python scripts/gemm_tiling_gpu.py OUT [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

# (label, M, N, K, transpose_b)
PROBLEMS = [
    ("pointwise 7x7 320->1280 (mobilenet_v2)", 1280, 49, 320, False),
    ("pointwise 7x7 960->160 (mobilenet_v2)", 160, 49, 960, False),
    ("pointwise 7x7 160->960 (mobilenet_v2)", 960, 49, 160, False),
    ("pointwise 14x14 576->96 (mobilenet_v2)", 96, 196, 576, False),
    ("pointwise 14x14 96->576 (mobilenet_v2)", 576, 196, 96, False),
    ("pointwise 28x28 192->32 (mobilenet_v2)", 32, 784, 192, False),
    ("pointwise 7x7 576->96 (mobilenet_v3_small)", 96, 49, 576, False),
    ("dense 256x768x3072 (gpt mlp down)", 256, 768, 3072, True),
    ("dense 256x768x768 (gpt attention out)", 256, 768, 768, True),
    ("dense 256x2304x768 (gpt qkv)", 256, 2304, 768, True),
    ("dense 1x1000x1280 (classifier)", 1, 1000, 1280, True),
    ("matmul 1x1000x1280 (classifier, B as K x N)", 1, 1000, 1280, False),
    ("dense 1x1000x1283 (unaligned K)", 1, 1000, 1283, True),
    ("matmul 3x1000x1283 (unaligned K, B as K x N)", 3, 1000, 1283, False),
    ("dense 4x4096x4096 (batch-4 linear)", 4, 4096, 4096, True),
    ("dense 1x3072x768 (gpt mlp up, one token)", 1, 3072, 768, True),
    ("matmul 1024^3", 1024, 1024, 1024, False),
]
TILINGS = ("large", "small", "sliced", "gemv")


def tilings(M: int) -> tuple:
    """The tilings that take an M-row problem (the GEMV takes at most 4 rows)."""
    from simaccel.kernels import matmul

    return TILINGS if M <= matmul.GEMV[0] else TILINGS[:-1]


def _kernel_us(fn, sync, repeat: int, trace: Path) -> float:
    """GPU kernel µs per call of `fn` (CUPTI through torch.profiler: the kernels' own time, not
    the Python launch around them, which is longer than these kernels), after 3 warm calls."""
    from simaccel.tvm_integration.tools import model_bench

    for _ in range(3):
        fn()
    sync()
    return model_bench.kernel_profile(fn, sync, repeat, trace)["kernel_us_per_call"]


def _torch_us(a, b, transpose_b: bool, repeat: int, trace: Path):
    try:
        import torch
    except ImportError:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    run = (lambda: ta @ tb.T) if transpose_b else (lambda: ta @ tb)
    return _kernel_us(run, torch.cuda.synchronize, repeat, trace)


def measure(repeat: int, traces: Path) -> list[dict]:
    from numba import cuda

    from simaccel.compare import mismatch
    from simaccel.kernels import KernelTarget, matmul

    target = KernelTarget("cuda", 0)
    rng = np.random.default_rng(0)
    rows = []
    for label, M, N, K, transpose_b in PROBLEMS:
        a = rng.standard_normal((M, K)).astype(np.float32)
        b = rng.standard_normal((N, K) if transpose_b else (K, N)).astype(np.float32)
        want = a.astype(np.float64) @ (b.T if transpose_b else b).astype(np.float64)
        da, db, dout = cuda.to_device(a), cuda.to_device(b), cuda.device_array((M, N), np.float32)
        row = {"problem": label, "M": M, "N": N, "K": K, "transpose_b": transpose_b,
               "chosen": matmul.tiling(M, N, K, 1), "us": {}, "max_rel_error": {}, "mismatch": {}}
        for tiling in tilings(M):
            def run(tiling=tiling):
                matmul.launch_matmul(target, dout, da, db, transpose_b=transpose_b, activation="none",
                                     tiling_override=tiling)

            row["us"][tiling] = _kernel_us(run, cuda.synchronize, repeat, traces / f"{len(rows)}-{tiling}.json")
            got = dout.copy_to_host()
            row["max_rel_error"][tiling] = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
            row["mismatch"][tiling] = mismatch(got, want.astype(np.float32), scaled=True)
        row["us"]["torch"] = _torch_us(a, b, transpose_b, repeat, traces / f"{len(rows)}-torch.json")
        rows.append(row)
        print(label, {k: round(v, 1) if v else v for k, v in row["us"].items()}, "chosen:", row["chosen"],
              flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args(argv)
    from numba import cuda

    args.out.mkdir(parents=True, exist_ok=True)
    device = cuda.get_current_device()
    rows = measure(args.repeat, args.out / "traces")
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "device": device.name.decode() if isinstance(device.name, bytes) else str(device.name),
              "sms": device.MULTIPROCESSOR_COUNT, "repeat": args.repeat, "problems": rows}
    (args.out / "gemm-tiling.json").write_text(json.dumps(report, indent=1))
    lines = [f"# float32 tilings, {report['device']}, {report['date']}", "",
             f"GPU kernel µs per call over {args.repeat} warm calls (CUPTI); torch = cuBLAS, TF32 off.", "",
             "| problem | M x N x K | large | small | sliced | gemv | torch | chosen | chosen / best tiling |",
             "|---|---|---|---|---|---|---|---|---|"]
    worst, mismatched = 0.0, []
    for r in rows:
        us = r["us"]
        best = min(us[t] for t in tilings(r["M"]))
        ratio = us[r["chosen"]] / best
        worst = max(worst, max(r["max_rel_error"].values()))
        mismatched += [f"{r['problem']}, {t}: {why}" for t, why in r["mismatch"].items() if why is not None]
        torch_us = f"{us['torch']:.1f}" if us["torch"] else "-"
        gemv_us = f"{us['gemv']:.1f}" if "gemv" in us else "-"
        lines.append(f"| {r['problem']} | {r['M']}x{r['N']}x{r['K']} | {us['large']:.1f} | {us['small']:.1f} | "
                     f"{us['sliced']:.1f} | {gemv_us} | {torch_us} | {r['chosen']} | {ratio:.2f} |")
    lines += ["", f"Largest relative error against numpy (float64), any tiling: {worst:.1e}"]
    lines += [f"MISMATCH {line}" for line in mismatched]
    (args.out / "gemm-tiling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
