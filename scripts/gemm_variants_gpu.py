"""Time GEMM kernel variants on a GPU against cuBLAS (torch, TF32 off): C = A @ B, float32.

    python scripts/gemm_variants_gpu.py OUT_DIR

Each variant is checked against torch's result, then timed with CUDA events (median of 20
after 3 warm-ups) at 1024^3 and 4096^3, interleaved with cuBLAS. Writes OUT_DIR/gemm.json.
"""
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from numba import cuda

sys.path.insert(0, str(Path(__file__).parent))
import _matmul_before_batching as before  # noqa: E402
from gemm_variants import VARIANTS, make  # noqa: E402

from simaccel.kernels import KernelTarget  # noqa: E402
from simaccel.ops import get_op  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False


def launchers(M, N, K):
    cdiv = lambda a, b: (a + b - 1) // b  # noqa: E731
    out = {}

    target = KernelTarget("cuda")

    def isa(name):  # an op of the ISA through its own launcher: the tiling it picks for this size
        op = get_op(name)

        def go(o, a, b):
            weight = cuda.as_cuda_array(torch.as_tensor(b).T.contiguous()) if "dense" in name else b
            if weight is not b:
                go.weights = weight  # transposed once, reused: the kernel alone is timed
            extra = [cuda.as_cuda_array(torch.zeros(N, device="cuda"))] if "_bias" in name else []
            launch = lambda: op.kernel(target, o, a, go.weights if weight is not b else b, *extra, **op.all_attrs({}))  # noqa: E731
            launch()
            go.launch = launch
        return go

    def old(o, a, b):
        old_k[(cdiv(N, 64), cdiv(M, 64)), (16, 16)](o, a, b, dummy_b(b), M, N, K, 0, 0, 0)

    for name in ("simaccel.matmul", "simaccel.dense", "simaccel.matmul_bias_gelu"):
        out[name] = isa(name)
    out["before_batching"] = old
    for name, cfg in VARIANTS.items():
        kernel, block, tile = make(**cfg)
        jitted = cuda.jit(kernel)
        grid = (cdiv(N, tile[1]), cdiv(M, tile[0]))
        out[name] = (lambda j, g, bl: (lambda o, a, b: j[g, bl](o, a, b, M, N, K)))(jitted, grid, block)
    return out


old_k = cuda.jit(before._matmul_kernel)


def dummy_b(b):
    return b.reshape(b.size)


def time_it(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main(out_dir):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": torch.cuda.get_device_name(), "sizes": {}}
    for size in (1024, 4096):
        M = N = K = size
        torch.manual_seed(0)
        A = torch.randn(M, K, device="cuda")
        B = torch.randn(K, N, device="cuda")
        ref = A @ B
        res = {}
        for name, launch in launchers(M, N, K).items():
            C = torch.full((M, N), float("nan"), device="cuda")
            a, b, c = cuda.as_cuda_array(A), cuda.as_cuda_array(B), cuda.as_cuda_array(C)
            try:
                launch(c, a, b)
                torch.cuda.synchronize()
                want = torch.nn.functional.gelu(ref) if name.endswith("_gelu") else ref
                err = float((C - want).abs().max() / want.abs().max())
                again = getattr(launch, "launch", None) or (lambda: launch(c, a, b))
                us = time_it(again)
            except Exception as e:  # noqa: BLE001
                res[name] = {"error": f"{type(e).__name__}: {e}"}
                print(size, name, res[name], flush=True)
                continue
            res[name] = {"median_us": us, "tflops": 2 * M * N * K / us / 1e6, "max_rel_err": err}
            print(size, name, f"{us:.1f} us {res[name]['tflops']:.2f} TFLOP/s err {err:.1e}", flush=True)
        us = time_it(lambda: torch.matmul(A, B))
        res["cublas"] = {"median_us": us, "tflops": 2 * M * N * K / us / 1e6}
        print(size, "cublas", f"{us:.1f} us {res['cublas']['tflops']:.2f} TFLOP/s", flush=True)
        report["sizes"][str(size)] = res
    (out_dir / "gemm.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
