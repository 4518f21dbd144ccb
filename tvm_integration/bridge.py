"""The runtime side of the forwarder: TVM tensors and TVM's stream in, simaccel runtime out.

The compiled forwarder calls the global function ``simaccel.runtime.invoke`` with the
region key, its Program (JSON) and the region's tensors (inputs, then DPS outputs) exactly
as TVM passes them. For GPU tensors this also reads TVM's current stream for their device
(`tvm_ffi.get_raw_stream`), so the accelerator's kernels are queued behind TVM's.
"""

from __future__ import annotations

import tvm_ffi

from ..runtime import get_runtime

_CPU = 1  # DLPack device type of host memory


def invoke(key: str, program_json: str, *tensors) -> None:
    stream = None
    if tensors:
        device = tensors[0].device
        if device.dlpack_device_type() != _CPU:
            stream = tvm_ffi.get_raw_stream(device)
    get_runtime().invoke(key, program_json, *tensors, stream=stream)
