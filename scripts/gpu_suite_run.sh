#!/usr/bin/env bash
# The whole `gpu` test set of one commit, on a machine with an NVIDIA GPU and the full TVM
# (docs/gpu.md, "How a GPU result is made"): every GPU result the project commits comes with
# this run of the same commit, so that a claim is never made on red GPU tests.
#   1. `simaccel demo --device cuda` (native regions);
#   2. `pytest -m gpu tests` (every test marked gpu; -n N workers when pytest-xdist is there; the
#      device_alone ones, which measure the whole GPU, after the rest and alone).
# It writes into OUT_DIR: commit.txt (given as $SIMACCEL_COMMIT, or read from git), date.txt,
# devices.txt (nvidia-smi -L), demo.log, gpu-tests.log, junit.xml (and -alone) and summary.txt (the counts).
# Python runs with -P so that the installed package, not the source folder, is imported.
# Usage, in the project root there: scripts/gpu_suite_run.sh OUT_DIR [WORKERS]
set -uo pipefail
out=${1:?usage: scripts/gpu_suite_run.sh OUT_DIR [WORKERS]}
workers=${2:-4}
mkdir -p "$out"
echo "${SIMACCEL_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$out/commit.txt"
date -u +"%Y-%m-%d %H:%M:%S UTC" > "$out/date.txt"
nvidia-smi -L > "$out/devices.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$out/devices.txt" 2>&1

python3 -P -m simaccel.tvm_integration.tools.cli demo --device cuda > "$out/demo.log" 2>&1
echo "exit status: $?" >> "$out/demo.log"

# The tests that measure the whole GPU (device_alone) run after the rest, with nothing beside them.
parallel=()
if python3 -c "import xdist" 2>/dev/null; then parallel=(-n "$workers" --dist loadfile); fi
python3 -P -m pytest -m "gpu and not device_alone" tests "${parallel[@]}" -q -rs -p no:cacheprovider \
  --junitxml="$out/junit.xml" > "$out/gpu-tests.log" 2>&1
status=$?
echo "exit status: $status" >> "$out/gpu-tests.log"
python3 -P -m pytest -m "gpu and device_alone" tests -q -rs -p no:cacheprovider --junitxml="$out/junit-alone.xml" \
  > "$out/gpu-tests-alone.log" 2>&1
alone=$?
echo "exit status: $alone" >> "$out/gpu-tests-alone.log"
python3 - "$out" <<'EOF' | tee "$out/summary.txt"
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

out = Path(sys.argv[1])
counts = [0, 0, 0, 0]
for name in ("junit.xml", "junit-alone.xml"):
    suite = ET.parse(out / name).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    counts = [c + int(suite.get(k, 0)) for c, k in zip(counts, ("tests", "failures", "errors", "skipped"))]
tests, failures, errors, skipped = counts
print(f"commit {(out / 'commit.txt').read_text().strip()}, {(out / 'date.txt').read_text().strip()}")
print(f"device {(out / 'devices.txt').read_text().splitlines()[0]}")
print(f"demo: {[l for l in (out / 'demo.log').read_text().splitlines() if l.startswith('RESULT')]}")
print(f"pytest -m gpu tests: {tests - failures - errors - skipped} passed, {failures} failed, {errors} errors, "
      f"{skipped} skipped")
EOF
[ "$status" -eq 0 ] && [ "$alone" -eq 0 ]
