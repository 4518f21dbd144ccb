# Sourced by the scripts/gpu_*_run.sh once they have set $out (their output folder):
# `step NAME COMMAND...` runs COMMAND with its output in $out/NAME.log, appends its exit
# status there, and prints the log's last $STEP_TAIL lines (default 25).
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
