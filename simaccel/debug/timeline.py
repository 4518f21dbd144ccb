"""The timeline trace: a Chrome trace-event / Perfetto JSON of a run.

Where it sits: a debugging tool above the runtime, fed by the events of simaccel.events: a
watcher of every region call made through the Python runtime (`simaccel.debug.hooks`), native
regions' calls (the debug word's `flags.TRACE` is on while tracing, so they record CUDA events
and publish each call through `simaccel.debug.native_events`), every byte simaccel copies, and
the runtime's creation ($SIMACCEL_TRACE); it reads the ledger's counters. TVM's side, the VM's own call
instructions (its kernels, builtins and the calls of region functions), is added by
`simaccel.tvm_integration.tools.trace_tvm`, which feeds `Trace.vm_call`. The core knows
nothing of TVM.

Turning it on:

- `with simaccel.trace("trace.json"):` (also `simaccel.debug.trace`) traces the block and writes
  the file when it ends;
- `$SIMACCEL_TRACE=trace.json` starts a trace when the process's runtime is first created (the
  first region call, the loading of a library with native regions, or `simaccel.get_runtime()`:
  this module listens for it from its import on) and writes the file at interpreter exit
  (atexit), unless a trace was started explicitly before
  (`simaccel demo` and `simaccel run` trace their run into `$SIMACCEL_TRACE` that way, so that
  TVM's VM calls are in it too).

One trace at a time per process; a second one is refused with a SimAccelError.

Tracks: one process (pid) per device ("cpu:0", "cuda:0"), one thread (tid) per stream on it
("host" for CPU work, "default stream" or "stream 0x..." on a GPU). On a stream's track TVM's
VM calls contain the simaccel region they call, which contains its ops, which carry their
kernel launches (grid, block, shared bytes) and tensors (shapes, dtypes, bytes read and
written) as arguments; a native region's launches are child spans of its ops. The process
"host" (pid 0) has simaccel's copies (instant events: host-staged copies and aliased-output
copies, direction and bytes) and the ledger's counters ("C" events).

Clocks (every event says which in `args.clock`):

- "host": `time.perf_counter_ns()` from the trace's start; CPU engines (ref, sim) and, on a
  CPU device, TVM's VM calls.
- "device": CUDA events (numba-cuda `cuda.event`) recorded on the call's stream around each op
  of the cuda engine and around each TVM VM call on a GPU, resolved when the trace is written
  (no synchronisation per call), placed on the host timeline through one anchor event per
  device (recorded and synchronised at its first use, then read against the host clock).
- "host start + device offsets": a native region's call (published by region.h): its start is
  the host time of the call (CLOCK_REALTIME, moved onto the trace's clock), its launches are
  offset by their CUDA-event times; when TVM's VM call of that region was traced on the same
  device, the region is placed at that call's device start instead.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import time

from .. import events
from ..errors import SimAccelError
from ..profile import active_profile
from ..runtime import get_runtime
from ..timing import model_program, region_bound
from . import flags, hooks, native_events

TRACE_ENV = "SIMACCEL_TRACE"
HOST_PID = 0

# Event categories (`cat`), used by the summary too.
VM_CALL, VM_BUILTIN, VM_REGION = "tvm.kernel", "tvm.builtin", "tvm.region_call"
REGION, OP, LAUNCH, COPY = "simaccel.region", "simaccel.op", "simaccel.launch", "simaccel.copy"
CLOCK_HOST, CLOCK_DEVICE, CLOCK_NATIVE = "host", "device", "host start + device offsets"

_lock = threading.Lock()
_current: "Trace | None" = None
_env_checked = False


def current() -> "Trace | None":
    """The trace being recorded now, or None (the common case)."""
    return _current


class _CudaClock:
    """CUDA events on the trace's timeline: one anchor per device, resolved at the end."""

    def __init__(self, trace: "Trace"):
        self.trace = trace
        self.anchors: dict[int, tuple] = {}  # device id -> (event, host us)
        self.streams: dict[tuple[int, int], object] = {}

    def stream(self, device_id: int, handle):
        """A numba stream for a raw handle (an int; 0 or None: the default stream) or a numba stream."""
        from numba import cuda

        if not isinstance(handle, (int, type(None))):
            return handle
        key = (device_id, int(handle or 0))
        stream = self.streams.get(key)
        if stream is None:
            with cuda.gpus[device_id]:
                stream = cuda.external_stream(key[1]) if key[1] else cuda.default_stream()
            self.streams[key] = stream
        return stream

    def mark(self, device_id: int, stream):
        """Record an event on `stream` (numba stream or raw handle) of GPU `device_id` now."""
        from numba import cuda

        with cuda.gpus[device_id]:
            stream = self.stream(device_id, stream)
            if device_id not in self.anchors:
                anchor = cuda.event(timing=True)
                anchor.record(stream)
                anchor.synchronize()
                self.anchors[device_id] = (anchor, self.trace.host_us())
            event = cuda.event(timing=True)
            event.record(stream)
        return device_id, event

    def resolve(self, marker) -> float:
        """The time of a recorded event in microseconds of the trace (waits for it)."""
        from numba import cuda

        device_id, event = marker
        anchor, host = self.anchors[device_id]
        with cuda.gpus[device_id]:
            event.synchronize()
            return host + cuda.event_elapsed_time(anchor, event) * 1e3


class Trace:
    """One trace being recorded; written as JSON to `path` by `close()`."""

    def __init__(self, path, clock=None):
        self.path = os.fspath(path)
        self.epoch_ns = time.perf_counter_ns()
        self.epoch_realtime_ns = time.time_ns()
        self.clock = clock if clock is not None else _CudaClock(self)  # tests pass a stand-in
        self._lock = threading.Lock()
        self._events: list[dict] = []
        self._deferred: list = []  # callables run by close(): device-clocked records to resolve
        self._vm_calls: list[dict] = []  # TVM's VM calls (to place native regions inside them)
        self._native: list[dict] = []  # native region calls as published
        self._pids: dict[str, int] = {"host": HOST_PID}
        self._tids: dict[tuple[int, str], int] = {}
        self.closed = False

    # -- clocks --------------------------------------------------------------------------
    def host_us(self, ns: int | None = None) -> float:
        """perf_counter_ns `ns` (default: now) in microseconds since the trace began."""
        return ((time.perf_counter_ns() if ns is None else ns) - self.epoch_ns) / 1e3

    def realtime_us(self, ns: int) -> float:
        """A CLOCK_REALTIME time (`time.time_ns()`, native regions' host_start_ns) on the trace's clock."""
        return (ns - self.epoch_realtime_ns) / 1e3

    # -- tracks ----------------------------------------------------------------------------
    def track(self, device: str, stream=None) -> tuple[int, int]:
        """(pid, tid) of `device` ("cpu:0", "cuda:0", or "host") and `stream` (raw handle, None: host)."""
        with self._lock:
            pid = self._pids.setdefault(device, len(self._pids))
            label = stream if isinstance(stream, str) else stream_label(stream, device)
            key = (pid, label)
            if key not in self._tids:
                self._tids[key] = 1 + sum(1 for p, _ in self._tids if p == pid)
            return pid, self._tids[key]

    # -- events ----------------------------------------------------------------------------
    def add(self, event: dict) -> None:
        with self._lock:
            self._events.append(event)

    def span(self, name: str, cat: str, where: tuple[int, int], ts: float, dur: float, args: dict) -> dict:
        event = {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": max(dur, 0.0), "pid": where[0],
                 "tid": where[1], "args": args}
        self.add(event)
        return event

    def defer(self, resolve) -> None:
        """Run `resolve()` (which adds events) when the trace is written."""
        with self._lock:
            self._deferred.append(resolve)

    def counters(self, ts: float | None = None) -> None:
        """The ledger's counters now, as "C" events on the host process."""
        snap = get_runtime().ledger.snapshot()
        ts = self.host_us() if ts is None else ts
        where = self.track("host", "ledger")
        self.add({"name": "ledger calls", "cat": "simaccel.ledger", "ph": "C", "ts": ts, "pid": where[0], "tid": where[1],
                  "args": {"offloaded_calls": snap["offloaded_calls"], "ops": sum(snap["ops"].values()),
                           "kernel_launches": sum(snap["kernel_launches"].values())}})
        self.add({"name": "ledger bytes copied", "cat": "simaccel.ledger", "ph": "C", "ts": ts, "pid": where[0],
                  "tid": where[1], "args": dict(snap["bytes"])})

    def copy(self, direction: str, nbytes: int) -> None:
        """One copy simaccel made (ledger.record_copy), as an instant event, and the counters after it."""
        ts = self.host_us()
        where = self.track("host", "simaccel copies")
        self.add({"name": f"copy {direction}", "cat": COPY, "ph": "i", "s": "t", "ts": ts, "pid": where[0],
                  "tid": where[1], "args": {"direction": direction, "bytes": int(nbytes), "clock": CLOCK_HOST}})

    def vm_call(self, device: str, stream, name: str, args: dict, host_begin_ns: int, host_end_ns: int,
                begin_marker=None, end_marker=None) -> None:
        """One TVM VM call instruction (from trace_tvm): host times, and CUDA markers on a GPU."""
        cat = VM_BUILTIN if name.startswith("vm.builtin.") else VM_CALL
        where = self.track(device, stream)
        record = {"name": name, "cat": cat, "where": where, "device": device, "args": dict(args),
                  "host": (self.host_us(host_begin_ns), self.host_us(host_end_ns))}
        with self._lock:
            self._vm_calls.append(record)
        if cat == VM_CALL:
            self.counters()  # after a kernel or a region call: what the ledger counted so far
        if begin_marker is None:
            record["times"] = record["host"]
            record["args"]["clock"] = CLOCK_HOST
            record["event"] = self.span(name, cat, where, record["host"][0], record["host"][1] - record["host"][0],
                                        record["args"])
            return

        def resolve():
            begin, end = self.clock.resolve(begin_marker), self.clock.resolve(end_marker)
            record["times"] = (begin, end)
            record["args"]["clock"] = CLOCK_DEVICE
            record["args"]["host_dur_us"] = record["host"][1] - record["host"][0]
            record["event"] = self.span(name, cat, where, begin, end - begin, record["args"])

        self.defer(resolve)

    def native_call(self, record: dict) -> None:
        """One native region call as `simaccel.debug.native_events` publishes it (converted at close)."""
        with self._lock:
            self._native.append(dict(record))

    # -- writing ---------------------------------------------------------------------------
    def close(self) -> dict:
        """Resolve device times, convert native calls, write the JSON; returns the document."""
        if self.closed:
            raise SimAccelError(f"trace {self.path}: already written")
        self.closed = True
        for resolve in self._deferred:
            resolve()
        region_names = {e["args"].get("region") for e in self._events if e.get("cat") == REGION}
        for record in self._native:
            native_events_to_trace(self, record)
            region_names.add(record.get("region"))
        for call in self._vm_calls:  # a VM call of a simaccel region is a container, not TVM's kernel
            event = call.get("event")
            if event is not None and event["cat"] == VM_CALL and (event["name"] in region_names
                                                                  or event["name"].endswith("_simaccel")):
                event["cat"] = VM_REGION
        self.counters()
        document = self.document()
        directory = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(directory, exist_ok=True)
            with open(self.path, "w") as f:
                json.dump(document, f)
        except OSError as e:
            raise SimAccelError(f"trace {self.path}: cannot write it ({e.strerror or e})") from e
        return document

    def document(self) -> dict:
        meta = []
        for name, pid in self._pids.items():
            meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
            meta.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for (pid, label), tid in self._tids.items():
            meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}})
        events = sorted(self._events, key=lambda e: (e["pid"], e["tid"], e["ts"], -e.get("dur", 0)))
        return {
            "traceEvents": meta + events,
            "displayTimeUnit": "ms",
            "otherData": {
                "producer": "simaccel.debug.timeline",
                "clocks": {CLOCK_HOST: "time.perf_counter_ns() since the trace began, in microseconds",
                           CLOCK_DEVICE: "CUDA events on the stream, placed on the host clock by one anchor event per device",
                           CLOCK_NATIVE: "host time of a native region's call plus its launches' CUDA-event offsets"},
                "epoch_realtime_ns": self.epoch_realtime_ns,
            },
        }


def stream_label(stream, device: str) -> str:
    if device.startswith("cpu") or device == "host":
        return "host"
    if not stream:
        return "default stream"
    return f"stream {int(stream):#x}"


def native_events_to_trace(trace: Trace, record: dict) -> None:
    """Add one native region call (the `simaccel.debug.native_events` dict) to `trace`.

    The dict: {"region", "device" ("cuda:0" or a device id), "stream" (raw handle),
    "host_start_ns" (CLOCK_REALTIME), "launches": [{"op", "op_name", "kernel", "grid", "block",
    "shared", "start_us", "end_us"}]}, the launch times in microseconds from the region's start.
    """
    device = record.get("device", "cuda:0")
    device = device if isinstance(device, str) else f"cuda:{int(device)}"
    where = trace.track(device, record.get("stream"))
    launches = list(record.get("launches", ()))
    start = trace.realtime_us(int(record["host_start_ns"]))
    placed = "host start"
    for call in trace._vm_calls:  # TVM's VM call of this region, on this device, at that host time
        if call["name"] == record["region"] and call["device"] == device and "times" in call \
                and call["host"][0] <= start <= call["host"][1]:
            start, placed = call["times"][0], "start of TVM's VM call"
            break
    end = max((float(launch["end_us"]) for launch in launches), default=0.0)
    modeled = modeled_times(get_runtime().ledger.programs().get(record["region"]), False)
    trace.span(record["region"], REGION, where, start, end,
               {"region": record["region"], "engine": "native", "device": device, "stream": record.get("stream"),
                "launches": len(launches), "clock": CLOCK_NATIVE, "placed_at": placed, **modeled.get(None, {})})
    by_op: dict[int, list] = {}
    for launch in launches:
        by_op.setdefault(int(launch["op"]), []).append(launch)
    for index, group in sorted(by_op.items()):
        first = min(float(launch["start_us"]) for launch in group)
        last = max(float(launch["end_us"]) for launch in group)
        trace.span(group[0]["op_name"], OP, where, start + first, last - first,
                   {"op": group[0]["op_name"], "index": index, "region": record["region"], "clock": CLOCK_NATIVE,
                    "launches": [_launch_args(launch) for launch in group], **modeled.get(index, {})})
        for launch in group:
            trace.span(launch["kernel"], LAUNCH, where, start + float(launch["start_us"]),
                       float(launch["end_us"]) - float(launch["start_us"]),
                       {**_launch_args(launch), "op": group[0]["op_name"], "clock": CLOCK_NATIVE})


def modeled_times(program, staged: bool) -> dict:
    """{None: the region's, op index: the op's} {"modeled_us", "bound"} under the active
    profile's performance figures (simaccel.timing), for the trace's span arguments; empty
    where the profile has none or the Program is unknown here."""
    performance = active_profile().performance
    if program is None or performance is None:
        return {}
    try:
        region = model_program(program, performance, staged and performance.dma_bandwidth is not None)
    except SimAccelError:  # an op this process has not declared
        return {}
    times = {None: {"modeled_us": region.seconds * 1e6, "bound": region_bound(region)}}
    for op in region.ops:
        times[op.index] = {"modeled_us": op.seconds * 1e6, "bound": op.bound}
    return times


def _launch_args(launch: dict) -> dict:
    return {"kernel": launch["kernel"], "grid": list(_dims(launch["grid"])), "block": list(_dims(launch["block"])),
            "shared_bytes": int(launch.get("shared", launch.get("shared_bytes", 0)))}


def _dims(value) -> tuple:
    return tuple(int(v) for v in value) if isinstance(value, (tuple, list)) else (int(value),)


class TraceWatcher(hooks.Watcher):
    """Records each Python region call: a region span, and per op a span with its launches."""

    python_regions = False  # native regions stay native: they publish their own events

    def __init__(self, trace: Trace):
        self.trace = trace

    def _device_clock(self, run) -> bool:
        return run.engine.name == "cuda"

    def _now(self, run):
        if self._device_clock(run):
            return self.trace.clock.mark(run.call.device[1], run.call.target.stream)
        return self.trace.host_us()

    def region_start(self, run) -> None:
        run.notes[self] = {"start": self._now(run), "ops": []}

    def op_start(self, run, index: int) -> None:
        run.notes[self]["ops"].append([index, self._now(run), None])

    def op_end(self, run, index: int) -> None:
        run.notes[self]["ops"][-1][2] = self._now(run)

    def region_end(self, run) -> None:
        notes = run.notes.pop(self)
        end = self._now(run)
        program, call = run.program, run.call
        device = f"{call.device[0]}:{call.device[1]}"
        where = self.trace.track(device, call.stream)
        device_clock = self._device_clock(run)
        clock = CLOCK_DEVICE if device_clock else CLOCK_HOST
        modeled = modeled_times(program, call.staged)
        region_args = {"region": program.name, "engine": run.engine.name, "device": device, "stream": call.stream,
                       "staged": call.staged, "clock": clock,
                       "inputs": [_tensor_args(program.tensors[i]) for i in program.inputs],
                       "outputs": [_tensor_args(program.tensors[i]) for i in program.outputs], **modeled.get(None, {})}
        ops = []
        for index, begin, finish in notes["ops"]:
            node = program.ops[index]
            ops.append((index, begin, finish, {
                "op": node.op, "index": index, "region": program.name, "engine": run.engine.name, "clock": clock,
                "view": node.output in program.views,
                "inputs": [_tensor_args(program.tensors[i]) for i in node.inputs],
                "output": _tensor_args(program.tensors[node.output]),
                "bytes_read": sum(program.tensors[i].nbytes for i in node.inputs),
                "bytes_written": program.tensors[node.output].nbytes,
                "launches": [{"kernel": getattr(launch.kernel, "__name__", str(launch.kernel)),
                              "grid": list(_dims(launch.grid)), "block": list(_dims(launch.block)),
                              "shared_bytes": launch.shared_bytes} for launch in run.launches[index]],
                **modeled.get(index, {}),
            }))
        trace, start = self.trace, notes["start"]

        def emit(resolve):
            begin = resolve(start)
            trace.span(program.name, REGION, where, begin, resolve(end) - begin, region_args)
            for _, op_begin, op_end, args in ops:
                t0 = resolve(op_begin)
                trace.span(args["op"], OP, where, t0, resolve(op_end) - t0, args)

        if device_clock:
            trace.defer(lambda: emit(trace.clock.resolve))
        else:
            emit(lambda t: t)
        trace.counters()


def _tensor_args(spec) -> dict:
    return {"name": spec.name, "shape": list(spec.shape), "dtype": spec.dtype, "bytes": spec.nbytes}


# -- starting and stopping -----------------------------------------------------------------------
def start(path, clock=None) -> Trace:
    """Start tracing to `path` (process-wide); `stop()` writes the file.

    A trace started before the runtime exists takes the place of `$SIMACCEL_TRACE`'s.
    """
    global _current, _env_checked
    _env_checked = True
    get_runtime()  # created now if it was not: $SIMACCEL_TRACE's trace does not start after this one
    with _lock:
        if _current is not None:
            raise SimAccelError(f"a trace to {_current.path} is already being recorded; one trace at a time "
                                f"(asked for {os.fspath(path)})")
        trace = _current = Trace(path, clock)
    trace.watcher = TraceWatcher(trace)
    hooks.install(trace.watcher)
    events.listen(events.COPY, trace.copy)
    flags.set_bit(flags.TRACE, True)
    native_events.subscribe(trace.native_call)
    return trace


def stop() -> Trace | None:
    """Stop the current trace and write it (None if no trace was on)."""
    global _current
    with _lock:
        trace, _current = _current, None
    if trace is None:
        return None
    flags.set_bit(flags.TRACE, False)
    hooks.uninstall(trace.watcher)
    events.unlisten(events.COPY, trace.copy)
    native_events.unsubscribe(trace.native_call)
    trace.close()
    return trace


@contextlib.contextmanager
def trace(path, clock=None):
    """Trace the block: every region call, TVM VM calls where a traced VM runs, copies and counters.

    Writes the Chrome trace-event JSON to `path` when the block ends (also after an error).
    """
    recording = start(path, clock)
    try:
        yield recording
    finally:
        if current() is recording:
            stop()


def start_from_env(runtime=None) -> Trace | None:
    """Start the trace `$SIMACCEL_TRACE` names, once per process, written at exit (when the
    process's runtime is created: a RUNTIME listener of simaccel.events from this module's import on)."""
    global _env_checked
    if _env_checked:
        return None
    path = os.environ.get(TRACE_ENV, "")
    if not path or current() is not None:
        _env_checked = True
        return None
    recording = start(path)
    atexit.register(_stop_at_exit, recording)
    return recording


def _stop_at_exit(recording: Trace) -> None:
    if current() is recording:
        try:
            stop()
        except SimAccelError as e:
            import sys

            print(f"simaccel: {e}", file=sys.stderr)


events.listen(events.RUNTIME, start_from_env)
