"""Time simaccel.attention's kernel on a GPU against torch's scaled_dot_product_attention.

    python scripts/attention_gpu.py OUT_DIR [--only CASE] [--float32]

Prefill (S = T query rows and keys, causal) and decode (1 query row against T keys) in float16
and bfloat16, 32 query heads of 128 over 32 key/value heads, or 8 (grouped-query attention,
torch's enable_gqa), and two "padded" cases whose last eighth of keys a padding mask hides
(simaccel.attention_bias with a (B, 1, 1, T) bias; torch's SDPA given the same mask, causal
diagonal included, as its float attn_mask): each checked against torch (simaccel.compare's rule with the
dtype's tolerance), then timed with CUDA events (the median of 20 samples of 5 calls queued
behind a spin kernel, scripts/fp16_gemm_gpu.py's `events_ms`), interleaved with torch's SDPA (flash where torch picks it). Writes
OUT_DIR/attention.json. With --only CASE (a label below), it runs that case's kernel once in
float16 and times nothing: what Nsight Compute profiles (`ncu -k regex:attention ...`).
With --float32, the float32 cases instead (the one-warp-per-row kernel: torch's frontend
gives 16-bit models float32 attention, and nn.TransformerEncoderLayer's is float32), into
OUT_DIR/attention-float32.json.
"""
import argparse
import json
import sys
from pathlib import Path

import torch
from fp16_gemm_gpu import events_ms, numba_array  # the GEMM script's timing and views, beside this one
from numba import cuda

from simaccel.compare import array_difference
from simaccel.kernels import KernelTarget
from simaccel.ops import get_op

# (label, batch, query rows, keys, query heads, key/value heads, head dim, causal[, padded])
CASES = [("prefill 2048", 1, 2048, 2048, 32, 32, 128, True), ("prefill 512", 4, 512, 512, 32, 32, 128, True),
         ("prefill 2048 gqa", 1, 2048, 2048, 32, 8, 128, True), ("prefill 2048 d64", 1, 2048, 2048, 32, 32, 64, True),
         ("decode 4096", 1, 1, 4096, 32, 32, 128, False), ("decode 4096 gqa", 1, 1, 4096, 32, 8, 128, False),
         ("decode 1024 x8", 8, 1, 1024, 32, 32, 128, False), ("decode 4096 gqa x8", 8, 1, 4096, 32, 8, 128, False),
         ("prefill 2048 gqa padded", 1, 2048, 2048, 32, 8, 128, True, True),
         ("decode 4096 gqa padded", 1, 1, 4096, 32, 8, 128, False, True)]
FLOAT32_CASES = [("encoder 64", 2, 64, 64, 4, 4, 64, False), ("prefill 256 d64", 1, 256, 256, 8, 8, 64, True),
                 ("llama 32 d32 gqa", 1, 32, 32, 8, 2, 32, True), ("decode 1024 gqa", 1, 1, 1024, 32, 8, 128, False)]


def main(out_dir: Path, only: str | None = None, float32: bool = False) -> int:
    cases = FLOAT32_CASES if float32 else CASES
    if only is not None and only not in {case[0] for case in cases}:
        raise SystemExit(f"--only {only!r}: no such case (the cases: {', '.join(case[0] for case in cases)})")
    target = KernelTarget("cuda", cuda.external_stream(torch.cuda.current_stream().cuda_stream))
    rows, failed = [], 0
    for dtype_name in ("float32",) if float32 else ("float16",) if only else ("float16", "bfloat16"):
        dtype = getattr(torch, dtype_name)
        for label, b, s, t, h, hkv, d, causal, *padded in cases:
            if only and label != only:
                continue
            torch.manual_seed(0)
            q, k, v = (torch.randn(b, n, heads, d, device="cuda", dtype=dtype) for n, heads in ((s, h), (t, hkv), (t, hkv)))
            out = torch.empty(b, s, h, d, device="cuda", dtype=dtype)
            attrs = {"scale": d ** -0.5, "causal": causal, "bottom_right": True}
            args = [numba_array(x) for x in (out, q, k, v)]
            op, mask = get_op("simaccel.attention"), None
            if padded:  # the last eighth of the keys hidden; torch takes the causal diagonal in the same mask
                bias = torch.zeros(b, 1, 1, t, device="cuda", dtype=dtype)
                bias[..., t - t // 8:] = float("-inf")
                op, args = get_op("simaccel.attention_bias"), args + [numba_array(bias)]
                diagonal = torch.full((s, t), float("-inf"), device="cuda", dtype=dtype).triu(t - s + 1)
                mask = bias + (diagonal if causal else 0)

            def ours():
                op.kernel(target, *args, **attrs)

            def theirs():
                return torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                    is_causal=causal and s > 1 and mask is None, enable_gqa=hkv != h)

            ours()
            if only:
                torch.cuda.synchronize()
                return 0
            want = theirs().transpose(1, 2).float()
            torch.cuda.synchronize()
            found = array_difference(out.float().cpu().numpy(), want.cpu().numpy(), dtype=dtype_name, scaled=True)
            failed += not found.ok
            ms, torch_ms = events_ms(ours, warm=2, queued=5), events_ms(theirs, warm=2, queued=5)
            flops = 4.0 * b * h * s * t * d / (2 if causal else 1)
            kv_bytes = 2 * b * t * hkv * d * q.element_size()  # what a decode step must read at least
            row = {"case": label, "dtype": dtype_name, "batch": b, "S": s, "T": t, "heads": h, "kv_heads": hkv, "head_dim": d,
                   "causal": causal, "ms": ms, "torch_ms": torch_ms, "ratio": ms / torch_ms,
                   "tflops": flops / ms / 1e9, "kv_gbps": kv_bytes / ms / 1e6, "matches_torch": found.ok}
            rows.append(row)
            print(f"{dtype_name:9s} {label:16s} {ms * 1e3:10.1f} us | torch {torch_ms * 1e3:8.1f} us | "
                  f"{row['ratio']:6.2f}x | {'ok' if found.ok else 'MISMATCH ' + found.reason}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ("attention-float32.json" if float32 else "attention.json")).write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", help="run this case's kernel once and time nothing (for Nsight Compute)")
    parser.add_argument("--float32", action="store_true", help="the float32 cases (the one-warp-per-row kernel)")
    args = parser.parse_args()
    sys.exit(main(args.out, args.only, args.float32))
