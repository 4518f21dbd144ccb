"""Time conv2d's implicit-GEMM tilings on a GPU, beside torch (cuDNN, TF32 off).

    python scripts/conv_tiling_gpu.py OUT_DIR

3x3 convolutions (stride 1, padding 1, C -> C channels: ResNet stages) at batch 8 and 1,
through simaccel.conv2d's own launcher three ways: the tiling it chooses
(kernels/conv2d.py `tiling`), 64 x 64 tiles forced and sliced 32 x 32 tiles forced (by
setting MIN_SMALL_TILES). Each is checked against torch's result, then timed with CUDA events
(scripts/cuda_events.py: median of 30 samples of 10 launches queued behind a spin kernel). Writes
OUT_DIR/conv_tiling.json and prints a table.
"""
import json
import sys
from pathlib import Path

import torch
from numba import cuda

from simaccel.kernels import KernelTarget
from simaccel.kernels import conv2d as cv
from simaccel.ops import get_op

sys.path.insert(0, str(Path(__file__).parent))  # python -P adds no script folder
from cuda_events import events_us  # noqa: E402

SHAPES = [(8, 64, 56), (8, 128, 28), (8, 256, 14), (1, 64, 56), (1, 128, 28), (1, 256, 14), (1, 512, 7)]
FORCED = {"chosen": cv.MIN_SMALL_TILES, "64x64": 0, "sliced": 1 << 40}


def timed(fn):
    return events_us(fn, reps=30, spin=10_000_000)


def main(out_dir):
    torch.backends.cudnn.allow_tf32 = False
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = KernelTarget("cuda", cuda.external_stream(torch.cuda.current_stream().cuda_stream))
    op = get_op("simaccel.conv2d")
    attrs = op.all_attrs({"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1})
    results = []
    for n, c, h in SHAPES:
        torch.manual_seed(0)
        x = torch.randn(n, c, h, h, device="cuda")
        w = torch.randn(c, c, 3, 3, device="cuda") * 0.05
        want = torch.nn.functional.conv2d(x, w, padding=1)
        out = torch.empty_like(want)
        row = {"batch": n, "channels": c, "size": h, "torch_us": timed(lambda: torch.nn.functional.conv2d(x, w, padding=1)),
               "chosen": cv.tiling(c, h * h, c * 9, n)}
        for label, min_tiles in FORCED.items():
            cv.MIN_SMALL_TILES = min_tiles
            try:
                fn = lambda: op.kernel(target, cuda.as_cuda_array(out), cuda.as_cuda_array(x), cuda.as_cuda_array(w), **attrs)
                fn()
                torch.cuda.synchronize()
                row[f"{label}_max_error"] = float((out - want).abs().max())
                row[f"{label}_us"] = timed(fn)
            finally:
                cv.MIN_SMALL_TILES = FORCED["chosen"]
        results.append(row)
        print(f"b{n} {h}x{h}x{c:<4} torch {row['torch_us']:7.1f} us | " + " | ".join(
            f"{label} {row[label + '_us']:7.1f} us x{row[label + '_us'] / row['torch_us']:.2f} (err {row[label + '_max_error']:.1e})"
            for label in FORCED) + f" | chosen: {row['chosen']}", flush=True)
    (out_dir / "conv_tiling.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "results": results}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
