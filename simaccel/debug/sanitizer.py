"""The sanitizer's checks: a watcher (simaccel.debug.hooks) that catches what a region call
must never do, and names the region, op and tensor.

Where it sits: a debugging tool above the runtime. Imported (with simaccel), it registers
`SANITIZER` as the SANITIZE listener of simaccel.events; simaccel.runtime runs a sanitized
call (simaccel.debug.sanitize says which) with it as its first watcher, on the ref, sim and
cuda engines alike. Per call:

* region start: on the cuda engine, refuse a stream that is capturing a CUDA graph (the
  checks synchronise, which capture forbids) and check that kernels go to the call's stream;
  keep a host copy of every input.
* before each op (not views): its output is computed into plan-owned scratch instead, a
  flat buffer of GUARD bytes, the tensor's bytes, GUARD bytes, filled with the poison of its
  dtype (a NaN payload no arithmetic produces; a byte pattern for other dtypes); the op
  sees the exact-shape middle. Tensors the op reads that are not region inputs are copied.
* after each op: synchronise (cuda: a fault is kind "fault", naming the launches); a changed
  guard byte is "out_of_bounds" (bytes before / after the tensor); a changed input of the op
  is "input_written"; elements still holding the poison are "unwritten" (for dtypes where
  any bit pattern is a value, the op runs once more with a second poison and only elements
  that kept both count); then the scratch is copied into the real tensor.
* region end: every input that shares no memory with an output must equal its copy.

Inputs are compared through host copies (on the cuda engine a device-to-host copy per
check; docs/debugging.md gives the cost). A simulated kernel's IndexError becomes a
SanitizerError of kind "index" in any call (simaccel.engines.sim.index_error).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import events
from ..errors import SanitizerError
from ..launch_plan import WORKSPACE, View
from ..names import BYTE_POISON, FLOAT_POISON
from ..ops import get_op
from ..program import TensorSpec
from .hooks import Watcher

GUARD = 256  # bytes of canary on each side of a scratch tensor (keeps the middle 256-byte aligned)

# The poison of each dtype (one home for Python and native regions: simaccel.names):
# signalling NaNs with payloads for floats (arithmetic yields quiet NaNs), bytes otherwise.
_FLOAT_POISON, _BYTE_POISON = FLOAT_POISON, BYTE_POISON


def poison(dtype, second: bool = False) -> int:
    """The poison of `dtype` as an unsigned integer of its item size."""
    dtype = np.dtype(dtype)
    if not second and dtype.name in _FLOAT_POISON:
        return _FLOAT_POISON[dtype.name]
    byte = _BYTE_POISON[1 if second else 0]
    return int.from_bytes(bytes([byte]) * dtype.itemsize, "little")


def needs_second_run(dtype) -> bool:
    """Whether an element equal to the poison may be a real value (any pattern of the dtype is one)."""
    dtype = np.dtype(dtype)
    return dtype.name not in _FLOAT_POISON and dtype != np.bool_


def _uint(itemsize: int) -> np.dtype:
    return np.dtype(f"<u{itemsize}")


def poison_image(spec: TensorSpec, second: bool = False) -> np.ndarray:
    """Host bytes of a scratch buffer for `spec`: guard, tensor, guard, all the poison."""
    itemsize = spec.np_dtype.itemsize
    count = (2 * GUARD + spec.nbytes) // itemsize
    return np.full(count, poison(spec.dtype, second), _uint(itemsize)).view(np.uint8)


@dataclass
class _Scratch:
    """Plan-owned buffers of one tensor: the flat guarded buffer, its middle, the poison images."""

    flat: object
    middle: object
    images: tuple  # (first, second): engine arrays holding poison_image
    host_images: tuple


@dataclass
class _CallState:
    inputs: dict = field(default_factory=dict)  # input tensor id -> (host copy, shares memory with an output)
    op_inputs: dict = field(default_factory=dict)  # tensor id -> host copy, for the op running now
    real: object = None  # the output slot the op's scratch stands in for


class Sanitizer(Watcher):
    """The checks of one sanitized region call (state in `run.notes`, buffers in `run.scratch`)."""

    python_regions = False  # native regions sanitize themselves (the debug word's SANITIZE bit)

    # -- region ------------------------------------------------------------------------------
    def region_start(self, run) -> None:
        check_stream(run)
        state = run.notes[self] = _CallState()
        outputs = [ref for _, role, ref in run.boundary if role == "output"]
        for i, role, ref in run.boundary:
            if role == "input":
                state.inputs[i] = (_host(run, run.slots[i]), any(_overlap(ref, out) for out in outputs))

    def region_end(self, run) -> None:
        synchronize(run, None)
        state = run.notes.pop(self)
        for i, (copy, aliased) in state.inputs.items():
            if not aliased:
                _compare_input(run, None, i, copy, _host(run, run.slots[i], copy=False))

    # -- ops ---------------------------------------------------------------------------------
    def op_start(self, run, index: int) -> None:
        program = run.program
        node = program.ops[index]
        if node.output in program.views:
            return
        state = run.notes[self]
        state.op_inputs = {}
        for t in dict.fromkeys(program.views.get(t, t) for t in node.inputs):
            if t not in state.inputs:
                state.op_inputs[t] = _host(run, run.slots[t])
        scratch = self._scratch(run, node.output)
        run.engine.copy(run.call, scratch.flat, scratch.images[0])
        state.real = run.slots[node.output]
        run.slots[node.output] = scratch.middle

    def op_end(self, run, index: int) -> None:
        program = run.program
        node = program.ops[index]
        if node.output in program.views:
            return
        state = run.notes[self]
        synchronize(run, index)
        scratch = run.scratch[(self, node.output)]
        flat = _host(run, scratch.flat, copy=False)
        check_guards(run, index, flat, scratch.host_images[0])
        for t in dict.fromkeys(program.views.get(t, t) for t in node.inputs):
            before = state.inputs[t][0] if t in state.inputs else state.op_inputs[t]
            _compare_input(run, index, t, before, _host(run, run.slots[t], copy=False))
        spec = program.tensors[node.output]
        left = _poisoned(flat, spec, scratch.host_images[0])
        if left.any() and needs_second_run(spec.dtype):
            left &= self._rerun(run, index, scratch)
        if left.any():
            where = np.flatnonzero(left)
            raise SanitizerError(
                f"region {program.name}: op {index} ({node.op}) left {where.size} of {left.size} elements of its "
                f"output {_describe(spec)} unwritten (they still hold the sanitizer's poison; first at element "
                f"{_position(spec, where[0])}, last at {_position(spec, where[-1])}){_launch_list(run, index)}",
                region=program.name, op=node.op, tensor=spec.name, kind="unwritten")
        run.engine.copy(run.call, state.real, scratch.middle)
        run.slots[node.output] = state.real
        state.real = None

    def _rerun(self, run, index: int, scratch: _Scratch) -> np.ndarray:
        """Run op `index` again into the second poison; the elements it left unwritten there too."""
        node = run.program.ops[index]
        run.engine.copy(run.call, scratch.flat, scratch.images[1])
        run.engine.execute(run.call, node, get_op(node.op), [run.slots[i] for i in node.inputs], scratch.middle,
                           run.launches[index])
        synchronize(run, index)
        flat = _host(run, scratch.flat, copy=False)
        check_guards(run, index, flat, scratch.host_images[1])
        return _poisoned(flat, run.program.tensors[node.output], scratch.host_images[1])

    def _scratch(self, run, tensor: int) -> _Scratch:
        key = (self, tensor)
        scratch = run.scratch.get(key)
        if scratch is None:
            spec = run.program.tensors[tensor]
            host_images = (poison_image(spec), poison_image(spec, second=True))
            flat_spec = TensorSpec(f"{spec.name} (sanitizer scratch)", host_images[0].shape, "uint8")
            device = run.call.device[1]
            flat = run.engine.allocate(flat_spec, device)
            images = []
            for host in host_images:
                image = run.engine.allocate(flat_spec, device)
                run.engine.from_host(run.call, image, host)
                images.append(image)
            scratch = run.scratch[key] = _Scratch(flat, _middle(flat, spec), tuple(images), host_images)
        return scratch


SANITIZER = Sanitizer()
events.listen(events.SANITIZE, SANITIZER)


# -- checks ------------------------------------------------------------------------------------
def check_guards(run, index: int, flat: np.ndarray, image: np.ndarray) -> None:
    """A changed canary byte before or after op `index`'s output is an "out_of_bounds" error."""
    node = run.program.ops[index]
    spec = run.program.tensors[node.output]
    end = GUARD + spec.nbytes
    before = np.flatnonzero(flat[:GUARD] != image[:GUARD])
    after = np.flatnonzero(flat[end:] != image[end:])
    if not before.size and not after.size:
        return
    parts = []
    if after.size:
        parts.append(f"{after[-1] + 1} bytes past its end ({after.size} bytes changed)")
    if before.size:
        parts.append(f"{GUARD - before[0]} bytes before its start ({before.size} bytes changed)")
    raise SanitizerError(
        f"region {run.program.name}: op {index} ({node.op}) wrote outside its output {_describe(spec)}: up to "
        f"{' and '.join(parts)}{_launch_list(run, index)}",
        region=run.program.name, op=node.op, tensor=spec.name, kind="out_of_bounds")


def _compare_input(run, index: int | None, tensor: int, before: np.ndarray, now: np.ndarray) -> None:
    if np.array_equal(before.reshape(-1).view(np.uint8), now.reshape(-1).view(np.uint8)):  # bits: NaN == NaN
        return
    program = run.program
    spec = program.tensors[tensor]
    width = _uint(spec.np_dtype.itemsize)
    changed = np.flatnonzero(before.reshape(-1).view(width) != now.reshape(-1).view(width))
    first = changed[0]
    role = ("input" if tensor in program.inputs else "output" if tensor in program.outputs
            else "constant" if tensor in program.constants else "intermediate")
    detail = (f"{changed.size} of {spec.nbytes // spec.np_dtype.itemsize} elements changed, first at element "
              f"{_position(spec, first)}: {before.reshape(-1)[first].item()!r} -> {now.reshape(-1)[first].item()!r}")
    if index is None:
        raise SanitizerError(
            f"region {program.name}: its {role} {_describe(spec)} changed during the call ({detail}), though no op "
            "that reads it changed it: some op of the region wrote outside its own output",
            region=program.name, op=None, tensor=spec.name, kind="input_written")
    node = program.ops[index]
    raise SanitizerError(
        f"region {program.name}: op {index} ({node.op}) wrote into its input {_describe(spec)} (the region's "
        f"{role}; {detail}): an op may write only its output{_launch_list(run, index)}",
        region=program.name, op=node.op, tensor=spec.name, kind="input_written")


def _poisoned(flat: np.ndarray, spec: TensorSpec, image: np.ndarray) -> np.ndarray:
    """Which elements of the tensor in `flat` still equal the poison in `image` (a bool array)."""
    width = _uint(spec.np_dtype.itemsize)
    middle = flat[GUARD:GUARD + spec.nbytes].view(width)
    return middle == image[GUARD:GUARD + spec.nbytes].view(width)


def synchronize(run, index: int | None) -> None:
    """Wait for the call's queued work (cuda); a CUDA error then is a "fault" of op `index`."""
    stream = getattr(run.call.target, "stream", None)
    if run.engine.device_type != "cuda" or stream is None:
        return
    try:
        stream.synchronize()
    except Exception as e:  # numba's CudaAPIError: illegal address, launch failure, ...
        program = run.program
        if index is None:
            raise SanitizerError(
                f"region {program.name}: the GPU faulted after its last op (copying aliased outputs): "
                f"{type(e).__name__}: {e}", region=program.name, kind="fault") from e
        node = program.ops[index]
        raise SanitizerError(
            f"region {program.name}: op {index} ({node.op}) faulted on the GPU: {type(e).__name__}: {e}"
            f"{_launch_list(run, index)}", region=program.name, op=node.op, kind="fault") from e


def check_stream(run) -> None:
    """Kernels go to the call's stream (cuda engine), and that stream is not capturing a CUDA
    graph (`engine.capturing`: never on host engines)."""
    program, call = run.program, run.call
    wanted = int(call.stream or 0)
    if run.engine.device_type == "cuda":
        stream = call.target.stream  # a numba stream: int() of its handle (its own __int__ gives an enum for 0)
        handle = int(getattr(stream, "handle", stream) or 0)
        if handle != wanted:
            raise SanitizerError(
                f"region {program.name}: its kernels would launch on stream {handle:#x}, but the call's stream (TVM's "
                f"current one) is {wanted:#x}", region=program.name, kind="stream")
    reason = run.engine.capturing(call.device[1], call.stream)
    if reason:
        raise SanitizerError(
            f"region {program.name}: called while stream {wanted:#x} {reason}; a sanitized call synchronises "
            "after every op, which capture forbids: sanitize the calls before capturing, not during",
            region=program.name, kind="capture")


# -- helpers -----------------------------------------------------------------------------------
def _host(run, array, copy: bool = True) -> np.ndarray:
    """A host copy of an engine array (host engines: the array itself where `copy` is False)."""
    if run.engine.device_type == "cpu" and not copy:
        return array
    return run.engine.to_host(run.call, array)


def _middle(flat, spec: TensorSpec):
    """The tensor between the guards of `flat`: shape and dtype of `spec`, the same memory."""
    if isinstance(flat, np.ndarray):
        return flat[GUARD:GUARD + spec.nbytes].view(spec.np_dtype).reshape(spec.shape)
    from ..engines.cuda import device_view

    return device_view(flat.__cuda_array_interface__["data"][0] + GUARD, spec, owner=flat)


def _overlap(a, b) -> bool:
    return a.nbytes > 0 and b.nbytes > 0 and a.address < b.address + b.nbytes and b.address < a.address + a.nbytes


def _describe(spec: TensorSpec) -> str:
    return f"{spec.name!r} {spec.shape} {spec.dtype}"


def _position(spec: TensorSpec, flat_index: int) -> str:
    if len(spec.shape) <= 1:
        return str(int(flat_index))
    return str(tuple(int(i) for i in np.unravel_index(int(flat_index), spec.shape)))


def _launch_list(run, index: int) -> str:
    """"; its launches: kernel grid block args" from the recorded launches of op `index` (kernel engines)."""
    launches = run.launches[index] if index < len(run.launches) else ()
    if not launches:
        return ""
    names = run.program.tensors
    described = []
    for launch in launches:
        args = ", ".join(f"{'workspace' if a.tensor == WORKSPACE else names[a.tensor].name}{list(a.shape)}"
                         if isinstance(a, View) else repr(a) for a in launch.args)
        described.append(f"{getattr(launch.kernel, '__name__', launch.kernel)}[grid {launch.grid}, block {launch.block}, "
                         f"shared {launch.shared_bytes}]({args})")
    return "; its launches: " + "; ".join(described)
