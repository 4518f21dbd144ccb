#!/usr/bin/env bash
# GPU run with the full TVM on the GPU machine (TVM compiles in place; see README, "On a GPU"):
#   part "tests": `simaccel demo --device cuda` (float32, float16), the examples on the GPU
#                 and every test marked `gpu`;
#   part "fuzz":  `simaccel fuzz` on the cuda engine, on a local Dask cluster of JOBS workers;
#   part "campaign": one campaign (native and cuda engines) in one process and on a local Dask
#                 cluster of JOBS workers (the same seed: the same cases, so the same verdicts),
#                 then a longer one on the cluster; cases/s of each (needs the dask wheels).
# Python runs with -P so that the installed package, not the source folder, is imported.
# Usage: scripts/gpu_fuzz_run.sh tests|fuzz|campaign OUT_DIR [FUZZ_CASES] [JOBS]
set -uo pipefail
part=${1:?usage: scripts/gpu_fuzz_run.sh tests|fuzz|campaign OUT_DIR [FUZZ_CASES] [JOBS]}
out=${2:?usage: scripts/gpu_fuzz_run.sh tests|fuzz|campaign OUT_DIR [FUZZ_CASES] [JOBS]}
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
campaign)
  fuzz() {  # fuzz NAME TIMEOUT ARGS...: a campaign into OUT/NAME, its log and summary kept
    local name=$1 limit=$2; shift 2
    timeout "$limit" python3 -P -m simaccel.tvm_integration.tools.cli fuzz --engine native,cuda --seed 7 \
      --export-every 20 --shrink-seconds 60 --out "$out/$name" "$@" 2>&1 | grep -v "dead codes\|Fast mode" | tee "$out/$name.log" | tail -4
    echo "exit status: ${PIPESTATUS[0]}" | tee -a "$out/$name.log"
  }
  fuzz one-process 240 --cases "${3:-40}"
  fuzz cluster 120 --cases "${3:-40}" --jobs "${4:-12}"
  fuzz cluster-long 200 --cases "$(( ${3:-40} * 5 ))" --jobs "${4:-12}"
  python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = {}
for name in ("one-process", "cluster", "cluster-long"):
    try:
        s = json.loads((out / name / "fuzz-summary.json").read_text())
    except OSError:
        continue
    rows[name] = {k: s[k] for k in ("cases", "seconds", "cases_per_second", "workers", "executor", "counts",
                                     "retried_batches", "reloaded_in_fresh_process", "device")}
    rows[name]["failures"] = [f["signature"] for f in s["failures"]]
if "one-process" in rows and "cluster" in rows:
    rows["same_verdicts"] = rows["one-process"]["counts"] == rows["cluster"]["counts"]
    rows["speedup"] = round(rows["cluster"]["cases_per_second"] / rows["one-process"]["cases_per_second"], 2)
(out / "campaign.json").write_text(json.dumps(rows, indent=1))
print(json.dumps(rows, indent=1))
PY
  tar czf "$out/campaigns.tgz" -C "$out" one-process cluster cluster-long 2>/dev/null
  rm -rf "$out/one-process" "$out/cluster" "$out/cluster-long"
  ;;
esac
