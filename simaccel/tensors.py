"""Tensors at the runtime boundary: what a region call receives, checked against its Program.

A region's tensors arrive in one of two forms, and both become a `TensorRef` (address,
shape, dtype, strides, device) before anything reads them:

* `from_dltensor(address)`: a `DLTensor*`, read in place. This is what TVM's compiled region
  functions pass (simaccel.tvm_integration.backend.forwarder): the very buffers TVM allocated.
* `from_dlpack(obj)`: any DLPack producer (numpy, PyTorch, CuPy, a TVM tensor), for callers
  of `Runtime.run`.

`check(...)` compares a TensorRef with the Program's TensorSpec (dtype, shape, compact
row-major layout, alignment, writable outputs); `overlaps(...)` finds outputs whose memory
is also another boundary tensor's. Engines then view the memory in place: `host_array`
for host memory, the cuda engine its own device-array views. Nothing here copies data.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .errors import DeviceError, DtypeError, LayoutError, ShapeError
from .program import TensorSpec

# DLPack device type codes (dlpack.h, DLDeviceType).
DLPACK_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 10: "rocm", 13: "cuda_managed"}
# DLPack dtype codes (DLDataTypeCode) of the element types numpy (with ml_dtypes) knows.
_DLPACK_KINDS = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 6: "bool"}


def dlpack_dtype(code: int, bits: int, lanes: int = 1):
    """The numpy dtype of a DLPack (code, bits, lanes), or None for one numpy lacks."""
    kind = _DLPACK_KINDS.get(code)
    if kind is None or lanes != 1 or (kind == "bool" and bits != 8) or (kind == "bfloat" and bits != 16):
        return None
    try:
        return np.dtype("bool" if kind == "bool" else f"{kind}{bits}")
    except TypeError:
        return None


def dlpack_code(dtype) -> int | None:
    """The DLPack dtype code of numpy `dtype` (bfloat16: 4), or None for one DLPack lacks."""
    dtype = np.dtype(dtype)
    if dtype.name == "bfloat16":
        return 4
    return {"i": 0, "u": 1, "f": 2, "b": 6}.get(dtype.kind)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    """dlpack.h's DLTensor."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class TensorRef:
    """One boundary tensor of a region call: where its elements are and how they are laid out.

    `dtype` is a numpy dtype, or a string for element types numpy lacks (refused by `check`);
    `strides` are in elements (None: compact row-major); `array` is a host view the producer
    already gave (DLPack on the CPU), so `host_array` need not make another.
    """

    __slots__ = ("address", "shape", "dtype", "strides", "device", "readonly", "array")

    def __init__(self, address, shape, dtype, strides, device, readonly=False, array=None):
        self.address = int(address or 0)
        self.shape = shape
        self.dtype = dtype
        self.strides = strides
        self.device = device
        self.readonly = readonly
        self.array = array

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * getattr(self.dtype, "itemsize", 0)


def describe(device: tuple[str, int]) -> str:
    return f"{device[0]}:{device[1]}"


def device_of(tensor) -> tuple[str, int]:
    """(device type name, device id) of a DLPack tensor."""
    try:
        kind, index = tensor.__dlpack_device__()
        return _device_name(kind), int(index)
    except AttributeError:
        raise DeviceError(f"{type(tensor).__name__} is not a DLPack tensor (no __dlpack_device__)") from None
    except (TypeError, ValueError) as e:
        raise DeviceError(f"{type(tensor).__name__}.__dlpack_device__() gave no (device type, id) pair: {e}") from e


def _device_name(kind) -> str:
    return DLPACK_DEVICES.get(int(kind), f"dlpack-device-{int(kind)}")


def from_dltensor(address) -> TensorRef:
    """A TensorRef of the `DLTensor*` at `address` (an int or a ctypes.c_void_p)."""
    address = getattr(address, "value", address)
    if type(address) is not int:
        raise DeviceError(f"a region received {type(address).__name__} where a DLTensor pointer belongs")
    if not address:
        raise DeviceError("a region received a null tensor")
    t = _DLTensor.from_address(address)
    ndim = t.ndim
    shape = tuple(t.shape[:ndim]) if ndim else ()
    strides = tuple(t.strides[:ndim]) if ndim and t.strides else None
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    dtype = dlpack_dtype(code, bits, lanes)
    if dtype is None:
        dtype = f"DLPack dtype (code {code}, bits {bits}, lanes {lanes})"
    device = (_device_name(t.device.device_type), int(t.device.device_id))
    return TensorRef((t.data or 0) + t.byte_offset, shape, dtype, strides, device)


def from_dlpack(tensor, device: tuple[str, int], region: str, role: str, name: str) -> TensorRef:
    """A TensorRef of any DLPack producer's tensor on `device` (never a copy)."""
    where = f"region {region}: {role} {name!r} (on {describe(device)})"
    array = None
    if device[0] == "cpu":
        try:
            array = np.from_dlpack(tensor)
        except (BufferError, TypeError, ValueError, RuntimeError):
            pass  # numpy imports no bfloat16 through DLPack: cuda.core's view below reads it
    if array is not None:
        strides = tuple(s // array.itemsize for s in array.strides) if array.strides else None
        if strides is not None and any(s * array.itemsize != b for s, b in zip(strides, array.strides)):
            raise LayoutError(f"{where}: byte strides {array.strides} are not whole {array.dtype} elements")
        return TensorRef(array.__array_interface__["data"][0], array.shape, array.dtype, strides, device,
                         not array.flags.writeable, array)
    try:
        from cuda.core.utils import StridedMemoryView

        # stream -1: the producer must not synchronise; simaccel runs on the caller's stream.
        view = StridedMemoryView.from_dlpack(tensor, stream_ptr=-1)
    except Exception as e:  # the producer's own error type: say what it said
        raise DeviceError(f"{where} cannot be viewed through DLPack: {type(e).__name__}: {e}") from e
    strides = tuple(view.strides) if view.strides is not None else None
    return TensorRef(view.ptr, tuple(view.shape), np.dtype(view.dtype), strides, device, bool(view.readonly))


def check(region: str, role: str, spec: TensorSpec, ref: TensorRef) -> None:
    """Raise DtypeError / ShapeError / LayoutError where `ref` is not what `spec` declares."""
    where = f"region {region}: {role} {spec.name!r}"
    if ref.dtype != spec.np_dtype:
        raise DtypeError(f"{where} expects dtype {spec.dtype}, got {ref.dtype} (shape {ref.shape}, on {describe(ref.device)})")
    if ref.shape != spec.shape:
        raise ShapeError(f"{where} expects shape {spec.shape}, got {ref.shape} ({spec.dtype}, on {describe(ref.device)})")
    if ref.strides is not None and not is_compact(ref.shape, ref.strides):
        raise LayoutError(f"{where} {spec.shape} must be compact row-major, got element strides {ref.strides}")
    if ref.address % spec.np_dtype.itemsize and spec.nbytes:  # no elements: no address is read
        raise LayoutError(
            f"{where} data pointer {ref.address:#x} (byte_offset included) is not aligned to its "
            f"{spec.np_dtype.itemsize}-byte {spec.dtype} elements"
        )
    if role == "output" and ref.readonly:
        raise LayoutError(f"{where} is read-only")


def is_compact(shape, strides) -> bool:
    """Row-major without gaps (element strides; the stride of an extent-1 axis is irrelevant).

    A tensor with no elements is compact whatever its strides: DLPack producers give empty
    tensors strides such as (0, 0) (numpy) or any others, and none of them is ever followed.
    """
    if 0 in shape:
        return True
    step = 1
    for dim, stride in zip(reversed(shape), reversed(tuple(strides))):
        if dim != 1 and stride != step:
            return False
        step *= dim
    return True


def overlaps(refs: list[TensorRef], n_inputs: int) -> list[tuple[int, int]]:
    """(output position, other position) for every output whose bytes another tensor also holds.

    Positions index `refs` (inputs first, then outputs). Empty tensors overlap nothing.
    """
    spans = [(r.address, r.address + r.nbytes) for r in refs]
    found = []
    for i in range(n_inputs, len(refs)):
        lo, hi = spans[i]
        if lo == hi:
            continue
        for j, (other_lo, other_hi) in enumerate(spans):
            if j != i and other_lo < hi and lo < other_hi:
                found.append((i, j))
    return found


def host_array(ref: TensorRef) -> np.ndarray:
    """A writable numpy view of a host-memory TensorRef (checked, so compact row-major)."""
    if ref.array is not None:
        return ref.array
    nbytes = ref.nbytes
    if nbytes == 0:
        return np.empty(ref.shape, ref.dtype)  # no elements to read or write
    buffer = (ctypes.c_char * nbytes).from_address(ref.address)
    return np.frombuffer(buffer, ref.dtype).reshape(ref.shape)
