"""Timing whole models against TVM alone: interleaved medians, GPU kernel time from CUPTI,
partition summaries and the markdown table of a run.

Where it sits: a tool on top of the backend, used by the GPU scripts that time torch.export
models (scripts/torch_models_gpu.py, scripts/untuned_models_gpu.py). Everything here but
`kernel_profile` is plain Python over plain data, so the CPU tests check it without a GPU.

Kernel time comes from `torch.profiler` with ``ProfilerActivity.CUDA``: CUPTI records every
kernel the process launches in the profiling window, TVM's (cuLaunchKernel through its own
CUDA runtime) and native regions' as well as torch's, so one mode is profiled at a time and
its kernels are read from the Chrome trace torch writes (events of category "kernel", their
"dur" in microseconds), a format that has stayed stable across torch versions.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable


def timed(calls: dict[str, Callable[[], object]], sync: Callable[[], object], repeat: int,
          warmup: int = 10) -> dict[str, float]:
    """Median wall time in microseconds of each of `calls`, one call of each in turn (interleaved,
    so drifts of clock and temperature hit every mode alike), each followed by `sync()`."""
    samples = {name: [] for name in calls}
    for _ in range(warmup):
        for go in calls.values():
            go()
            sync()
    for _ in range(repeat):
        for name, go in calls.items():
            start = time.perf_counter()
            go()
            sync()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) * 1e6 for name, s in samples.items()}


def kernels_from_trace(trace: dict) -> list[tuple[str, float]]:
    """(kernel name, duration in µs) of every GPU kernel in a Chrome trace written by
    `torch.profiler` (`export_chrome_trace`): events of category "kernel"."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    return [(e.get("name", "?"), float(e.get("dur", 0.0))) for e in events
            if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel"]


def gpu_activity_counts(trace: dict) -> dict[str, int]:
    """How many events of each GPU category other than kernels (copies, memsets) a trace holds."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    counts = Counter(str(e.get("cat", "")).lower() for e in events if e.get("ph") == "X")
    return {cat: n for cat, n in sorted(counts.items()) if cat.startswith("gpu_")}


def kernel_summary(kernels: list[tuple[str, float]], calls: int, top: int = 10) -> dict:
    """Per call: total kernel µs, launches, and the `top` kernels by time (name, µs per call,
    launches per call, share of the total)."""
    if calls <= 0:
        raise ValueError(f"calls must be positive, got {calls}")
    time_by_name: dict[str, float] = defaultdict(float)
    count_by_name: Counter = Counter()
    for name, dur in kernels:
        time_by_name[name] += dur
        count_by_name[name] += 1
    total = sum(time_by_name.values())
    ranked = sorted(time_by_name, key=lambda n: (-time_by_name[n], n))[:top]
    return {
        "kernel_us_per_call": total / calls,
        "launches_per_call": len(kernels) / calls,
        "distinct_kernels": len(time_by_name),
        "top_kernels": [{"name": n, "us_per_call": time_by_name[n] / calls,
                         "launches_per_call": count_by_name[n] / calls,
                         "share": time_by_name[n] / total if total else 0.0} for n in ranked],
    }


def kernel_profile(call: Callable[[], object], sync: Callable[[], object], calls: int, trace_path: Path,
                   top: int = 10) -> dict:
    """Run `call` `calls` times (each followed by `sync()`) under torch.profiler's CUDA activity
    and summarise the kernels it recorded (`kernel_summary`); the trace stays at `trace_path`."""
    from torch.profiler import ProfilerActivity, profile

    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
            sync()
    trace_path = Path(trace_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(trace_path))
    trace = json.loads(trace_path.read_text())
    summary = kernel_summary(kernels_from_trace(trace), calls, top)
    summary["other_gpu_events_per_call"] = {cat: n / calls for cat, n in gpu_activity_counts(trace).items()}
    return summary


def composite_calls(partitioned) -> Counter:
    """How many times each simaccel op is called in the regions of a partitioned module. A
    region defines each distinct composite function once (identical ones, such as the blocks of
    one stage of a CNN, are shared), so `PartitionReport.regions` lists distinct composites;
    this counts calls."""
    from tvm import relax

    from ..backend.patterns import op_name

    calls: Counter = Counter()
    for func in partitioned.functions.values():
        if not isinstance(func, relax.Function) or not func.attrs or "Codegen" not in func.attrs:
            continue
        composites = {}
        for block in func.body.blocks:
            for binding in block.bindings:
                value = binding.value
                if isinstance(value, relax.Function) and value.attrs and "Composite" in value.attrs:
                    composites[binding.var] = op_name(str(value.attrs["Composite"]))
                elif isinstance(value, relax.Call) and value.op in composites:
                    calls[composites[value.op]] += 1
    return calls


def partition_summary(report, partitioned=None) -> dict:
    """What a `PartitionReport` says, as data: the regions with their op counts, and the ops
    kept on TVM grouped by Relax op, each with how often and every distinct reason. With the
    partitioned module, "offloaded" counts op calls (`composite_calls`), else distinct composites."""
    offloaded = Counter(op for ops in report.regions.values() for op in ops) if partitioned is None \
        else composite_calls(partitioned)
    kept: dict[str, dict] = {}
    for _, op, reason in report.kept:
        entry = kept.setdefault(op, {"count": 0, "reasons": Counter()})
        entry["count"] += 1
        entry["reasons"][reason] += 1
    return {
        "regions": len(report.regions),
        "ops_per_region": [len(ops) for ops in report.regions.values()],
        "offloaded": dict(sorted(offloaded.items())),
        "offloaded_total": sum(offloaded.values()),
        "offloaded_counts": "distinct composites" if partitioned is None else "calls",
        "kept_total": len(report.kept),
        "kept": {op: {"count": e["count"], "reasons": dict(e["reasons"].most_common())}
                 for op, e in sorted(kept.items(), key=lambda kv: (-kv[1]["count"], kv[0]))},
        "splits": list(report.splits),
        "rewritten": list(report.rewritten),
    }


def format_partition(name: str, summary: dict, width: int = 160) -> str:
    """A partition summary as text: regions, what they hold, each kept op with its reasons."""
    lines = [f"{name}: {summary['regions']} region(s), {summary['offloaded_total']} op(s) offloaded, "
             f"{summary['kept_total']} kept on TVM"]
    if summary["offloaded"]:
        lines.append("  offloaded: " + ", ".join(f"{op} x{n}" for op, n in summary["offloaded"].items()))
    for op, entry in summary["kept"].items():
        lines.append(f"  kept {op} x{entry['count']}")
        for reason, n in entry["reasons"].items():
            text = reason if len(reason) <= width else reason[: width - 3] + "..."
            lines.append(f"      {n} x {text}")
    return "\n".join(lines)


def _us(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _pair(entry: dict, key: str, fmt) -> str:
    kernels = entry.get("kernels") or {}
    tvm, ours = (kernels.get(mode) or {} for mode in ("tvm_only", "simaccel_native"))
    if key not in tvm and key not in ours:
        return "-"
    return f"{fmt(tvm.get(key))} / {fmt(ours.get(key))}"


def markdown_table(models: dict[str, dict]) -> str:
    """The model table: per model, TVM alone's and simaccel's median µs and their ratio, kernel
    µs and launches per call (TVM alone / simaccel), regions and ops left on TVM, the kernel
    that takes simaccel longest; a model that failed says where."""
    head = ("| model | TVM alone µs | simaccel µs | ratio | kernel µs (TVM / simaccel) | "
            "launches (TVM / simaccel) | regions | ops left on TVM | simaccel's top kernel | check |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, entry in models.items():
        medians = entry.get("median_us", {})
        if "error" in entry:
            error = re.sub(r"(fused_[A-Za-z0-9]+_[A-Za-z0-9]+_)[A-Za-z0-9_]{20,}", r"\1...", entry["error"])
            partition = entry.get("partition", {})
            lines.append(f"| {name} | {_us(medians.get('tvm_only'))} | - | - | - | - | {partition.get('regions', '-')} "
                         f"| - | - | failed: {error.splitlines()[0][:160]} |")
            continue
        tvm, ours = medians.get("tvm_only"), medians.get("simaccel_native")
        ratio = f"{ours / tvm:.2f}x" if tvm and ours is not None else "-"
        partition = entry.get("partition", {})
        kept = partition.get("kept", {})
        kept_text = ", ".join(f"{op.removeprefix('relax.')} x{e['count']}" for op, e in kept.items()) or "none"
        top = ((entry.get("kernels") or {}).get("simaccel_native") or {}).get("top_kernels") or []
        top_text = f"{top[0]['name'][:48]} ({top[0]['us_per_call']:,.0f} µs)" if top else "-"
        check = entry.get("check", "-")
        lines.append(f"| {name} | {_us(tvm)} | {_us(ours)} | {ratio} | {_pair(entry, 'kernel_us_per_call', _us)} | "
                     f"{_pair(entry, 'launches_per_call', lambda v: '-' if v is None else f'{v:g}')} | "
                     f"{partition.get('regions', '-')} | {kept_text} | {top_text} | {check} |")
    return "\n".join(lines)
