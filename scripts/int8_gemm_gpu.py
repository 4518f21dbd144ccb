"""Time simaccel's int8 GEMM (kernels/matmul_int8.py, dp4a) against torch's int8 matmul (cuBLAS).

    python scripts/int8_gemm_gpu.py OUT_DIR     (run from scripts/, beside fp16_gemm_gpu.py)

int8 x int8 -> int32 at a few sizes (a W8A8 decoder's projections and a 4096^3 square), each
checked exactly against torch._int_mm, then timed with CUDA events (fp16_gemm_gpu.py's
`events_ms`, interleaved). Writes OUT_DIR/int8-gemm.json.
"""
import json
import sys
from pathlib import Path

import torch
from fp16_gemm_gpu import events_ms, numba_array
from numba import cuda

from simaccel.kernels import KernelTarget
from simaccel.ops import get_op

SIZES = [(4096, 4096, 4096), (512, 4096, 4096), (32, 4096, 11008), (128, 11008, 4096)]  # M, K, N


def main(out_dir: Path) -> int:
    op = get_op("simaccel.matmul")
    attrs = op.all_attrs({"out_dtype": "int32"})
    target = KernelTarget("cuda", cuda.external_stream(torch.cuda.current_stream().cuda_stream))
    rows = []
    for m, k, n in SIZES:
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
        b = torch.randint(-128, 128, (k, n), dtype=torch.int8, device="cuda")
        out = torch.empty(m, n, dtype=torch.int32, device="cuda")
        args = [numba_array(x) for x in (out, a, b)]

        def ours():
            op.kernel(target, *args, **attrs)

        def theirs():
            return torch._int_mm(a, b)

        ours()
        exact = bool(torch.equal(out, theirs()))
        ms, ref_ms = events_ms(ours), events_ms(theirs)
        row = {"m": m, "k": k, "n": n, "exact": exact, "simaccel_ms": ms, "torch_int_mm_ms": ref_ms,
               "simaccel_tops": 2 * m * n * k / ms / 1e9, "ratio": ms / ref_ms}
        rows.append(row)
        print(json.dumps(row), flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "int8-gemm.json").write_text(json.dumps({"device": torch.cuda.get_device_name(0), "rows": rows},
                                                      indent=1))
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
