"""The TVM half of simaccel.testing: the engines a test runs on, `assert_matches_tvm`, `assert_offloads`.

Where it sits: a tool built on the backend (`build`, `build_tvm_only`, `partition_report`),
reached by users as `simaccel.testing` (which re-exports these names lazily, see its
docstring) and through the pytest plugin (`pytest_plugin.py`: the `simaccel_engine` fixture
gives an `Engine`). Results are judged by `simaccel.compare`'s rule for whole outputs (atol
times 1 + the output's largest magnitude), the rule every command, fuzz, conformance and
bisect judge by.
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from ... import debug
from ...compare import mismatch
from ...errors import EngineError, SimAccelError
from ...runtime import get_runtime
from ...shapes import shape_vars
from ...testing import TEST_ENGINES
from ..backend.native import has_native_regions
from ..backend.partition import PartitionReport, partition_report
from ..backend.pipeline import build, build_tvm_only, default_target
from ..backend.sizes import dim_of
from .bisect import bisect as bisect_model
from .common.runs import outputs_as_list
from .deploy import runtime_only
from .models import random_inputs


class Engine(str):
    """One way to run a model's simaccel regions: "ref", "sim", "cuda" or "native".

    A str (its name), so `engines=["ref", simaccel_engine]` mixes both; `device` is where the
    model's tensors live ("cpu": an llvm build; "cuda": a CUDA build), `runtime_engine` the
    runtime's engine choice while it runs ("auto" for native regions, which run without Python)
    and `native` the build's native switch.
    """

    def __new__(cls, name):
        if isinstance(name, Engine):
            return name
        if name not in TEST_ENGINES:
            raise EngineError(f"unknown simaccel test engine {name!r}; choose one of {', '.join(TEST_ENGINES)}")
        return super().__new__(cls, name)

    @property
    def device(self) -> str:
        return TEST_ENGINES[self][0]

    @property
    def runtime_engine(self) -> str:
        return TEST_ENGINES[self][1]

    @property
    def description(self) -> str:
        return TEST_ENGINES[self][2]

    @property
    def native(self) -> bool | None:
        """build()'s `native`: True for "native", False for "cuda" (Python regions), None on the CPU."""
        return {"native": True, "cuda": False}.get(str(self))

    @property
    def target(self) -> tvm.target.Target:
        return default_target(self.device)

    def tvm_device(self):
        return tvm.device(self.device, 0)

    def unavailable(self) -> str | None:
        """None if this engine can run here, else the reason (what the plugin's skip says)."""
        return _unavailable(str(self))

    @contextlib.contextmanager
    def use(self):
        """Run simaccel regions on this engine inside the block (per thread; native: no Python engine)."""
        runtime = get_runtime()
        with runtime.use_engine(self.runtime_engine):
            if self == "native" and runtime.route_flag_set():
                raise EngineError("engine 'native': a Python engine or host-staged mode is chosen in this process "
                                  "(set_engine, $SIMACCEL_ENGINE, $SIMACCEL_STAGED), so native regions would forward "
                                  "to Python; unset it for native tests")
            yield self


@functools.lru_cache(maxsize=None)
def _unavailable(name: str) -> str | None:
    if runtime_only():
        return "this TVM has only its runtime; building a model needs the full apache-tvm (with its compiler)"
    if name in ("ref", "sim", "cuda"):
        from ...engines import get_engine

        try:
            get_engine(name)
        except EngineError as e:
            reason = str(e).removeprefix(f"engine {name!r} cannot run here: ")
            return f"needs an NVIDIA GPU: {reason}" if name == "cuda" else reason
        if name != "cuda":
            return None
    if not tvm.cuda(0).exist:
        return "needs an NVIDIA GPU that TVM's CUDA runtime finds (tvm.cuda(0).exist is False here)"
    if name == "native":
        from ...aot import toolchain_missing
        from ...native.build import compiler_missing

        missing = toolchain_missing() or compiler_missing()
        if missing:
            return f"native regions cannot be built here: {missing}"
    return None


@dataclass
class Match:
    """What `assert_matches_tvm` ran on one engine: both sides' outputs and simaccel's ledger."""

    engine: Engine
    outputs: list[np.ndarray]
    reference: list[np.ndarray]
    ledger: dict = field(default_factory=dict)
    report: PartitionReport | None = None


def assert_matches_tvm(mod: tvm.IRModule, inputs=None, *, rtol: float | None = None, atol: float | None = None,
                       engines=None, profile=None, func: str = "main", seed: int = 0, expect_offload: bool = True,
                       sanitize: bool = True, bisect: bool = True, sizes=None) -> list[Match]:
    """Build `mod` with simaccel and with TVM alone, run both on each engine, assert every output matches.

    inputs: numpy arrays, one per parameter of `func` (default: seeded random ones, `seed`).
    sizes: for a module with symbolic dims, the sizes to run it at: a dict (size var -> value) or
    a list of them; each build is made once and run at every one, with seeded random inputs
    (a module with symbolic dims takes `inputs` or `sizes`).
    rtol, atol: the tolerance for every output (default: per output dtype, simaccel.compare; atol is
    times 1 + the output's largest magnitude).
    engines: names or `Engine`s, e.g. ``[simaccel_engine]`` (default: ``["ref"]``). TVM alone is
    built for the same target as simaccel (llvm for ref/sim, CUDA for cuda/native).
    expect_offload: also assert that at least one region was offloaded and ran on simaccel (a
    model partitioned into nothing would "match" trivially).
    sanitize: run simaccel with its sanitizer on (`simaccel.debug.sanitize`).
    bisect: on a mismatch, run `simaccel.debug.bisect` and put its report in the message.

    Returns one `Match` per engine (and per sizes, in order). Raises AssertionError naming the engine, the output, how
    many elements differ, the largest error and where; a SimAccelError raised by simaccel
    (a sanitizer finding, a refused tensor) is raised as it is.
    """
    __tracebackhide__ = True  # pytest shows the test's line, not this function's
    engines = [Engine(e) for e in ([engines] if isinstance(engines, str) else (engines or ["ref"]))]
    runs = _runs(mod, inputs, sizes, func, seed)  # (what, arrays): the inputs of each run of one build
    _, report = partition_report(mod, profile)
    if expect_offload and not report.regions:
        raise AssertionError(f"nothing of the model was offloaded to simaccel (expect_offload=False if that is meant)\n"
                             f"{_indent(report.format())}")
    runtime = get_runtime()
    references: dict[str, list[np.ndarray]] = {}
    builds: dict = {}  # (target, native) -> simaccel's build: ref and sim run one CPU build
    matches = []
    for engine in engines:
        reason = engine.unavailable()
        if reason:
            raise EngineError(f"engine {engine!r} cannot run here: {reason}")
        if engine.device not in references:
            theirs = build_tvm_only(mod, engine.target)
            references[engine.device] = [_run(theirs, arrays, engine, func) for _, arrays in runs]
        key = (str(engine.target), engine.native)
        if key not in builds:
            builds[key] = build(mod, engine.target, profile=profile, native=engine.native)
        executable = builds[key]
        if engine == "native" and report.regions and not has_native_regions(executable):
            raise AssertionError("engine 'native': the CUDA build holds no native region functions")
        for (what, arrays), want in zip(runs, references[engine.device]):
            runtime.ledger.reset()
            with engine.use(), debug.sanitize(sanitize):
                got = _run(executable, arrays, engine, func)
            ledger = runtime.ledger.snapshot()
            problems = output_mismatches(got, want, rtol, atol)
            if expect_offload and not ledger["offloaded_calls"]:
                problems.insert(0, f"{len(report.regions)} region(s) were partitioned, but no region call reached simaccel")
            if problems:
                problems = [f"{what}: {p}" for p in problems] if what else problems
                raise AssertionError(_failure(mod, arrays, engine, func, problems, report, rtol, atol, profile, bisect))
            matches.append(Match(engine, got, want, ledger, report))
    return matches


def assert_offloads(mod: tvm.IRModule, ops=None, *, regions: int | None = None, kept: int | None = None,
                    profile=None) -> PartitionReport:
    """Assert what partitioning `mod` for `profile` offloads to simaccel; returns the partition report.

    ops: op names (``"simaccel.dense_bias_relu"``) or family names (``"simaccel.dense"``, any
    of its fused variants) that must be offloaded, each at least as often as listed.
    regions: the exact number of regions; kept: the exact number of ops left to TVM.
    With none of them: at least one region. The message lists what was offloaded and what was
    kept, with the reasons.
    """
    __tracebackhide__ = True
    _, report = partition_report(mod, profile)
    offloaded = [op for names in report.regions.values() for op in names]
    problems = []
    wanted = [ops] if isinstance(ops, str) else list(ops or [])
    left = list(offloaded)
    for name in wanted:
        hit = next((op for op in left if op == name or _family(op) == name), None)
        if hit is None:
            count = wanted.count(name)
            problems.append(f"{name} is not offloaded" + (f" {count} times" if count > 1 else ""))
        else:
            left.remove(hit)
    if regions is not None and len(report.regions) != regions:
        problems.append(f"{len(report.regions)} region(s), expected {regions}")
    if kept is not None and len(report.kept) != kept:
        problems.append(f"{len(report.kept)} op(s) kept on TVM, expected {kept}")
    if ops is None and regions is None and kept is None and not report.regions:
        problems.append("nothing is offloaded")
    if problems:
        raise AssertionError("assert_offloads: " + "; ".join(dict.fromkeys(problems)) + "\n" + _indent(report.format()))
    return report


# -- helpers ------------------------------------------------------------------------------------------
def _family(op: str) -> str | None:
    from ...ops import get_op

    try:
        return get_op(op).family.name
    except SimAccelError:
        return None


def _runs(mod, inputs, sizes, func: str, seed: int) -> list[tuple[str, list[np.ndarray]]]:
    """(what, inputs) of each run: the given or seeded inputs; or, with `sizes`, seeded inputs at each."""
    if func not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise SimAccelError(f"assert_matches_tvm: the module has no function {func!r}")
    symbolic = sorted(frozenset().union(*(shape_vars([dim_of(d) for d in p.ty.shape.values])
                                          for p in mod[func].params if hasattr(p.ty, "shape"))))
    if sizes is None:
        if symbolic and inputs is None:
            raise SimAccelError(f"assert_matches_tvm: {func} has symbolic dims ({', '.join(symbolic)}); give inputs, or "
                                f"sizes={{{', '.join(f'{v!r}: ...' for v in symbolic)}}} (or a list of such dicts)")
        return [("", _inputs(mod, inputs, func, seed))]
    if inputs is not None:
        raise SimAccelError("assert_matches_tvm: give inputs or sizes, not both")
    runs = []
    for values in [sizes] if isinstance(sizes, dict) else list(sizes):
        missing = [v for v in symbolic if v not in values]
        if missing:
            raise SimAccelError(f"assert_matches_tvm: sizes {values} give no value to size var {missing[0]} "
                                f"(the vars: {', '.join(symbolic)})")
        runs.append((f"at {', '.join(f'{k} = {v}' for k, v in values.items())}", random_inputs(mod, seed, func, values)))
    if not runs:
        raise SimAccelError("assert_matches_tvm: sizes is an empty list")
    return runs


def _inputs(mod, inputs, func: str, seed: int) -> list[np.ndarray]:
    if inputs is None:
        return random_inputs(mod, seed, func)
    names = [p.name for p in mod[func].params]  # not their shapes: a symbolic one has no value before the inputs
    arrays = [np.asarray(a) for a in ([inputs] if isinstance(inputs, np.ndarray) else inputs)]
    if len(arrays) != len(names):
        raise SimAccelError(f"assert_matches_tvm: {func} takes {len(names)} inputs ({', '.join(names)}), got {len(arrays)}")
    return arrays


def _run(executable, arrays, engine: Engine, func: str) -> list[np.ndarray]:
    device = engine.tvm_device()
    result = relax.VirtualMachine(executable, device)[func](*[tvm.runtime.tensor(a, device) for a in arrays])
    return [t.numpy() for t in outputs_as_list(result)]


def output_mismatches(got, want, rtol=None, atol=None) -> list[str]:
    """A line for each output of `got` that does not match `want` (simaccel.compare's rule for
    whole outputs), or for a count that differs."""
    if len(got) != len(want):
        return [f"simaccel's build returned {len(got)} outputs, TVM alone's {len(want)}"]
    problems = []
    for i, (g, w) in enumerate(zip(got, want)):
        problem = mismatch(g, w, rtol, atol, scaled=True)
        if problem is not None:
            problems.append(f"output {i} {w.shape} {w.dtype}: {problem}")
    return problems


def _failure(mod, arrays, engine, func, problems, report, rtol, atol, profile, bisect) -> str:
    target = "llvm" if engine.device == "cpu" else "cuda"
    lines = [f"simaccel differs from TVM alone: function {func!r}, engine {str(engine)!r} (target {target})"]
    lines += [f"  {p}" for p in problems]
    lines += ["partition:", _indent(report.format())]
    if bisect:
        try:
            found = bisect_model(mod, arrays, target=target, engine=None if engine.runtime_engine == "auto" else
                                 engine.runtime_engine, rtol=rtol, atol=atol, profile=profile,
                                 out_dir=tempfile.mkdtemp(prefix="simaccel-bisect-"))
            lines += ["bisection:", _indent(found.format())]
        except Exception as e:  # the mismatch is the failure; a bisection that breaks only adds a note
            lines.append(f"bisection failed: {type(e).__name__}: {e}")
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
