#!/usr/bin/env bash
# GPU run with the full TVM on the GPU machine (TVM compiles in place; see README, "On a GPU"):
#   part "tests": `simaccel demo --device cuda` (float32, float16), the examples on the GPU
#                 and every test marked `gpu`;
#   part "fuzz":  `simaccel fuzz` on the cuda engine, in worker processes.
# Python runs with -P so that the installed package, not the source folder, is imported.
# Usage: scripts/gpu_fuzz_run.sh tests|fuzz OUT_DIR [FUZZ_CASES] [JOBS]
set -uo pipefail
part=${1:?usage: scripts/gpu_fuzz_run.sh tests|fuzz OUT_DIR [FUZZ_CASES] [JOBS]}
out=${2:?usage: scripts/gpu_fuzz_run.sh tests|fuzz OUT_DIR [FUZZ_CASES] [JOBS]}
mkdir -p "$out"
nvidia-smi -L > "$out/devices.txt" 2>&1
case "$part" in
tests)
  for dtype in float32 float16; do
    timeout 240 python3 -P -m simaccel.tvm_integration.tools.cli demo --device cuda --dtype "$dtype" 2>&1 | tee -a "$out/demo.log"
    echo "exit status: ${PIPESTATUS[0]}" | tee -a "$out/demo.log"
  done
  for example in "user_op.py --engine cuda" "zero_copy_gpu.py"; do
    echo "== examples/$example" | tee -a "$out/examples.log"
    timeout 120 python3 -P examples/$example 2>&1 | tee -a "$out/examples.log"
    echo "exit status: ${PIPESTATUS[0]}" | tee -a "$out/examples.log"
  done
  timeout 420 python3 -P -X faulthandler -m pytest tests -m gpu -v -rs -p no:cacheprovider \
    --junitxml="$out/gpu-tests.xml" 2>&1 | tee "$out/gpu-tests.log" | tail -40
  echo "exit status: ${PIPESTATUS[0]}" | tee -a "$out/gpu-tests.log"
  ;;
fuzz)
  timeout 540 python3 -P -m simaccel.tvm_integration.tools.cli fuzz --engine cuda --cases "${3:-500}" --jobs "${4:-8}" --seed 0 \
    --export-every 0 --shrink-seconds 120 --out "$out/fuzz" 2>&1 | grep -v "dead codes" | tee "$out/fuzz.log"
  echo "exit status: ${PIPESTATUS[0]}" | tee -a "$out/fuzz.log"
  cp "$out/fuzz/fuzz-summary.json" "$out/" 2>/dev/null
  tar czf "$out/fuzz-cases.tgz" -C "$out" fuzz
  rm -rf "$out/fuzz"
  ;;
esac
