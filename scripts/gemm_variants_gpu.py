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
    """name -> prepare(out, a, b): returns a call that launches that kernel once on them."""
    cdiv = lambda a, b: (a + b - 1) // b  # noqa: E731
    target = KernelTarget("cuda")

    def isa(name):  # an op of the ISA through its own launcher: the tiling it picks for this size
        op = get_op(name)

        def prepare(o, a, b):
            # The dense form's weight is transposed once, here: the kernel alone is timed.
            weight = cuda.as_cuda_array(torch.as_tensor(b).T.contiguous()) if "dense" in name else b
            bias = [cuda.as_cuda_array(torch.zeros(N, device="cuda"))] if "_bias" in name else []
            return lambda: op.kernel(target, o, a, weight, *bias, **op.all_attrs({}))
        return prepare

    def before_batching(o, a, b):
        return lambda: old_k[(cdiv(N, 64), cdiv(M, 64)), (16, 16)](o, a, b, b.reshape(b.size), M, N, K, 0, 0, 0)

    def variant(kernel, block, tile):
        jitted = cuda.jit(kernel)
        grid = (cdiv(N, tile[1]), cdiv(M, tile[0]))
        return lambda o, a, b: lambda: jitted[grid, block](o, a, b, M, N, K)

    out = {name: isa(name) for name in ("simaccel.matmul", "simaccel.dense", "simaccel.matmul_bias_gelu")}
    out["before_batching"] = before_batching
    out.update({name: variant(*make(**cfg)) for name, cfg in VARIANTS.items()})
    return out


old_k = cuda.jit(before._matmul_kernel)


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
        for name, prepare in launchers(M, N, K).items():
            C = torch.full((M, N), float("nan"), device="cuda")
            a, b, c = cuda.as_cuda_array(A), cuda.as_cuda_array(B), cuda.as_cuda_array(C)
            try:
                launch = prepare(c, a, b)
                launch()
                torch.cuda.synchronize()
                want = torch.nn.functional.gelu(ref) if name.endswith("_gelu") else ref
                err = float((C - want).abs().max() / want.abs().max())
                us = time_it(launch)
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
