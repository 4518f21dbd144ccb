#!/usr/bin/env bash
# Issue 21's measurements on a GPU machine with the full TVM (shared GPU README, "The full TVM there"):
#   models: the untuned and the tuned torch.export models, native regions against TVM alone
#           (scripts/untuned_models_gpu.py: every model built first in parallel, then timed one at a time);
#   ops:    `simaccel bench --ops`, every kernel beside its torch peer;
#   fusion: the GPU tests of fused epilogues and of the grouped convolution kernel.
# Usage: scripts/gpu_untuned_run.sh OUT_DIR models|ops|fusion
set -uo pipefail
out=${1:?usage: scripts/gpu_untuned_run.sh OUT_DIR models|ops|fusion}
what=${2:?usage: scripts/gpu_untuned_run.sh OUT_DIR models|ops|fusion}
source "$(dirname "$0")/gpu_step.sh"  # step NAME COMMAND...; devices.txt, date.txt

case $what in
  models) step models python3 -P scripts/untuned_models_gpu.py "$out/models" --models "${MODELS:-all}" \
            --jobs "${JOBS:-14}" --repeat "${REPEAT:-30}" --profile-calls "${PROFILE_CALLS:-10}"
          rm -rf "$out/models/libs"
          tar czf "$out/models.tgz" -C "$out" models && rm -rf "$out/models" ;;
  ops) step ops python3 -P -m simaccel.tvm_integration.tools.cli bench --ops --out "$out/ops"
       tar czf "$out/ops.tgz" -C "$out" ops && rm -rf "$out/ops" ;;
  fusion) step fusion python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/test_fusion.py \
            tests/test_conv2d_grouped.py tests/test_gpu_*.py -k "fused or grouped or real_sizes or matches_tvm" ;;
esac
