"""The runtime side of the forwarder: TVM tensors in, simaccel runtime call out.

The compiled forwarder calls the global function ``simaccel.runtime.invoke`` with the
region key, its Program (JSON) and the region's tensors (inputs, then DPS outputs) as TVM
passes them; this hands them to the process-wide simaccel runtime unchanged.
"""

from __future__ import annotations

from ..runtime import get_runtime


def invoke(key: str, program_json: str, *tensors) -> None:
    get_runtime().invoke(key, program_json, *tensors)
