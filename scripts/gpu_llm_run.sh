#!/usr/bin/env bash
# The LLM targets of docs/llm.md on a GPU machine (shared GPU README; "models" needs the full TVM):
#   kernels: `simaccel bench --ops` (the 16-bit GEMMs and the decode GEMVs beside cuBLAS), the
#            attention kernel beside torch's SDPA in 16-bit and in float32, then Nsight Compute
#            on the kernels of the targets: a decode GEMV, the bfloat16 GEMM, the prefill tile,
#            the grouped-query decode step (into OUT/ncu.txt);
#   models:  the decoder in float32, float16 and bfloat16 against TVM alone and torch.
# Usage, in the project root there: scripts/gpu_llm_run.sh OUT_DIR kernels|models
set -uo pipefail
out=${1:?usage: scripts/gpu_llm_run.sh OUT_DIR kernels|models}
what=${2:?usage: scripts/gpu_llm_run.sh OUT_DIR kernels|models}
source "$(dirname "$0")/gpu_step.sh"  # step, ncu_case; devices.txt, date.txt

ncu_attention() {  # ncu_attention CASE: one float16 launch of scripts/attention_gpu.py's CASE
  echo "===== attention $1 (kernels attention|combine)" >> "$out/ncu.txt"
  (cd "$(dirname "$0")" && timeout "${NCU_TIMEOUT:-90}" /usr/local/cuda/bin/ncu $NCU_SECTIONS \
    -k "regex:attention|combine" python3 attention_gpu.py "$out/ncu-scratch" --only "$1") >> "$out/ncu.txt" 2>&1
  echo "===== rc=$?" >> "$out/ncu.txt"
  rm -rf "$out/ncu-scratch"
}

case $what in
  kernels)
    step ops python3 -P -m simaccel.tvm_integration.tools.cli bench --ops --out "$out/ops"
    (cd "$(dirname "$0")" && step attention python3 attention_gpu.py "$out/att")
    (cd "$(dirname "$0")" && step attention-float32 python3 attention_gpu.py "$out/att" --float32)
    NCU_TIMEOUT=90 ncu_case "gemv 1x4096->14336 bfloat16" gemv
    NCU_TIMEOUT=90 ncu_case "gemm 4096^3 bfloat16" tensor_core
    ncu_attention "prefill 2048"
    ncu_attention "decode 4096 gqa" ;;
  models)
    step decoder python3 scripts/decoder_gpu.py "$out/dec" --repeat "${REPEAT:-20}" --dtypes float32,float16,bfloat16 ;;
  *) echo "unknown part $what (kernels|models)" >&2; exit 2 ;;
esac
