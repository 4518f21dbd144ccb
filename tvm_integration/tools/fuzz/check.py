"""Checking one fuzz case: built with simaccel and with TVM alone, run, compared.

Where it sits: `simaccel fuzz` (fuzz/campaign.py) draws cases (fuzz/models.py) and hands each
to a `Checker`, in its own process or on a Dask worker (tools/executors.py). A case is built for
each device its engines need, with simaccel and with TVM alone, and run on the same inputs on
every engine asked for (`ref` and `sim` on the CPU; on a GPU `native`, the build's native
regions, and `cuda`, the same regions routed to the Python engine). A sample is exported and
run again in a fresh process that imports only TVM. A case that TVM alone cannot build or run
is skipped (TVM's fault, not simaccel's), except a bfloat16 case whose float64 reference claims
every op's semantics (TVM 0.27 builds no bfloat16 layer_norm or power): where simaccel builds
it, it is checked against that reference instead, and passes or fails on it alone; a result that differs from TVM's is checked against
the case's float64 reference before it counts as simaccel's failure: where TVM's own result is
the further from it (float16 overflow, accumulation order), the case is counted as "TVM
numerically off". A user op's float64 reference is its own numpy reference, the one the `ref`
engine runs, so it never excuses a difference from TVM alone.

Each failing `Outcome` names its stage (build, run, output, reload) and error (the exception's
class, or "mismatch"): with the op kinds of the model, the signature failures are told apart by.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ....compare import array_difference, scaled_error, tolerance
from ....errors import SimAccelError
from ....runtime import get_runtime
from ....shapes import sizes_text
from ..backends import RUNTIME_ENGINE, Backend, engine_device
from ..common.error_line import error_line
from ..common.runs import read_outputs, run_fresh, run_vm, stop_if_context_lost
from ..common.stderr_log import tail
from ..common.verdicts import BUILD, FAIL, OUTPUT, PASS, RELOAD, RUN, SKIP, TVM_OFF
from .models import Case, case_to_json

@dataclass
class Outcome:
    verdict: str
    reason: str = ""
    stage: str = ""  # failures: BUILD, RUN, OUTPUT, RELOAD, CRASH or HANG
    error: str = ""  # failures: the exception's class name, or "mismatch"

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "reason": self.reason, "stage": self.stage, "error": self.error}


def _failed(stage: str, error: BaseException | str, reason: str) -> Outcome:
    return Outcome(FAIL, reason, stage, error if isinstance(error, str) else type(error).__name__)


# -- one case ---------------------------------------------------------------------------------
class Checker:
    """Builds and runs cases on `engines`, and keeps the exported sample for the fresh-process
    check; counts what the cases it was asked to `count` ran."""

    def __init__(self, engines, workdir: str | None = None, backend: Backend = Backend()):
        self.engines = list(engines)
        self.backend = backend
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="simaccel-fuzz-"))
        self.exported: list[tuple[object, Case, Path, list]] = []  # (key, case, library, TVM's outputs)
        self.with_regions = 0  # counted cases where simaccel ran at least one region
        self.ops: Counter = Counter()  # simaccel ops run, over every counted case
        self.user_ops: Counter = Counter()  # users' ops: how many counted models held each

    def check(self, case: Case, count: bool = True, export=None) -> Outcome:
        """The verdict on `case`. `count`: add what it ran to the counters (a shrinking step is
        no new case). `export`: a key; the CPU build is then exported for `check_exported`."""
        import tvm

        from ...backend.pipeline import build_tvm_only, default_target

        if count:
            self.user_ops.update(case.user_ops)
        try:
            mod = case.bound_module()
        except SimAccelError:
            raise  # a user op this process does not know (or declares wrongly): no skip hides it
        except Exception as e:  # noqa: BLE001 - a model Relax refuses is not a case
            return Outcome(SKIP, f"Relax refuses the model: {error_line(e)}")
        # A symbolic case is built once and run at each of its size points; a static one once.
        points = [(case.at(p), f" at {sizes_text(p)}") for p in case.size_points()] if case.size_vars() else [(case, "")]
        verdict = Outcome(PASS)
        for device in dict.fromkeys(engine_device(e) for e in self.engines):
            target = default_target(device)
            dev = tvm.device(device, 0)
            try:
                theirs = build_tvm_only(mod, target)
            except Exception as e:  # noqa: BLE001 - TVM's own failure: skip
                stop_if_context_lost(e, "TVM alone", _case_text(case))
                if case.dtype == "bfloat16" and case.exact_reference and case.independent_reference \
                        and not case.specials:
                    return self._against_reference(case, mod, target, device, points, count, error_line(e))
                return Outcome(SKIP, f"TVM alone: {error_line(e)}")
            name = self.backend.name
            try:
                partitioned, report = self.backend.partition(mod)
                executable = self.backend.build(mod, target, partitioned=partitioned)
            except Exception as e:  # noqa: BLE001 - anything TVM builds, the backend must build
                return _failed(BUILD, e, f"{name} build failed where TVM alone builds: {error_line(e)}")
            for k, (point, at) in enumerate(points):  # what a case ran is counted once, at its first size
                outcome, want = self._run_point(point, at, mod, theirs, executable, report, device, dev, count and k == 0)
                if outcome.verdict in (FAIL, SKIP):
                    return outcome
                if outcome.verdict == TVM_OFF:
                    verdict = outcome
            if export is not None and device == "cpu" and not case.size_vars() and want is not None:  # its one point's want
                path = self.workdir / f"case{len(self.exported)}.so"
                executable.export_library(str(path))
                self.exported.append((export, case, path, want))
        return verdict

    def _run_point(self, case: Case, at: str, mod, theirs, executable, report, device: str, dev,
                   count: bool) -> tuple[Outcome, list | None]:
        """`case` (a static case, or a symbolic one at one batch size, `at` saying which) run by
        TVM alone's build `theirs` and the backend's `executable` on every engine of `device`:
        the verdict, and TVM alone's outputs (None where it could not run the case)."""
        arrays = case.runtime_arrays()
        try:
            want = run_vm(theirs, arrays, dev)
        except Exception as e:  # noqa: BLE001 - TVM's own failure: skip
            stop_if_context_lost(e, "TVM alone", _case_text(case))
            return Outcome(SKIP, f"TVM alone{at}: {error_line(e)}"), None
        # TVM alone may return another dtype than its module declares (TVM 0.27's attention with a
        # scale on float16 or bfloat16 returns float32): TVM is off in that, and its values, in the
        # declared dtype, are compared as any case's (the float64 reference settles a difference).
        wrong = next((f"its output {i} is {w.dtype} where the module declares {case.dtype}"
                      for i, w in enumerate(want) if w.dtype != np.dtype(case.dtype)), None)
        verdict = Outcome(PASS)
        if wrong is not None:
            want = [w.astype(case.dtype) for w in want]
            verdict = Outcome(TVM_OFF, f"TVM alone{at}: {wrong}")
        for engine in (e for e in self.engines if engine_device(e) == device):
            got, failure = self._run(case, engine, executable, report, arrays, dev, at, count)
            if failure is not None:
                return failure, want
            where, stage = f"engine {engine}{at}", f"{OUTPUT} ({engine})"
            outcome = case_verdict(case, got, want, where, stage=stage)
            if outcome.verdict == FAIL and device != "cpu" and not (case.independent_reference
                                                                     and case.exact_reference):
                outcome = case_verdict(case, got, want, where, witness=self._tvm_on_cpu(mod, arrays), stage=stage)
            if outcome.verdict == FAIL:
                return outcome, want
            if outcome.verdict == TVM_OFF:
                verdict = outcome
        return verdict, want

    def _against_reference(self, case: Case, mod, target, device: str, points, count: bool, why: str) -> Outcome:
        """A case TVM alone cannot build (`why`), built with the backend and run at each of
        `points` on every engine of `device`, each output against the float64 reference rounded
        to the output's dtype, with the case dtype's tolerance."""
        import tvm

        try:
            partitioned, report = self.backend.partition(mod)
            executable = self.backend.build(mod, target, partitioned=partitioned)
        except Exception as e:  # noqa: BLE001 - the ops kept on TVM fail as TVM alone does: skip
            return Outcome(SKIP, f"TVM alone: {why}; the {self.backend.name} build too (what stays on TVM): "
                                 f"{error_line(e)}")
        dev = tvm.device(device, 0)
        for k, (point, at) in enumerate(points):
            want = point.reference()
            for engine in (e for e in self.engines if engine_device(e) == device):
                got, failure = self._run(point, engine, executable, report, point.runtime_arrays(), dev, at,
                                         count and k == 0)
                if failure is not None:
                    return failure
                for i, (g, w) in enumerate(zip(got, want, strict=True)):
                    found = _difference(case, g, w.astype(g.dtype))
                    if not found.ok:
                        return _failed(f"{OUTPUT} ({engine})", "mismatch",
                                       f"engine {engine}{at}: output {i} differs from the float64 reference "
                                       f"(TVM alone cannot build it: {why}): {found.reason}")
        return Outcome(PASS, f"TVM alone cannot build it ({why}); every output matches the float64 reference")

    def _run(self, case: Case, engine: str, executable, report, arrays, dev, at: str, count: bool):
        """The backend's `executable` run on `engine` with `arrays`: (its outputs, None), or
        (None, the failure) where it fails. `count`: add the ops it ran to the counters (the
        ledger's, or for another backend its partition `report`'s)."""
        runtime = get_runtime()
        runtime.ledger.reset()
        try:
            with runtime.use_engine(RUNTIME_ENGINE.get(engine, engine)) if self.backend.is_simaccel \
                    else contextlib.nullcontext():
                got = run_vm(executable, arrays, dev)
        except Exception as e:  # noqa: BLE001 - the backend failed to run what TVM runs
            stop_if_context_lost(e, f"{self.backend.name} on engine {engine}", _case_text(case))
            return None, _failed(f"{RUN} ({engine})", e, f"engine {engine}{at}: run failed: {error_line(e)}")
        if count:
            ran = runtime.ledger.snapshot()["ops"] if self.backend.is_simaccel else \
                Counter(op for ops in report.regions.values() for op in ops)
            self.ops.update(ran)
            self.with_regions += bool(ran) and engine == self.engines[0]
        return got, None

    @staticmethod
    def _tvm_on_cpu(mod, arrays) -> list | None:
        """TVM alone built for the CPU: the second witness where the reference is a user op's own."""
        import tvm

        from ...backend.pipeline import build_tvm_only, default_target

        try:
            return run_vm(build_tvm_only(mod, default_target("cpu")), arrays, tvm.cpu())
        except Exception:  # noqa: BLE001 - no witness, then
            return None

    def check_exported(self) -> list[tuple[object, Case, Outcome]]:
        """Run every exported library in one fresh process (TVM only imported); the failures,
        with the keys they were exported with."""
        if not self.exported:
            return []
        jobs = []
        for i, (_, case, path, _) in enumerate(self.exported):
            inputs = self.workdir / f"in{i}.npz"
            np.savez(inputs, *case.runtime_arrays())
            (self.workdir / f"out{i}.npz").unlink(missing_ok=True)  # none left from an earlier call
            jobs.append([str(path), str(inputs), str(self.workdir / f"out{i}.npz")])
        result = run_fresh(jobs, self.workdir)
        failures = []
        for i, (key, case, _, want) in enumerate(self.exported):
            out = self.workdir / f"out{i}.npz"
            if not out.exists():
                failures.append((key, case, _failed(RELOAD, "no result", "after export and load in a fresh process: "
                                                                         f"no result ({tail(result)})")))
                continue
            got = read_outputs(out)
            outcome = case_verdict(case, got, want, "after export and load in a fresh process", stage=RELOAD)
            if outcome.verdict == FAIL:
                failures.append((key, case, outcome))
        self.exported.clear()
        return failures



def _case_text(case: Case) -> str:
    return f"The case: {case.describe()}; its model: {json.dumps(case_to_json(case))}"


def case_verdict(case: Case, got: list, want: list, where: str, witness: list | None = None,
                 stage: str = OUTPUT) -> Outcome:
    """PASS when `got` matches TVM's `want` by simaccel.compare's rule for whole outputs (NaN and
    inf where TVM has them, the rest within the case's dtype's tolerance, atol times the output's
    scale).

    Otherwise the float64 reference decides: TVM_OFF where simaccel is no further from it
    than twice TVM's error (or within tolerance of it), FAIL where simaccel is the one off.
    Where that reference is a user op's own (not independent of what simaccel runs), or there
    is none that claims TVM's semantics (ceil-mode pooling; special values, except for outputs
    that never read them, `Case.free_of_specials`), only a `witness`
    can settle it: TVM alone built for the CPU. When simaccel's GPU result equals
    it and TVM's GPU build does not, TVM's two builds disagree and TVM is the one off. A
    failure's stage is `stage`, its error "mismatch".
    """
    def failed(reason):
        return _failed(stage, "mismatch", reason)

    if len(got) != len(want):
        return failed(f"{where}: {len(got)} outputs, TVM alone gives {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return failed(f"{where}: output {i} is {g.shape} {g.dtype}, TVM alone gives {w.shape} {w.dtype}")
    found = [_difference(case, g, w) for g, w in zip(got, want)]
    if all(d.ok for d in found):
        return Outcome(PASS)
    first = next(i for i, d in enumerate(found) if not d.ok)
    message = f"{where}: output {first} differs from TVM alone (max error {found[first].scaled_error:.3g} of its scale)"
    if witness is not None and len(witness) == len(got) and all(_difference(case, g, c).ok for g, c in zip(got, witness)):
        if case.specials or not case.exact_reference or not case.independent_reference:
            return Outcome(TVM_OFF, f"{message} ({case.dtype}); TVM's CPU build gives simaccel's result, its "
                                    "GPU build does not")
    differing = [i for i, d in enumerate(found) if not d.ok]
    # With NaN and inf in the inputs the reference settles only outputs that never read them.
    if not case.exact_reference or (case.specials and not all(case.free_of_specials()[i] for i in differing)):
        return failed(message + "; no float64 reference to settle it")
    reference = case.reference()
    errors = [(scaled_error(got[i], reference[i]), scaled_error(want[i], reference[i]))
              for i in (differing if case.specials else range(len(got)))]
    against = ", ".join(f"simaccel {ours:.3g} / TVM alone {theirs:.3g}" for ours, theirs in errors)
    if not case.independent_reference:  # the user op's own reference: what simaccel's ref engine runs
        return failed(f"{message}; the float64 reference uses {', '.join(case.user_ops)}'s own "
                             f"reference, so it cannot settle it (errors against it: {against})")
    rtol, atol = tolerance(case.dtype)
    if any(ours > max(rtol + atol, 2 * theirs) for ours, theirs in errors):
        return failed(f"{message}; errors against float64: {against}")
    return Outcome(TVM_OFF, f"{message} ({case.dtype}); errors against float64: {against}")


def _difference(case: Case, got, want):
    """`got` against `want` as a whole output, with the tolerance of the case's dtype (the
    precision it computes in, whatever the dtype its outputs are cast to)."""
    return array_difference(got, want, dtype=case.dtype, scaled=True)
