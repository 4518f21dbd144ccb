"""`simaccel fuzz`: random Relax models, built with simaccel and with TVM alone, compared.

Each case (simaccel.tvm_integration.tools.fuzz_models) is built twice for its device, with simaccel
and with TVM alone, and run on the same inputs on every engine asked for (`ref` and `sim` on
the CPU; on a GPU `native`, the build's native regions, and `cuda`, the same regions routed
to the Python engine). A sample is also exported and run again in a fresh process that
imports only TVM. A case that TVM alone cannot build or run is skipped (TVM's fault, not
simaccel's); a result that differs from TVM's is checked against the case's float64
reference before it counts as simaccel's failure: where TVM's own result is the further from
it (float16 overflow, accumulation order), the case is counted as "TVM numerically off".

The drawing is done by hypothesis, so the first failure is shrunk (for at most
`shrink_seconds`) to a smaller model that still fails, and saved as a runnable reproduction:
the model as TVMScript, its inputs, the case as JSON and a `repro.py` that checks it again.
The first three cases where TVM alone is the one off are saved the same way, under `tvm-off/`.
Exit status: 0 when no case failed, 1 otherwise.

Users' ops (families declared in the modules named in $SIMACCEL_OPS, with a fuzz hook) are
drawn too; the summary counts the models that held each. Their float64 reference is their
own numpy reference, the one simaccel's `ref` engine runs, so it never excuses a difference
from TVM alone: there, any difference is a failure. Workers, the fresh process and saved
reproductions get the $SIMACCEL_OPS entries (.py paths made absolute); `replay` sets them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import EngineError, SimAccelError, UnsupportedOpError
from ...ops import USER_OPS_ENV
from ...ops.registry import user_op_entries
from ...profile import PROFILE_ENV, active_profile
from ...runtime import AUTO, ENGINE_ENV, get_runtime
from .deploy import error_line
from .fuzz_models import Case, Config, Draw, Value, draw_case, drawable_user_families, fuzz_op, user_families

ENGINE_DEVICE = {"ref": "cpu", "sim": "cpu", "cuda": "cuda", "native": "cuda"}
# "native": the CUDA build's native regions (simaccel.native), run with no Python engine chosen.
RUNTIME_ENGINE = {"native": "auto"}
TOLERANCE = {"float32": (1e-4, 1e-5), "float16": (2e-2, 2e-2)}  # (rtol, atol relative to the output's scale)
PASS, SKIP, TVM_OFF, FAIL = "passed", "skipped (TVM alone cannot build or run it)", "TVM numerically off", "failed"


@dataclass
class Outcome:
    verdict: str
    reason: str = ""


class FuzzFailure(Exception):
    """A case on which simaccel differs from TVM alone (raised to let hypothesis shrink it)."""


# -- one case ---------------------------------------------------------------------------------
class Checker:
    """Builds and runs cases on `engines`, and keeps a sample for the fresh-process check."""

    def __init__(self, engines, export_every: int = 0, workdir: str | None = None):
        self.engines = list(engines)
        self.export_every = export_every
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="simaccel-fuzz-"))
        self.exported: list[tuple[Case, Path, list]] = []
        self.checked = 0
        self.with_regions = 0  # cases where simaccel ran at least one region
        self.ops: Counter = Counter()  # simaccel ops run, over every case
        self.user_ops: Counter = Counter()  # users' ops: how many checked models held each

    def check(self, case: Case, sample: bool = True) -> Outcome:
        """The verdict on `case`; with `sample`, every `export_every`-th case is also exported."""
        import tvm

        from ..backend.pipeline import build, build_tvm_only, default_target

        self.checked += 1
        if sample:
            self.user_ops.update(case.user_ops)
        try:
            mod = case.bound_module()
        except SimAccelError:
            raise  # a user op this process does not know (or declares wrongly): no skip hides it
        except Exception as e:  # noqa: BLE001 - a model Relax refuses is not a case
            return Outcome(SKIP, f"Relax refuses the model: {error_line(e)}")
        arrays = case.runtime_arrays()
        verdict = Outcome(PASS)
        for device in dict.fromkeys(ENGINE_DEVICE[e] for e in self.engines):
            target = default_target(device)
            dev = tvm.device(device, 0)
            try:
                want = _run(build_tvm_only(mod, target), arrays, dev)
            except Exception as e:  # noqa: BLE001 - TVM's own failure: skip
                _stop_if_context_lost(e, "TVM alone", case)
                return Outcome(SKIP, f"TVM alone: {error_line(e)}")
            try:
                executable = build(mod, target)
            except Exception as e:  # noqa: BLE001 - anything TVM builds, simaccel must build
                return Outcome(FAIL, f"simaccel build failed where TVM alone builds: {error_line(e)}")
            for engine in (e for e in self.engines if ENGINE_DEVICE[e] == device):
                runtime = get_runtime()
                runtime.ledger.reset()
                try:
                    with runtime.use_engine(RUNTIME_ENGINE.get(engine, engine)):
                        got = _run(executable, arrays, dev)
                except Exception as e:  # noqa: BLE001 - simaccel failed to run what TVM runs
                    _stop_if_context_lost(e, f"simaccel on engine {engine}", case)
                    return Outcome(FAIL, f"engine {engine}: run failed: {error_line(e)}")
                ran = runtime.ledger.snapshot()["ops"]
                if sample:  # a shrinking step is no new case
                    self.ops.update(ran)
                    self.with_regions += bool(ran) and engine == self.engines[0]
                outcome = compare(case, got, want, f"engine {engine}")
                if outcome.verdict == FAIL and device != "cpu" and not case.independent_reference:
                    outcome = compare(case, got, want, f"engine {engine}", witness=self._tvm_on_cpu(mod, arrays))
                if outcome.verdict == FAIL:
                    return outcome
                if outcome.verdict == TVM_OFF:
                    verdict = outcome
            if sample and device == "cpu" and self.export_every and self.checked % self.export_every == 1 % self.export_every:
                path = self.workdir / f"case{self.checked}.so"
                executable.export_library(str(path))
                self.exported.append((case, path, want))
        return verdict

    @staticmethod
    def _tvm_on_cpu(mod, arrays) -> list | None:
        """TVM alone built for the CPU: the second witness where the reference is a user op's own."""
        import tvm

        from ..backend.pipeline import build_tvm_only, default_target

        try:
            return _run(build_tvm_only(mod, default_target("cpu")), arrays, tvm.cpu())
        except Exception:  # noqa: BLE001 - no witness, then
            return None

    def check_exported(self) -> list[tuple[Case, Outcome]]:
        """Run every exported library in one fresh process (TVM only imported); the failures."""
        if not self.exported:
            return []
        jobs = []
        for i, (case, path, _) in enumerate(self.exported):
            inputs = self.workdir / f"in{i}.npz"
            np.savez(inputs, *case.runtime_arrays())
            (self.workdir / f"out{i}.npz").unlink(missing_ok=True)  # none left from an earlier call
            jobs.append([str(path), str(inputs), str(self.workdir / f"out{i}.npz")])
        (self.workdir / "jobs.json").write_text(json.dumps(jobs))
        env = {**user_ops_environ(), "SIMACCEL_ENGINE": "ref"}  # the libraries' user ops, found from workdir
        result = subprocess.run([sys.executable, "-c", _FRESH_PROCESS, str(self.workdir / "jobs.json")],
                                capture_output=True, text=True, env=env, timeout=1800, cwd=self.workdir)
        failures = []
        for i, (case, _, want) in enumerate(self.exported):
            out = self.workdir / f"out{i}.npz"
            if not out.exists():
                failures.append((case, Outcome(FAIL, f"after export and load in a fresh process: no result ({_tail(result)})")))
                continue
            with np.load(out) as data:
                got = [data[f"arr_{k}"] for k in range(len(data.files))]
            outcome = compare(case, got, want, "after export and load in a fresh process")
            if outcome.verdict == FAIL:
                failures.append((case, outcome))
        self.exported.clear()
        return failures


_FRESH_PROCESS = """
import json, sys
import numpy as np
import tvm
for lib, inputs, out in json.load(open(sys.argv[1])):
    try:
        vm = tvm.runtime.vm.VirtualMachine(tvm.runtime.load_module(lib), tvm.cpu())
        with np.load(inputs) as data:
            args = [tvm.runtime.tensor(data[f"arr_{i}"]) for i in range(len(data.files))]
        result = vm["main"](*args)
        results = [result] if hasattr(result, "numpy") else list(result)
        np.savez(out, *[r.numpy() for r in results])
    except Exception as e:
        print(lib, type(e).__name__, str(e).strip().splitlines()[-1:], file=sys.stderr)
"""


class ContextLost(SimAccelError):
    """A CUDA error that leaves the process's GPU context unusable: no later case could run."""


_STICKY_CUDA_ERRORS = ("cudaErrorIllegalAddress", "illegal memory access", "cudaErrorLaunchFailure",
                       "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED")


def _stop_if_context_lost(error: BaseException, phase: str, case: Case) -> None:
    """End the run, naming the phase and the case, after an error no later CUDA call survives."""
    if any(marker in str(error) for marker in _STICKY_CUDA_ERRORS):
        raise ContextLost(
            f"the GPU context was lost while running {phase} ({error_line(error)}); every later case would "
            f"fail. The case: {case.describe()}; its model: {json.dumps(case_to_json(case))}"
        ) from error


def _run(executable, arrays, dev) -> list[np.ndarray]:
    import tvm
    from tvm import relax

    from .deploy import outputs_as_list

    vm = relax.VirtualMachine(executable, dev)
    return [t.numpy() for t in outputs_as_list(vm["main"](*[tvm.runtime.tensor(a, dev) for a in arrays]))]


def compare(case: Case, got: list, want: list, where: str, witness: list | None = None) -> Outcome:
    """PASS when `got` equals TVM's `want` (NaN and inf where TVM has them, close elsewhere).

    Otherwise the float64 reference decides: TVM_OFF where simaccel is no further from it
    than twice TVM's error (or within tolerance of it), FAIL where simaccel is the one off.
    Where that reference is a user op's own (not independent of what simaccel runs), only a
    `witness` can settle it: TVM alone built for the CPU. When simaccel's GPU result equals
    it and TVM's GPU build does not, TVM's two builds disagree and TVM is the one off.
    """
    if len(got) != len(want):
        return Outcome(FAIL, f"{where}: {len(got)} outputs, TVM alone gives {len(want)}")
    rtol, atol = TOLERANCE[case.dtype]
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return Outcome(FAIL, f"{where}: output {i} is {g.shape} {g.dtype}, TVM alone gives {w.shape} {w.dtype}")
    close = [_close(g, w, rtol, atol) for g, w in zip(got, want)]
    if all(close):
        return Outcome(PASS)
    first = close.index(False)
    difference = _error(got[first], want[first])
    message = f"{where}: output {first} differs from TVM alone (max error {difference:.3g} of its scale)"
    if case.specials or not case.exact_reference:
        return Outcome(FAIL, message + "; no float64 reference to settle it")
    errors = [(_error(g, r), _error(w, r)) for g, w, r in zip(got, want, case.reference())]
    against = ", ".join(f"simaccel {ours:.3g} / TVM alone {theirs:.3g}" for ours, theirs in errors)
    if not case.independent_reference:  # the user op's own reference: what simaccel's ref engine runs
        if witness is not None and len(witness) == len(got) and all(
                g.shape == c.shape and _close(g, c, rtol, atol) for g, c in zip(got, witness)):
            return Outcome(TVM_OFF, f"{message} ({case.dtype}); TVM's CPU build gives simaccel's result, its "
                                    f"GPU build does not (errors against the op's reference: {against})")
        return Outcome(FAIL, f"{message}; the float64 reference uses {', '.join(case.user_ops)}'s own "
                             f"reference, so it cannot settle it (errors against it: {against})")
    if any(ours > max(rtol + atol, 2 * theirs) for ours, theirs in errors):
        return Outcome(FAIL, f"{message}; errors against float64: {against}")
    return Outcome(TVM_OFF, f"{message} ({case.dtype}); errors against float64: {against}")


def _close(got, want, rtol, atol) -> bool:
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)) or not np.array_equal(np.isinf(g), np.isinf(w)):
        return False
    finite = np.isfinite(w)
    if not np.array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)]):
        return False
    scale = 1.0 + (np.abs(w[finite]).max() if finite.any() else 0.0)
    return bool(np.all(np.abs(g[finite] - w[finite]) <= rtol * np.abs(w[finite]) + atol * scale))


def _error(got, reference) -> float:
    """Largest difference from `reference`, relative to its scale (inf where NaN/inf disagree)."""
    g, r = got.astype(np.float64), reference.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(r)
    same_inf = np.isinf(r) & (g == r)
    diff = np.where(both_nan | same_inf, 0.0, np.abs(g - r))
    diff = np.where(np.isnan(diff), np.inf, diff)
    finite = np.isfinite(r)
    scale = 1.0 + (np.abs(r[finite]).max() if finite.any() else 0.0)
    return float(diff.max() / scale) if diff.size else 0.0


def _tail(result) -> str:
    return (result.stderr.strip().splitlines() or ["no error output"])[-1][:300]


# -- the run: hypothesis draws, we check, failures shrink --------------------------------------
@dataclass
class Tally:
    counts: dict = dataclasses.field(default_factory=lambda: {PASS: 0, SKIP: 0, TVM_OFF: 0, FAIL: 0})
    examples: dict = dataclasses.field(default_factory=dict)  # verdict -> a few reasons

    def add(self, outcome: Outcome) -> None:
        self.counts[outcome.verdict] += 1
        if outcome.verdict != PASS:
            self.examples.setdefault(outcome.verdict, [])
            if len(self.examples[outcome.verdict]) < 5:
                self.examples[outcome.verdict].append(outcome.reason)

    def line(self) -> str:
        return ", ".join(f"{n} {verdict}" for verdict, n in self.counts.items() if n or verdict in (PASS, FAIL))


def run_fuzz(cases: int = 100, seed: int = 0, engines=("ref",), dtypes=("float32", "float16"), max_ops: int = 8,
             out_dir="fuzz-out", export_every: int = 25, shrink_seconds: float = 300, jobs: int = 1, log=print,
             shared: str | None = None) -> int:
    """Fuzz `cases` models on `engines`; returns the exit status (0 clean, 1 a failure).

    With `jobs` > 1 the cases are shared among that many worker processes, worker i drawing
    with seed `seed * 1000 + i` into `out_dir/job<i>`; their summaries are added up.
    """
    from .deploy import runtime_only

    if runtime_only():
        raise SimAccelError(
            "simaccel fuzz builds every model with TVM, which needs the full TVM (with its compiler); "
            "this TVM is runtime-only (TVM_USE_RUNTIME_LIB=1)"
        )
    from ...engines import ENGINE_NAMES, get_engine

    # fuzz's engines are its `engines`; $SIMACCEL_ENGINE chooses none of them, but a value no
    # engine has is a mistake to say, as demo and run say it (the "native" engine reads it)
    named = os.environ.get(ENGINE_ENV)
    if named and named not in (AUTO, *ENGINE_NAMES):
        raise EngineError(f"unknown {ENGINE_ENV} value {named!r}; choose one of {AUTO}, {', '.join(ENGINE_NAMES)}")
    drawable_user_families(Config(dtypes=tuple(dtypes)))  # each user op it cannot draw: say why, before any case
    try:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SimAccelError(f"--out {out_dir}: cannot create the folder: {e.strerror or e}") from e
    if jobs > 1:
        return _run_jobs(cases, seed, engines, dtypes, max_ops, out_dir, export_every, shrink_seconds, jobs, log)
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as seeded
    from hypothesis import strategies as st

    for engine in engines:
        if engine not in ENGINE_DEVICE:
            raise SimAccelError(f"unknown engine {engine!r} for fuzz; choose from {', '.join(ENGINE_DEVICE)}")
        # EngineError here, not every case skipped, where it cannot run (cuda without a GPU)
        get_engine("cuda" if ENGINE_DEVICE[engine] == "cuda" else engine)
    # On the GPU: no NaN/inf inputs (TVM's CUDA build takes max() as fmaxf, which drops NaN,
    # where its CPU build, and simaccel on every engine, keeps it: docs/design.md) and no
    # zero-size dims (TVM's CUDA build refuses most of them: "Divide by zero").
    gpu = any(ENGINE_DEVICE[e] == "cuda" for e in engines)
    config = Config(dtypes=tuple(dtypes), max_ops=max_ops, tiny="sim" in engines,
                    specials_percent=0 if gpu else Config.specials_percent,
                    zero_dim_percent=0 if gpu else Config.zero_dim_percent)
    checker = Checker(engines, export_every)
    tally = Tally()
    progress = _Progress(cases, log, Path(out_dir) / "progress.json")
    memo: dict[str, Outcome] = {}
    state = {"deadline": None, "failure": None, "shrinks": 0, "counted": 0}

    def one_case(data):
        case = draw_case(Draw(lambda lo, hi: data.draw(st.integers(lo, hi))), config)
        key = repr(case)
        outcome = memo.get(key)
        if outcome is None:
            if state["deadline"] is None and (state["counted"] >= cases or not _claim(shared, key)):
                return  # enough cases, or one another worker of this run has checked: not run
            state["counted"] += state["deadline"] is None
            if state["deadline"] is not None:
                if time.monotonic() > state["deadline"]:
                    return  # shrinking has had its time: what is found so far is the answer
                state["shrinks"] += 1
            # Written before, removed after: a case that kills the process (a crash in a kernel
            # or in TVM) is left behind as a reproduction.
            running = save_reproduction(case, Outcome("crashed", "the process died while checking this case"),
                                        engines, Path(out_dir) / "running")
            outcome = memo[key] = checker.check(case, sample=state["deadline"] is None)
            shutil.rmtree(running, ignore_errors=True)
            if not any(running.parent.iterdir()):
                running.parent.rmdir()  # no case left running: no empty folder left behind
            if state["deadline"] is None:
                tally.add(outcome)
                progress.update(tally)
                if outcome.verdict == TVM_OFF and tally.counts[TVM_OFF] <= 3:  # evidence for a TVM report
                    save_reproduction(case, outcome, engines, Path(out_dir) / "tvm-off")
        if outcome.verdict == FAIL:
            if state["deadline"] is None:
                state["deadline"] = time.monotonic() + shrink_seconds
                log(f"\nFAILED: {outcome.reason}\n  {case.describe()}\n  shrinking (at most {shrink_seconds:.0f} s) ...")
            state["failure"] = (case, outcome)
            raise FuzzFailure(outcome.reason)

    # Different draws can make the same model (a 37% and a 38% chance agree): ask hypothesis
    # for more examples than cases, and check each distinct model once.
    test = settings(
        max_examples=4 * cases, database=None, deadline=None, derandomize=False, report_multiple_bugs=False,
        phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
    )(given(st.data())(one_case))
    start = time.monotonic()
    log(f"fuzz: {cases} cases, seed {seed}, engines {', '.join(engines)}, dtypes {', '.join(dtypes)}")
    drawn = _log_settings(log)
    try:
        seeded(seed)(test)()
    except FuzzFailure:
        pass
    progress.done()
    failures = [state["failure"]] if state["failure"] else []
    reloaded = len(checker.exported)
    reloaded_user = sum(bool(case.user_ops) for case, _, _ in checker.exported)
    if not failures:
        failures = checker.check_exported()
    saved = []
    for case, outcome in failures:
        tally.counts[FAIL] = max(tally.counts[FAIL], 1)
        path = save_reproduction(case, outcome, engines, out_dir)
        saved.append({"reason": outcome.reason, "case": case.describe(), "reproduction": str(path)})
        log(f"FAILED: {outcome.reason}\n  smallest failing case ({state['shrinks']} shrink steps): {case.describe()}\n"
            f"  reproduction: {path}  (python {path / 'repro.py'})")
    seconds = time.monotonic() - start
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "device": _device_name(engines),
        "seed": seed, "cases": tally.counts[PASS] + tally.counts[SKIP] + tally.counts[TVM_OFF] + tally.counts[FAIL],
        "engines": list(engines), "dtypes": list(dtypes), "seconds": round(seconds, 1),
        "counts": tally.counts, "examples": tally.examples, "reloaded_in_fresh_process": reloaded,
        "cases_with_simaccel_regions": checker.with_regions, "simaccel_ops_run": dict(sorted(checker.ops.items())),
        "user_op_modules": user_op_modules(), "user_ops_in_models": _user_op_counts(drawn, checker.user_ops),
        "reloaded_with_user_ops": reloaded_user, "profile": active_profile().to_dict(),
        "failures": saved,
    }
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "fuzz-summary.json").write_text(json.dumps(summary, indent=1))
    log(f"fuzz: {summary['cases']} cases in {seconds:.0f} s on {', '.join(engines)}: {tally.line()}; "
        f"{checker.with_regions} ran simaccel regions ({sum(checker.ops.values())} ops); "
        + _user_ops_line(summary["user_ops_in_models"])
        + f"{reloaded} exported and run again in a fresh process" + ("" if failures else ", all matched"))
    return 1 if failures else 0


def _log_settings(log) -> list[str]:
    """Say which users' ops are drawn and which device profile partitions; the drawn ops."""
    drawn = [f.name for f in user_families()]
    if drawn:
        log(f"fuzz: users' ops drawn too: {', '.join(drawn)} (${USER_OPS_ENV}={','.join(user_op_modules())})")
    if os.environ.get(PROFILE_ENV):
        log(f"fuzz: partitioning for device profile {active_profile().name!r} (${PROFILE_ENV}={os.environ[PROFILE_ENV]})")
    return drawn


def user_op_modules() -> list[str]:
    """The entries of $SIMACCEL_OPS, .py paths made absolute (so a process in another folder finds them)."""
    return [os.path.abspath(e) if e.endswith(".py") else e for e in user_op_entries()]


def user_ops_environ() -> dict:
    """os.environ for a child process: $SIMACCEL_OPS and $SIMACCEL_PROFILE with absolute paths
    (unset stays unset)."""
    env = dict(os.environ)
    if env.get(USER_OPS_ENV, "").strip():
        env[USER_OPS_ENV] = ",".join(user_op_modules())
    if env.get(PROFILE_ENV, "").strip():
        env[PROFILE_ENV] = os.path.abspath(env[PROFILE_ENV])
    return env


def _user_op_counts(drawn, counts: Counter) -> dict:
    """Models that held each user op: every drawable one (0 where none did), then any other."""
    return {name: counts.get(name, 0) for name in [*drawn, *sorted(set(counts) - set(drawn))]}


def _user_ops_line(counts: dict) -> str:
    if not counts:
        return ""
    return "users' ops in models: " + ", ".join(f"{name} {n}" for name, n in counts.items()) + "; "


def _claim(shared: str | None, key: str) -> bool:
    """Whether this worker is the first of its run to draw the model `key` (always, alone).

    Every worker's hypothesis starts from the same simplest models; a file per model in the
    run's shared folder makes each distinct model count once.
    """
    if shared is None:
        return True
    try:
        os.close(os.open(os.path.join(shared, hashlib.sha256(key.encode()).hexdigest()[:24]), os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False


def _run_jobs(cases, seed, engines, dtypes, max_ops, out_dir, export_every, shrink_seconds, jobs, log) -> int:
    """Run the cases in `jobs` worker processes and add up what they found."""
    out = Path(out_dir).resolve()
    shared = out / "models-seen"
    shared.mkdir(exist_ok=True)
    workers = []
    for i in range(jobs):
        share = cases // jobs + (1 if i < cases % jobs else 0)
        folder = out / f"job{i}"
        command = [sys.executable, "-m", "simaccel.tvm_integration.tools.cli", "fuzz", "--cases", str(share), "--seed", str(seed * 1000 + i),
                   "--engine", ",".join(engines), "--dtype", ",".join(dtypes), "--max-ops", str(max_ops),
                   "--out", str(folder), "--export-every", str(export_every), "--shrink-seconds", str(shrink_seconds),
                   "--shared", str(shared)]
        folder.mkdir(parents=True, exist_ok=True)
        logfile = open(folder / "fuzz.log", "w")
        # cwd: the worker's own folder, so a source checkout in the caller's folder cannot
        # shadow the installed package.
        workers.append((folder, subprocess.Popen(command, stdout=logfile, stderr=subprocess.STDOUT, cwd=folder,
                                                 env=user_ops_environ()), logfile))
    log(f"fuzz: {cases} cases in {jobs} processes, seeds {seed * 1000}..{seed * 1000 + jobs - 1}, "
        f"engines {', '.join(engines)}, dtypes {', '.join(dtypes)}")
    _log_settings(log)
    progress, start = _Progress(cases, log), time.monotonic()
    while any(p.poll() is None for _, p, _ in workers):
        progress.update(_added([_read_json(f / "progress.json") for f, _, _ in workers]))
        time.sleep(2)
    progress.done()
    summaries = []
    for folder, process, logfile in workers:
        logfile.close()
        summary = _read_json(folder / "fuzz-summary.json")
        if process.returncode not in (0, 1) or not summary:
            tail = (folder / "fuzz.log").read_text().strip().splitlines()[-1:]
            left = sorted((folder / "running").glob("case-*"))
            where = f"; the case it was checking: {left[0]} (simaccel fuzz --replay {left[0]})" if left else ""
            raise SimAccelError(f"fuzz worker {folder} stopped with status {process.returncode}: {' '.join(tail)}{where}")
        summaries.append(summary)
    tally = _added([s["counts"] for s in summaries])
    failures = [f for s in summaries for f in s["failures"]]
    summary = {**summaries[0], "seed": seed, "jobs": jobs, "cases": sum(s["cases"] for s in summaries),
               "seconds": round(time.monotonic() - start, 1), "counts": tally.counts, "failures": failures,
               "reloaded_in_fresh_process": sum(s["reloaded_in_fresh_process"] for s in summaries),
               "reloaded_with_user_ops": sum(s.get("reloaded_with_user_ops", 0) for s in summaries),
               "cases_with_simaccel_regions": sum(s["cases_with_simaccel_regions"] for s in summaries),
               "simaccel_ops_run": dict(sorted(sum((Counter(s["simaccel_ops_run"]) for s in summaries), Counter()).items())),
               "user_ops_in_models": _user_op_counts(list(summaries[0].get("user_ops_in_models", {})), sum(
                   (Counter(s.get("user_ops_in_models", {})) for s in summaries), Counter())),
               "examples": _merged_examples(summaries)}
    (out / "fuzz-summary.json").write_text(json.dumps(summary, indent=1))
    for failure in failures:
        log(f"FAILED: {failure['reason']}\n  {failure['case']}\n  reproduction: {failure.get('reproduction')}")
    log(f"fuzz: {summary['cases']} cases in {summary['seconds']:.0f} s on {', '.join(engines)} ({jobs} processes): "
        f"{tally.line()}; {summary['cases_with_simaccel_regions']} ran simaccel regions "
        f"({sum(summary['simaccel_ops_run'].values())} ops); " + _user_ops_line(summary["user_ops_in_models"])
        + f"{summary['reloaded_in_fresh_process']} exported and run again in a fresh process"
        + ("" if failures else ", all matched"))
    return 1 if failures else 0


def _merged_examples(summaries) -> dict:
    merged: dict = {}
    for s in summaries:
        for verdict, reasons in s["examples"].items():
            merged.setdefault(verdict, []).extend(reasons)
    return {verdict: reasons[:10] for verdict, reasons in merged.items()}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _added(counts: list[dict]) -> Tally:
    tally = Tally()
    for c in counts:
        for verdict, n in c.items():
            tally.counts[verdict] = tally.counts.get(verdict, 0) + n
    return tally


class _Progress:
    """A one-line progress bar on a terminal, a line every 10% elsewhere; also kept in `path`."""

    def __init__(self, total: int, log, path: Path | None = None):
        self.total, self.log, self.start, self.path = total, log, time.monotonic(), path
        self.tty = sys.stderr.isatty()
        self.reported = 0

    def update(self, tally: Tally) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(tally.counts))
        done = sum(tally.counts.values())
        rate = done / max(time.monotonic() - self.start, 1e-9)
        left = (self.total - done) / rate if rate else 0
        text = f"[{done:>{len(str(self.total))}}/{self.total}] {tally.line()}  ({rate:.2f} cases/s, ~{left / 60:.0f} min left)"
        if self.tty:
            print("\r" + text, end="", file=sys.stderr, flush=True)
        elif done * 10 // self.total > self.reported:
            self.reported = done * 10 // self.total
            self.log(text)

    def done(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def _device_name(engines) -> str:
    if any(ENGINE_DEVICE[e] == "cuda" for e in engines):
        from .deploy import gpu_name

        return gpu_name()
    import platform

    return f"CPU ({platform.machine()}, {os.cpu_count()} cores)"


# -- reproductions ------------------------------------------------------------------------------
def case_to_json(case: Case) -> dict:
    return {**dataclasses.asdict(case), "values": [dataclasses.asdict(v) for v in case.values]}


def case_from_json(data: dict) -> Case:
    """The case saved by `case_to_json`; UnsupportedOpError (naming $SIMACCEL_OPS) for a user op
    this process has not declared."""
    values = [Value(**{**v, "shape": tuple(v["shape"]), "args": tuple(v["args"])}) for v in data["values"]]
    case = Case(data["dtype"], values, list(data["outputs"]), int(data["data_seed"]), bool(data["specials"]))
    for op in case.user_ops:
        fuzz_op(op)
    return case


REPRO = '''"""Check a simaccel fuzz failure again: python repro.py (exit 1 while it still fails)."""
import pathlib
import sys

from simaccel.tvm_integration.tools.fuzz import replay

sys.exit(replay(pathlib.Path(__file__).resolve().parent))
'''


def save_reproduction(case: Case, outcome: Outcome, engines, out_dir) -> Path:
    """Write model.py (TVMScript), inputs.npz, case.json and repro.py; return the folder."""
    from ... import __version__

    data = case_to_json(case)
    folder = Path(out_dir) / f"case-{hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    modules = user_op_modules()
    user = (f"# users' ops {case.user_ops}: declared in ${USER_OPS_ENV}={','.join(modules)} (replay sets it)\n"
            if case.user_ops else "")
    (folder / "model.py").write_text(
        f"# simaccel fuzz: {outcome.reason}\n# parameters bound as constants: "
        f"{[v.name for v in case.params if v.constant]} (their values are in inputs.npz)\n" + user + case.module().script()
    )
    np.savez(folder / "inputs.npz", **{v.name: a for v, a in zip(case.params, case.arrays())})
    (folder / "case.json").write_text(json.dumps(
        {"engines": list(engines), "verdict": outcome.verdict, "reason": outcome.reason,
         "simaccel": __version__, "user_op_modules": modules,
         "profile": active_profile().to_dict() if os.environ.get(PROFILE_ENV) else None, "case": data}, indent=1, default=list))
    (folder / "repro.py").write_text(REPRO)
    return folder


def replay(folder, log=print) -> int:
    """Check a saved case again on its engines: 0 when it now passes, 1 when it still fails.

    The modules its user ops were declared in (case.json's ``user_op_modules``) are added to
    $SIMACCEL_OPS while it runs."""
    folder = Path(folder)
    try:
        saved = json.loads((folder / "case.json").read_text())
        data, engines, modules = saved["case"], saved["engines"], list(saved.get("user_op_modules") or [])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SimAccelError(f"{folder}: not a simaccel fuzz reproduction (case.json: {e})") from e
    from ...engines import get_engine

    for engine in engines:  # a case found on a GPU: say so here, not "skipped" for want of one
        try:
            get_engine("cuda" if ENGINE_DEVICE.get(engine) == "cuda" else engine)
        except SimAccelError as e:
            raise SimAccelError(f"{folder}: the case was found on engine {engine}, which cannot run here: {e}") from e
    with saved_settings(modules, saved.get("profile"), "replay", log):
        try:
            case = case_from_json(data)
        except UnsupportedOpError as e:
            ops = sorted({v.get("op") for v in data["values"] if "." in (v.get("op") or "")})
            raise SimAccelError(f"{folder}: the case uses users' ops {', '.join(ops)}, not all declared in this process; "
                                f"it was saved with ${USER_OPS_ENV}={','.join(modules) or '(unset)'}") from e
        except (ValueError, KeyError, TypeError) as e:
            raise SimAccelError(f"{folder}: not a simaccel fuzz reproduction (case.json: {e})") from e
        outcome = Checker(engines).check(case)
    log(f"{case.describe()}\n{outcome.verdict}{': ' + outcome.reason if outcome.reason else ''}")
    return 1 if outcome.verdict == FAIL else 0


@contextlib.contextmanager
def saved_settings(modules, profile: dict | None, who: str = "replay", log=print):
    """While the block runs: $SIMACCEL_OPS also names `modules` (where a saved reproduction's
    users' ops were declared) and, when `profile` (a DeviceProfile as a dict) is not the active
    one, $SIMACCEL_PROFILE is a file holding it; both are restored after."""
    previous_profile = os.environ.get(PROFILE_ENV)
    if profile is not None and profile != active_profile().to_dict():
        path = Path(tempfile.mkdtemp(prefix="simaccel-replay-")) / "profile.json"
        path.write_text(json.dumps(profile))
        os.environ[PROFILE_ENV] = str(path)
        log(f"{who}: ${PROFILE_ENV}={path} (the device profile {profile.get('name')!r} the case was found with)")
    previous = os.environ.get(USER_OPS_ENV)
    missing = [m for m in modules if m not in user_op_modules()]
    if missing:
        os.environ[USER_OPS_ENV] = ",".join(user_op_modules() + missing)
        log(f"{who}: ${USER_OPS_ENV}={os.environ[USER_OPS_ENV]} (the modules this case's user ops were declared in)")
    try:
        yield
    finally:
        for name, value, changed in ((USER_OPS_ENV, previous, bool(missing)), (PROFILE_ENV, previous_profile, True)):
            if changed:
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
