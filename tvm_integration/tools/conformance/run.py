"""`simaccel conformance`: every model of a zoo through the whole BYOC flow, against TVM alone.

Where it sits: the CLI's `conformance` calls `run_conformance`. The models (conformance/zoo.py)
go out one per task (`model_task`, conformance/check.py) to an executor (tools/executors.py):
this process, or a Dask cluster whose workers keep TVM, torch and the compiled kernels warm.
A task whose worker dies, or runs past `--model-seconds`, is retried once and then reported as
that model's crash (or hang); the rest of the run goes on. Results are written after every
model to OUT/conformance.json, with OUT/conformance.md and OUT/conformance.html at the end;
`--compare OLD.json` flags what regressed since an earlier run. Exit status: 0 when no model
failed and nothing regressed, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ....errors import SimAccelError
from ....profile import PROFILE_ENV, active_profile
from ..backends import SIMACCEL, Backend, check_engines, engine_device
from ..common.retries import Retries, lost_twice
from ..common.runs import ContextLost, device_name
from ..common.settings import user_op_modules
from ..common.verdicts import CRASH, FAIL, HANG
from ..executors import ONE_AT_A_TIME, InProcess, Lost, end_worker, parse_cluster, time_limit
from .check import check_model, verdict
from .report import VERDICTS, html_page, load_results, markdown, model_verdict, run_regressions
from .zoo import zoo

MODEL_SECONDS = 1800  # on a cluster, a model running longer ends its worker: a hang


def default_engines(partition: str = SIMACCEL) -> list[str]:
    """Where a GPU is present, its engine ("native" for simaccel, "cuda" for another backend),
    else the CPU's ("ref", or "cpu")."""
    import tvm

    gpu = tvm.cuda(0).exist
    if partition == SIMACCEL:
        return ["native"] if gpu else ["ref"]
    return ["cuda"] if gpu else ["cpu"]


def model_task(job: dict, seconds: float) -> dict:
    """`check_model` as a task: one at a time per worker, ended past `seconds` (on a cluster)."""
    name = job["model"]["name"]
    event = {"model": name, "stage": HANG, "reason": f"the model ran past the limit of {seconds:g} s"}
    with ONE_AT_A_TIME, time_limit(seconds, event):
        try:
            return check_model(job)
        except ContextLost as e:
            if seconds:  # a new worker process gets a new GPU context
                end_worker({"model": name, "stage": CRASH, "reason": str(e)})
            raise


def run_conformance(sources=("relax", "torch"), user_models=(), engines=None, partition: str = SIMACCEL,
                    size: str = "small", only: str | None = None, out_dir="conformance-out", reload_every: int = 3,
                    repeat: int = 20, seed: int = 0, cluster: str | None = None, jobs: int = 1,
                    model_seconds: float = MODEL_SECONDS, compare_with: str | None = None, log=print) -> int:
    """Check every model of the zoo on `engines` against TVM alone; the exit status (0 clean, 1 not).

    `partition`: "simaccel" or another backend's partition function (MODULE:FUNCTION, tools/backends.py).
    `reload_every`: models i with i % reload_every == 0 are exported and run in a fresh process (0: none).
    `repeat`: timed warm calls per model on a GPU (0: not timed)."""
    from ..deploy import runtime_only

    if runtime_only():
        raise SimAccelError("simaccel conformance builds every model with TVM, which needs the full TVM (with its "
                            "compiler); this TVM is runtime-only (TVM_USE_RUNTIME_LIB=1)")
    backend = Backend(partition)
    engines = list(engines or default_engines(partition))
    check_engines(engines, backend, "conformance")
    if cluster is not None:
        parse_cluster(cluster)  # a malformed address: said before any model loads
    old = load_results(compare_with) if compare_with else None
    chosen = zoo(sources, user_models, size, only)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SimAccelError(f"--out {out_dir}: cannot create the folder: {e.strerror or e}") from e
    if cluster is None and jobs > 1:
        cluster = f"local:{jobs}"
    if cluster is None:
        executor, model_seconds = InProcess(), 0
    else:
        from ..executors import DaskExecutor

        executor = DaskExecutor(cluster, any(engine_device(e) == "cuda" for e in engines), model_seconds, log,
                                command="conformance")
    settings = {"engines": engines, "partition": backend.spec, "seed": seed, "repeat": repeat,
                "user_op_modules": user_op_modules(),
                "profile": active_profile().to_dict() if os.environ.get(PROFILE_ENV) else None}
    log(f"conformance: {len(chosen)} models ({', '.join(sorted({m.source for m in chosen}))}), backend {backend.name}, "
        f"engines {', '.join(engines)}, on {executor.name}"
        + (f" ({executor.workers} workers)" if executor.workers > 1 else ""))
    try:
        summary = _run(chosen, settings, executor, reload_every, model_seconds, out, log)
    finally:
        executor.close()
    summary.update(backend=backend.name, partition=backend.spec, zoo=list(sources) + (["user"] if user_models else []),
                   size=size)
    regressions, notes = run_regressions(summary, old) if old is not None else ([], [])
    if old is not None:
        summary["compared_with"] = {"path": str(compare_with), "regressions": regressions, "notes": notes}
    _write(out, summary)
    for line in notes:
        log(f"conformance: {line}")
    for line in regressions:
        log(f"REGRESSION: {line}")
    counts = ", ".join(f"{n} {verdict}" for verdict, n in summary["counts"].items() if n)
    log(f"conformance: {len(chosen)} models in {summary['seconds']:.0f} s ({summary['models_per_second']:.3f} "
        f"models/s): {counts}" + (f"; {len(regressions)} regression(s) against {compare_with}" if old is not None else "")
        + f"; {out / 'conformance.md'}")
    return 1 if summary["counts"][FAIL] or regressions else 0


def _run(chosen, settings: dict, executor, reload_every: int, seconds: float, out: Path, log) -> dict:
    start = time.monotonic()
    results: dict[str, dict] = {}
    retries = Retries(executor)  # a model whose worker is lost runs again once
    summary = _summary(chosen, settings, executor, results, start)
    jobs = {m.name: {**settings, "model": m.to_json(), "reload": bool(reload_every) and i % reload_every == 0}
            for i, m in enumerate(chosen)}
    for name, job in jobs.items():
        executor.submit(name, model_task, job, seconds)
    for name, result in executor.completed():
        if isinstance(result, Lost):
            if retries.again(name, model_task, jobs[name], seconds):
                log(f"conformance: the worker checking {name} was lost ({result}); retrying it")
                continue
            stage, error, reason = lost_twice(executor.events(), "model", name,
                                              f"the worker process died while checking it, twice ({result})")
            result = {"model": jobs[name]["model"], "engines": {}, "failure": verdict(FAIL, stage, error, reason)}
        results[name] = result
        summary = _summary(chosen, settings, executor, results, start)
        (out / "conformance.json").write_text(json.dumps(summary, indent=1))
        line = ", ".join(f"{e} {entry['verdict']}" + (f" {entry['ratio']:.2f}x" if "ratio" in entry else "")
                         for e, entry in result.get("engines", {}).items())
        log(f"[{len(results):>{len(str(len(chosen)))}}/{len(chosen)}] {name}: {model_verdict(result)}"
            + (f" ({line})" if line else "") + f" in {result.get('seconds', 0):.0f} s, "
            f"{len(results) / max(time.monotonic() - start, 1e-9):.3f} models/s")
    summary["retried"] = len(retries.retried)
    summary["retried_models"] = [name for name in jobs if name in retries.retried]
    return summary


def _summary(chosen, settings: dict, executor, results: dict, start: float) -> dict:
    done = [results[m.name] for m in chosen if m.name in results]
    counts = {verdict: 0 for verdict in VERDICTS}
    for result in done:
        counts[model_verdict(result)] += 1
    seconds = time.monotonic() - start
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": device_name(settings["engines"]),
            "engines": settings["engines"], "executor": executor.name, "workers": executor.workers,
            "seconds": round(seconds, 1), "models_per_second": round(len(done) / max(seconds, 1e-9), 4),
            "counts": counts, "settings": settings, "models": done}


def _write(out: Path, summary: dict) -> None:
    (out / "conformance.json").write_text(json.dumps(summary, indent=1))
    (out / "conformance.md").write_text(markdown(summary))
    (out / "conformance.html").write_text(html_page(summary))
