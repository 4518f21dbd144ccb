#!/usr/bin/env bash
# The debugging tools on a GPU machine with the full TVM (shared GPU README, "The full TVM there"):
#   1. `simaccel demo --device cuda`;
#   2. the sanitizer on planted defects, native regions and the cuda engine (scripts/debug_tools_gpu.py);
#   3. timeline traces of the demo and of resnet18 from torch.export (scripts/trace_gpu.py);
#   4. `simaccel sanitize` (compute-sanitizer) on a kernel that writes past its output (memcheck) and on one
#      that leaves an element unwritten (memcheck, initcheck).
# Usage: scripts/gpu_debug_run.sh OUT_DIR
set -uo pipefail
out=${1:?usage: scripts/gpu_debug_run.sh OUT_DIR}
STEP_TAIL=${STEP_TAIL:-3}
source "$(dirname "$0")/gpu_step.sh"  # step NAME COMMAND...; devices.txt, date.txt

step demo python3 -P -m simaccel.tvm_integration.tools.cli demo --device cuda
step sanitizer python3 scripts/debug_tools_gpu.py "$out/sanitizer.json"
step trace python3 scripts/trace_gpu.py "$out/trace"
step compute-sanitizer python3 -P -m simaccel.tvm_integration.tools.cli sanitize -- \
  python3 scripts/debug_tools_gpu.py --plain planted.past_end
step compute-sanitizer-skip-last python3 -P -m simaccel.tvm_integration.tools.cli sanitize -- \
  python3 scripts/debug_tools_gpu.py --plain planted.skip_last
step compute-sanitizer-initcheck python3 -P -m simaccel.tvm_integration.tools.cli sanitize --tool initcheck -- \
  python3 scripts/debug_tools_gpu.py --plain planted.skip_last
