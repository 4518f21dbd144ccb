"""The timing model (simaccel.timing): profile figures, each op's work, regions, the ledger's
modeled-beside-measured table, `simaccel whatif`, and its validation against H200 kernel times."""

from __future__ import annotations

import json
import math
import os
import pathlib

import pytest

from simaccel import DeviceProfile, SimAccelError
from simaccel.program import OpNode, Program, TensorSpec
from simaccel.timing import Performance, model_program, op_work
from gpu_cases import one_op_program

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROFILES = ROOT / "examples" / "profiles"
# The current `simaccel bench --ops` run (results/current.json names it; docs/timing-model.md shows its table).
CURRENT_OPS = ROOT / json.loads((ROOT / "results" / "current.json").read_text())["results"]["kernels"]["file"]

PERF = Performance(peak_flops={"float32": 1e12, "float16": 4e12}, memory_bandwidth=1e11, scratchpad_bandwidth=1e12,
                   op_dispatch=1e-6, region_dispatch=1e-5, dma_bandwidth=1e10, dma_latency=2e-5)


# -- the figures (each field's checks: tests/test_profile_schema.py) -------------------------------------
def test_a_profile_with_figures_round_trips_through_json(tmp_path):
    for path in sorted(PROFILES.glob("*.json")):
        profile = DeviceProfile.load(str(path))
        assert profile.performance is not None, path
        copy = tmp_path / path.name
        copy.write_text(json.dumps(profile.to_dict()))
        assert DeviceProfile.load(str(copy)) == profile
    assert DeviceProfile().performance is None and DeviceProfile().to_dict()["performance"] is None


def test_a_dtype_without_a_figure_runs_at_the_lowest_peak():
    assert PERF.peak("float16") == 4e12 and PERF.peak("int64") == 1e12


# -- an op's work -----------------------------------------------------------------------------------------
def test_matmul_work_is_two_operations_per_multiply_add_plus_its_bias_and_activation():
    program = one_op_program("simaccel.dense_bias_gelu", [(2, 3, 5), (7, 5), (7,)], "float32")
    flops, boundary, scratch = op_work(program, 0)
    assert flops == 2 * 6 * 7 * 5 + 2 * 6 * 7
    assert boundary == 4 * (30 + 35 + 7 + 42) and scratch == 0


def test_conv2d_work_counts_the_taps_of_its_group():
    attrs = {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 4}
    program = one_op_program("simaccel.conv2d", [(2, 8, 6, 6), (16, 2, 3, 3)], "float16", attrs)
    assert op_work(program, 0)[0] == 2 * (2 * 16 * 6 * 6) * (2 * 3 * 3)


def test_elementwise_reduction_and_pooling_work():
    assert op_work(one_op_program("simaccel.add", [(4, 5), (5,)], "float32"), 0)[0] == 20
    assert op_work(one_op_program("simaccel.softmax", [(4, 5)], "float32"), 0)[0] == 20
    pool = {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1], "dilation": [1, 1]}
    program = one_op_program("simaccel.max_pool2d", [(1, 2, 8, 8)], "float32", pool)
    assert op_work(program, 0)[0] == 1 * 2 * 4 * 4 * 9


def _chain() -> Program:
    """relu -> reshape (a view) -> softmax: the view moves nothing, the intermediate is scratch."""
    t = (TensorSpec("x", (4, 6), "float32"), TensorSpec("h", (4, 6), "float32"), TensorSpec("v", (6, 4), "float32"),
         TensorSpec("y", (6, 4), "float32"))
    ops = (OpNode("simaccel.relu", (0,), 1), OpNode("simaccel.reshape", (1,), 2, {"shape": [6, 4]}),
           OpNode("simaccel.softmax", (2,), 3))
    return Program("chain", t, (0,), (3,), ops).validate()


def test_boundary_and_intermediate_bytes_and_views():
    program = _chain()
    assert op_work(program, 0) == (24.0, 96, 96)  # reads x (boundary), writes h (scratch)
    assert op_work(program, 1) == (0.0, 0, 0)  # a view: h's memory under another shape
    assert op_work(program, 2) == (24.0, 96, 96)  # reads the view of h (scratch), writes y


def test_a_region_is_its_dispatch_and_the_roofline_of_each_op():
    program = _chain()
    region = model_program(program, PERF)
    relu, view, softmax = region.ops
    assert relu.memory == pytest.approx(96 / 1e11 + 96 / 1e12) and relu.compute == pytest.approx(24 / 1e12)
    assert relu.bound == "memory" and relu.seconds == pytest.approx(1e-6 + relu.memory)
    assert view.seconds == 0 and view.bound == "dispatch"
    assert region.seconds == pytest.approx(1e-5 + relu.seconds + softmax.seconds)
    staged = model_program(program, PERF, staged=True)
    assert staged.seconds - region.seconds == pytest.approx(2 * 2e-5 + 2 * 96 / 1e10)


def test_a_compute_bound_op_runs_at_its_dtypes_peak():
    for dtype, peak in (("float32", 1e12), ("float16", 4e12)):
        [op] = model_program(one_op_program("simaccel.matmul", [(512, 512), (512, 512)], dtype), PERF).ops
        assert op.bound == "compute" and op.compute == pytest.approx(2 * 512 ** 3 / peak)


def test_host_staged_time_needs_the_dma_figures():
    no_dma = Performance(peak_flops={"float32": 1e12}, memory_bandwidth=1e11)
    with pytest.raises(SimAccelError, match="region chain: host-staged time needs the profile's dma_bandwidth"):
        model_program(_chain(), no_dma, staged=True)


# -- beside a run: the ledger ---------------------------------------------------------------------------------
def test_the_ledger_puts_the_model_beside_each_regions_measured_time():
    import tvm

    import simaccel
    from simaccel.tvm_integration import build
    from simaccel.tvm_integration.tools import models

    mod = models.demo_cnn("float32")
    runtime = simaccel.get_runtime()
    vm = tvm.relax.VirtualMachine(build(mod, "llvm"), tvm.cpu())
    runtime.ledger.reset()
    vm["main"](*[tvm.runtime.tensor(a) for a in models.random_inputs(mod, 0)])
    table = runtime.ledger.modeled(PERF)
    snapshot = runtime.ledger.snapshot()
    assert {row["region"] for row in table.rows} == set(snapshot["regions"]) and not table.missing
    programs = runtime.ledger.programs()
    for row in table.rows:
        assert row["calls"] == 1 and row["measured_s"] == pytest.approx(snapshot["regions"][row["region"]]["seconds"])
        assert row["modeled_s"] == pytest.approx(model_program(programs[row["region"]], PERF).seconds)
    text = table.format()
    assert "all calls" in text and f"{sum(r['modeled_s'] for r in table.rows) * 1e6:.2f} us" in text


# -- simaccel whatif -----------------------------------------------------------------------------------------
SLOW = DeviceProfile(name="slow", ops={"simaccel.conv2d"}, max_region_bytes=40_000,  # conv2d alone, split
                     performance=Performance(peak_flops={"float32": 1e10}, memory_bandwidth=1e9, op_dispatch=1e-5))


def test_whatif_models_each_profiles_own_partition(tmp_path):
    from simaccel.timing import region_shares
    from simaccel.tvm_integration import partition_report
    from simaccel.tvm_integration.tools import models
    from simaccel.tvm_integration.tools.whatif import format_whatif, whatif, write_roofline

    mod = models.demo_cnn("float32")
    fast = DeviceProfile(name="fast", performance=PERF)
    results = whatif(mod, [fast, SLOW])
    for result in results:
        _, report = partition_report(mod, result.profile)
        assert sorted(r.region for r in result.regions) == sorted(report.regions) and result.kept == report.kept
        assert result.calls == [1] * len(result.regions)
        assert result.seconds == pytest.approx(sum(r.seconds for r in result.regions))
        assert sum(result.shares.values()) == pytest.approx(result.seconds)
        for region in result.regions:
            assert sum(region_shares(region).values()) == pytest.approx(region.seconds)
    assert len(results[1].kept) > len(results[0].kept)
    text = format_whatif(results)
    assert f"profile fast: {len(results[0].regions)} region(s)" in text and "slow / fast:" in text
    write_roofline(results, str(tmp_path / "roof.png"))
    assert (tmp_path / "roof.png").read_bytes()[:4] == b"\x89PNG"


def test_whatif_names_each_op_left_on_tvm_and_regions_whole():
    """The report: no op kept on TVM was named, and region names were cut to one long common
    prefix, so the slow profile's two conv2d regions printed alike."""
    from simaccel.tvm_integration.tools import models
    from simaccel.tvm_integration.tools.whatif import format_whatif, whatif

    [result] = whatif(models.demo_cnn("float32"), [SLOW])
    names = [r.region for r in result.regions]
    assert len(names) == 2 and len(os.path.commonprefix(names)) > 40  # alike but for their ends
    text = format_whatif([result])
    lines = text.splitlines()
    for name in names:
        assert sum(line.split()[-1] == name for line in lines) == 1, text  # the whole name, on its line
    assert "..." not in text
    assert result.kept and all(f"{var} = {op}: {reason}" in lines[i] for i, (var, op, reason)
                               in zip([lines.index(f"    {v} = {o}: {r}") for v, o, r in result.kept], result.kept))
    assert f"left on TVM, not modeled: {len(result.kept)} op(s)" in text
    assert "not enabled in profile slow" in text and "simaccel has no pattern for relax.nn.leakyrelu" in text


def _repeated_layers(layers: int = 6, every: int = 2):
    """dense+bias+relu layers of one width with a leaky_relu (TVM) after every `every`-th: TVM makes
    one region function of the equal stretches, called once for each."""
    from tvm import relax

    width = 16
    x = relax.Var("x", relax.TensorType((4, width), "float32"))
    ws = [relax.Var(f"w{i}", relax.TensorType((width, width), "float32")) for i in range(layers)]
    bs = [relax.Var(f"b{i}", relax.TensorType((width,), "float32")) for i in range(layers)]
    bb = relax.BlockBuilder()
    with bb.function("main", [x, *ws, *bs]):
        with bb.dataflow():
            h = x
            for i in range(layers):
                h = bb.emit(relax.op.nn.relu(relax.op.add(relax.op.matmul(h, relax.op.permute_dims(ws[i])), bs[i])))
                if i % every == every - 1:
                    h = bb.emit(relax.op.nn.leakyrelu(h, 0.1))
            out = bb.emit_output(relax.op.nn.softmax(h))
        bb.emit_func_output(out)
    return bb.get()


def test_whatif_counts_every_call_of_a_region_tvm_calls_several_times():
    """A region function called three times is three calls' time (and dispatches) in a run, as
    many as the runtime's ledger counts when the model runs."""
    import tvm

    import simaccel
    from simaccel.tvm_integration import build
    from simaccel.tvm_integration.tools import models
    from simaccel.tvm_integration.tools.whatif import format_whatif, whatif

    mod = _repeated_layers()
    [result] = whatif(mod, [DeviceProfile(name="fast", performance=PERF)])
    runtime = simaccel.get_runtime()
    vm = tvm.relax.VirtualMachine(build(mod, "llvm"), tvm.cpu())
    runtime.ledger.reset()
    vm["main"](*[tvm.runtime.tensor(a) for a in models.random_inputs(mod, 0)])
    measured = {name: counts["calls"] for name, counts in runtime.ledger.snapshot()["regions"].items()}
    assert dict(zip([r.region for r in result.regions], result.calls)) == measured
    assert sorted(result.calls) == [1, 3]
    assert result.seconds == pytest.approx(sum(c * r.seconds for c, r in zip(result.calls, result.regions)))
    ops = sum(c * sum(1 for op in r.ops if op.flops or op.boundary_bytes or op.scratch_bytes)
              for c, r in zip(result.calls, result.regions))
    assert result.shares["dispatch"] == pytest.approx(4 * PERF.region_dispatch + ops * PERF.op_dispatch)
    text = format_whatif([result])
    assert f"4 region calls x 10.00 us + {ops} ops x 1.00 us" in text
    assert any(line.split()[3] == "3" and line.split()[-1] == result.regions[result.calls.index(3)].region
               for line in text.splitlines() if line.strip()[:1].isdigit())


def test_the_roofline_labels_overlap_nothing_and_the_chart_shows_dispatch(tmp_path):
    """Many ops at nearby intensities (a dozen dense layers of close widths, each with a norm and
    an activation): each position's number is placed where it overlaps no other label, no point,
    not the legend, inside its panel; the bars of dispatch / compute / memory add up to each total."""
    import matplotlib.pyplot as plt
    from tvm import relax

    from simaccel.tvm_integration.tools.whatif import roofline_figure, roofline_points, whatif

    widths = [64, 72, 80, 96, 112, 128, 160, 192, 224, 256, 288, 320]
    x = relax.Var("x", relax.TensorType((8, widths[0]), "float32"))
    params, prev = [], widths[0]
    for i, w in enumerate(widths):
        params.append((relax.Var(f"w{i}", relax.TensorType((w, prev), "float32")),
                       relax.Var(f"b{i}", relax.TensorType((w,), "float32"))))
        prev = w
    bb = relax.BlockBuilder()
    with bb.function("main", [x, *[v for pair in params for v in pair]]):
        with bb.dataflow():
            h = x
            for w, b in params:
                h = bb.emit(relax.op.add(relax.op.sigmoid(relax.op.add(relax.op.matmul(h, relax.op.permute_dims(w)), b)), 1.0))
            out = bb.emit_output(relax.op.nn.softmax(h))
        bb.emit_func_output(out)
    results = whatif(bb.get(), [DeviceProfile(name="fast", performance=PERF), SLOW,
                                DeviceProfile.load(str(PROFILES / "npu.json"))])
    fig, panels = roofline_figure(results)
    try:
        for result, panel in zip(results, panels):
            points, _ = roofline_points(result)
            assert sorted(panel["labels"]) == [p["number"] for p in points]
            boxes = list(panel["labels"].values())
            for i, box in enumerate(boxes):
                assert panel["frame"].contains(box.x0, box.y0) and panel["frame"].contains(box.x1, box.y1)
                assert not box.overlaps(panel["legend"])
                assert not any(box.overlaps(other) for other in boxes[i + 1:] + panel["points"]), result.profile.name
        assert sum(len(p["labels"]) for p in panels) >= 20
        bars = [patch for patch in fig.axes[-2].patches]  # the stacked bars: dispatch, compute, memory
        assert len(bars) == 3 * len(results)
        for i, result in enumerate(results):
            heights = [bars[k * len(results) + i].get_height() for k in range(3)]
            assert heights[0] == pytest.approx(result.shares["dispatch"] * 1e6)
            assert sum(heights) == pytest.approx(result.seconds * 1e6)
    finally:
        plt.close(fig)


def test_whatif_refuses_a_profile_without_figures():
    from simaccel.tvm_integration.tools import models
    from simaccel.tvm_integration.tools.whatif import whatif

    with pytest.raises(SimAccelError, match="profile bare has no performance figures"):
        whatif(models.demo_cnn("float32"), [DeviceProfile(name="bare")])


def test_whatif_command(capsys, tmp_path):
    from simaccel.tvm_integration.tools.cli import main

    png = tmp_path / "roof.png"
    assert main(["whatif", "--demo", "--profile", str(PROFILES / "h200.json"), "--profile", str(PROFILES / "npu.json"),
                 "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "profile h200:" in out and "profile edge-npu:" in out and "edge-npu / h200:" in out and png.exists()
    assert out.count("lv8 = relax.nn.leakyrelu: simaccel has no pattern for relax.nn.leakyrelu") == 2  # per profile
    assert main(["whatif", "--demo"]) == 2
    assert "name at least one --profile" in capsys.readouterr().err


# -- validation against the H200 ---------------------------------------------------------------------------------
# What bounds each class of bench --ops case (docs/timing-model.md): the model is a lower bound
# (measured >= modeled, torch's kernels too), and measured / modeled stays below these.
BOUNDS = {"gemm": (2.7, 1.7), "convolution": (10.0, 17.0), "bandwidth": (3.6, 4.0)}  # (simaccel, torch)


def _class(case: str) -> str:
    if case.startswith(("gemm", "dense")):
        return "gemm"
    return "convolution" if case.startswith(("conv", "depthwise", "grouped")) else "bandwidth"


def test_the_model_with_the_gpu_s_figures_against_its_measured_kernel_times():
    """The current kernel run (an H100's or an H200's) against the timing model with that GPU's
    profile (docs/site_results.py's choice, the one the timing-model page shows)."""
    import sys

    from simaccel.tvm_integration.tools.timing_validation import rows, table

    sys.path.insert(0, str(ROOT / "docs"))
    import site_results  # docs/ is not a package

    rows_ = rows(json.loads(CURRENT_OPS.read_text()), DeviceProfile.load(str(ROOT / site_results.kernels_profile())))
    assert len(rows_) >= 20
    for row in rows_:
        ours, theirs = BOUNDS[_class(row["case"])]
        assert 1.0 <= row["ratio"] <= ours, row
        assert 1.0 <= row["torch_ratio"] <= theirs, row
        assert math.isclose(row["modeled_us"] * row["ratio"], row["measured_us"])
    assert table(rows_) in (ROOT / "docs" / "timing-model.md").read_text()  # the doc shows this very table


def test_the_trace_carries_the_modeled_time_of_each_region_and_op(tmp_path, monkeypatch):
    import tvm

    import simaccel
    from simaccel.debug.timeline import OP, REGION
    from simaccel.debug.timeline_summary import format_summary, summarize
    from simaccel.tvm_integration import build
    from simaccel.tvm_integration.tools import models

    mod = models.demo_cnn("float32")
    vm = tvm.relax.VirtualMachine(build(mod, "llvm"), tvm.cpu())
    args = [tvm.runtime.tensor(a) for a in models.random_inputs(mod, 0)]
    profile = DeviceProfile(name="traced", performance=PERF)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile.to_dict()))
    monkeypatch.setenv("SIMACCEL_PROFILE", str(path))
    with simaccel.trace(str(tmp_path / "with.json")):
        vm["main"](*args)
    document = json.loads((tmp_path / "with.json").read_text())
    regions = [e for e in document["traceEvents"] if e.get("cat") == REGION]
    ops = [e for e in document["traceEvents"] if e.get("cat") == OP]
    assert regions and ops
    programs = simaccel.get_runtime().ledger.programs()
    for e in regions:
        want = model_program(programs[e["args"]["region"]], PERF).seconds * 1e6
        assert e["args"]["modeled_us"] == pytest.approx(want) and e["args"]["bound"] in ("compute", "memory", "dispatch")
    for e in ops:
        [op] = [o for o in model_program(programs[e["args"]["region"]], PERF).ops if o.index == e["args"]["index"]]
        assert e["args"]["modeled_us"] == pytest.approx(op.seconds * 1e6)
    assert "modeled us" in format_summary(summarize(document))
    monkeypatch.delenv("SIMACCEL_PROFILE")  # a profile without figures: nothing modeled
    with simaccel.trace(str(tmp_path / "without.json")):
        vm["main"](*args)
    document = json.loads((tmp_path / "without.json").read_text())
    assert not any("modeled_us" in e.get("args", {}) for e in document["traceEvents"])
    assert "modeled us" not in format_summary(summarize(document))
