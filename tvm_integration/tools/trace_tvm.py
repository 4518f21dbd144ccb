"""TVM's own work in the timeline trace: every VM call instruction (its kernels, builtins, regions).

Where it sits: a tool over the core's trace (`simaccel.debug.timeline`), used by `simaccel demo`,
`simaccel run` and scripts/trace_gpu.py. TVM 0.27 has no profiler for the Relax VM (there is
no `tvm.runtime.profiling`, and `VirtualMachine` takes no `profile=`), but its VM calls an
instrument function before and after each Call instruction (`VirtualMachine.set_instrument`)
with the callee's symbol and its arguments. `instrument_vm` installs one that, while a trace is
being recorded, adds each call as a span on the track of its device and TVM's current stream:
host times (`time.perf_counter_ns`) on a CPU device; on a GPU, CUDA events recorded on TVM's
current stream before and after the call (device time, resolved when the trace is written),
the host duration kept in `args.host_dur_us`. The VM calls of simaccel's region functions
then contain the region's own spans. Builtins (`vm.builtin.*`) are spans of category
"tvm.builtin"; the other callees are TVM's kernels ("tvm.kernel") or region calls
("tvm.region_call").

A VM keeps its instrument for its lifetime (TVM offers no way to remove one), and the
instrument is a Python call per instruction even while no trace is on: trace with a VM made
for it (`traced_vm`), as the tools do. CUDA-graph runs (RewriteCUDAGraph) are not traced: an
event recorded on a capturing stream would become part of the graph.
"""

from __future__ import annotations

import threading
import time

from ...debug.timeline import current


def _describe(value) -> dict | None:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return None
    try:
        return {"shape": [int(d) for d in shape], "dtype": str(dtype)}
    except (TypeError, ValueError):
        return None


def instrument_vm(vm, device):
    """Make `vm` (a relax / runtime VirtualMachine on TVM device `device`) add its calls to the trace."""
    gpu = device.dlpack_device_type() == 2  # kDLCUDA
    name = f"{'cuda' if gpu else 'cpu'}:{device.index}"
    local = threading.local()

    def stream_now():
        if not gpu:
            return None
        import tvm_ffi

        return tvm_ffi.get_raw_stream(tvm_ffi.device("cuda", device.index))

    def instrument(func, symbol, before, ret, *args):
        recording = current()
        if recording is None:
            return 0
        stack = getattr(local, "stack", None)
        if stack is None:
            stack = local.stack = []
        if before:
            stream = stream_now()
            marker = recording.clock.mark(device.index, stream) if gpu else None
            stack.append((recording, stream, marker, time.perf_counter_ns()))
            return 0
        if not stack:
            return 0
        began_on, stream, begin_marker, host_begin = stack.pop()
        host_end = time.perf_counter_ns()
        if began_on is not recording:
            return 0  # the trace changed during the call
        end_marker = recording.clock.mark(device.index, stream) if gpu else None
        tensors = [d for d in (_describe(a) for a in args) if d is not None]
        recording.vm_call(name, stream, str(symbol), {"symbol": str(symbol), "tensors": tensors,
                                                      "stream": stream, "vm_instruction": "Call"},
                          host_begin, host_end, begin_marker, end_marker)
        return 0

    vm.set_instrument(instrument)
    return vm


def traced_vm(executable, device):
    """A new VirtualMachine of `executable` (Executable or loaded module) on `device`, instrumented."""
    from tvm.runtime.vm import VirtualMachine

    return instrument_vm(VirtualMachine(executable, device), device)


def trace_call(executable, device, func: str, *args):
    """Run `func` of `executable` once on a VM made for it; with a trace on, its calls are in the trace."""
    return traced_vm(executable, device)[func](*args)
