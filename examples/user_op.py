"""A user-defined op in a model: RMSNorm (examples/rms_norm_op.py) offloaded with built-in ops.

    h = rms_norm(x, gamma)            myaccel.rms_norm        (declared in rms_norm_op.py)
    h = relu(h @ fc_w^T + fc_b)       simaccel.dense_bias_relu   } one simaccel region
    out = log_softmax(h)              TVM (simaccel has no pattern for log_softmax)

Partitions the model (printing the report), builds it with simaccel and with TVM alone, runs
both on the same inputs and compares them by simaccel.compare's rule, as every simaccel tool
judges a result. Exit status 0 when they match, 1 when they do not.

    python examples/user_op.py [--engine ref|sim|cuda] [--seed N]

`ref` and `sim` run on the CPU (`sim`: the Numba kernels on the CUDA simulator); `cuda`
builds for the GPU and needs one.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time

import tvm
from tvm import relax

import simaccel
from simaccel.compare import array_difference
from simaccel.tvm_integration import build, build_tvm_only, default_target, partition_report
from simaccel.tvm_integration.tools.models import random_inputs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rms_norm_op  # noqa: E402,F401  declares myaccel.rms_norm: importing it is all it takes

ROWS, FEATURES, HIDDEN = 8, 32, 16  # small: `sim` interprets every CUDA thread in Python


def model(dtype: str = "float32") -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((ROWS, FEATURES), dtype))
    gamma = relax.Var("gamma", relax.TensorType((FEATURES,), dtype))
    w = relax.Var("fc_w", relax.TensorType((HIDDEN, FEATURES), dtype))
    b = relax.Var("fc_b", relax.TensorType((HIDDEN,), dtype))
    with bb.function("main", [x, gamma, w, b]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.rms_norm(x, gamma, axes=[-1], epsilon=1e-5))
            h = bb.emit(relax.op.matmul(h, bb.emit(relax.op.permute_dims(w))))
            h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(h, b))))
            out = bb.emit_output(relax.op.nn.log_softmax(h))
        bb.emit_func_output(out)
    return bb.get()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["ref", "sim", "cuda"], default="ref")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    device = "cuda" if args.engine == "cuda" else "cpu"
    if device == "cuda" and not tvm.cuda(0).exist:
        print("--engine cuda: TVM finds no CUDA GPU on this machine", file=sys.stderr)
        return 2
    target, dev = default_target(device), tvm.device(device, 0)
    mod = model()

    print("[1] partition (myaccel.rms_norm is declared in examples/rms_norm_op.py)")
    _, report = partition_report(mod)
    print(textwrap.indent(report.format(), "    "))

    print(f"[2] build with simaccel and with TVM alone (target {target.kind.name})")
    simaccel_exec, reference_exec = build(mod, target), build_tvm_only(mod, target)

    tensors = [tvm.runtime.tensor(a, dev) for a in random_inputs(mod, args.seed)]
    runtime = simaccel.get_runtime()
    runtime.ledger.reset()
    print(f"[3] run on {dev}, simaccel engine {args.engine!r}")
    start = time.perf_counter()
    with runtime.use_engine(args.engine):
        got = relax.VirtualMachine(simaccel_exec, dev)["main"](*tensors).numpy()
    seconds = time.perf_counter() - start
    want = relax.VirtualMachine(reference_exec, dev)["main"](*tensors).numpy()

    ledger = runtime.ledger.snapshot()
    ops = ", ".join(f"{op} x{n} ({ledger['kernel_launches'].get(op, 0)} launches)" for op, n in ledger["ops"].items())
    print(f"    offloaded calls: {ledger['offloaded_calls']}; ops: {ops}; {seconds:.2f} s")
    print(f"    bytes copied by simaccel: {ledger['bytes']}")
    found = array_difference(got, want, scaled=True)  # the dtype's tolerance, atol times the output's scale
    ok = found.ok and ledger["ops"].get("myaccel.rms_norm") == 1
    print(f"output {got.shape} {got.dtype}: max abs error vs TVM alone = {found.max_error:.3g} (rtol {found.rtol:g}, "
          f"atol {found.atol:g} x (1 + max |TVM alone|))" + ("" if found.ok else f": {found.reason}"))
    print("RESULT: match" if ok else "RESULT: MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
