"""Tensors at the runtime boundary: DLPack objects checked against a Program's TensorSpec.

Any DLPack producer works (TVM, numpy, PyTorch, CuPy). CPU tensors become writable numpy
views of the producer's buffer (no copy), so DPS outputs are filled in place.
"""

from __future__ import annotations

import numpy as np

from .errors import DeviceError, DtypeError, LayoutError, ShapeError
from .program import TensorSpec

# DLPack device type codes (dlpack.h, DLDeviceType).
DLPACK_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 10: "rocm", 13: "cuda_managed"}


def device_of(tensor) -> tuple[str, int]:
    """(device type name, device id) of a DLPack tensor."""
    try:
        kind, index = tensor.__dlpack_device__()
    except AttributeError:
        raise DeviceError(f"{type(tensor).__name__} is not a DLPack tensor (no __dlpack_device__)") from None
    return DLPACK_DEVICES.get(int(kind), f"dlpack-device-{int(kind)}"), int(index)


def describe(device: tuple[str, int]) -> str:
    return f"{device[0]}:{device[1]}"


def check_spec(region: str, role: str, spec: TensorSpec, shape, dtype, device) -> None:
    """Raise ShapeError / DtypeError when a tensor's shape or dtype differs from its spec."""
    if dtype == spec.np_dtype and tuple(shape) == spec.shape:
        return
    shape = tuple(int(d) for d in shape)
    where = f"region {region}: {role} {spec.name!r}"
    if str(dtype) != spec.dtype:
        raise DtypeError(f"{where} expects dtype {spec.dtype}, got {dtype} (shape {shape}, on {describe(device)})")
    raise ShapeError(f"{where} expects shape {spec.shape}, got {shape} ({dtype}, on {describe(device)})")


def host_view(tensor, spec: TensorSpec, region: str, role: str, device: tuple[str, int]) -> np.ndarray:
    """A writable numpy view of a DLPack tensor in host memory on `device`, checked against `spec`.

    The runtime has already checked that every tensor of the call is on `device`.
    """
    try:
        array = np.from_dlpack(tensor)
    except (BufferError, TypeError, ValueError) as e:
        raise DeviceError(f"region {region}: {role} {spec.name!r} cannot be viewed through DLPack: {e}") from e
    check_spec(region, role, spec, array.shape, array.dtype, device)
    flags = array.flags
    if not flags.c_contiguous:
        raise LayoutError(
            f"region {region}: {role} {spec.name!r} {spec.shape} must be compact row-major, got strides {array.strides}"
        )
    if not flags.aligned:
        raise LayoutError(
            f"region {region}: {role} {spec.name!r} data pointer {array.ctypes.data:#x} (byte_offset included) "
            f"is not aligned to its {array.dtype.itemsize}-byte {spec.dtype} elements"
        )
    if role == "output" and not flags.writeable:
        raise LayoutError(f"region {region}: output {spec.name!r} is read-only")
    return array
