"""The runtime side of a region function: TVM's tensors and stream in, simaccel runtime out.

A compiled region function (simaccel.tvm_integration.backend.forwarder) calls the global function
``simaccel.runtime.invoke`` with the region key, its Program (JSON), the build's GPU hint
and one `DLTensor*` per tensor (inputs, then DPS outputs), exactly the buffers TVM passed.
They are read in place as `TensorRef`s. Libraries built by simaccel 0.1.0's C++ forwarder
pass TVM tensor objects instead; those are read through DLPack, and neither they nor a native
region forwarding here pass a hint, so such libraries keep working.

The GPU hint is not empty where a CUDA build could not know its target (a bare
`RunCodegen()`): its regions then run through Python, and the first call of each on a GPU
warns, saying how to get native regions. For GPU tensors this
also reads TVM's current stream for their device (`tvm_ffi.get_raw_stream`), so the
accelerator's kernels are queued behind TVM's.
"""

from __future__ import annotations

import ctypes
import functools
import json
import warnings

import tvm_ffi

from ...errors import SimAccelError
from ...program import Program
from ...runtime import get_runtime
from ...tensors import TensorRef, device_of, from_dltensor


@functools.lru_cache(maxsize=None)
def _ffi_device(kind: str, index: int):
    return tvm_ffi.device(kind, index)


_warned: set[str] = set()  # keys of the regions whose GPU hint was shown


def invoke(key: str, program_json: str, *args) -> None:
    """One region call: `args` are the GPU hint (libraries of this version), then the tensors
    (and, for a symbolic region, its shape arguments: TVM Shape objects, `shape_object`)."""
    hint, handles = (args[0], args[1:]) if args and isinstance(args[0], str) else ("", args)
    runtime = get_runtime()
    shapes = {k for k, _ in runtime.program(key, program_json).shape_args} if '"shape_args"' in program_json else ()
    tensors = [shape_object(h) if k in shapes else h if hasattr(h, "__dlpack_device__") else from_dltensor(h)
               for k, h in enumerate(handles)]
    stream = None
    first = next((t for t in tensors if not isinstance(t, tuple)), None)
    if first is not None:
        device = first.device if isinstance(first, TensorRef) else device_of(first)
        if device[0] != "cpu":
            if hint and key not in _warned:
                _warned.add(key)
                region = key.rsplit(":", 1)[0]
                warnings.warn(f"simaccel: region {region} runs through Python on {device[0]}:{device[1]}: {hint}",
                              stacklevel=2)
            stream = tvm_ffi.get_raw_stream(_ffi_device(*device))
    runtime.invoke(key, program_json, *tensors, stream=stream)


_SHAPE_TYPE_INDEX = 69  # kTVMFFIShape in tvm/ffi/c_api.h
_HEADER_BYTES = 24  # TVMFFIObject: combined_ref_count, type_index, padding, deleter


def shape_object(handle) -> tuple[int, ...]:
    """The sizes of the TVM Shape object a region function passes as a handle (a ShapeTuple from
    Python as it is): the object's header, then its TVMFFIShapeCell {const int64_t* data;
    size_t size} (tvm-ffi's C ABI, c_api.h)."""
    if isinstance(handle, (tuple, list)) or hasattr(handle, "__len__"):
        return tuple(int(v) for v in handle)
    address = handle.value if isinstance(handle, ctypes.c_void_p) else int(handle or 0)
    if not address:
        raise SimAccelError("a shape argument of a region call is a null pointer")
    type_index = ctypes.c_int32.from_address(address + 8).value
    if type_index != _SHAPE_TYPE_INDEX:
        raise SimAccelError(f"a shape argument of a region call is an object of type index {type_index}, not a "
                            f"Shape ({_SHAPE_TYPE_INDEX})")
    data = ctypes.c_void_p.from_address(address + _HEADER_BYTES).value
    size = ctypes.c_size_t.from_address(address + _HEADER_BYTES + 8).value
    return tuple((ctypes.c_int64 * size).from_address(data)) if size else ()


def native_region(key: str, program_json: str) -> int:
    """Where a native region (simaccel.native) counts its calls and each op's kernel launches:
    ledger memory, by address."""
    data = json.loads(program_json)
    ops = [op["op"] for op in data["ops"]]
    try:  # for the timing model only: a region of ops this process has not declared still counts
        program = Program.from_dict(data)
    except SimAccelError:
        program = None
    return get_runtime().ledger.native_counters(data["name"], ops, program)
