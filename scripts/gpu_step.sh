# Sourced by the scripts/gpu_*_run.sh once they have set $out (their output folder):
# `step NAME COMMAND...` runs COMMAND with its output in $out/NAME.log, appends its exit
# status there, and prints the log's last $STEP_TAIL lines (default 25); `ncu_case LABEL
# KERNEL_REGEX` profiles one launch of a `simaccel bench --ops` case's kernel with Nsight
# Compute, into $out/ncu.txt.
mkdir -p "$out"
nvidia-smi -L > "$out/devices.txt" 2>&1
date -u +"%Y-%m-%d %H:%M:%S UTC" > "$out/date.txt"

step() {
  local name=$1; shift
  echo "== $name: $*"
  "$@" > "$out/$name.log" 2>&1
  local status=$?
  echo "exit status: $status" >> "$out/$name.log"
  tail -"${STEP_TAIL:-25}" "$out/$name.log"
}

NCU_SECTIONS="--section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats"

ncu_case() {
  echo "===== $1 (kernel $2)" >> "$out/ncu.txt"
  timeout "${NCU_TIMEOUT:-45}" /usr/local/cuda/bin/ncu $NCU_SECTIONS -k "regex:$2" -c 1 \
    python3 -P "$(dirname "${BASH_SOURCE[0]}")/profile_ops_gpu.py" "$1" >> "$out/ncu.txt" 2>&1
  echo "===== rc=$?" >> "$out/ncu.txt"
}
