"""The "cuda" engine: the accelerator's Numba CUDA kernels on a real NVIDIA GPU.

Zero-copy and stream-ordered: every boundary tensor is viewed in place as a Numba device
array (the caller's device pointer, no allocation, no copy, no synchronisation), and every
kernel is launched on the caller's current stream for that device, so TVM kernels before and
after a region are ordered with it without any device-wide or host synchronisation.
Intermediates come from the plan (one per Program, device and stream) and are reused.

Host-staged mode (opt-in, for comparison only) copies each input device->host->accelerator
memory and each output back the same way, as a host-mediated integration would; the ledger
counts those bytes.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections import OrderedDict

import numpy as np

from ..kernels.dtypes import BFLOAT16
from ..kernels.target import reinterpret
from ..launch_plan import WORKSPACE, replay
from ..tensors import describe
from .base import Call, Engine

_VIEW_CACHE_SIZE = 512


class CudaEngine(Engine):
    name = "cuda"
    device_type = "cuda"
    launches_kernels = True
    description = "Numba CUDA kernels on an NVIDIA GPU, zero-copy on the caller's stream"

    def __init__(self):
        self._streams: dict[tuple[int, int], object] = {}
        self._views: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._exit_hook = False

    def drop_caches(self) -> None:
        """Drop cached views and streams (also at exit, before the drivers unload)."""
        with self._lock:
            self._views.clear()
            self._streams.clear()

    def available(self) -> str | None:
        try:
            from numba import cuda

            if cuda.is_available():
                return None
            return "numba-cuda finds no usable CUDA GPU and driver on this machine"
        except Exception as e:  # a broken driver install: say what numba said
            return f"numba-cuda cannot reach a GPU: {type(e).__name__}: {e}"

    # -- per call ------------------------------------------------------------------------
    def _at_exit(self) -> None:
        """Leave device memory and modules to the driver when the process exits.

        numba-cuda's finalizers unload kernel modules during interpreter teardown once more
        than CUDA_DEALLOCS_COUNT are pending; by then the CUDA context may be gone (TVM's
        CUDA runtime tears down too), and the unload crashes the process. The driver frees
        everything of an exiting process anyway, so at exit nothing is flushed.
        """
        from numba.cuda.core import config

        self.drop_caches()
        config.CUDA_DEALLOCS_COUNT = 1 << 62
        config.CUDA_DEALLOCS_RATIO = 1e12

    @contextlib.contextmanager
    def activate(self, call: Call):
        from numba import cuda

        from ..kernels import KernelTarget

        if not self._exit_hook:
            # Registered after numba's own exit hooks, so it runs before them (LIFO).
            atexit.register(self._at_exit)
            self._exit_hook = True
        with cuda.gpus[call.device[1]]:
            call.target = KernelTarget("cuda", self._stream(call.device[1], call.stream))
            yield

    def _stream(self, device_id: int, handle: int | None):
        from numba import cuda

        key = (device_id, int(handle or 0))
        stream = self._streams.get(key)
        if stream is None:
            stream = cuda.external_stream(key[1]) if key[1] else cuda.default_stream()
            self._streams[key] = stream
        return stream

    def bind(self, call: Call, ref, index: int, spec, role: str):
        array = self._view(call, ref, spec, role)
        if not call.staged:
            return array
        return self._stage(call, array, index, spec, role)

    def allocate(self, spec, device_id: int = 0):
        from numba import cuda

        with cuda.gpus[device_id]:
            return cuda.device_array(spec.shape, dtype=spec.np_dtype)

    def constant(self, spec, device_id: int = 0):
        from numba import cuda

        with cuda.gpus[device_id]:
            return to_device(spec.value_array())

    def copy(self, call: Call, destination, source) -> None:
        bits(destination).copy_to_device(bits(source), stream=call.target.stream)

    def to_host(self, call: Call, array):
        host = to_host(array, call.target.stream)
        call.target.stream.synchronize()
        return host

    def from_host(self, call: Call, array, host) -> None:
        bits(array).copy_to_device(bits(host), stream=call.target.stream)

    def capturing(self, device_id: int, stream: int | None) -> str | None:
        """Why `stream` cannot synchronise or allocate now: it is capturing a CUDA graph
        (cuStreamIsCapturing, through numba-cuda's driver binding), else None."""
        from numba import cuda
        from numba.cuda.cudadrv.driver import binding, driver

        with cuda.gpus[device_id]:
            try:
                status = driver.cuStreamIsCapturing(int(stream or 0))
            except Exception as e:  # the legacy stream while another stream captures: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
                return f"cannot be asked whether it is capturing a CUDA graph ({type(e).__name__}: {e})"
        if status == binding.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
            return None
        if status == binding.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_INVALIDATED:
            return "is capturing a CUDA graph (its capture was already invalidated by an error)"
        return "is capturing a CUDA graph"

    def free(self, arrays: list, device_id: int) -> None:
        """Free an evicted plan's device memory now, not at numba's next batch of frees.

        numba-cuda 0.30 queues a device allocation's free on its memory manager's queue
        (`context.memory_manager.deallocations`), not on the context's own (`context.deallocations`,
        for other objects), and flushes a queue only after 10 entries: flushing the context's
        queue alone left evicted plans' buffers allocated.
        """
        from numba import cuda

        arrays.clear()
        with cuda.gpus[device_id]:
            context = cuda.current_context()
            for queue in (getattr(context.memory_manager, "deallocations", None), context.deallocations):
                if queue is not None:  # an external memory manager may keep no queue
                    queue.clear()

    def execute(self, call: Call, node, op, inputs, output, launches=()) -> int:
        arrays = dict(zip(node.inputs, inputs))
        arrays[node.output] = output
        if call.workspace is not None:
            arrays[WORKSPACE] = call.workspace
        replay(launches, call.target, arrays)
        return len(launches)

    def finish(self, call: Call) -> None:
        if not call.writebacks:
            return
        stream = call.target.stream
        for staging, destination in call.writebacks:
            host = bits(staging).copy_to_host(stream=stream)
            stream.synchronize()
            call.ledger.record_copy("device_to_host", host.nbytes)
            bits(destination).copy_to_device(host, stream=stream)
            call.ledger.record_copy("host_to_device", host.nbytes)
        stream.synchronize()
        call.writebacks.clear()

    # -- zero-copy views -----------------------------------------------------------------
    def _view(self, call: Call, ref, spec, role: str):
        """A Numba device array over the caller's memory (a checked TensorRef), cached by address."""
        if call.ledger.tracing:
            call.ledger.record_tensor(call.region, role, spec.name, describe(call.device), ref.address)
        key = (ref.address, spec.shape, spec.dtype, call.device[1])
        with self._lock:
            array = self._views.get(key)
            if array is not None:
                self._views.move_to_end(key)
                return array
        array = device_view(ref.address, spec, owner=None)
        with self._lock:
            self._views[key] = array
            if len(self._views) > _VIEW_CACHE_SIZE:
                self._views.popitem(last=False)
        return array

    # -- host-staged comparison mode -------------------------------------------------------
    def _stage(self, call: Call, array, index: int, spec, role: str):
        """Accelerator-owned copy of a boundary tensor, filled through host memory."""
        staging = call.scratch.get(index)
        if staging is None:
            staging = call.scratch[index] = self.allocate(spec, call.device[1])
        if role == "output":
            call.writebacks.append((staging, array))
            return staging
        stream = call.target.stream
        host = bits(array).copy_to_host(stream=stream)
        stream.synchronize()
        call.ledger.record_copy("device_to_host", host.nbytes)
        bits(staging).copy_to_device(host, stream=stream)
        stream.synchronize()
        call.ledger.record_copy("host_to_device", host.nbytes)
        return staging


def bits(array):
    """`array` (numpy or Numba device array) as numba-cuda copies it: a bfloat16 one viewed as
    uint16 of the same bytes, since numba-cuda moves data through Python's buffer protocol,
    which has no format for ml_dtypes' bfloat16 ("cannot include dtype 'E' in a buffer", seen
    on an H100); every other array as it is."""
    return reinterpret(array, array.shape, np.uint16) if np.dtype(array.dtype) == BFLOAT16 else array


def to_device(array, stream=0):
    """A Numba device copy of numpy `array`, bfloat16 too (its bytes moved as `bits`)."""
    from numba import cuda

    return reinterpret(cuda.to_device(bits(array), stream=stream), array.shape, array.dtype)


def to_host(array, stream=0):
    """The host copy of Numba device `array`, bfloat16 too (its bytes moved as `bits`)."""
    return bits(array).copy_to_host(stream=stream).view(array.dtype)


def device_view(address: int, spec, owner=None):
    """A Numba device array of `spec`'s shape and dtype over the device memory at `address`
    (C-contiguous, no copy, no synchronisation). The dtype goes to numba-cuda as a numpy dtype,
    not its typestr: bfloat16's is '<V2', raw bytes."""
    from numba import cuda

    return cuda.from_cuda_array_interface(
        {"shape": spec.shape, "strides": None, "typestr": spec.np_dtype, "data": (address, False), "version": 3},
        owner=owner, sync=False)
