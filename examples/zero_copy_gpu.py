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
3. the outputs match those of the TVM-only build (simaccel.compare's rule, as every simaccel
   tool judges a result).

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

import tvm
from tvm import relax

import simaccel
from simaccel.compare import array_difference, mismatch
from simaccel.tvm_integration import build, build_tvm_only, default_target, partition_report
from simaccel.tvm_integration.tools.models import hetero_chain, random_inputs

ROWS, FEATURES, HIDDEN = 64, 256, 512
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
    args = parse_args(argv)
    device = choose_device(args.device)
    if device is None:
        return 2
    engine = "cuda" if device == "cuda" else "ref"
    target, dev = default_target(device), tvm.device(device, 0)
    vm, reference, tensors = partition_and_build(hetero_chain("float32", ROWS, FEATURES, HIDDEN), target, dev)
    got, ok = traced_call(vm, tensors, dev, engine, device)
    print("[4] compare with TVM alone")
    want = reference["main"](*tensors)
    ok &= matches_tvm_alone(got, want)
    print(f"[5] bytes simaccel copied and time per call (median of {args.repeat})")
    (h0, h1, _), (_, w, b) = got, tensors
    staged_bytes = sum(t.numpy().nbytes for t in (h0, w, b, h1))  # what host staging copies each way
    copies_ok, seconds = copies_and_times(vm, reference, tensors, dev, engine, device, args.repeat, want, staged_bytes)
    ok &= copies_ok
    print_times(seconds, device)
    print("RESULT: match" if ok else "RESULT: MISMATCH")
    return 0 if ok else 1


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per mode (median reported)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def choose_device(asked: str) -> str | None:
    """"cuda" or "cpu" for --device `asked` (saying why when no GPU is used); None for --device
    cuda where TVM finds no GPU."""
    gpu = bool(tvm.cuda(0).exist)
    if asked == "cuda" and not gpu:
        print("--device cuda: TVM finds no CUDA GPU on this machine", file=sys.stderr)
        return None
    device = "cuda" if gpu and asked != "cpu" else "cpu"
    if device == "cpu":
        print("no GPU used: " + ("--device cpu" if gpu else "TVM finds no CUDA GPU (tvm.cuda(0).exist is False)")
              + "; showing the same flow on the CPU (engine 'ref', host buffers)")
    return device


def partition_and_build(mod, target, dev):
    """Steps 1 and 2: the partition report, then (simaccel's VM, TVM alone's VM, the inputs on `dev`)."""
    print("[1] partition: TVM kernel -> simaccel region -> TVM kernel")
    _, report = partition_report(mod)
    print(textwrap.indent(report.format(), "    "))
    print(f"[2] build with simaccel and with TVM alone (target {target.kind.name})")
    vm = relax.VirtualMachine(build(mod, target), dev)
    reference = relax.VirtualMachine(build_tvm_only(mod, target), dev)
    return vm, reference, [tvm.runtime.tensor(a, dev) for a in random_inputs(mod, 0)]


def traced_call(vm, tensors, dev, engine: str, device: str):
    """Step 3: one call with the ledger tracing the region's tensors; ((h0, h1, h2), whether the
    region read and wrote TVM's own buffers)."""
    runtime = simaccel.get_runtime()
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
    _, w, b = tensors
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
    print(f"    pointer identity (the region read and wrote TVM's own buffers): {'yes' if identity else 'NO'}")
    return (h0, h1, h2), identity


def matches_tvm_alone(got, want) -> bool:
    """Step 4: each output against TVM alone's, its largest difference printed."""
    ok = True
    for name, g, r in zip(("h0", "h1", "h2"), got, want):
        found = array_difference(g.numpy(), r.numpy(), scaled=True)
        ok &= found.ok
        print(f"    {name} {tuple(g.shape)}: max abs error {found.max_error:.3g}{'' if found.ok else '  MISMATCH: ' + found.reason}")
    return ok


def copies_and_times(vm, reference, tensors, dev, engine: str, device: str, repeat: int, want, staged_bytes: int):
    """Step 5: per mode (native on a GPU, zero-copy, host-staged on a GPU), the bytes simaccel
    copied in one call, checked, and the result checked; (whether all held, seconds per call by mode)."""
    runtime = simaccel.get_runtime()
    ok = True
    modes = [("zero-copy", engine, False)]
    if device == "cuda":  # a CUDA build's regions are native unless a Python engine is chosen
        modes = [("native", "auto", False), *modes, ("host-staged", engine, True)]
    seconds = {"TVM alone": per_call(reference, tensors, dev, repeat)}
    for mode, chosen, staged in modes:
        with runtime.use_engine(chosen), runtime.use_staged(staged):
            runtime.ledger.reset()
            got = vm["main"](*tensors)
            dev.sync()
            copied = runtime.ledger.snapshot()["bytes"]
            seconds[mode] = per_call(vm, tensors, dev, repeat)
        same = all(mismatch(g.numpy(), r.numpy(), scaled=True) is None for g, r in zip(got, want))
        ok &= same
        expected = staged_bytes if staged else 0
        ok &= copied == {"host_to_device": expected, "device_to_host": expected, "device_to_device": 0}
        print(f"    {mode:11}: host->device {copied['host_to_device']} B, device->host {copied['device_to_host']} B, "
              f"device->device {copied['device_to_device']} B; result {'matches' if same else 'MISMATCH'}")
    if device == "cpu":
        print("    host-staged: not run (it copies GPU tensors through host memory; these are host tensors)")
    return ok, seconds


def print_times(seconds: dict, device: str) -> None:
    base = seconds["zero-copy"]
    for mode, s in seconds.items():
        print(f"    {mode:11}: {s * 1e6:9.0f} us per call ({s / base:.2f}x zero-copy)")
    if device == "cpu":
        print(textwrap.dedent(CPU_TIMES).strip("\n"))


if __name__ == "__main__":
    sys.exit(main())
