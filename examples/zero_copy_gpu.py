"""Zero-copy on the GPU in one script: TVM kernel -> simaccel region -> TVM kernel.

    h0 = leaky_relu(x)               TVM kernel
    h1 = relu(h0 @ fc_w^T + fc_b)    simaccel region (simaccel.dense_bias_relu)
    h2 = log_softmax(h1)             TVM kernel
    returns (h0, h1, h2)

Built for the CUDA target and run on the GPU with the ledger tracing every tensor the region
is handed, it shows:

1. pointer identity: the region read h0 at the device address TVM's leaky_relu kernel wrote it to,
   read the caller's fc_w and fc_b in place, and wrote h1 into the buffer TVM allocated (which
   TVM's log_softmax then read);
2. bytes simaccel copied (from the ledger) and time per call: the region native (C++ launching
   the AOT-compiled kernels, GPU only), on the Python `cuda` engine zero-copy, and host-staged
   (the comparison mode that bounces every region tensor through host memory);
3. the outputs equal those of the TVM-only build.

Without a GPU (tvm.cuda(0).exist is False) it says so and shows the same flow on the CPU:
the `ref` engine on host buffers, the same pointer identity, no staged comparison (that mode
applies to GPU tensors only), and times it says do not measure the accelerator.
Exit status 0 when everything holds, 1 otherwise.

    python examples/zero_copy_gpu.py [--device auto|cpu|cuda] [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import textwrap
import time

import numpy as np
import tvm
from tvm import relax

import simaccel
from simaccel.tvm_integration import build, build_tvm_only, default_target, partition_report
from simaccel.tvm_integration.tools.models import hetero_chain, random_inputs

ROWS, FEATURES, HIDDEN = 64, 256, 512
RTOL, ATOL = 1e-4, 1e-4
CPU_TIMES = """
        (on the CPU these ratios do not measure the accelerator: the region runs on the 'ref' engine,
        whose dense layer is numpy's BLAS matmul, called through simaccel's Python runtime, while TVM
        alone runs the dense layer as its default CPU schedule compiles it (untuned loops), so the
        ratio swings widely with the machine and its load; what the example measures, zero-copy
        against host-staged and native regions against TVM's CUDA build, needs a GPU)
"""


def per_call(vm, tensors, dev, repeat: int) -> float:
    """Median seconds of one call (each followed by a device sync), after one warm-up call."""
    vm["main"](*tensors)
    dev.sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        vm["main"](*tensors)
        dev.sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per mode (median reported)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    gpu = bool(tvm.cuda(0).exist)
    if args.device == "cuda" and not gpu:
        print("--device cuda: TVM finds no CUDA GPU on this machine", file=sys.stderr)
        return 2
    device = "cuda" if gpu and args.device != "cpu" else "cpu"
    if device == "cpu":
        print("no GPU used: " + ("--device cpu" if gpu else "TVM finds no CUDA GPU (tvm.cuda(0).exist is False)")
              + "; showing the same flow on the CPU (engine 'ref', host buffers)")
    engine = "cuda" if device == "cuda" else "ref"
    target, dev = default_target(device), tvm.device(device, 0)
    runtime = simaccel.get_runtime()
    ok = True

    mod = hetero_chain("float32", ROWS, FEATURES, HIDDEN)
    print("[1] partition: TVM kernel -> simaccel region -> TVM kernel")
    _, report = partition_report(mod)
    print(textwrap.indent(report.format(), "    "))
    print(f"[2] build with simaccel and with TVM alone (target {target.kind.name})")
    vm = relax.VirtualMachine(build(mod, target), dev)
    reference = relax.VirtualMachine(build_tvm_only(mod, target), dev)
    _, w, b = tensors = [tvm.runtime.tensor(a, dev) for a in random_inputs(mod, 0)]

    print(f"[3] one call on {dev}, engine {engine!r}, with the ledger tracing the region's tensors")
    runtime.ledger.reset()
    runtime.ledger.tracing = True
    try:
        with runtime.use_engine(engine):
            h0, h1, h2 = vm["main"](*tensors)
            dev.sync()
    finally:
        runtime.ledger.tracing = False
    trace = runtime.ledger.trace()
    ours = {h0.data_ptr(): "h0, written by TVM's leaky_relu kernel", w.data_ptr(): "fc_w, the caller's argument",
            b.data_ptr(): "fc_b, the caller's argument", h1.data_ptr(): "h1, allocated by TVM; log_softmax reads it"}
    for entry in trace:
        print(f"    region {entry['role']:6} {entry['tensor']!r:6} @ {entry['address']:#x} on {entry['device']}: "
              f"{ours.get(entry['address'], 'NOT a buffer TVM handed over')}")
    inputs = {e["address"] for e in trace if e["role"] == "input"}
    outputs = [e["address"] for e in trace if e["role"] == "output"]
    identity = (
        {h0.data_ptr(), w.data_ptr(), b.data_ptr()} <= inputs
        and outputs == [h1.data_ptr()]
        and all(e["device"] == f"{device}:0" for e in trace)
    )
    ok &= identity
    print(f"    pointer identity (the region read and wrote TVM's own buffers): {'yes' if identity else 'NO'}")

    print("[4] compare with TVM alone")
    want = reference["main"](*tensors)
    for name, g, r in zip(("h0", "h1", "h2"), (h0, h1, h2), want):
        g, r = g.numpy(), r.numpy()
        error = float(np.max(np.abs(g.astype(np.float64) - r.astype(np.float64))))
        same = bool(np.allclose(g, r, rtol=RTOL, atol=ATOL))
        ok &= same
        print(f"    {name} {g.shape}: max abs error {error:.3g}{'' if same else '  MISMATCH'}")

    print(f"[5] bytes simaccel copied and time per call (median of {args.repeat})")
    modes = [("zero-copy", engine, False)]
    if device == "cuda":  # a CUDA build's regions are native unless a Python engine is chosen
        modes = [("native", "auto", False), *modes, ("host-staged", engine, True)]
    seconds = {"TVM alone": per_call(reference, tensors, dev, args.repeat)}
    for mode, chosen, staged in modes:
        with runtime.use_engine(chosen), runtime.use_staged(staged):
            runtime.ledger.reset()
            got = vm["main"](*tensors)
            dev.sync()
            copied = runtime.ledger.snapshot()["bytes"]
            seconds[mode] = per_call(vm, tensors, dev, args.repeat)
        same = all(np.allclose(g.numpy(), r.numpy(), rtol=RTOL, atol=ATOL) for g, r in zip(got, want))
        ok &= same
        expected = sum(t.numpy().nbytes for t in (h0, w, b, h1)) if staged else 0
        ok &= copied == {"host_to_device": expected, "device_to_host": expected, "device_to_device": 0}
        print(f"    {mode:11}: host->device {copied['host_to_device']} B, device->host {copied['device_to_host']} B, "
              f"device->device {copied['device_to_device']} B; result {'matches' if same else 'MISMATCH'}")
    if device == "cpu":
        print("    host-staged: not run (it copies GPU tensors through host memory; these are host tensors)")
    base = seconds["zero-copy"]
    for mode, s in seconds.items():
        print(f"    {mode:11}: {s * 1e6:9.0f} us per call ({s / base:.2f}x zero-copy)")
    if device == "cpu":
        print(textwrap.dedent(CPU_TIMES).strip("\n"))

    print("RESULT: match" if ok else "RESULT: MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
