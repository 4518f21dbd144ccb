"""`simaccel demo`: the whole BYOC flow on a small heterogeneous model, checked against TVM.

Builds the demo CNN (or, with `--model NAME`, exports a PyTorch model with torch.export),
partitions it (printing what went where and why), compiles it with simaccel and with TVM
alone, runs both on the same inputs, and compares (while a timeline trace is on, the simaccel
build's VM calls are traced too: tools/trace_tvm.py). Returns the
process exit status: 0 when the results match, 1 when they do not. On a runtime-only TVM
it refuses at once, before importing anything that needs the full TVM.
"""

from __future__ import annotations

import time

import numpy as np

from ...compare import array_difference
from ...errors import DeviceError, SimAccelError


def gpu_present() -> bool:
    import tvm

    return bool(tvm.cuda(0).exist)


def run_demo(
    engine: str = "auto", seed: int = 0, dtype: str = "float32", device: str = "auto", staged: bool = False, out=print,
    model: str = "cnn", size: str = "full",
) -> int:
    """Run the demo on `device` ("cpu", "cuda", or "auto": the GPU when there is one).

    `model` is "cnn" (the built-in demo model) or a torch.export model of
    simaccel.tvm_integration.tools.torch_models (needs torch), at `size` "full" or "small".
    """
    from .common.runs import outputs_as_list
    from .deploy import runtime_only

    if runtime_only():
        raise SimAccelError(
            "simaccel demo compiles its model, which needs the full TVM (with its compiler); this "
            "TVM is runtime-only (TVM_USE_RUNTIME_LIB=1). Build libraries elsewhere and run them "
            "here with `simaccel run LIB.so --inputs in.npz --device cuda`."
        )
    import tvm
    from tvm import relax

    from ...debug.timeline import current as current_trace
    from ...runtime import get_runtime
    from . import models
    from .trace_tvm import instrument_vm
    from ..backend.partition import partition_report
    from ..backend.pipeline import build, build_tvm_only, default_target
    from ..backend.native import has_native_regions

    device = _device(engine, device, staged)
    torch_model = None if model == "cnn" else _torch_model(model, size, seed, dtype)
    runtime = get_runtime()
    if engine != "auto":
        runtime.set_engine(engine)
    runtime.set_staged(staged or None)
    tvm_device = tvm.device(device, 0)
    target = default_target(device)

    step = _Steps(out)
    if torch_model is None:
        mod = models.demo_cnn(dtype)
        step("partition the demo model (CNN + MLP head)")
    else:
        step(f"export {model} ({size}, input {torch_model.input_shape}) with torch.export and import it into TVM")
        out(_indent(torch_model.doc))
        mod = torch_model.to_relax()
        step(f"partition {model}")
    _, report = partition_report(mod)
    out(_indent(report.format()))

    step(f"compile with simaccel (target {target.kind.name}{', host-staged' if staged else ''})")
    simaccel_exec = build(mod, target)
    step("compile with TVM alone (the reference)")
    reference_exec = build_tvm_only(mod, target)

    inputs = models.random_inputs(mod, seed)
    tensors = [tvm.runtime.tensor(a, tvm_device) for a in inputs]
    runtime.ledger.reset()
    native = has_native_regions(simaccel_exec) and not runtime.route_flag_set()
    step(f"run on {tvm_device}, " + ("simaccel regions native (C++ launching AOT-compiled kernels)" if native
                                     else f"simaccel engine {runtime.engine_name(device)!r}"))
    # torch.export models return a tuple: the first output is the model's
    simaccel_vm = relax.VirtualMachine(simaccel_exec, tvm_device)
    if current_trace() is not None:  # simaccel.trace / $SIMACCEL_TRACE / --trace: TVM's VM calls too
        instrument_vm(simaccel_vm, tvm_device)
    got = outputs_as_list(simaccel_vm["main"](*tensors))[0].numpy()
    step("run the TVM-only build")
    want = outputs_as_list(relax.VirtualMachine(reference_exec, tvm_device)["main"](*tensors))[0].numpy()

    ok = compare_with_tvm_alone(got, want, out)
    if torch_model is not None:
        from_torch = float(np.max(np.abs(got.astype(np.float64) - torch_model.run(inputs[0]))))
        out(f"max abs error vs torch (for reference; float32 sums in another order) = {from_torch:.3g}")
    _print_ledger(runtime, staged, out)
    out("RESULT: match" if ok else "RESULT: MISMATCH")
    return 0 if ok else 1


def compare_with_tvm_alone(got, want, out=print) -> bool:
    """Print how simaccel's output compares with TVM alone's (simaccel.compare's rule for whole
    outputs, the dtype's tolerance); whether it matches."""
    found = array_difference(got, want, scaled=True)
    out(f"\noutput {got.shape} {got.dtype}: max abs error vs TVM alone = {found.max_error:.3g} (rtol {found.rtol:g}, "
        f"atol {found.atol:g} x (1 + max |TVM alone|))" + ("" if found.ok else f": {found.reason}"))
    return found.ok


def _device(engine: str, device: str, staged: bool) -> str:
    """Where the demo runs ("auto": the GPU when TVM finds one); a DeviceError for an engine or
    --staged that cannot run there."""
    if device == "auto":
        device = "cuda" if gpu_present() else "cpu"
    if device == "cuda" and not gpu_present():
        raise DeviceError("--device cuda: TVM finds no CUDA GPU on this machine")
    if staged and device != "cuda":
        raise DeviceError("--staged copies GPU tensors through host memory; it needs --device cuda")
    if (engine == "cuda") != (device == "cuda") and engine != "auto":
        raise DeviceError(
            f"--engine {engine} cannot run a model on {device}: "
            + ("the cuda engine works on GPU tensors" if engine == "cuda" else f"the {engine} engine works on host memory")
        )
    return device


def _torch_model(model: str, size: str, seed: int, dtype: str):
    from . import torch_models

    if dtype != "float32":
        raise SimAccelError(f"--model {model} is exported from torch in float32; --dtype {dtype} applies to the cnn model")
    return torch_models.load(model, size, seed)


def _print_ledger(runtime, staged: bool, out) -> None:
    """The ledger of the run and, where the active profile has performance figures, the modeled time beside it."""
    from ...profile import active_profile

    out("ledger:")
    out(_indent(_format_ledger(runtime.ledger.snapshot())))
    profile = active_profile()
    if profile.performance is not None:
        out(f"time of this run beside the time the accelerator of profile {profile.name!r} would take "
            "(simaccel.timing):")
        out(_indent(runtime.ledger.modeled(profile.performance, staged).format()))


class _Steps:
    def __init__(self, out):
        self.out = out
        self.start = time.perf_counter()
        self.count = 0

    def __call__(self, text: str) -> None:
        self.count += 1
        self.out(f"[{self.count}] {text}  (+{time.perf_counter() - self.start:.1f} s)")


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def _format_ledger(snapshot: dict) -> str:
    lines = [f"offloaded calls: {snapshot['offloaded_calls']}"]
    for op, count in snapshot["ops"].items():
        lines.append(f"{op}: {count} run(s), {snapshot['kernel_launches'].get(op, 0)} kernel launch(es)")
    b = snapshot["bytes"]
    lines.append(
        f"bytes copied by simaccel: host->device {b['host_to_device']}, device->host {b['device_to_host']}, "
        f"device->device {b['device_to_device']}"
    )
    for name, region in snapshot["regions"].items():
        lines.append(f"region {name}: {region['calls']} call(s), {region['seconds'] * 1e3:.2f} ms")
    return "\n".join(lines)
