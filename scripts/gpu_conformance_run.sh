#!/usr/bin/env bash
# GPU run with the full TVM on the GPU machine (README, "On a GPU"), issue 22's conformance run:
#   part "one":     the GEMV's K = 1..3 kernel tests; `simaccel conformance` over the torch zoo
#                   in one process, native regions timed against TVM alone;
#   part "cluster": the same conformance run on a local Dask cluster of JOBS workers (models/s
#                   against the one-process run), a short fuzz campaign (native and cuda
#                   engines) in one process and on the cluster (cases/s, same seed), and the
#                   earlier H200 campaign's case 28 replayed and bisected.
# Every step has a time limit; what a step finished is kept (conformance.json is written after
# every model). Python runs with -P so that the installed package, not the source, is imported.
# Usage: scripts/gpu_conformance_run.sh one|cluster OUT_DIR [JOBS]
set -uo pipefail
part=${1:?usage: scripts/gpu_conformance_run.sh one|cluster OUT_DIR [JOBS]}
out=${2:?usage: scripts/gpu_conformance_run.sh one|cluster OUT_DIR [JOBS]}
jobs=${3:-8}
mkdir -p "$out"
nvidia-smi -L > "$out/devices.txt" 2>&1
date -u +"%Y-%m-%d %H:%M:%S UTC" > "$out/date.txt"
cli=(python3 -P -m simaccel.tvm_integration.tools.cli)  # an array: `timeout` runs no shell function
step() {  # step NAME LIMIT COMMAND...: its output in OUT/NAME.log, its exit status at the end
  local name=$1 limit=$2; shift 2
  echo "== $name: $*" | tee "$out/$name.log"
  timeout "$limit" "$@" 2>&1 | grep -v "dead codes\|Fast mode\|Scope Saving" >> "$out/$name.log"
  echo "exit status: ${PIPESTATUS[0]}" | tee -a "$out/$name.log"
  tail -3 "$out/$name.log"
}
case28=results/gpu/2026-12-02-h200-fuzz-campaign/case28
zoo=(conformance --zoo torch --engine native --repeat 20 --reload-every 4)
case "$part" in
one)
  step gemv-tests 100 python3 -P -m pytest tests/test_gpu_kernels.py -m gpu -p no:cacheprovider -q \
    -k "kernels_at_real_sizes and (dense or matmul)"
  step conformance-one-process 450 "${cli[@]}" "${zoo[@]}" --out "$out/conformance-one-process"
  ;;
cluster)
  step conformance-cluster 280 "${cli[@]}" "${zoo[@]}" --jobs "$jobs" --out "$out/conformance-cluster"
  step fuzz-one-process 70 "${cli[@]}" fuzz --engine native,cuda --seed 7 --cases 6 --export-every 3 --shrink-seconds 20 \
    --out "$out/fuzz-one-process"
  step fuzz-cluster 120 "${cli[@]}" fuzz --engine native,cuda --seed 7 --cases 36 --jobs 12 --export-every 3 \
    --shrink-seconds 20 --out "$out/fuzz-cluster"
  step case28-replay 40 "${cli[@]}" fuzz --replay "$case28"
  step case28-bisect 60 "${cli[@]}" bisect "$case28/model.py" --inputs "$case28/args.npz" --target cuda -o "$out/case28-bisect"
  ;;
*) echo "unknown part $part" >&2; exit 2 ;;
esac
tar czf /tmp/results.tgz -C "$out" . && mv /tmp/results.tgz "$out/results.tgz"
find "$out" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +  # in results.tgz: few files come back
ls "$out"
