"""Time the float32 matmul's 64 x 64 and sliced-K tilings on small-K GEMMs, beside torch.

    python scripts/gemm_small_k_gpu.py

The GEMMs of a batch-1 network's pointwise convolutions (M output channels, K input channels,
N pixels: 1 to 49 tiles of 64 x 64), through `launch_matmul` with the tiling forced, each
checked against torch's result (TF32 off) and timed with scripts/cuda_events.py (median of 30
samples of 10 launches queued behind a spin kernel). Prints a line per GEMM; the run of
2026-12-04 is results/gpu/2026-12-04-h200-vector-conv/ops-first/gemm_small_k.log, behind
kernels/matmul.py's MIN_SLICED_K.
"""
import sys
from pathlib import Path

import torch
from numba import cuda

sys.path.insert(0, str(Path(__file__).parent))  # python -P adds no script folder
from cuda_events import events_us  # noqa: E402

from simaccel.kernels import KernelTarget  # noqa: E402
from simaccel.kernels.matmul import launch_matmul  # noqa: E402

SHAPES = [(24, 24, 3136), (48, 48, 784), (96, 96, 196), (192, 192, 49), (58, 58, 784), (116, 116, 196),
          (232, 232, 49), (16, 32, 12544), (64, 16, 3136)]  # (M, K, N)


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    target = KernelTarget("cuda", cuda.external_stream(torch.cuda.current_stream().cuda_stream))
    array = cuda.as_cuda_array
    for M, K, N in SHAPES:
        w, x, out = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda"), torch.empty(M, N, device="cuda")
        want = w @ x
        row = f"M{M} K{K} N{N}: torch {events_us(lambda: torch.matmul(w, x, out=out), reps=30, spin=10_000_000):6.1f}"
        for tiling in ("small", "sliced"):
            def fn():
                launch_matmul(target, array(out), array(w), array(x), transpose_b=False, activation="none",
                              tiling_override=tiling)

            fn()
            torch.cuda.synchronize()
            error = float((out - want).abs().max())
            row += f"  {tiling} {events_us(fn, reps=30, spin=10_000_000):6.1f} (err {error:.0e})"
        print(row, flush=True)


if __name__ == "__main__":
    sys.exit(main())
