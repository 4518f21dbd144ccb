"""Summarise a GPU proof run (scripts/gpu_proof.sh) into OUT/gpu-results.json.

Records the date, the devices, TVM's mode (runtime-only or full), the test counts and each
test's outcome from the JUnit XML, and the result of the runtime-only `simaccel run`.
"""

import json
import os
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path


def main(out_dir: str) -> None:
    out = Path(out_dir)
    suite = ET.parse(out / "gpu-tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    outcomes = {}
    for case in suite.iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome = tag if tag != "skipped" else f"skipped: {element.get('message', '')}"
        outcomes[name] = outcome
    gpu_tests = {k: v for k, v in outcomes.items() if "test_gpu" in k}
    run_log = (out / "runtime-only-run.log").read_text()
    test_log = (out / "gpu-tests.log").read_text().strip().splitlines()
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "devices": (out / "devices.txt").read_text().strip().splitlines(),
        "tvm_runtime_only": os.environ.get("TVM_USE_RUNTIME_LIB") == "1",
        "tests": {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")},
        "pytest_process": test_log[-1] if test_log else None,
        "gpu_tests": {
            "total": len(gpu_tests),
            "passed": sum(v == "passed" for v in gpu_tests.values()),
            "failed": sum(v in ("failure", "error") for v in gpu_tests.values()),
            "skipped": sum(v.startswith("skipped") for v in gpu_tests.values()),
        },
        "runtime_only_simaccel_run": {"log": run_log.strip().splitlines(), "matched": "RESULT: match" in run_log},
        "outcomes": outcomes,
    }
    (out / "gpu-results.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: summary[k] for k in ("devices", "tests", "gpu_tests")}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
