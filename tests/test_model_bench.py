"""The model timing tools' plain parts (tvm_integration/tools/model_bench.py): timing medians,
kernels read from a torch.profiler Chrome trace, per-call kernel summaries, partition summaries
and the markdown table. No GPU and no torch needed; the GPU scripts use the same functions.
"""

from __future__ import annotations

import pytest

from simaccel.tvm_integration.backend.partition import PartitionReport
from simaccel.tvm_integration.tools import model_bench

TRACE = {"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "conv_dw", "dur": 30.0},
    {"ph": "X", "cat": "kernel", "name": "gemm", "dur": 10.0},
    {"ph": "X", "cat": "kernel", "name": "conv_dw", "dur": 50.0},
    {"ph": "X", "cat": "gpu_memset", "name": "Memset", "dur": 1.0},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "dur": 5.0},  # host side: not a kernel
    {"ph": "i", "cat": "kernel", "name": "marker"},  # not a complete event
    {"ph": "X", "cat": "Kernel", "name": "gemm", "dur": 10.0},
]}


def test_kernels_come_from_complete_kernel_events_only():
    assert model_bench.kernels_from_trace(TRACE) == [("conv_dw", 30.0), ("gemm", 10.0), ("conv_dw", 50.0),
                                                     ("gemm", 10.0)]
    assert model_bench.gpu_activity_counts(TRACE) == {"gpu_memset": 1}


def test_a_kernel_summary_is_per_call_and_ranks_kernels_by_time():
    summary = model_bench.kernel_summary(model_bench.kernels_from_trace(TRACE), calls=2, top=1)
    assert summary["kernel_us_per_call"] == pytest.approx(50.0)
    assert summary["launches_per_call"] == 2 and summary["distinct_kernels"] == 2
    assert summary["top_kernels"] == [{"name": "conv_dw", "us_per_call": 40.0, "launches_per_call": 1.0,
                                       "share": pytest.approx(0.8)}]
    with pytest.raises(ValueError, match="calls must be positive"):
        model_bench.kernel_summary([], calls=0)


def test_timed_interleaves_and_takes_medians():
    order = []
    medians = model_bench.timed({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                                lambda: order.append("sync"), repeat=3, warmup=1)
    assert order == ["a", "sync", "b", "sync"] * 4
    assert set(medians) == {"a", "b"} and all(v >= 0 for v in medians.values())


def _report():
    return PartitionReport(
        regions={"r0": ["simaccel.conv2d_bias_relu", "simaccel.concat", "simaccel.conv2d_bias_relu"], "r1": ["simaccel.mean"]},
        kept=[("lv1", "relax.nn.max_pool2d", "simaccel.max_pool2d rejected: pooling with ceil_mode=True is not supported"),
              ("lv2", "relax.zeros_like", "simaccel has no pattern for relax.zeros_like"),
              ("lv3", "relax.nn.max_pool2d", "simaccel.max_pool2d rejected: pooling with ceil_mode=True is not supported"),
              ("lv4", "relax.nn.max_pool2d", "simaccel.max_pool2d rejected: dtype int8")],
        splits=["cut"], rewritten=["batch_norm folded"])


def test_a_partition_summary_groups_kept_ops_with_their_reasons():
    summary = model_bench.partition_summary(_report())
    assert summary["regions"] == 2 and summary["ops_per_region"] == [3, 1]
    assert summary["offloaded"] == {"simaccel.concat": 1, "simaccel.conv2d_bias_relu": 2, "simaccel.mean": 1}
    assert summary["offloaded_total"] == 4 and summary["kept_total"] == 4
    assert summary["offloaded_counts"] == "distinct composites"  # no module given: what the report lists
    assert list(summary["kept"]) == ["relax.nn.max_pool2d", "relax.zeros_like"]  # most kept first
    assert summary["kept"]["relax.nn.max_pool2d"] == {"count": 3, "reasons": {
        "simaccel.max_pool2d rejected: pooling with ceil_mode=True is not supported": 2,
        "simaccel.max_pool2d rejected: dtype int8": 1}}
    assert summary["splits"] == ["cut"] and summary["rewritten"] == ["batch_norm folded"]
    text = model_bench.format_partition("squeezenet", summary)
    assert text.splitlines()[0] == "squeezenet: 2 region(s), 4 op(s) offloaded, 4 kept on TVM"
    assert "  kept relax.nn.max_pool2d x3" in text and "      2 x simaccel.max_pool2d rejected: pooling" in text


def test_the_markdown_table_has_a_row_per_model_and_says_what_failed():
    kernels = {"tvm_only": model_bench.kernel_summary([("k", 100.0)] * 3, calls=1),
               "simaccel_native": model_bench.kernel_summary([("conv_dw", 250.0), ("gemm", 50.0)] * 2, calls=1)}
    models = {
        "squeezenet": {"median_us": {"tvm_only": 400.0, "simaccel_native": 600.0, "torch": 500.0},
                       "kernels": kernels, "partition": model_bench.partition_summary(_report()), "check": "ok"},
        "cpu_only": {"median_us": {"tvm_only": 10.0, "simaccel_native": 5.0}, "kernels": None,
                     "partition": {"regions": 1, "kept": {}}, "check": "ok"},
        "broken": {"error": "CodegenError: attribute max must be a finite number\nmore"},
        "no_build": {"error": "simaccel build: CodegenError: region fused_relax_nn_conv2d_relax_add_relax_clip_relax_"
                              "clip1_relax_multiply: op 2 (simaccel.clip) attribute max must be a finite number",
                     "median_us": {"tvm_only": 812.4, "torch": 900.0}, "partition": {"regions": 1, "kept": {}}},
    }
    lines = model_bench.markdown_table(models).splitlines()
    assert len(lines) == 6 and lines[1] == "|---" * 10 + "|"
    assert all(line.count("|") == 11 for line in lines)
    row = lines[2]
    assert row.startswith("| squeezenet | 400 | 600 | 1.50x | 300 / 600 | 3 / 4 | 2 |")
    assert "nn.max_pool2d x3, zeros_like x1" in row and "conv_dw (500 µs)" in row and row.endswith("| ok |")
    assert lines[3].startswith("| cpu_only | 10 | 5 | 0.50x | - | - | 1 | none | - |")
    assert lines[4].startswith("| broken | -") and "failed: CodegenError: attribute max must be a finite number |" in lines[4]
    # a model simaccel could not build still shows TVM alone's time, its regions and a short error
    assert lines[5].startswith("| no_build | 812 | - | - | - | - | 1 | - | - | failed: simaccel build: CodegenError: "
                               "region fused_relax_nn_...: op 2 (simaccel.clip) attribute max must be a finite number |")
