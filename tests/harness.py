"""Run a model through simaccel and through TVM alone, and compare."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

import simaccel
from simaccel.tvm_integration import build, build_tvm_only, partition_report
from simaccel.tvm_integration.deploy import outputs_as_list
from simaccel.tvm_integration.models import random_inputs

TOLERANCE = {"float32": dict(rtol=1e-4, atol=1e-5), "float16": dict(rtol=2e-2, atol=2e-2)}


def offloaded_ops(mod) -> list[str]:
    """The simaccel op names the partitioner put into regions, in order."""
    _, report = partition_report(mod)
    return [op for ops in report.regions.values() for op in ops]


def run_vm(executable, arrays):
    """Run `main`; one numpy array, or a list of them when the model returns a tuple."""
    device = tvm.cpu()
    out = relax.VirtualMachine(executable, device)["main"](*[tvm.runtime.tensor(a, device) for a in arrays])
    outputs = [t.numpy() for t in outputs_as_list(out)]
    return outputs[0] if hasattr(out, "numpy") else outputs


def compare_with_tvm(mod, engine: str, seed: int = 0, expect_offload: bool = True):
    """Build `mod` with simaccel and with TVM alone, run both on `engine`, assert they match.

    Returns (simaccel result, TVM result, ledger snapshot).
    """
    runtime = simaccel.get_runtime()
    arrays = random_inputs(mod, seed)
    dtype = str(mod["main"].params[0].ty.dtype)
    want = run_vm(build_tvm_only(mod), arrays)
    runtime.ledger.reset()
    with runtime.use_engine(engine):
        got = run_vm(build(mod), arrays)
    snapshot = runtime.ledger.snapshot()
    if expect_offload:
        assert snapshot["offloaded_calls"] >= 1, "nothing ran on simaccel"
    for g, w in zip(*(x if isinstance(x, list) else [x] for x in (got, want)), strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert np.all(np.isfinite(g))
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), **TOLERANCE[dtype])
    return got, want, snapshot
