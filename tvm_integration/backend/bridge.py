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
    """One region call: `args` are the GPU hint (libraries of this version), then the tensors."""
    hint, handles = (args[0], args[1:]) if args and isinstance(args[0], str) else ("", args)
    tensors = [h if hasattr(h, "__dlpack_device__") else from_dltensor(h) for h in handles]
    stream = None
    if tensors:
        device = tensors[0].device if isinstance(tensors[0], TensorRef) else device_of(tensors[0])
        if device[0] != "cpu":
            if hint and key not in _warned:
                _warned.add(key)
                region = key.rsplit(":", 1)[0]
                warnings.warn(f"simaccel: region {region} runs through Python on {device[0]}:{device[1]}: {hint}",
                              stacklevel=2)
            stream = tvm_ffi.get_raw_stream(_ffi_device(*device))
    get_runtime().invoke(key, program_json, *tensors, stream=stream)


def native_region(key: str, program_json: str, launches_per_op: str) -> int:
    """Where a native region (simaccel.native) counts its calls: ledger memory, by address."""
    data = json.loads(program_json)
    ops = [op["op"] for op in data["ops"]]
    launches = [int(n) for n in launches_per_op.split(",")] if launches_per_op else []
    try:  # for the timing model only: a region of ops this process has not declared still counts
        program = Program.from_dict(data)
    except SimAccelError:
        program = None
    return get_runtime().ledger.native_counters(data["name"], ops, launches, program)
