#!/usr/bin/env bash
# The whole `gpu` test set of one commit, on a machine with an NVIDIA GPU and the full TVM
# (docs/gpu.md, "How a GPU result is made"): every GPU result the project commits comes with
# this run of the same commit, so that a claim is never made on red GPU tests.
#   1. `simaccel demo --device cuda` (native regions);
#   2. `pytest -m gpu tests` (every test marked gpu; -n N workers when pytest-xdist is there; the
#      device_alone ones, which measure the whole GPU, after the rest and alone).
# It writes into OUT_DIR: commit.txt (given as $SIMACCEL_COMMIT, or read from git), date.txt,
# devices.txt (nvidia-smi -L), demo.log, gpu-tests.log (and -alone), junit.xml (both runs' test suites;
# junit-rest.xml and junit-alone.xml apart) and summary.txt (the counts).
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
  --junitxml="$out/junit-rest.xml" > "$out/gpu-tests.log" 2>&1
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
# junit.xml: both runs' test suites in one file, the record of the whole gpu test set
merged = ET.Element("testsuites")
for name in ("junit-rest.xml", "junit-alone.xml"):
    merged.extend(ET.parse(out / name).getroot().iter("testsuite"))
ET.ElementTree(merged).write(out / "junit.xml", encoding="utf-8", xml_declaration=True)
tests, failures, errors, skipped = (sum(int(s.get(k, 0)) for s in merged) for k in ("tests", "failures", "errors",
                                                                                     "skipped"))
print(f"commit {(out / 'commit.txt').read_text().strip()}, {(out / 'date.txt').read_text().strip()}")
print(f"device {(out / 'devices.txt').read_text().splitlines()[0]}")
print(f"demo: {[l for l in (out / 'demo.log').read_text().splitlines() if l.startswith('RESULT')]}")
print(f"pytest -m gpu tests: {tests - failures - errors - skipped} passed, {failures} failed, {errors} errors, "
      f"{skipped} skipped")
EOF
[ "$status" -eq 0 ] && [ "$alone" -eq 0 ]
