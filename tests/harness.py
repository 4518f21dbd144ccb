"""Run a model through simaccel and through TVM alone, and compare."""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

import simaccel
from compare import assert_same
from simaccel.tvm_integration import build, build_tvm_only, partition_report
from simaccel.tvm_integration.tools.deploy import outputs_as_list
from simaccel.tvm_integration.tools.models import random_inputs


def offloaded_ops(mod) -> list[str]:
    """The simaccel op names the partitioner put into regions, in order."""
    _, report = partition_report(mod)
    return [op for ops in report.regions.values() for op in ops]


def run_vm(executable, arrays, func: str = "main"):
    """Run `func`; one numpy array, or a list of them when the model returns a tuple."""
    device = tvm.cpu()
    out = relax.VirtualMachine(executable, device)[func](*[tvm.runtime.tensor(a, device) for a in arrays])
    outputs = [t.numpy() for t in outputs_as_list(out)]
    return outputs[0] if hasattr(out, "numpy") else outputs


# TVM alone's outputs, per model, function and inputs: a test runs one model on each engine,
# and TVM alone's build and run (the same each time) cost as much as simaccel's. A hit needs the
# same structural hash (which covers constants' data) and a structurally equal model.
_TVM_ALONE: OrderedDict = OrderedDict()
_TVM_ALONE_SIZE = 64


def _digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype}{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def tvm_alone(mod, arrays, func: str = "main"):
    """`run_vm(build_tvm_only(mod), arrays, func)`, remembered for the test process."""
    key = (tvm_ffi.structural_hash(mod), func, _digest(arrays))
    seen = _TVM_ALONE.get(key)
    if seen is None or not tvm_ffi.structural_equal(seen[0], mod):
        seen = _TVM_ALONE[key] = (mod, run_vm(build_tvm_only(mod), arrays, func))
        while len(_TVM_ALONE) > _TVM_ALONE_SIZE:
            _TVM_ALONE.popitem(last=False)
    _TVM_ALONE.move_to_end(key)
    outputs = seen[1]
    return [o.copy() for o in outputs] if isinstance(outputs, list) else outputs.copy()


@functools.lru_cache(maxsize=None)
def small_torch_model(name: str):
    """torch_models' model `name` at its small size and its Relax module: exported once per
    test process (the torch extra's tests run each model on several engines)."""
    from simaccel.tvm_integration.tools import torch_models

    model = torch_models.load(name, "small")
    return model, model.to_relax()


def _scale(array) -> float:
    """The largest finite magnitude of `array` (1e-30 where it has none)."""
    a = np.asarray(array, dtype=np.float64)
    finite = np.abs(a[np.isfinite(a)])
    return max(float(finite.max()) if finite.size else 0.0, 1e-30)


def compare_with_tvm(mod, engine: str, seed: int = 0, expect_offload: bool = True, arrays=None, func: str = "main",
                     profile=None, atol_scale: float | None = None):
    """Build `mod` with simaccel and with TVM alone, run both on `engine`, assert they match.

    `arrays` default to seeded random inputs; `profile` is the device profile to partition for;
    `atol_scale`: the absolute tolerance is that fraction of each output's largest magnitude
    (whole models, whose float32 sums TVM orders differently), else the dtype's default.
    Returns (simaccel result, TVM result, ledger snapshot).
    """
    runtime = simaccel.get_runtime()
    arrays = random_inputs(mod, seed, func) if arrays is None else arrays
    dtype = str(mod[func].params[0].ty.dtype)
    want = tvm_alone(mod, arrays, func)
    runtime.ledger.reset()
    with runtime.use_engine(engine):
        got = run_vm(build(mod, profile=profile), arrays, func)
    snapshot = runtime.ledger.snapshot()
    if expect_offload:
        assert snapshot["offloaded_calls"] >= 1, "nothing ran on simaccel"
    for g, w in zip(*(x if isinstance(x, list) else [x] for x in (got, want)), strict=True):
        assert_same(g, w, dtype, atol=None if atol_scale is None else atol_scale * _scale(w))
    return got, want, snapshot


def plant_reference(monkeypatch, name: str, wrong):
    """Make op `name`'s numpy reference (what the ref engine runs) compute `wrong(right result)`
    for as long as the test runs: a planted fault the checks must catch."""
    import dataclasses

    from simaccel.ops import get_op, registry

    op = get_op(name)
    right = op.family.reference
    family = dataclasses.replace(op.family, reference=lambda *a, **k: wrong(right(*a, **k)))
    monkeypatch.setitem(registry._OPS, name, dataclasses.replace(op, family=family))
    simaccel.get_runtime().clear()  # plans hold resolved ops


def decoder_example():
    """The decoder of examples/decoder.py (simaccel.tvm_integration.tools.decoder): the model,
    its weights, rotary tables, generation loop and torch twin."""
    from simaccel.tvm_integration.tools import decoder

    return decoder
