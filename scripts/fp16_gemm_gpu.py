"""Time the float16 (or bfloat16) GEMM kernels on a GPU against cuBLAS (torch): C = A @ B and the dense form.

    python scripts/fp16_gemm_gpu.py OUT_DIR [--ncu] [--bfloat16]

Each case runs through its op's own launcher (the tile width it picks for its size, or the
one forced with `bn`), is checked against torch's float32 product (simaccel.compare's rule for
whole outputs with float16's tolerance; the max abs error over the result's scale is reported), then timed with CUDA events (median of 20 samples of 10 calls queued behind a spin
kernel, after 3 warm-ups) interleaved with torch's matmul in the same dtype. Writes OUT_DIR/fp16_gemm.json
(--bfloat16: OUT_DIR/bf16_gemm.json, the same cases in bfloat16). With --ncu, each case is
launched twice and nothing is timed (for Nsight Compute).
"""
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
from numba import cuda

from simaccel.compare import array_difference
from simaccel.kernels import KernelTarget, tensor_core
from simaccel.ops import get_op

# (label, op, M, N, K, forced tile width or None)
CASES = [
    ("matmul 4096^3", "simaccel.matmul", 4096, 4096, 4096, None),
    ("dense 4096^3", "simaccel.dense", 4096, 4096, 4096, None),
    ("matmul 4096^3 bn128", "simaccel.matmul", 4096, 4096, 4096, 128),
    ("matmul_bias_gelu 4096^3", "simaccel.matmul_bias_gelu", 4096, 4096, 4096, None),
    ("matmul 8192^3", "simaccel.matmul", 8192, 8192, 8192, None),
    ("matmul 2048^3", "simaccel.matmul", 2048, 2048, 2048, None),
    ("matmul 4096x4096x1024", "simaccel.matmul", 4096, 4096, 1024, None),
    ("dense 8192x1024x4096 (MLP up)", "simaccel.dense", 8192, 1024, 4096, None),
    ("matmul 1024^3", "simaccel.matmul", 1024, 1024, 1024, None),
]


def events_ms(fn, reps=20, warm=3, queued=10):
    """GPU time of one call of `fn`: the median over `reps` samples of `queued` calls queued
    behind a spin kernel (so the host's launch cost, tens of microseconds of Python, is hidden)."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(20_000_000)  # ~10 ms of GPU while the host queues the calls
        start.record()
        for _ in range(queued):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / queued)
    return statistics.median(times)


def numba_array(t):
    """A Numba device array over torch tensor `t` (contiguous): its dtype given as numpy's, as
    torch's __cuda_array_interface__ has no bfloat16."""
    dtype = np.dtype(str(t.dtype).removeprefix("torch."))
    return cuda.from_cuda_array_interface({"shape": tuple(t.shape), "strides": None, "typestr": dtype,
                                           "data": (t.data_ptr(), False), "version": 3}, owner=t, sync=False)


def prepare(name, M, N, K, bn, dtype):
    torch.manual_seed(0)
    a = torch.rand(M, K, device="cuda", dtype=dtype) - 0.5
    b = torch.rand(K, N, device="cuda", dtype=dtype) - 0.5
    weight = b.T.contiguous() if "dense" in name else b
    out = torch.empty(M, N, device="cuda", dtype=dtype)
    op = get_op(name)
    target = KernelTarget("cuda", cuda.external_stream(torch.cuda.current_stream().cuda_stream))
    bias = [torch.zeros(N, device="cuda", dtype=dtype)] if "_bias" in name else []
    args = [numba_array(t) for t in (out, a, weight, *bias)]

    def launch():
        if bn is None:
            op.kernel(target, *args, **op.all_attrs({}))
        else:
            saved = tensor_core.width
            tensor_core.width = lambda M, N, batches: bn
            try:
                op.kernel(target, *args, **op.all_attrs({}))
            finally:
                tensor_core.width = saved

    return a, b, out, launch


def main(out_dir: Path, ncu: bool, dtype_name: str = "float16") -> int:
    dtype = getattr(torch, dtype_name)
    rows = []
    failed = 0
    for label, name, M, N, K, bn in CASES:
        a, b, out, launch = prepare(name, M, N, K, bn, dtype)
        if ncu:
            launch()
            launch()
            torch.cuda.synchronize()
            print(f"launched {label} twice")
            continue
        launch()
        torch.cuda.synchronize()
        want = a.float() @ b.float()
        if "gelu" in name:
            want = torch.nn.functional.gelu(want)
        error = float((out.float() - want).abs().max() / want.abs().max())
        found = array_difference(out.float().cpu().numpy(), want.cpu().numpy(), dtype=dtype_name, scaled=True)
        ours = events_ms(launch)
        theirs = events_ms(lambda: torch.matmul(a, b))
        flops = 2.0 * M * N * K
        row = {"case": label, "M": M, "N": N, "K": K, "bn": bn or tensor_core.width(M, N, 1), "ms": ours,
               "tflops": flops / ours / 1e9, "cublas_ms": theirs, "cublas_tflops": flops / theirs / 1e9,
               "ratio": ours / theirs, "max_rel_error": error}
        rows.append(row)
        ok = found.ok
        failed += not ok
        print(f"{label:32s} bn {row['bn']}: {ours * 1e3:8.1f} us {row['tflops']:6.1f} TFLOP/s | cuBLAS "
              f"{theirs * 1e3:8.1f} us {row['cublas_tflops']:6.1f} | {row['ratio']:.2f}x | error {error:.1e}"
              f"{'' if ok else '  MISMATCH: ' + found.reason}")
    if not ncu:
        out_dir.mkdir(parents=True, exist_ok=True)
        name = "fp16_gemm.json" if dtype_name == "float16" else "bf16_gemm.json"
        (out_dir / name).write_text(json.dumps({"device": torch.cuda.get_device_name(), "dtype": dtype_name,
                                                "rows": rows}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), "--ncu" in sys.argv[2:], "bfloat16" if "--bfloat16" in sys.argv[2:] else "float16"))
