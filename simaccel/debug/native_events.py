"""Native regions' trace records: what a traced native call launched and when, for subscribers.

Where it sits: a debugging tool's view of the NATIVE_CALL events of simaccel.events. While the
debug word's TRACE bit is on (simaccel.debug.flags), a native region (simaccel/native/trace.h) records a CUDA
event before and after each kernel launch on TVM's stream, waits for the last one after the
call, and hands the timings to Python through the global function `names.NATIVE_TRACE_FUNC`,
which simaccel.tvm_integration.backend.autoload registers as `record`. One JSON object per call:

    {"region": "fused_dense_simaccel", "key": "fused_dense_simaccel:1a2b3c4d5e6f", "device": 0, "stream": 1234,
     "host_start_ns": time.time_ns() at the call's start (CLOCK_REALTIME),
     "launches": [{"launch": 0, "op": 0, "op_name": "simaccel.dense_bias", "kernel": "...",
                   "grid": [x, y, z], "block": [x, y, z], "shared": 0,
                   "start_us": 0.0, "end_us": 12.5}, ...]}

`region` is the region's symbol, the name TVM's VM calls it by and the Program's name (what
the Python regions' trace events say); `key` the runtime's key of its Program. `start_us` and
`end_us` are GPU times from the call's first event. The timeline trace
(simaccel.debug.trace) subscribes with `subscribe(callback)`; each callback gets the dict.
With the bit off no event API is called and nothing reaches this module.
"""

from __future__ import annotations

import json
import warnings

from .. import events


def subscribe(callback) -> None:
    """Call `callback(record: dict)` for every traced native region call from now on."""
    events.listen(events.NATIVE_CALL, callback)


def unsubscribe(callback) -> None:
    events.unlisten(events.NATIVE_CALL, callback)


def subscribers() -> tuple:
    return events.listeners(events.NATIVE_CALL)


def record(json_text: str) -> None:
    """One traced call (the JSON text a native region sends): parsed, given to every subscriber.

    A subscriber that raises is reported as a warning: a trace must not fail the model's call.
    """
    callbacks = events.listeners(events.NATIVE_CALL)
    if not callbacks:
        return
    data = json.loads(str(json_text))
    for callback in callbacks:
        try:
            callback(data)
        except Exception as e:  # a tool's bug: say so, keep running the model
            warnings.warn(f"simaccel: a native trace subscriber ({callback!r}) failed: {type(e).__name__}: {e}",
                          RuntimeWarning, stacklevel=2)
