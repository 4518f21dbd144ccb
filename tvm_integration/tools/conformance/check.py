"""One model of a conformance run: partitioned, built with the backend and with TVM alone, run, compared.

Where it sits: conformance/run.py hands `check_model` to an executor (tools/executors.py) once
per model of the zoo (conformance/zoo.py), in this process or on a Dask worker. The verdicts,
stages and the fresh-process reload are the fuzzer's too (tools/common/), so a model fails as
a fuzz case does: at the backend's build, an engine's run, an engine's output (judged by
simaccel.compare's rule for whole outputs), or the exported library run again in a fresh
process. A model TVM alone cannot build or run is skipped. Where a torch model's result differs from TVM alone's and equals torch's while TVM
alone's does not, TVM is the one off ("TVM numerically off"). On a GPU the backend is also
timed against TVM alone: interleaved medians of warm calls (tools/model_bench.py).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

from ....compare import mismatch
from ....runtime import get_runtime
from ..backends import RUNTIME_ENGINE, Backend, engine_device
from ..common.error_line import error_line
from ..common.runs import ContextLost, read_outputs, run_fresh, run_vm, stop_if_context_lost
from ..common.settings import saved_settings
from ..common.stderr_log import stderr_captured, tail
from ..common.verdicts import BUILD, FAIL, OUTPUT, PASS, RELOAD, RUN, SKIP, TVM_OFF
from .zoo import load

LOAD = "load"  # a failure stage of its own: the model could not be loaded or exported from torch
# Against torch (another framework's kernels and algorithms, a witness, not the reference) the
# absolute tolerance is 1e-3 of each output's scale; against TVM alone it is the dtype's.
TORCH_ATOL = 1e-3


def output_mismatch(got: list, want: list, atol: float | None = None) -> str | None:
    """None when every output of `got` matches `want` by simaccel.compare's rule for whole
    outputs (atol times 1 + the output's largest magnitude), else the first difference, naming
    the output. `atol`: instead of the dtype's."""
    if len(got) != len(want):
        return f"{len(got)} outputs, TVM alone gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        problem = mismatch(g, w, atol=atol, scaled=True)
        if problem is not None:
            return f"output {i} {w.shape} {w.dtype}: {problem}"
    return None


def _torch_difference(got: list, torch_outputs: list) -> str | None:
    """None where `got` matches torch's outputs: within TORCH_ATOL (scaled), or a 16-bit float
    output's own tolerance where that is wider (two builds rounding each step differently)."""
    if len(got) < len(torch_outputs):
        return f"{len(got)} outputs, torch gives {len(torch_outputs)}"
    half = any(str(g.dtype) in ("float16", "bfloat16") for g in got[:len(torch_outputs)])
    return output_mismatch(got[:len(torch_outputs)], [t.astype(g.dtype) for g, t in zip(got, torch_outputs)],
                           None if half else TORCH_ATOL)


def verdict(verdict: str, stage: str = "", error: str | BaseException = "", reason: str = "", **more) -> dict:
    """A result entry: the verdict and, for a failure, its stage, error (class name or "mismatch") and reason."""
    error = error if isinstance(error, str) else type(error).__name__
    return {"verdict": verdict, "stage": stage, "error": error, "reason": reason, **more}


def check_model(job: dict) -> dict:
    """Check one model (a task): job holds the model's spec, the engines, the backend's
    `partition`, `seed`, `reload` (export and run again in a fresh process), `repeat` (timed
    calls on a GPU, 0: none), the users' op modules and the device profile."""
    start = time.monotonic()
    result = {"model": job["model"], "backend": Backend(job["partition"]).name, "engines": {}}
    with saved_settings(job.get("user_op_modules") or [], job.get("profile"), "conformance worker", log=lambda _: None), \
            tempfile.TemporaryDirectory(prefix="simaccel-conformance-log-") as folder:
        with stderr_captured(folder) as log:  # TVM's C++ log and the like: kept in the result, off the console
            try:
                _check(job, result)
            except Exception as e:  # noqa: BLE001 - a model that breaks the check is that model's failure
                if isinstance(e, ContextLost):
                    raise  # the task's executor ends the worker: no later model could run in it
                result["error"] = f"{type(e).__name__}: {e}"
                result["traceback"] = traceback.format_exc()[-4000:]
        result.update(log.to_json())
    result["seconds"] = round(time.monotonic() - start, 2)
    return result


def _check(job: dict, result: dict) -> None:
    import tvm

    from ...backend.pipeline import build_tvm_only, default_target
    from ..model_bench import partition_summary

    name = job["model"]["name"]
    backend = Backend(job["partition"])
    try:
        loaded = load(job["model"]["spec"], job.get("seed", 0))
    except Exception as e:  # noqa: BLE001 - the model's fault, said as such
        result["failure"] = verdict(FAIL, LOAD, e, f"the model could not be loaded: {error_line(e)}")
        return
    mod, arrays = loaded.mod, loaded.inputs
    partitioned, report = backend.partition(mod)
    result["partition"] = partition_summary(report, partitioned)
    result["partition_text"] = report.format()
    engines = job["engines"]
    for device in dict.fromkeys(engine_device(e) for e in engines):
        dev = tvm.device(device, 0)
        target = default_target(device)
        mine = [e for e in engines if engine_device(e) == device]
        try:
            tvm_alone = build_tvm_only(mod, target)
            want = run_vm(tvm_alone, arrays, dev)
        except Exception as e:  # noqa: BLE001 - TVM's own failure: skipped
            stop_if_context_lost(e, "TVM alone", f"The model: {name}")
            for engine in mine:
                result["engines"][engine] = verdict(SKIP, reason=f"TVM alone: {error_line(e)}")
            continue
        if loaded.torch_outputs is not None and "tvm_vs_torch" not in result:  # torch ran on the CPU
            result["tvm_vs_torch"] = _torch_difference(want, loaded.torch_outputs)
        try:
            executable = backend.build(mod, target, partitioned=partitioned)
        except Exception as e:  # noqa: BLE001 - anything TVM builds, the backend must build
            for engine in mine:
                result["engines"][engine] = verdict(FAIL, BUILD, e, f"{backend.name} build failed where TVM alone "
                                                                    f"builds: {error_line(e)}")
            continue
        for engine in mine:
            result["engines"][engine] = _run_engine(job, backend, engine, executable, tvm_alone, arrays, want, dev,
                                                    loaded.torch_outputs, name)
        for shape, inputs, torch_outputs in loaded.more:  # a symbolic model: the same build at its other sizes
            _at_size(job, backend, mine, executable, tvm_alone, inputs, torch_outputs, dev, name, shape, result)
        if job.get("reload") and all(result["engines"][e]["verdict"] == PASS for e in mine):
            result["engines"][mine[0]]["reload"] = _reload(executable, arrays, want, device)


def _at_size(job, backend, engines, executable, tvm_alone, arrays, torch_outputs, dev, name, shape, result) -> None:
    """The model's build run again at input shape `shape`: each engine's entry records the shape,
    and takes the verdict there where it is worse (its reason saying at which shape)."""
    at = f" at input shape {tuple(shape)}"
    try:
        want = run_vm(tvm_alone, arrays, dev)
    except Exception as e:  # noqa: BLE001 - TVM's own failure at this size: said, not held against the backend
        stop_if_context_lost(e, "TVM alone", f"The model: {name}")
        for engine in engines:
            result["engines"][engine].setdefault("skipped_shapes", []).append(f"{tuple(shape)}: TVM alone: {error_line(e)}")
        return
    for engine in engines:
        entry = result["engines"][engine]
        if entry["verdict"] == FAIL:
            continue
        there = _run_engine({**job, "repeat": 0}, backend, engine, executable, tvm_alone, arrays, want, dev,
                            torch_outputs, name)
        entry.setdefault("shapes", []).append(list(shape))
        worse = {PASS: 0, TVM_OFF: 1, FAIL: 2}
        if worse.get(there["verdict"], 0) > worse.get(entry["verdict"], 0):
            result["engines"][engine] = {**there, "reason": there.get("reason", "") + at, "shapes": entry["shapes"]}


def _use(backend: Backend, engine: str):
    return get_runtime().use_engine(RUNTIME_ENGINE.get(engine, engine)) if backend.is_simaccel \
        else contextlib.nullcontext()


def _run_engine(job, backend, engine, executable, tvm_alone, arrays, want, dev, torch_outputs, name) -> dict:
    import tvm
    from tvm import relax

    gpu = engine_device(engine) == "cuda"
    runtime = get_runtime()
    runtime.ledger.reset()
    try:
        with _use(backend, engine):
            got = run_vm(executable, arrays, dev)
    except Exception as e:  # noqa: BLE001 - the backend failed to run what TVM runs
        stop_if_context_lost(e, f"{backend.name} on engine {engine}", f"The model: {name}")
        return verdict(FAIL, f"{RUN} ({engine})", e, f"engine {engine}: run failed: {error_line(e)}")
    entry = verdict(PASS)
    if backend.is_simaccel:
        entry["offloaded_calls"] = runtime.ledger.snapshot()["offloaded_calls"]
    problem = output_mismatch(got, want)
    if problem is not None:
        entry = verdict(FAIL, f"{OUTPUT} ({engine})", "mismatch", f"engine {engine}: differs from TVM alone: {problem}")
        if torch_outputs is not None and _torch_difference(got, torch_outputs) is None \
                and _torch_difference(want, torch_outputs) is not None:
            entry = verdict(TVM_OFF, reason=f"engine {engine}: differs from TVM alone ({problem}), but matches torch, "
                                             "which TVM alone does not")
    elif torch_outputs is not None:
        entry["vs_torch"] = _torch_difference(got, torch_outputs)
    if job.get("repeat") and gpu and entry["verdict"] != FAIL:
        from ..model_bench import timed

        theirs = relax.VirtualMachine(tvm_alone, dev)
        ours = relax.VirtualMachine(executable, dev)
        inputs = [tvm.runtime.tensor(a, dev) for a in arrays]

        def backend_call():
            with _use(backend, engine):
                ours["main"](*inputs)

        medians = timed({"tvm_only": lambda: theirs["main"](*inputs), "backend": backend_call}, dev.sync,
                        job["repeat"], warmup=min(10, job["repeat"]))
        entry["median_us"] = {k: round(v, 1) for k, v in medians.items()}
        entry["ratio"] = round(medians["backend"] / medians["tvm_only"], 3)
    return entry


def _reload(executable, arrays, want, device: str) -> dict:
    """The backend's library exported, then run in a fresh process that imports TVM only."""
    with tempfile.TemporaryDirectory(prefix="simaccel-conformance-") as workdir:
        folder = Path(workdir)
        executable.export_library(str(folder / "model.so"))
        np.savez(folder / "inputs.npz", *arrays)
        process = run_fresh([[str(folder / "model.so"), str(folder / "inputs.npz"), str(folder / "out.npz")]], folder,
                            device)
        if not (folder / "out.npz").exists():
            return verdict(FAIL, RELOAD, "no result", f"after export and load in a fresh process: no result "
                                                       f"({tail(process)})")
        got = read_outputs(folder / "out.npz")
    problem = output_mismatch(got, want)
    if problem is not None:
        return verdict(FAIL, RELOAD, "mismatch", f"after export and load in a fresh process: differs from TVM alone: "
                                                  f"{problem}")
    return verdict(PASS)
