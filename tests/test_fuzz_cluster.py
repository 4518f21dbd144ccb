"""`simaccel fuzz` on a real Dask cluster: a scheduler and two worker processes on loopback,
started as a user starts them (`dask scheduler`, `dask worker`), the campaign run by the CLI.

A worker killed mid-campaign loses only its batch, which is retried; planted faults in users'
ops that only the workers show (tests/user_ops/campaign_faults.py) are found through the
cluster: a wrong result shrunk and reproduced, a crash and a hang each reported as its case.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import forks

pytest.importorskip("distributed", reason="the dask extra is not installed")

FAULTS = str(Path(__file__).resolve().parent / "user_ops" / "campaign_faults.py")
SCHEDULER_START = 60  # seconds


def _cli(*args, env=None):
    """`python -m` the CLI, its stderr merged into its stdout, as a fork of a process that
    imported it (tests/forks.py); Popen's poll, communicate and returncode."""
    return forks.start([sys.executable, "-m", forks.CLI, *args], env={**os.environ, **(env or {})}, cwd="/",
                       stderr_to_stdout=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A Dask scheduler and two single-threaded worker processes (under one nanny each) on
    127.0.0.1; the workers' processes show the planted faults. Yields the scheduler's address."""
    folder = tmp_path_factory.mktemp("dask")
    scheduler_file = folder / "scheduler.json"
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    logs = [open(folder / "scheduler.log", "w"), open(folder / "workers.log", "w")]
    scheduler = subprocess.Popen([*dask, "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                  "--scheduler-file", str(scheduler_file)], stdout=logs[0], stderr=subprocess.STDOUT,
                                 cwd=folder)
    deadline = time.monotonic() + SCHEDULER_START
    while not scheduler_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert scheduler_file.exists(), (folder / "scheduler.log").read_text()
    address = json.loads(scheduler_file.read_text())["address"]
    workers = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "2",
                                "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"],
                               stdout=logs[1], stderr=subprocess.STDOUT, cwd=folder,
                               env={**os.environ, "SIMACCEL_TEST_FAULTS": "wrong,crash,hang"})
    try:
        yield address
    finally:
        for process in (workers, scheduler):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs:
            log.close()


def _summary(out: Path) -> dict:
    return json.loads((out / "fuzz-summary.json").read_text())


def test_a_worker_killed_mid_campaign_loses_only_its_batch(cluster, tmp_path):
    from distributed import Client

    out = tmp_path / "out"
    run = _cli("fuzz", "--cluster", cluster, "--cases", "12", "--seed", "3", "--batch-size", "3", "--engine", "ref",
               "--export-every", "6", "--out", str(out))
    with Client(cluster, timeout="30s") as client:
        deadline = time.monotonic() + 120
        busy = {}
        while not busy and time.monotonic() < deadline and run.poll() is None:
            busy = {worker: keys for worker, keys in client.processing().items()
                    if any(str(k).startswith("simaccel-fuzz-") for k in keys)}
            time.sleep(0.2)
        assert busy, "no batch ever reached a worker"
        victim = next(iter(busy))
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
    output, _ = run.communicate(timeout=600)
    assert run.returncode == 0, output
    summary = _summary(out)
    assert summary["cases"] == 12 and summary["counts"]["failed"] == 0, summary["counts"]
    assert summary["retried_batches"] >= 1 and "retrying the batch" in output, output
    assert summary["workers"] == 2 and summary["executor"].startswith("the Dask cluster at tcp://127.0.0.1")
    assert summary["reloaded_in_fresh_process"] == 2  # cases 0 and 6, on the workers
    assert "cases/s" in output.strip().splitlines()[-1]


def test_planted_faults_are_found_shrunk_and_reproduced_through_the_cluster(cluster, tmp_path):
    """Seed 32's first 10 cases (float32) hold faults.trunc in cases 1, 2 and 3, faults.round on
    a 3-D input in case 6 and faults.sign on one in case 9, each on an output's path (the ops'
    draws, checked here; seed 0's moved off the outputs' paths when the generator learnt the
    decoder ops)."""
    from simaccel.tvm_integration.tools.fuzz import Campaign
    from simaccel.tvm_integration.tools.fuzz.campaign import draw

    out = tmp_path / "out"
    run = _cli("fuzz", "--cluster", cluster, "--cases", "10", "--seed", "32", "--batch-size", "2", "--engine", "ref",
               "--dtype", "float32", "--export-every", "0", "--case-seconds", "8", "--shrink-seconds", "60",
               "--out", str(out), env={"SIMACCEL_OPS": FAULTS})
    output, _ = run.communicate(timeout=900)
    assert run.returncode == 1, output
    summary = _summary(out)
    by_stage = {f["stage"]: f for f in summary["failures"]}
    assert set(by_stage) >= {"output (ref)", "crash", "hang"}, [f["signature"] for f in summary["failures"]]

    wrong = by_stage["output (ref)"]
    assert "faults.trunc" in wrong["signature"] and wrong["error"] == "mismatch"
    assert set(wrong["cases"]) >= {1, 2, 3} and wrong["tried"] > 0
    folder = Path(wrong["reproduction"])
    saved = json.loads((folder / "case.json").read_text())
    with_ops = {**os.environ, "SIMACCEL_OPS": FAULTS}
    campaign = Campaign.from_json(summary["campaign"])
    original = draw(campaign, wrong["index"])[0]
    assert len(saved["case"]["values"]) < len(original.values), "not shrunk"
    assert "faults.trunc" in (folder / "model.py").read_text()
    # Reproduced where the fault is (exit 1: still failing), passing where it is not.
    for faults, status in (("wrong", 1), ("", 0)):
        result = forks.run([sys.executable, str(folder / "repro.py")], timeout=300, cwd="/",
                           env={**with_ops, "SIMACCEL_TEST_FAULTS": faults})
        assert result.returncode == status, result.stdout + result.stderr

    crash, hang = by_stage["crash"], by_stage["hang"]
    assert crash["cases"] == [6] and "faults.round" in crash["signature"] and "died" in crash["reason"]
    assert hang["cases"] == [9] and "faults.sign" in hang["signature"] and "limit of 8 s" in hang["reason"]
    # The crash's reproduction replays the crash (the replaying process dies the same way).
    result = forks.run([sys.executable, str(Path(crash["reproduction"]) / "repro.py")], timeout=300, cwd="/",
                       env={**with_ops, "SIMACCEL_TEST_FAULTS": "crash"})
    assert result.returncode == 3, result.stdout + result.stderr
    assert summary["counts"]["failed"] == 5 and summary["cases"] == 10, summary["counts"]
    report = (out / "fuzz-report.md").read_text()
    assert "## Distinct failures: 3" in report and "faults.trunc" in report


def test_a_conformance_run_on_the_cluster_reports_a_hung_model_and_checks_the_rest(cluster, tmp_path):
    """tests/user_models/sleeper.py hangs where the workers load it; the run retries it once,
    reports it as a hang past --model-seconds, and the other models pass on the workers."""
    out = tmp_path / "out"
    sleeper = Path(__file__).resolve().parent / "user_models" / "sleeper.py"
    run = _cli("conformance", "--cluster", cluster, "--zoo", "relax", "--only", "matmul_relu,hetero_chain,sleeper",
               "--models", str(sleeper), "--model-seconds", "15", "--reload-every", "2", "--out", str(out))
    output, _ = run.communicate(timeout=600)
    assert run.returncode == 1, output
    results = json.loads((out / "conformance.json").read_text())
    assert results["executor"].startswith("the Dask cluster at tcp://127.0.0.1") and results["workers"] == 2
    models = {r["model"]["name"]: r for r in results["models"]}
    assert list(models) == ["hetero_chain", "matmul_relu", "sleeper"]  # the zoo's order, not the finishing order
    for name in ("hetero_chain", "matmul_relu"):
        assert models[name]["engines"]["ref"]["verdict"] == "passed", models[name]
    assert models["hetero_chain"]["engines"]["ref"]["reload"]["verdict"] == "passed"  # model 0, on a worker
    hang = models["sleeper"]["failure"]
    assert hang["stage"] == "hang" and "limit of 15 s" in hang["reason"], hang
    # the sleeper was retried; on a loaded machine another model may have needed its retry too
    assert "sleeper" in results["retried_models"] and results["retried"] == len(results["retried_models"])
    assert "the worker checking sleeper was lost" in output and "retrying it" in output
    assert "sleeper" in (out / "conformance.md").read_text().split("## Failures: 1")[1]
