#!/usr/bin/env bash
# Kernel work on a GPU machine with the full TVM (shared GPU README, "The full TVM there"):
#   ops:   `simaccel bench --ops` (every kernel beside its torch peer), then Nsight Compute on
#          the cases named in $NCU_CASES ("CASE=KERNEL_REGEX;CASE=KERNEL_REGEX...");
#   tests: the `gpu` tests, every kernel compiled ahead of time by simaccel.aot as a native
#          region does (on libraries the machine builds itself);
#   bench: the prebuilt-library benchmark, built there, compared with an earlier bench.json ($OLD).
# Usage: scripts/gpu_kernels_run.sh OUT_DIR ops|tests|bench
set -uo pipefail
out=${1:?usage: scripts/gpu_kernels_run.sh OUT_DIR ops|tests|bench}
what=${2:?usage: scripts/gpu_kernels_run.sh OUT_DIR ops|tests|bench}
source "$(dirname "$0")/gpu_step.sh"  # step NAME COMMAND...; devices.txt, date.txt

case $what in
  ops) step ops python3 -P -m simaccel.tvm_integration.tools.cli bench --ops --out "$out/ops"
       IFS=';' read -ra cases <<< "${NCU_CASES:-}"
       for c in "${cases[@]}"; do ncu_case "${c%%=*}" "${c#*=}"; done ;;
  tests) step tests python3 -P -m pytest -q -p no:cacheprovider -m gpu ${TESTS:-tests} ;;
  bench) step artifacts python3 -P -m simaccel.tvm_integration.tools.artifacts "$out/artifacts"
         step bench python3 -P -m simaccel.tvm_integration.tools.cli bench --artifacts "$out/artifacts" \
           --out "$out/bench" --repeat "${REPEAT:-50}" ${OLD:+--compare "$OLD"}
         rm -rf "$out/artifacts" ;;
  *) echo "unknown step $what (ops|tests|bench)" >&2; exit 2 ;;
esac
