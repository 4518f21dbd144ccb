"""`simaccel fuzz` as a campaign: cases drawn from one seed, checked in batches, failures told
apart by signature, shrunk and saved.

Where it sits: the CLI's `fuzz` calls `run_fuzz`. Case i of a campaign is the model drawn
with numpy's generator seeded with (seed, i) (fuzz/models.py), so a campaign is the same
wherever and in whatever order its cases run. The cases go out in batches, tasks of
`check_batch`, to an executor: this process, or a Dask cluster (tools/executors.py), whose
workers keep TVM and the compiled kernels warm between tasks. A batch whose worker dies or
hangs is retried once; lost again, its cases run one by one, and the one that kills its worker
(a third time: twice in its batch, once alone) is reported as a crash (or a hang past the
per-case time limit) with its index. Every finished
batch is saved in OUT/batches/, so an interrupted campaign resumes (`--resume`). The console
carries progress and results only: what the cases write on stderr (TVM's C++ log) is kept
with their records (`check_batch`).

Failures are told apart by signature: stage (build, run, output, reload, crash, hang), error
(the exception's class, or "mismatch") and the op kinds of the model. One of each signature is
shrunk, as a task too (fuzz/shrink.py); the shrunk models are grouped again by signature, and
each distinct failure gets a folder under OUT/failures/ with its reproduction
(fuzz/repro.py) and the indices of every case that showed it. OUT/fuzz-summary.json and
OUT/fuzz-report.md sum it up. Exit status: 0 when no case failed, 1 otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ....errors import EngineError, SimAccelError
from ....ops import USER_OPS_ENV
from ....profile import PROFILE_ENV, active_profile
from ....runtime import AUTO, ENGINE_ENV
from ..executors import ONE_AT_A_TIME, InProcess, Lost, end_worker, parse_cluster, time_limit
from ..backends import SIMACCEL, Backend, check_engines, engine_device
from ..common.retries import Retries, lost_twice
from ..common.runs import ContextLost, device_name
from ..common.settings import saved_settings, user_op_modules, user_ops_environ
from ..common.stderr_log import LOG_DISTINCT_KEPT, stderr_captured
from ..common.verdicts import CRASH, FAIL, HANG, PASS, RELOAD, SKIP, TVM_OFF, report_head, run_line
from .check import Checker, Outcome
from .case import symbolic_twin
from .models import Case, Config, Draw, draw_case, drawable_user_families, user_families
from .repro import save_reproduction

BATCH_SIZE = 10  # cases per task in this process (and the most per task on a cluster)
CASE_SECONDS = 600  # the per-case time limit on a cluster's workers
TVM_OFF_SAVED = 3  # cases where TVM alone is the one off, saved as evidence for a TVM report


@dataclass(frozen=True)
class Campaign:
    """What a campaign draws and checks: everything a worker needs to redo any of its cases."""

    seed: int
    cases: int
    engines: tuple
    dtypes: tuple
    max_ops: int = 8
    export_every: int = 25  # cases i with i % export_every == 0 are exported and reloaded (0: none)
    batch_size: int = BATCH_SIZE
    user_op_modules: tuple = ()
    profile: dict | None = None  # the device profile, where $SIMACCEL_PROFILE set one
    partition: str = SIMACCEL  # the backend checked: simaccel, or another's partition function (backends.py)
    symbolic: bool = False  # each case that can takes symbolic sizes, built once, run at several

    def config(self) -> Config:
        # On the GPU: no NaN/inf inputs (TVM's CUDA build takes max() as fmaxf, which drops NaN,
        # where its CPU build, and simaccel on every engine, keeps it: docs/design.md) and no
        # zero-size dims (TVM's CUDA build refuses most of them: "Divide by zero").
        gpu = any(engine_device(e) == "cuda" for e in self.engines)
        return Config(dtypes=tuple(self.dtypes), max_ops=self.max_ops, tiny="sim" in self.engines,
                      specials_percent=0 if gpu else Config.specials_percent,
                      zero_dim_percent=0 if gpu else Config.zero_dim_percent)

    def batches(self) -> list[tuple[int, int]]:
        """(first case, number of cases) of every batch."""
        return [(first, min(self.batch_size, self.cases - first)) for first in range(0, self.cases, self.batch_size)]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Campaign":
        return cls(**{**data, "engines": tuple(data["engines"]), "dtypes": tuple(data["dtypes"]),
                      "user_op_modules": tuple(data["user_op_modules"])})


def draw(campaign: Campaign, index: int, choices=None) -> tuple[Case, Draw]:
    """Case `index` of `campaign` (or the case `choices` draw), and the draw that made it (its
    `choices` and `spans`)."""
    source = Draw.seeded([campaign.seed, index]) if choices is None else Draw.replay(choices)
    case = draw_case(source, campaign.config())
    if campaign.symbolic:
        case = symbolic_twin(case)
    return case, source


# -- tasks: what a worker (or this process) runs -------------------------------------------------
def _result(index: int, case: Case, made: Draw, outcome: Outcome) -> dict:
    return {"index": index, **outcome.to_json(), "ops": sorted(set(case.ops)), "case": case.describe(),
            "choices": list(made.choices), "spans": [list(span) for span in made.spans]}


def check_batch(campaign_json: dict, first: int, count: int, case_seconds: float = 0,
                running: str | None = None) -> dict:
    """Check cases first .. first + count - 1 of the campaign; what they gave (a task).

    `case_seconds`: a case running longer ends this process (a cluster's worker: its nanny
    starts a new one, and the campaign learns of it). `running`: a folder where the case being
    checked is saved first and removed after, so a case that kills this process is left there.
    What a case writes on stderr (TVM's C++ log, written to file descriptor 2) is captured
    (`check.stderr_captured`), not shown: counted, a few distinct lines kept for the summary, a
    case that does not pass keeps its last lines in its record."""
    campaign = Campaign.from_json(campaign_json)
    start = time.monotonic()
    with _worker_checker(campaign, "simaccel-fuzz-") as checker:
        counts: Counter = Counter()
        found: dict[int, dict] = {}
        logged, sample = 0, []  # lines the cases wrote on stderr (TVM's C++ log among them), kept off the console
        symbolic = sizes = 0  # cases with symbolic sizes, and the size points they ran at in all
        for index in range(first, first + count):
            case, made = draw(campaign, index)
            if case.size_vars():
                symbolic, sizes = symbolic + 1, sizes + len(case.size_points())
            export = index if campaign.export_every and index % campaign.export_every == 0 else None
            left = save_reproduction(case, Outcome("crashed", "the process died while checking this case"),
                                     campaign.engines, running, partition=campaign.partition) if running else None
            with time_limit(case_seconds, _hang(index, case_seconds)), stderr_captured(left or checker.workdir) as log:
                try:
                    outcome = checker.check(case, export=export)
                except ContextLost as e:
                    if case_seconds:  # on a cluster: a new worker process gets a new GPU context
                        end_worker({"index": index, "stage": CRASH, "reason": str(e)})
                    raise
            if left is not None:
                shutil.rmtree(left, ignore_errors=True)
                if not any(left.parent.iterdir()):
                    left.parent.rmdir()  # no case left running: no empty folder left behind
            counts[outcome.verdict] += 1
            logged += log.count
            sample += [line for line in log.distinct if line not in sample][:LOG_DISTINCT_KEPT - len(sample)]
            if outcome.verdict != PASS:
                found[index] = {**_result(index, case, made, outcome), **log.to_json()}
        reloaded = len(checker.exported)
        reloaded_user = sum(bool(case.user_ops) for _, case, _, _ in checker.exported)
        for index, case, outcome in checker.check_exported():
            counts[found[index]["verdict"] if index in found else PASS] -= 1
            counts[FAIL] += 1
            found[index] = _result(index, case, draw(campaign, index)[1], outcome)
    return {"first": first, "count": count, "counts": dict(counts), "found": [found[i] for i in sorted(found)],
            "reloaded": reloaded, "reloaded_with_user_ops": reloaded_user, "stderr_lines": logged,
            "stderr_sample": sample, "symbolic": symbolic, "symbolic_sizes": sizes,
            "with_regions": checker.with_regions, "ops": dict(checker.ops), "user_ops": dict(checker.user_ops),
            "seconds": round(time.monotonic() - start, 2), "worker": f"{os.uname().nodename}:{os.getpid()}",
            "profile": active_profile().name}


def shrink_failure(campaign_json: dict, failure: dict, seconds: float, case_seconds: float = 0) -> dict:
    """Shrink a failure found by `check_batch` (a task): the smallest choices found that draw a
    case failing at the same stage with the same error, that case's outcome, and the candidates tried."""
    from .shrink import shrink

    campaign = Campaign.from_json(campaign_json)
    stage, error = failure["stage"], failure["error"]
    outcomes: dict[tuple, Outcome] = {}
    with _worker_checker(campaign, "simaccel-shrink-") as checker:

        def fails(candidate):
            case, made = draw(campaign, failure["index"], candidate)
            with time_limit(case_seconds, _hang(failure["index"], case_seconds)), stderr_captured(checker.workdir):
                outcome = checker.check(case, count=False, export=0 if stage == RELOAD else None)
                if stage == RELOAD and outcome.verdict != FAIL:
                    outcome = next((o for _, _, o in checker.check_exported()), outcome)
                checker.exported.clear()
            if outcome.verdict == FAIL and (outcome.stage, outcome.error) == (stage, error):
                outcomes[tuple(made.choices)] = outcome
                return made.choices, made.spans
            return None

        spans = [tuple(span) for span in failure["spans"]]
        choices, tried = shrink(failure["choices"], spans, fails, seconds)
    case, made = draw(campaign, failure["index"], choices)
    outcome = outcomes.get(tuple(made.choices))
    shrunk = _result(failure["index"], case, made, outcome) if outcome else dict(failure)
    return {**shrunk, "tried": tried}


@contextlib.contextmanager
def _worker_checker(campaign: Campaign, prefix: str):
    """A task's `Checker`: one task at a time in this process, the campaign's users' ops and
    device profile set, a temporary folder for its exported libraries."""
    with ONE_AT_A_TIME, saved_settings(list(campaign.user_op_modules), campaign.profile, "fuzz worker", log=_quiet), \
            tempfile.TemporaryDirectory(prefix=prefix) as workdir:
        yield Checker(campaign.engines, workdir, Backend(campaign.partition))


def _quiet(_line) -> None:
    pass


def _hang(index: int, seconds: float) -> dict:
    """The worker event of case `index` past the per-case time limit."""
    return {"index": index, "stage": HANG, "reason": f"the case ran past the per-case limit of {seconds:g} s"}


# -- the campaign ----------------------------------------------------------------------------------
@dataclass
class Tally:
    counts: dict = field(default_factory=lambda: {PASS: 0, SKIP: 0, TVM_OFF: 0, FAIL: 0})

    def add(self, counts: dict) -> None:
        for verdict, n in counts.items():
            self.counts[verdict] = self.counts.get(verdict, 0) + n

    def line(self) -> str:
        return ", ".join(f"{n} {verdict}" for verdict, n in self.counts.items() if n or verdict in (PASS, FAIL))


def run_fuzz(cases: int = 100, seed: int = 0, engines=("ref",), dtypes=("float32", "float16"), max_ops: int = 8,
             out_dir="fuzz-out", export_every: int = 25, shrink_seconds: float = 300, jobs: int = 1, log=print,
             cluster: str | None = None, batch_size: int | None = None, case_seconds: float = CASE_SECONDS,
             resume: bool = False, partition: str = SIMACCEL, symbolic: bool = False) -> int:
    """Fuzz `cases` models on `engines`; returns the exit status (0 clean, 1 a failure).

    `partition`: the backend checked against TVM alone, simaccel or another backend's
    partition function (MODULE:FUNCTION, tools/backends.py; its engines are cpu and cuda).

    `cluster`: None (this process; "local:JOBS" when `jobs` > 1), "local[:N]" (a Dask cluster
    of N worker processes on this machine) or a Dask scheduler's address (tcp://HOST:PORT).
    `resume`: continue the campaign saved in `out_dir` (its settings, not these).
    `symbolic`: each case whose first input has a leading dim (and no op reads sizes from its
    attributes) makes that dim a size var n in [1, 2 * drawn + 3], and its axis 1 a var s
    likewise where it has rank 3 or more (`symbolic_twin`): one build of each, run at each of
    its size points (`Case.size_points`), each against TVM alone."""
    from ..deploy import runtime_only

    if runtime_only():
        raise SimAccelError(
            "simaccel fuzz builds every model with TVM, which needs the full TVM (with its compiler); "
            "this TVM is runtime-only (TVM_USE_RUNTIME_LIB=1)"
        )
    out = Path(out_dir)
    campaign = _load(out) if resume else Campaign(
        seed, cases, tuple(engines), tuple(dtypes), max_ops, export_every, batch_size or BATCH_SIZE,
        tuple(user_op_modules()), active_profile().to_dict() if os.environ.get(PROFILE_ENV) else None, partition,
        symbolic)
    _check_settings(campaign)
    if cluster is None and jobs > 1:
        cluster = f"local:{jobs}"
    if cluster is not None:
        parse_cluster(cluster)  # a malformed address: said before any work
    _check_reachable(campaign, bool(campaign.export_every) or cluster is not None)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SimAccelError(f"--out {out_dir}: cannot create the folder: {e.strerror or e}") from e
    if cluster is None:
        executor = InProcess(out / "running")
    else:
        from ..executors import DaskExecutor

        gpu = any(engine_device(e) == "cuda" for e in campaign.engines)
        executor = DaskExecutor(cluster, gpu, case_seconds, log)
    try:
        if not resume and batch_size is None and executor.workers > 1:  # about four tasks per worker
            campaign = replace(campaign, batch_size=max(1, min(BATCH_SIZE, -(-campaign.cases // (4 * executor.workers)))))
        return _run(campaign, executor, out, shrink_seconds, resume, log)
    finally:
        executor.close()


def _check_settings(campaign: Campaign) -> None:
    from ....engines import ENGINE_NAMES

    # fuzz's engines are its `engines`; $SIMACCEL_ENGINE chooses none of them, but a value no
    # engine has is a mistake to say, as demo and run say it (the "native" engine reads it)
    named = os.environ.get(ENGINE_ENV)
    if named and named not in (AUTO, *ENGINE_NAMES):
        raise EngineError(f"unknown {ENGINE_ENV} value {named!r}; choose one of {AUTO}, {', '.join(ENGINE_NAMES)}")
    check_engines(campaign.engines, Backend(campaign.partition), "fuzz")
    drawable_user_families(campaign.config())  # each user op it cannot draw: say why, before any case


def _check_reachable(campaign: Campaign, in_other_processes: bool) -> None:
    """Where cases run or are checked again in other processes (workers; every `export_every`-th
    case reloaded in a fresh one), a users' op the campaign draws must be declared there too:
    one declared only in this process, not in a module of $SIMACCEL_OPS, would make every such
    case that draws it a false failure."""
    drawn = user_families() if campaign.config().user_ops else []
    if not drawn or not in_other_processes:
        return
    import subprocess

    listing = ("from simaccel.ops import families\nfrom simaccel.ops.registry import load_user_ops\n"
               "load_user_ops()\nprint('\\n'.join(f.name for f in families()))")
    result = subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, timeout=300,
                            env=user_ops_environ())
    if result.returncode != 0:
        raise SimAccelError(f"simaccel fuzz: a fresh process cannot import the users' ops of ${USER_OPS_ENV} "
                            f"({os.environ.get(USER_OPS_ENV, '')!r}): {result.stderr.strip().splitlines()[-1:]}")
    missing = sorted({f.name for f in drawn} - set(result.stdout.split()))
    if missing:
        raise SimAccelError(f"simaccel fuzz would draw {', '.join(missing)}, declared in this process only: each case is "
                            f"checked again in a fresh process, which knows only the ops of the modules ${USER_OPS_ENV} "
                            f"names ({os.environ.get(USER_OPS_ENV, '') or 'unset'}); name the module that declares them "
                            f"there (a module name or a .py path)")


def _load(out: Path) -> Campaign:
    try:
        return Campaign.from_json(json.loads((out / "campaign.json").read_text()))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SimAccelError(f"--resume: {out} holds no simaccel fuzz campaign to resume (campaign.json: {e})") from e


def _run(campaign: Campaign, executor, out: Path, shrink_seconds: float, resume: bool, log) -> int:
    start = time.monotonic()
    batches_dir = out / "batches"
    if not resume:
        for old in ("batches", "failures", "tvm-off", "running", "fuzz-summary.json", "fuzz-report.md"):
            shutil.rmtree(out / old, ignore_errors=True) if (out / old).is_dir() else (out / old).unlink(missing_ok=True)
    batches_dir.mkdir(parents=True, exist_ok=True)
    (out / "campaign.json").write_text(json.dumps(campaign.to_json(), indent=1))
    done = {}
    for path in sorted(batches_dir.glob("batch-*.json")):
        result = json.loads(path.read_text())
        done[result["first"]] = result
    log(f"fuzz: {campaign.cases} cases, seed {campaign.seed}, backend {Backend(campaign.partition).name}, "
        f"engines {', '.join(campaign.engines)}, "
        f"dtypes {', '.join(campaign.dtypes)}, on {executor.name}"
        + (f" ({executor.workers} workers, batches of {campaign.batch_size})" if executor.workers > 1 else ""))
    drawn = _log_settings(campaign, log)
    if resume:
        log(f"fuzz: resuming the campaign in {out}: {len(done)} of {len(campaign.batches())} batches done")
    tally, progress = Tally(), _Progress(campaign.cases, log, out / "progress.json")
    for result in done.values():
        tally.add(result["counts"])
    crashes: list[dict] = []
    retries = Retries(executor)  # a lost batch runs again once; lost twice, case by case
    where = (executor.case_seconds, executor.running)
    for first, count in campaign.batches():
        if first not in done:
            executor.submit(("batch", first, count), check_batch, campaign.to_json(), first, count, *where)
    for key, result in executor.completed():
        kind, first, count = key
        if isinstance(result, Lost):
            if kind == "batch" and retries.again(key, check_batch, campaign.to_json(), first, count, *where):
                log(f"fuzz: the worker checking cases {first}..{first + count - 1} was lost ({result}); "
                    "retrying the batch")
            elif count > 1:  # lost twice: one case at a time finds the one at fault
                for index in range(first, first + count):
                    executor.submit(("case", index, 1), check_batch, campaign.to_json(), index, 1, *where)
            else:
                crashes.append(_crash(campaign, first, executor.events(), str(result)))
                tally.add({FAIL: 1})
                progress.update(tally)
            continue
        if kind == "batch":
            (batches_dir / f"batch-{first:07d}.json").write_text(json.dumps(result))
        done[first] = result
        tally.add(result["counts"])
        progress.update(tally)
    progress.done()
    results = [done[k] for k in sorted(done)]
    found = [f for r in results for f in r["found"]] + crashes
    failures = _distinct_failures(campaign, [f for f in found if f["verdict"] == FAIL], executor, shrink_seconds, log)
    saved = _save(campaign, failures, [f for f in found if f["verdict"] == TVM_OFF], out)
    seconds = time.monotonic() - start
    summary = _summary(campaign, executor, results, tally, saved, len(retries.retried), seconds, drawn)
    (out / "fuzz-summary.json").write_text(json.dumps(summary, indent=1))
    (out / "fuzz-report.md").write_text(_report(summary))
    for failure in saved:
        log(f"FAILED ({failure['signature']}): {failure['reason']}\n  cases {_indices(failure['cases'])}; "
            f"smallest failing case ({failure['tried']} shrink candidates tried): {failure['case']}\n"
            f"  reproduction: {failure['reproduction']}  (python {failure['reproduction']}/repro.py)")
    log(f"fuzz: {summary['cases']} cases in {seconds:.0f} s on {', '.join(campaign.engines)}"
        + (f" ({executor.workers} workers, {summary['cases_per_second']:.2f} cases/s)" if executor.workers > 1 else "")
        + f": {tally.line()}; {summary['cases_with_simaccel_regions']} ran simaccel regions "
        f"({sum(summary['simaccel_ops_run'].values())} ops); " + _user_ops_line(summary["user_ops_in_models"])
        + (f"{summary['symbolic_cases']} with symbolic sizes, one build each run at {summary['symbolic_sizes_run']} "
           "sizes in all; " if campaign.symbolic else "")
        + (f"{len(saved)} distinct failure(s); " if saved else "")
        + f"{summary['reloaded_in_fresh_process']} exported and run again in a fresh process"
        + ("" if saved else ", all matched"))
    return 1 if saved else 0


def _crash(campaign: Campaign, index: int, events: list[dict], lost: str) -> dict:
    """The failure of a case that killed its worker (twice), as `check_batch` reports others."""
    stage, error, reason = lost_twice(events, "index", index, f"the worker process died while checking this case ({lost})")
    case, made = draw(campaign, index)
    return _result(index, case, made, Outcome(FAIL, reason, stage, error))


def _signature(failure: dict) -> str:
    return f"{failure['stage']}: {failure['error']} [{', '.join(failure['ops'])}]"


def _distinct_failures(campaign: Campaign, found: list[dict], executor, shrink_seconds: float, log) -> list[dict]:
    """One failure per signature, shrunk, with the indices of every case that showed it."""
    groups: dict[str, list[dict]] = {}
    for failure in sorted(found, key=lambda f: f["index"]):
        groups.setdefault(_signature(failure), []).append(failure)
    shrunk = {}
    for signature, members in groups.items():
        first = members[0]
        if first["stage"] in (CRASH, HANG) or shrink_seconds <= 0:
            shrunk[signature] = {**first, "tried": 0}
        else:
            executor.submit(("shrink", signature, 0), shrink_failure, campaign.to_json(), first, shrink_seconds,
                            executor.case_seconds)
    if len(shrunk) < len(groups):
        log(f"fuzz: shrinking {len(groups) - len(shrunk)} distinct failure(s) (at most {shrink_seconds:.0f} s each) ...")
    for (_, signature, _), result in executor.completed():
        shrunk[signature] = {**groups[signature][0], "tried": 0} if isinstance(result, Lost) else result
    distinct: dict[str, dict] = {}
    for signature, members in groups.items():
        small = shrunk[signature]
        merged = distinct.setdefault(_signature(small), {**small, "signature": _signature(small), "cases": []})
        merged["cases"] = sorted(merged["cases"] + [m["index"] for m in members])
    return list(distinct.values())


def _save(campaign: Campaign, failures: list[dict], tvm_off: list[dict], out: Path) -> list[dict]:
    """Reproductions: OUT/failures/<n>-<signature>/ per distinct failure, OUT/tvm-off/ for a few."""
    saved = []
    for n, failure in enumerate(failures, 1):
        case, _ = draw(campaign, failure["index"], failure["choices"])
        outcome = Outcome(FAIL, failure["reason"], failure["stage"], failure["error"])
        slug = re.sub(r"[^a-z0-9]+", "-", f"{failure['stage']} {failure['error']} {' '.join(failure['ops'])}".lower())
        folder = save_reproduction(case, outcome, campaign.engines, out / "failures", name=f"{n}-{slug.strip('-')[:60]}",
                                   partition=campaign.partition)
        saved.append({key: failure[key] for key in ("signature", "stage", "error", "reason", "case", "cases", "tried")}
                     | {"index": failure["index"], "reproduction": str(folder)})
    for failure in sorted(tvm_off, key=lambda f: f["index"])[:TVM_OFF_SAVED]:
        case, _ = draw(campaign, failure["index"])
        save_reproduction(case, Outcome(TVM_OFF, failure["reason"]), campaign.engines, out / "tvm-off",
                          partition=campaign.partition)
    return saved


def _summary(campaign: Campaign, executor, results, tally: Tally, saved, retried: int, seconds: float, drawn) -> dict:
    ops, user_ops = Counter(), Counter()
    for r in results:
        ops.update(r["ops"])
        user_ops.update(r["user_ops"])
    examples: dict = {}
    for r in results:
        for f in r["found"]:
            if len(examples.setdefault(f["verdict"], [])) < 5:
                examples[f["verdict"]].append(f["reason"])
    cases = sum(tally.counts.values())
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": device_name(campaign.engines),
        "campaign": campaign.to_json(), "seed": campaign.seed, "cases": cases, "engines": list(campaign.engines),
        "dtypes": list(campaign.dtypes), "executor": executor.name, "workers": executor.workers,
        "seconds": round(seconds, 1), "cases_per_second": round(cases / max(seconds, 1e-9), 3),
        "batches": len(campaign.batches()), "retried_batches": retried,
        "counts": tally.counts, "examples": examples,
        "reloaded_in_fresh_process": sum(r["reloaded"] for r in results),
        "reloaded_with_user_ops": sum(r["reloaded_with_user_ops"] for r in results),
        # what the cases wrote on stderr (TVM's C++ log: "Scope Saving:", ...), kept off the console:
        # how many lines, and some distinct ones (a failing case's last lines are in its record)
        "case_stderr_lines": sum(r.get("stderr_lines", 0) for r in results),
        "case_stderr_sample": list(dict.fromkeys(line for r in results for line in r.get("stderr_sample", [])))[:10],
        "cases_with_simaccel_regions": sum(r["with_regions"] for r in results),
        "symbolic_cases": sum(r.get("symbolic", 0) for r in results),
        "symbolic_sizes_run": sum(r.get("symbolic_sizes", 0) for r in results),
        "simaccel_ops_run": dict(sorted(ops.items())), "user_op_modules": list(campaign.user_op_modules),
        "user_ops_in_models": _user_op_counts(drawn, user_ops), "profile": active_profile().to_dict(),
        "profiles_on_workers": sorted({r["profile"] for r in results}),
        "failures": saved,
    }


def _report(summary: dict) -> str:
    lines = report_head(f"simaccel fuzz: {summary['cases']} cases, seed {summary['seed']}", summary,
                        f"{run_line(summary)}, {summary['cases_per_second']:.2f} cases/s; "
                        f"{summary['retried_batches']} batch(es) retried.", "cases")
    lines += ["", f"## Distinct failures: {len(summary['failures'])}", ""]
    if summary["failures"]:
        lines += ["| signature | cases | smallest failing case | reproduction |", "|---|---|---|---|"]
        lines += [f"| {f['signature']} | {_indices(f['cases'])} | {f['case']} | `{f['reproduction']}` |"
                  for f in summary["failures"]]
        lines += [""] + [f"- **{f['signature']}**: {f['reason']}" for f in summary["failures"]]
    else:
        lines.append("None: every case matched TVM alone.")
    return "\n".join(lines) + "\n"


def _indices(indices: list[int]) -> str:
    shown = ", ".join(str(i) for i in indices[:10])
    return shown + (f" and {len(indices) - 10} more" if len(indices) > 10 else "")


def _log_settings(campaign: Campaign, log) -> list[str]:
    """Say which users' ops are drawn and which device profile partitions; the drawn ops."""
    drawn = [f.name for f in user_families()]
    if drawn:
        log(f"fuzz: users' ops drawn too: {', '.join(drawn)} (${USER_OPS_ENV}={','.join(campaign.user_op_modules)})")
    if campaign.profile is not None:
        log(f"fuzz: partitioning for device profile {campaign.profile.get('name')!r}"
            + (f" (${PROFILE_ENV}={os.environ[PROFILE_ENV]})" if os.environ.get(PROFILE_ENV) else ""))
    return drawn


def _user_op_counts(drawn, counts: Counter) -> dict:
    """Models that held each user op: every drawable one (0 where none did), then any other."""
    return {name: counts.get(name, 0) for name in [*drawn, *sorted(set(counts) - set(drawn))]}


def _user_ops_line(counts: dict) -> str:
    if not counts:
        return ""
    return "users' ops in models: " + ", ".join(f"{name} {n}" for name, n in counts.items()) + "; "


class _Progress:
    """A one-line progress bar on a terminal, a line every 10% elsewhere; also kept in `path`."""

    def __init__(self, total: int, log, path: Path | None = None):
        self.total, self.log, self.start, self.path = total, log, time.monotonic(), path
        self.tty = sys.stderr.isatty()
        self.reported = 0

    def update(self, tally: Tally) -> None:
        if self.path is not None:
            self.path.write_text(json.dumps(tally.counts))
        done = sum(tally.counts.values())
        rate = done / max(time.monotonic() - self.start, 1e-9)
        left = (self.total - done) / rate if rate else 0
        text = (f"[{done:>{len(str(self.total))}}/{self.total}] {tally.line()}  "
                f"({rate:.2f} cases/s, ~{left / 60:.0f} min left)")
        if self.tty:
            print("\r" + text, end="", file=sys.stderr, flush=True)
        elif done * 10 // self.total > self.reported:
            self.reported = done * 10 // self.total
            self.log(text)

    def done(self) -> None:
        if self.tty:
            print(file=sys.stderr)

