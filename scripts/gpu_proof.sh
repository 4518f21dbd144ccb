#!/usr/bin/env bash
# The GPU proof run, on a machine with an NVIDIA GPU (a runtime-only TVM is enough):
#   1. the `gpu` tests (and the core tests) on libraries prebuilt by
#      `python -m simaccel.tvm_integration.tools.artifacts DIR` on a machine with the full TVM;
#   2. `simaccel run` of the exported demo library, checked against the CPU build's output;
#   3. `simaccel bench`.
# Python runs with -P so that the installed package, not the source folder, is imported.
# Usage: SIMACCEL_GPU_ARTIFACTS=DIR scripts/gpu_proof.sh OUT_DIR
set -uo pipefail
art=${SIMACCEL_GPU_ARTIFACTS:?set SIMACCEL_GPU_ARTIFACTS to the folder of prebuilt libraries}
out=${1:?usage: scripts/gpu_proof.sh OUT_DIR}
mkdir -p "$out"
nvidia-smi -L > "$out/devices.txt" 2>&1

python3 -P scripts/gpu_device_check.py 2>&1 | tee "$out/devices.txt" -a
python3 -P -X faulthandler -m pytest tests/test_gpu_*.py tests/test_kernels_*.py tests/test_runtime.py tests/test_program.py \
  -v -rs -p no:cacheprovider --junitxml="$out/gpu-tests.xml" 2>&1 | tee "$out/gpu-tests.log"
echo "exit status: ${PIPESTATUS[0]}" >> "$out/gpu-tests.log"

python3 -P -m simaccel.tvm_integration.tools.cli run "$art/demo_f32.simaccel.so" --inputs "$art/demo_f32.inputs.npz" \
  --expect "$art/demo_f32.expect_cpu.npz" --device cuda 2>&1 | tee "$out/runtime-only-run.log"
echo "exit status: ${PIPESTATUS[0]}" >> "$out/runtime-only-run.log"

python3 -P -m simaccel.tvm_integration.tools.cli bench --artifacts "$art" --out "$out" --repeat 50 2>&1 | tee "$out/bench.log"

python3 scripts/summarize_gpu_run.py "$out"
python3 -P scripts/profile_call.py "$art" mm8 2>&1 | tail -40
