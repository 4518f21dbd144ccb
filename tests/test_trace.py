"""The timeline trace (simaccel.trace): JSON format, nesting, TVM's VM calls, counters, summary, PNG."""

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tvm
from tvm import relax

import simaccel
from compare import assert_same
from harness import tvm_alone
from simaccel.debug import flags, hooks
from simaccel.debug.timeline import (COPY, LAUNCH, OP, REGION, VM_BUILTIN, VM_CALL, VM_REGION, Trace, TraceWatcher,
                                  current)
from simaccel.debug.timeline_summary import draw_timeline, format_summary, load, summarize, write_png
from simaccel.tvm_integration import build
from simaccel.tvm_integration.tools.cli import main
from simaccel.tvm_integration.tools.models import random_inputs
from simaccel.tvm_integration.tools.trace_tvm import traced_vm

from test_runtime import mlp_inputs, mlp_program


def _param(name, shape):
    return relax.Var(name, relax.TensorType(shape, "float32"))


def two_regions():
    """dense+bias+relu -> softmax (region 1); leaky_relu (TVM); dense+bias -> relu (region 2)."""
    bb = relax.BlockBuilder()
    x, w1, b1, w2, b2 = _param("x", (4, 8)), _param("w1", (6, 8)), _param("b1", (6,)), _param("w2", (5, 6)), _param("b2", (5,))
    with bb.function("main", [x, w1, b1, w2, b2]):
        with bb.dataflow():
            h = bb.emit(relax.op.matmul(x, bb.emit(relax.op.permute_dims(w1))))
            h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(h, b1))))
            h = bb.emit(relax.op.nn.softmax(h, axis=-1))
            h = bb.emit(relax.op.nn.leakyrelu(h, 0.1))
            h = bb.emit(relax.op.matmul(h, bb.emit(relax.op.permute_dims(w2))))
            out = bb.emit_output(relax.op.nn.relu(bb.emit(relax.op.add(h, b2))))
        bb.emit_func_output(out)
    return bb.get()


@pytest.fixture(scope="module")
def model():
    mod = two_regions()
    arrays = random_inputs(mod, 0)
    return build(mod), tvm_alone(mod, arrays), arrays


def spans(document, cat=None):
    return [e for e in document["traceEvents"] if e["ph"] == "X" and (cat is None or e["cat"] == cat)]


def inside(child, parent):
    return parent["ts"] <= child["ts"] and child["ts"] + child["dur"] <= parent["ts"] + parent["dur"] + 1e-6


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_a_traced_cpu_run_nests_ops_in_regions_in_tvm_calls(clean_runtime, model, tmp_path, engine):
    executable, want, arrays = model
    path = tmp_path / "trace.json"
    with clean_runtime.use_engine(engine), simaccel.trace(path) as recording:
        assert flags.value() & flags.TRACE and any(isinstance(w, TraceWatcher) for w in hooks.active())
        out = traced_vm(executable, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in arrays])
    assert_same(out.numpy(), want, "float32")
    assert current() is None and recording.closed
    document = json.loads(path.read_text())
    assert isinstance(document["traceEvents"], list)
    for e in document["traceEvents"]:
        assert {"name", "ph", "pid", "tid"} <= set(e), e
        if e["ph"] in ("X", "C", "i"):
            assert isinstance(e["ts"], float) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
    regions, ops = spans(document, REGION), spans(document, OP)
    assert len(regions) == 2
    assert [o["name"] for o in ops] == ["simaccel.dense_bias_relu", "simaccel.softmax", "simaccel.dense_bias_relu"]
    for region in regions:
        mine = [o for o in ops if o["args"]["region"] == region["name"]]
        assert mine and all(inside(o, region) for o in mine)
        assert [o["args"]["index"] for o in mine] == sorted(o["args"]["index"] for o in mine)
        assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-6 for a, b in zip(mine, mine[1:]))  # in order, no overlap
        assert region["args"]["engine"] == engine and region["args"]["clock"] == "host"
        calls = [c for c in spans(document, VM_REGION) if c["name"] == region["name"]]
        assert len(calls) == 1 and inside(region, calls[0])  # TVM's call of the region function contains it
    first = ops[0]["args"]
    assert first["inputs"][0] == {"name": first["inputs"][0]["name"], "shape": [4, 8], "dtype": "float32", "bytes": 128}
    assert first["output"]["shape"] == [4, 6] and first["bytes_written"] == 96
    assert first["bytes_read"] == sum(t["bytes"] for t in first["inputs"])
    if engine == "sim":
        for op in ops:
            assert op["args"]["launches"], op
            for launch in op["args"]["launches"]:
                assert launch["kernel"] and all(n >= 1 for n in launch["grid"] + launch["block"]) and launch["shared_bytes"] >= 0
    else:
        assert all(op["args"]["launches"] == [] for op in ops)
    kernels = spans(document, VM_CALL)
    assert [k["name"] for k in kernels] == ["leaky_relu"]
    assert kernels[0]["args"]["tensors"][0] == {"shape": [4, 6], "dtype": "float32"}
    assert regions[0]["ts"] + regions[0]["dur"] <= kernels[0]["ts"] <= regions[1]["ts"]  # region, TVM, region
    assert spans(document, VM_BUILTIN)
    # one track: the CPU's host "stream" holds TVM's calls and simaccel's regions
    work = [e for e in spans(document) if e["cat"] in (REGION, OP, VM_CALL, VM_REGION, VM_BUILTIN)]
    assert {(e["pid"], e["tid"]) for e in work} == {(work[0]["pid"], work[0]["tid"])}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"}
    assert names[(work[0]["pid"], work[0]["tid"])] == "host"
    assert len(set(names.values())) == len(names)  # one tid per (device, stream) label
    processes = {e["pid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"}
    assert processes[work[0]["pid"]] == "cpu:0"
    counters = [e for e in document["traceEvents"] if e["ph"] == "C" and e["name"] == "ledger calls"]
    assert counters and counters[-1]["args"] == {"offloaded_calls": 2, "ops": 3, "kernel_launches": 3 if engine == "sim" else 0}
    assert [c["args"]["offloaded_calls"] for c in counters] == sorted(c["args"]["offloaded_calls"] for c in counters)


def test_tracing_off_installs_nothing_and_one_trace_at_a_time(clean_runtime, tmp_path):
    assert current() is None and hooks.active() == () and not flags.value() & flags.TRACE
    with simaccel.debug.trace(tmp_path / "a.json"):
        with pytest.raises(simaccel.SimAccelError, match="one trace at a time"):
            with simaccel.trace(tmp_path / "b.json"):
                pass
        assert clean_runtime.ledger.copy_observers
    assert current() is None and hooks.active() == () and not flags.value() & flags.TRACE
    assert not clean_runtime.ledger.copy_observers and not clean_runtime.route_flag_set()
    assert (tmp_path / "a.json").exists() and not (tmp_path / "b.json").exists()


def test_copies_are_instant_events_and_counted(clean_runtime, tmp_path):
    with simaccel.trace(tmp_path / "t.json"):
        clean_runtime.ledger.record_copy("device_to_host", 64)
    document = load(tmp_path / "t.json")
    copies = [e for e in document["traceEvents"] if e.get("cat") == COPY]
    assert [(c["ph"], c["args"]["direction"], c["args"]["bytes"]) for c in copies] == [("i", "device_to_host", 64)]
    counters = [e for e in document["traceEvents"] if e["name"] == "ledger bytes copied"]
    assert counters[-1]["args"]["device_to_host"] == 64


def test_the_environment_variable_traces_a_process_and_writes_at_exit(tmp_path):
    path = tmp_path / "env-trace.json"
    script = textwrap.dedent("""
        import sys
        sys.path.insert(0, "tests")
        import numpy as np, simaccel
        from test_runtime import mlp_inputs, mlp_program
        x, w, b = mlp_inputs()
        y = np.zeros((4, 6), np.float32)
        simaccel.get_runtime().run(mlp_program(), x, w, b, y)
        simaccel.get_runtime().run(mlp_program(), x, w, b, y)
        from simaccel.debug import flags
        assert flags.value() & flags.TRACE
    """)
    env = dict(os.environ, SIMACCEL_TRACE=str(path), SIMACCEL_ENGINE="ref")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    document = load(path)
    regions = spans(document, REGION)
    assert [r["name"] for r in regions] == ["mlp", "mlp"] and regions[0]["ts"] + regions[0]["dur"] <= regions[1]["ts"]
    assert [o["name"] for o in spans(document, OP)] == ["simaccel.dense_bias_relu", "simaccel.softmax"] * 2


def test_the_summary_totals_are_the_sums_of_the_spans(tmp_path):
    document = {"traceEvents": [
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "host"}},
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "cpu:0"}},
        {"name": "r", "cat": REGION, "ph": "X", "ts": 0.0, "dur": 100.0, "pid": 1, "tid": 1, "args": {}},
        {"name": "simaccel.matmul", "cat": OP, "ph": "X", "ts": 10.0, "dur": 20.0, "pid": 1, "tid": 1, "args": {}},
        {"name": "simaccel.reshape", "cat": OP, "ph": "X", "ts": 30.0, "dur": 1.0, "pid": 1, "tid": 1, "args": {"view": True}},
        {"name": "simaccel.matmul", "cat": OP, "ph": "X", "ts": 40.0, "dur": 30.0, "pid": 1, "tid": 1, "args": {}},
        {"name": "add", "cat": VM_CALL, "ph": "X", "ts": 170.0, "dur": 5.0, "pid": 1, "tid": 1, "args": {}},
        {"name": "vm.builtin.alloc_storage", "cat": VM_BUILTIN, "ph": "X", "ts": 110.0, "dur": 2.0, "pid": 1, "tid": 1, "args": {}},
    ]}
    summary = summarize(document)
    kinds = {(k["category"], k["kind"]): (k["count"], k["total_us"]) for k in summary["kinds"]}
    assert kinds[(OP, "simaccel.matmul")] == (2, 50.0)
    assert kinds[(OP + " (view)", "simaccel.reshape")] == (1, 1.0)
    assert kinds[(VM_CALL, "add")] == (1, 5.0) and kinds[(REGION, "r")] == (1, 100.0)
    (track,) = summary["tracks"]
    assert track["track"] == "cpu:0 / host" and track["kernels"] == 3  # the view and the builtin are no kernels
    assert track["busy_us"] == 55.0 and track["span_us"] == 165.0
    assert track["idle_us"] == 110.0 and track["gaps"] == 2
    assert [(g["gap_us"], g["after"], g["before"]) for g in track["largest_gaps"]] == [
        (100.0, "simaccel.matmul", "add"), (10.0, "simaccel.matmul", "simaccel.matmul")]
    text = format_summary(summary)
    assert "simaccel.matmul" in text and "idle 110.0 us in 2 gaps" in text
    path = tmp_path / "t.json"
    path.write_text(json.dumps(document))
    assert main(["trace", "--summary", str(path)]) == 0


def test_the_summary_of_a_real_trace_adds_up(clean_runtime, tmp_path):
    x, w, b = mlp_inputs()
    y = np.zeros((4, 6), np.float32)
    with clean_runtime.use_engine("ref"), simaccel.trace(tmp_path / "t.json"):
        for _ in range(3):
            clean_runtime.run(mlp_program(), x, w, b, y)
    document = load(tmp_path / "t.json")
    for kind in summarize(document)["kinds"]:
        matching = [e for e in spans(document) if e["name"] == kind["kind"] and kind["category"].startswith(e["cat"])]
        assert kind["count"] == len(matching) == 3
        assert kind["total_us"] == pytest.approx(sum(e["dur"] for e in matching))


def test_trace_command_errors_are_one_line(tmp_path, capsys):
    assert main(["trace", "--summary", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["trace", str(tmp_path / "bad.json")]) == 2
    (tmp_path / "other.json").write_text('{"x": 1}')
    assert main(["trace", str(tmp_path / "other.json")]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "not valid JSON" in err and "no traceEvents list" in err


class FakeClock:
    """Stands in for CUDA events: each mark is the next tick of a device clock (microseconds)."""

    def __init__(self, start=1000.0, step=10.0):
        self.now, self.step, self.marks = start, step, []

    def mark(self, device_id, stream):
        self.now += self.step
        self.marks.append((device_id, stream))
        return self.now

    def resolve(self, marker):
        return marker


def native_record(trace, host_ns):
    return {"region": "fused_dense_simaccel", "device": "cuda:0", "stream": 0x1234, "host_start_ns": host_ns,
            "launches": [
                {"op": 0, "op_name": "simaccel.dense_bias_relu", "kernel": "dense_k", "grid": [2, 1, 1], "block": [64, 1, 1],
                 "shared": 512, "start_us": 1.0, "end_us": 4.0},
                {"op": 0, "op_name": "simaccel.dense_bias_relu", "kernel": "epilogue_k", "grid": 3, "block": 32,
                 "shared": 0, "start_us": 4.5, "end_us": 6.0},
                {"op": 1, "op_name": "simaccel.softmax", "kernel": "softmax_k", "grid": [4, 1, 1], "block": [128, 1, 1],
                 "shared": 0, "start_us": 7.0, "end_us": 9.0}]}


def test_native_region_events_become_nested_spans(tmp_path):
    trace = Trace(tmp_path / "n.json", clock=FakeClock())
    host_ns = trace.epoch_realtime_ns + 50_000  # 50 us after the trace began
    trace.native_call(native_record(trace, host_ns))
    trace.counters = lambda ts=None: None  # no runtime needed for this document
    document = trace.close()
    (region,) = spans(document, REGION)
    assert region["ts"] == pytest.approx(50.0) and region["dur"] == pytest.approx(9.0)
    assert region["args"]["engine"] == "native" and region["args"]["placed_at"] == "host start"
    ops, launches = spans(document, OP), spans(document, LAUNCH)
    assert [(o["name"], o["ts"], o["dur"]) for o in ops] == [("simaccel.dense_bias_relu", 51.0, 5.0), ("simaccel.softmax", 57.0, 2.0)]
    assert [launch["name"] for launch in launches] == ["dense_k", "epilogue_k", "softmax_k"]
    assert launches[1]["args"]["grid"] == [3] and launches[0]["args"]["shared_bytes"] == 512
    assert ops[0]["args"]["launches"][0] == {"kernel": "dense_k", "grid": [2, 1, 1], "block": [64, 1, 1], "shared_bytes": 512}
    assert all(inside(o, region) for o in ops) and all(inside(launch, ops[0]) for launch in launches[:2])
    assert inside(launches[2], ops[1])
    assert len({(e["pid"], e["tid"]) for e in spans(document)}) == 1
    names = {e["args"]["name"] for e in document["traceEvents"] if e["name"] in ("thread_name", "process_name")}
    assert {"cuda:0", "stream 0x1234"} <= names


def test_a_native_region_is_placed_inside_tvms_device_timed_call(tmp_path):
    clock = FakeClock(start=5000.0, step=100.0)
    trace = Trace(tmp_path / "n.json", clock=clock)
    trace.counters = lambda ts=None: None
    host_begin = trace.epoch_ns + 10_000
    begin, end = clock.mark(0, 0x1234), clock.mark(0, 0x1234)  # device times 5100 and 5200
    trace.vm_call("cuda:0", 0x1234, "fused_dense_simaccel", {}, host_begin, host_begin + 30_000, begin, end)
    trace.native_call(native_record(trace, trace.epoch_realtime_ns + 20_000))  # during the VM call, host-wise
    document = trace.close()
    (call,) = spans(document, VM_REGION)
    (region,) = spans(document, REGION)
    assert (call["ts"], call["dur"]) == (5100.0, 100.0) and call["args"]["clock"] == "device"
    assert call["args"]["host_dur_us"] == pytest.approx(30.0)
    assert region["ts"] == 5100.0 and region["args"]["placed_at"] == "start of TVM's VM call" and inside(region, call)


def test_the_png_timeline_is_written(clean_runtime, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib (the trace extra) draws the PNG")
    x, w, b = mlp_inputs()
    y = np.zeros((4, 6), np.float32)
    with clean_runtime.use_engine("ref"), simaccel.trace(tmp_path / "t.json"):
        clean_runtime.run(mlp_program(), x, w, b, y)
    out = tmp_path / "t.png"
    assert main(["trace", "--png", str(out), str(tmp_path / "t.json")]) == 0
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000


def test_the_png_without_matplotlib_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(simaccel.SimAccelError, match=r"simaccel\[trace\]"):
        write_png({"traceEvents": []}, tmp_path / "x.png")


SPAN = {"name": "simaccel.relu", "cat": OP, "ph": "X", "ts": 1.0, "dur": 2.0, "pid": 0, "tid": 1, "args": {}}
THREAD = {"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, "args": {"name": "host"}}
# (the document's JSON text, what the one-line error must say): JSON that is not a trace
NOT_A_TRACE = [
    ("[1, 2]", "event 0 is a number, not an object"),
    ("3", "the top level is a number, not an object with traceEvents"),
    ('"trace"', "the top level is a string"),
    ('{"events": []}', "no traceEvents list"),
    ('{"traceEvents": {}}', "traceEvents is an object, not a list"),
    ('{"traceEvents": [1]}', "event 0 is a number, not an object"),
    ('{"traceEvents": [null]}', "event 0 is null, not an object"),
    (json.dumps({"traceEvents": [THREAD, "span"]}), "event 1 is a string, not an object"),
    (json.dumps({"traceEvents": [{k: v for k, v in SPAN.items() if k != "ph"}]}),
     "event 0 ('simaccel.relu'), field 'ph': expected a string (the event's phase"),
    (json.dumps({"traceEvents": [{**SPAN, "ph": 7}]}), "field 'ph': expected a string"),
    (json.dumps({"traceEvents": [THREAD, {k: v for k, v in SPAN.items() if k != "name"}]}),
     "event 1, field 'name': expected a string, got missing"),
    (json.dumps({"traceEvents": [{**SPAN, "name": 5}]}), "event 0, field 'name': expected a string, got a number 5"),
    (json.dumps({"traceEvents": [{k: v for k, v in SPAN.items() if k != "ts"}]}),
     "event 0 ('simaccel.relu'), field 'ts': expected a finite number of microseconds, got missing"),
    (json.dumps({"traceEvents": [{**SPAN, "ts": "12"}]}), "field 'ts': expected a finite number of microseconds, got a string \"12\""),
    (json.dumps({"traceEvents": [{**SPAN, "ts": True}]}), "field 'ts': expected a finite number of microseconds, got a boolean"),
    ('{"traceEvents": [{"name": "a", "ph": "X", "ts": NaN, "dur": 1, "pid": 0, "tid": 1}]}',
     "event 0 ('a'), field 'ts': expected a finite number of microseconds, got a number NaN"),
    ('{"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": Infinity, "pid": 0, "tid": 1}]}',
     "field 'dur': expected a finite number of microseconds, got a number Infinity"),
    (json.dumps({"traceEvents": [{k: v for k, v in SPAN.items() if k != "dur"}]}), "field 'dur': expected a finite number"),
    (json.dumps({"traceEvents": [{**SPAN, "dur": -3.0}]}), "field 'dur': expected a duration >= 0, got a number -3.0"),
    (json.dumps({"traceEvents": [{k: v for k, v in SPAN.items() if k != "pid"}]}),
     "field 'pid': expected an integer or a string (the track's id), got missing"),
    (json.dumps({"traceEvents": [{**SPAN, "tid": [1]}]}), "field 'tid': expected an integer or a string"),
    (json.dumps({"traceEvents": [{**SPAN, "cat": 3}]}), "field 'cat': expected a string, got a number 3"),
    (json.dumps({"traceEvents": [{**SPAN, "args": [1]}]}), "field 'args': expected an object, got a list"),
    (json.dumps({"traceEvents": [{**SPAN, "args": {"modeled_us": "fast"}}]}),
     "field 'args.modeled_us': expected a finite number, got a string"),
    (json.dumps({"traceEvents": [{k: v for k, v in THREAD.items() if k != "args"}, SPAN]}),
     "event 0 ('thread_name'), field 'args': expected an object holding the track's name, got missing"),
    (json.dumps({"traceEvents": [{**THREAD, "args": {"label": "host"}}, SPAN]}),
     "event 0 ('thread_name'), field 'args.name': expected a string, got missing"),
    (json.dumps({"traceEvents": [{k: v for k, v in THREAD.items() if k != "tid"}, SPAN]}), "field 'tid': expected an integer"),
    (json.dumps({"traceEvents": [{"name": "process_name", "ph": "M", "args": {"name": "cpu:0"}}, SPAN]}),
     "event 0 ('process_name'), field 'pid': expected an integer or a string"),
]


@pytest.mark.parametrize("text, message", NOT_A_TRACE, ids=[m[:50] for _, m in NOT_A_TRACE])
def test_json_that_is_not_a_trace_is_one_line_naming_the_event_and_field(tmp_path, capsys, text, message):
    path = tmp_path / "t.json"
    path.write_text(text)
    for argv in (["trace", "--summary", str(path)], ["trace", "--png", str(tmp_path / "t.png"), str(path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and f"trace {path}" in err and "internal error" not in err, err
    assert not (tmp_path / "t.png").exists()
    if text.startswith('{"traceEvents": ['):  # a document handed over in Python is checked the same way
        with pytest.raises(simaccel.SimAccelError, match=re.escape(message)):
            summarize(json.loads(text))


def test_what_the_summary_does_not_read_is_not_checked(tmp_path):
    """Other phases (counters, instants, flows) and other metadata pass as they are; ids may be
    strings; a span may start before the trace's 0 (Chrome's format allows it)."""
    document = {"traceEvents": [
        {"name": "process_sort_index", "ph": "M", "pid": 0},
        {"ph": "C", "name": "ledger", "ts": "later", "args": 3},
        {"ph": "i", "s": "t", "ts": None},
        {"name": "thread_name", "ph": "M", "pid": "gpu", "tid": "s1", "args": {"name": "stream 1"}},
        {**SPAN, "pid": "gpu", "tid": "s1", "ts": -5.0},
        {**SPAN, "ts": 10.0},
    ]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(document))
    summary = summarize(load(path))
    assert [(k["kind"], k["count"]) for k in summary["kinds"]] == [("simaccel.relu", 2)]
    assert sorted(t["track"] for t in summary["tracks"]) == ["0 / 1", "gpu / stream 1"]


def test_the_png_legend_sits_outside_the_spans(clean_runtime, tmp_path):
    """The legend is above the axes (it covered the latest spans when drawn inside them), and
    names the categories drawn."""
    pytest.importorskip("matplotlib", reason="matplotlib (the trace extra) draws the PNG")
    import matplotlib.pyplot as plt

    x, w, b = mlp_inputs()
    y = np.zeros((4, 6), np.float32)
    with clean_runtime.use_engine("ref"), simaccel.trace(tmp_path / "t.json"):
        clean_runtime.run(mlp_program(), x, w, b, y)
    document = load(tmp_path / "t.json")
    fig = draw_timeline(document)
    try:
        fig.canvas.draw()
        ax = fig.axes[0]
        legend, axes = ax.get_legend().get_window_extent(), ax.get_window_extent()
        assert legend.y0 >= axes.y1, (legend, axes)  # wholly above the axes, where no span is drawn
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels and set(labels) <= {e.get("cat") for e in spans(document)}
    finally:
        plt.close(fig)
