"""Test support for native regions without a GPU: the stand-in driver and CUDA-looking tensors.

`fake_driver(tmp)` compiles tests/fake_cuda_driver.c; a region library opens it when
$SIMACCEL_CUDA_DRIVER names it. `cuda_tensor(array)` is a TVM-FFI tensor that says it lives
on a CUDA device but whose data pointer is the numpy array's (the stand-in never reads it,
except to copy an aliased output for real). `region_library(regions)` compiles native
regions the way the codegen does and links them into a loadable shared library;
`stand_in_library(regions)` gives that library with the stand-in driver named while it is used.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pathlib
import subprocess

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent


def fake_driver(directory: pathlib.Path) -> pathlib.Path:
    path = directory / "libfakecuda.so"
    if not path.exists():
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(path), str(HERE / "fake_cuda_driver.c")], check=True)
    return path


class LaunchRecord(ctypes.Structure):
    _fields_ = [("entry", ctypes.c_char * 1024), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared", ctypes.c_uint), ("stream", ctypes.c_void_p), ("num_words", ctypes.c_int),
                ("words", ctypes.c_int64 * 256)]


class FakeDriver:
    """The stand-in driver as loaded in this process (the region libraries share it)."""

    def __init__(self, path: pathlib.Path):
        self.lib = ctypes.CDLL(str(path))
        self.lib.fake_launch.restype = ctypes.POINTER(LaunchRecord)

    def reset(self) -> None:
        self.lib.fake_reset()
        self.lib.fake_set_capturing(0)
        self.lib.fake_set_reject_ptx(0)

    def launches(self) -> list[dict]:
        out = []
        for i in range(self.lib.fake_num_launches()):
            r = self.lib.fake_launch(i).contents
            out.append({"entry": r.entry.decode(), "grid": tuple(r.grid), "block": tuple(r.block), "shared": r.shared,
                        "stream": r.stream or 0, "words": list(r.words[: r.num_words])})
        return out

    def counter(self, name: str) -> int:
        return self.lib.fake_counter(name.encode())

    def capturing(self, on: bool) -> None:
        self.lib.fake_set_capturing(int(on))

    def reject_ptx(self, on: bool) -> None:
        self.lib.fake_set_reject_ptx(int(on))

    def set_compute(self, device: int, arch: tuple[int, int]) -> None:
        """Device `device` says it has compute capability `arch` (default (10, 0))."""
        self.lib.fake_set_compute(device, arch[0] * 10 + arch[1])

    def set_shared_limit(self, bytes_: int) -> None:
        """Every device offers a block at most `bytes_` of shared memory (default 227 KiB)."""
        self.lib.fake_set_shared_limit(bytes_)

    # The sanitizer's and the trace's hooks (all off after reset()).
    DEBUG_COUNTERS = ("memsets", "host_copies", "stream_syncs", "stream_contexts", "events_created", "event_records",
                      "event_syncs", "elapsed_queries")

    def debug_counters(self) -> dict[str, int]:
        """Calls of the entry points only the sanitizer and the trace use."""
        return {name: self.counter(name) for name in self.DEBUG_COUNTERS}

    def launch_fill(self, value: int | None) -> None:
        """Each launch "writes" its first array argument (its output) with byte `value`; None: launches write nothing."""
        self.lib.fake_set_launch_fill(int(value is not None), value or 0)

    def launch_defect(self, launch: int, data_word: int, extra: int, value: int | None = None) -> None:
        """Launch number `launch` (counted from reset) writes the array whose data pointer is parameter
        word `data_word` with its size + `extra` bytes of `value` (default: the fill value's
        complement; word 4, the output: instead of its plain fill)."""
        self.lib.fake_set_launch_defect(launch, data_word, ctypes.c_longlong(extra), -1 if value is None else value)

    def fault_after(self, launches: int) -> None:
        """cuStreamSynchronize fails with CUDA_ERROR_ILLEGAL_ADDRESS once `launches` launches were made."""
        self.lib.fake_set_fault_after(launches)

    def foreign_stream(self, stream: int | None) -> None:
        """cuStreamGetCtx says `stream` belongs to another context."""
        self.lib.fake_set_foreign_stream(int(stream is not None), ctypes.c_void_p(stream or 0))


# -- CUDA-looking tensors through DLPack ------------------------------------------------------
# DLPack's structs are declared here, not taken from simaccel.tensors: this module is also
# imported by a process in which simaccel cannot be imported (a deployment without it).
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]
_ALIVE: dict[int, tuple] = {}


@_DELETER
def _delete(managed):
    _ALIVE.pop(ctypes.addressof(managed.contents), None)


class _CudaLike:
    def __init__(self, array, device_id, strides, byte_offset, shape, device_type):
        self.array, self.device_id, self.strides, self.byte_offset = array, device_id, strides, byte_offset
        self.shape, self.device_type = shape, device_type

    def __dlpack_device__(self):
        return (self.device_type, self.device_id)

    def __dlpack__(self, **_):
        a = self.array
        shape = self.shape or a.shape
        m = _DLManagedTensor()
        dims = (ctypes.c_int64 * len(shape))(*shape)
        strides = (ctypes.c_int64 * len(shape))(*self.strides) if self.strides else None
        m.dl_tensor.data = a.ctypes.data
        m.dl_tensor.device = _DLDevice(self.device_type, self.device_id)
        m.dl_tensor.ndim = len(shape)
        # DLPack's codes (simaccel.tensors.dlpack_code; simaccel may be absent from this process)
        code = 4 if a.dtype.name == "bfloat16" else {"f": 2, "i": 0, "u": 1, "b": 6}[a.dtype.kind]
        m.dl_tensor.dtype = _DLDataType(code, a.dtype.itemsize * 8, 1)
        m.dl_tensor.shape = dims
        m.dl_tensor.strides = strides
        m.dl_tensor.byte_offset = self.byte_offset
        m.deleter = _delete
        _ALIVE[ctypes.addressof(m)] = (m, dims, strides, a)
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(m), b"dltensor", None)


def cuda_tensor(array: np.ndarray, device_id: int = 0, strides=None, byte_offset: int = 0, shape=None, device_type=2):
    """A TVM-FFI tensor on cuda:`device_id` (DLPack device type 2) over `array`'s memory."""
    import tvm_ffi

    return tvm_ffi.from_dlpack(_CudaLike(array, device_id, strides, byte_offset, shape, device_type))


# -- region libraries ---------------------------------------------------------------------------
def region_library(regions, directory: pathlib.Path, archs=((9, 0),)):
    """(TVM-FFI module, path) of a shared library holding `regions` (simaccel.native.source.NativeRegion)."""
    import tvm_ffi

    from simaccel.native.build import compile_object
    from simaccel.native.source import library_source

    obj = directory / "regions.o"
    obj.write_bytes(compile_object(library_source(list(regions), archs)))
    so = directory / "regions.so"
    subprocess.run(["g++", "-shared", "-o", str(so), str(obj)], check=True)
    return tvm_ffi.load_module(str(so)), so


@contextlib.contextmanager
def stand_in_library(regions, directory: pathlib.Path):
    """(library, FakeDriver): `regions` in one library (`region_library`), with
    $SIMACCEL_CUDA_DRIVER naming the stand-in driver for as long as the block runs."""
    path = fake_driver(directory)
    os.environ["SIMACCEL_CUDA_DRIVER"] = str(path)
    try:
        library, _ = region_library(list(regions), directory)
        yield library, FakeDriver(path)
    finally:
        os.environ.pop("SIMACCEL_CUDA_DRIVER", None)
