"""`simaccel bench`: TVM alone vs simaccel (native, Python zero-copy, host-staged), on one GPU.

A benchmark, not a test. For each case (the demo model; relu(x @ W) at 1024^3 and 4096^3;
an 8x8 region that shows the per-call overhead) it loads the prebuilt libraries
(simaccel.tvm_integration.tools.artifacts), checks that the builds agree and that the
native regions give exactly the Python engine's result, times the first call of the
regions (native, then Python), then times one call of each mode in turn (interleaved, so
drift hits all modes alike), each call followed by a device synchronisation, and reports
medians after warm-up. The modes run one library: its native regions ("simaccel_native"),
or the same regions routed to the Python "cuda" engine, zero-copy or host-staged. Where PyTorch is present its
cuBLAS matmul+relu (TF32 off) is timed in the same loop as a peer. Writes bench.json (with
the date, device name and versions) and bench.png. The artifacts and the output folder
are checked before anything is timed. `--compare OLD.json` then flags every figure more than
10% worse than that earlier report (simaccel.tvm_integration.tools.bench_compare).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from ...errors import SimAccelError
from ...runtime import get_runtime
from . import deploy
from .artifacts import case_inputs, load_manifest, require_cases
from .common.arrays import check_writable
from .bench_compare import PEER, format_comparison, load_report, peer_ratio_changes
from .common.torch_peer import torch_on_gpu

CASES = ["mm8", "mm1024", "mm4096", "conv56", "conv28", "conv14", "dwconv112", "demo_f32"]
MODES = ["tvm_only", "simaccel_native", "simaccel_zero_copy", "simaccel_staged"]
PEER_MODE = "torch"  # cuBLAS for the GEMM cases, cuDNN for the convolutions
GEMM_SIZE = {"mm8": 8, "mm1024": 1024, "mm4096": 4096}
# (batch, channels, size, groups) of the conv2d+bias+relu cases (3x3, stride 1, padding 1)
CONV_SHAPE = {"conv56": (8, 64, 56, 1), "conv28": (8, 128, 28, 1), "conv14": (8, 256, 14, 1), "dwconv112": (8, 32, 112, 32)}


def case_flops(name: str) -> float | None:
    """The multiply-adds x 2 of a GEMM or convolution case; None for the others."""
    if name in GEMM_SIZE:
        return 2.0 * GEMM_SIZE[name] ** 3
    if name in CONV_SHAPE:
        n, c, size, groups = CONV_SHAPE[name]
        return 2.0 * n * c * size * size * (c // groups) * 9
    return None


def run_bench(artifacts_dir, out_dir, repeat: int = 50, warmup: int = 5, compare_with=None, log=print) -> int:
    """Time every case, write bench.json and bench.png; with `compare_with` (an earlier
    bench.json) also compare (simaccel.tvm_integration.tools.bench_compare). Returns 1 when a
    figure is more than 10% worse than before, else 0."""
    old = load_report(compare_with) if compare_with else None  # a bad file fails before any timing
    if old is not None and old.peer != PEER:
        raise SimAccelError(f"bench --compare {compare_with}: a kernel report (ops.json); compare it with "
                            "`bench --ops --compare` or give a bench.json")
    manifest = load_manifest(artifacts_dir)
    require_cases(artifacts_dir, manifest, CASES)
    out = output_folder(out_dir)
    runtime = get_runtime()
    results = {}
    for name in CASES:
        results[name] = _bench_case(artifacts_dir, manifest, name, runtime, repeat, warmup)
        summary = ", ".join(f"{m} {v['median_us']:.1f} us" for m, v in results[name]["modes"].items())
        log(f"{name}: {summary}")

    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "device": deploy.gpu_name(),
        "versions": {pkg: package_version(pkg) for pkg in ("simaccel", "apache-tvm", "apache-tvm-ffi", "numba-cuda", "numpy", "torch")},
        "method": f"median of {repeat} timed calls after {warmup} warm-up calls; modes interleaved; "
        "each call followed by a device synchronisation; wall clock",
        "cases": results,
    }
    (out / "bench.json").write_text(json.dumps(report, indent=1))
    _chart(report, out / "bench.png")
    log(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")
    if old is None:
        return 0
    return compare_reports(out / "bench.json", compare_with, log=log)


def compare_reports(new_path, old_path, log=print) -> int:
    """Compare two bench reports; 1 when a figure is more than 10% worse, else 0."""
    new, old = load_report(new_path), load_report(old_path)
    changes, notes = peer_ratio_changes(new, old)
    log(f"compared with {old_path}:")
    for line in format_comparison(changes, notes, new, old):
        log(line)
    return 1 if any(c.regressed() for c in changes) else 0


def output_folder(out_dir) -> Path:
    """Create `out_dir` if needed and check that bench.json can be written there."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SimAccelError(f"output folder {out_dir}: cannot create it: {e.strerror or e}") from e
    check_writable(out / "bench.json", "output file")
    return out


def _bench_case(directory, manifest, name, runtime, repeat, warmup) -> dict:
    import tvm

    simaccel_vm, dev = deploy.load(os.path.join(directory, f"{name}.simaccel.so"), "cuda")
    tvm_vm, _ = deploy.load(os.path.join(directory, f"{name}.tvm.so"), "cuda")
    arrays = case_inputs(manifest, name)
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]

    def call(vm, engine=None, staged=False):
        def go():
            with contextlib.ExitStack() as scope:
                if engine:
                    scope.enter_context(runtime.use_engine(engine))
                if staged:
                    scope.enter_context(runtime.use_staged())
                vm["main"](*tensors)
            dev.sync()

        return go

    calls = {
        "tvm_only": call(tvm_vm),
        "simaccel_native": call(simaccel_vm),
        "simaccel_zero_copy": call(simaccel_vm, engine="cuda"),
        "simaccel_staged": call(simaccel_vm, engine="cuda", staged=True),
    }
    first_call = {mode: _first_call_ms(runtime, calls[mode]) for mode in ("simaccel_native", "simaccel_zero_copy")}
    peer = _torch_peer(name, arrays)
    if peer is not None:
        calls[PEER_MODE] = peer

    # The results stay alive until compared, so none can reuse another's memory.
    want, got = tvm_vm["main"](*tensors), simaccel_vm["main"](*tensors)
    with runtime.use_engine("cuda"):
        python = simaccel_vm["main"](*tensors)
    error = float(np.max(np.abs(got.numpy().astype(np.float64) - want.numpy().astype(np.float64))))
    identical = bool(np.array_equal(got.numpy(), python.numpy(), equal_nan=True))

    bytes_per_call = {}
    for mode in ("simaccel_native", "simaccel_zero_copy", "simaccel_staged"):
        runtime.ledger.reset()
        calls[mode]()
        bytes_per_call[mode] = runtime.ledger.snapshot()["bytes"]

    samples = {mode: [] for mode in calls}
    for _ in range(warmup):
        for go in calls.values():
            go()
    for _ in range(repeat):
        for mode, go in calls.items():
            start = time.perf_counter()
            go()
            samples[mode].append(time.perf_counter() - start)

    modes = {}
    for mode, times in samples.items():
        times_us = sorted(t * 1e6 for t in times)
        entry = {
            "median_us": statistics.median(times_us),
            "p10_us": times_us[len(times_us) // 10],
            "p90_us": times_us[(len(times_us) * 9) // 10],
            "runs": len(times_us),
        }
        if case_flops(name):
            entry["tflops"] = case_flops(name) / (entry["median_us"] * 1e-6) / 1e12
        if mode in bytes_per_call:
            entry["bytes_copied_per_call"] = bytes_per_call[mode]
        modes[mode] = entry
    base = modes["tvm_only"]["median_us"]
    return {
        "regions": manifest["cases"][name]["regions"],
        "max_abs_error_vs_tvm_only": error,
        "native_equals_python": identical,
        "first_call": first_call,
        "modes": modes,
        "time_ratio_vs_tvm_only": {mode: v["median_us"] / base for mode, v in modes.items()},
        "staged_over_zero_copy": modes["simaccel_staged"]["median_us"] / modes["simaccel_zero_copy"]["median_us"],
    }


def _first_call_ms(runtime, go) -> dict:
    """The first call of a freshly loaded library's regions: the call's wall time, and the
    longest time spent inside one region (kernel loading or compiling, memory setup)."""
    runtime.ledger.reset()
    start = time.perf_counter()
    go()
    wall = time.perf_counter() - start
    regions = runtime.ledger.snapshot()["regions"]
    return {"call_ms": wall * 1e3, "slowest_region_ms": max((r["seconds"] for r in regions.values()), default=0.0) * 1e3}


def _torch_peer(name, arrays):
    """The GEMM cases' relu(x @ W) with cuBLAS, the convolution cases' relu(conv2d + b) with
    cuDNN (TF32 off for both), if PyTorch is installed; else None."""
    if name not in GEMM_SIZE and name not in CONV_SHAPE:
        return None
    peer = torch_on_gpu(arrays)
    if peer is None:
        return None
    torch, F, t = peer
    if name in GEMM_SIZE:
        def run():
            return torch.relu(t[0] @ t[1])
    else:
        def run():
            return F.relu(F.conv2d(t[0], t[1], t[2].reshape(-1), padding=1, groups=CONV_SHAPE[name][3]))

    def go():
        run()
        torch.cuda.synchronize()

    return go


def pyplot():
    """matplotlib's pyplot on a file backend, or None where matplotlib is not installed (the
    charts are extras: the `bench` extra installs it)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _chart(report, path) -> None:
    plt = pyplot()
    if plt is None:
        return
    cases = list(report["cases"])
    modes = [m for m in (*MODES, PEER_MODE)
             if any(m in report["cases"][c]["modes"] for c in cases)]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        values = [report["cases"][c]["modes"].get(mode, {}).get("median_us", 0) for c in cases]
        bars = ax.bar([x + i * width for x in range(len(cases))], values, width, label=mode)
        for bar, v in zip(bars, values):
            if v:
                ax.annotate(f"{v:.0f}" if v >= 10 else f"{v:.1f}", (bar.get_x() + bar.get_width() / 2, v),
                            ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks([x + width * (len(modes) - 1) / 2 for x in range(len(cases))], cases)
    ax.set_ylabel("median time per call (us, log scale)")
    ax.set_title(f"simaccel on {report['device']} ({report['date'][:10]})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def package_version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None
