"""A block scheduler for numba-cuda's CUDA simulator on greenlets, and two costs of every
simulated thread taken out (`shared_array`, `_type_call`).

Used by kernels/target.py: the first kernel compiled for the "sim" target installs it
(`install`), so every simulated launch of the process runs its blocks through `run_block`.

The simulator runs each CUDA thread of a block as a Python thread (numba-cuda 0.30): a
barrier is a wait on an event per thread while the launching thread polls them all, and
every `syncthreads` costs each of a block's threads an operating-system context switch and
a turn at the GIL, most of a simulated layer norm's time. Here each CUDA thread of a block
is a greenlet on the launching thread (`SimThread`): `run_block` resumes the block's threads
one after the other; each runs until it reaches a barrier (where it switches back) or ends,
and once every live thread has had its turn, they all stand at the barrier and the next
round releases them. Semantics kept from the simulator's: a barrier waits for the block's
live threads only (a thread that ended leaves it); the first exception of any thread stops
the block and reaches the launcher with the thread's tid and ctaid in its message;
`cuda.threadIdx`, `blockIdx`, `laneid`, syncthreads_count / _and / _or and the rest of the
thread API are the simulator's own, which ask `threading.current_thread()` for the thread:
kernelapi's `threading` answers with the running `SimThread`. A kernel whose threads wait on
each other outside barriers (spinning on a flag another thread of the block sets) would
never be resumed: CUDA does not promise such a kernel progresses either.
tests/test_simulator.py holds the cases.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
from greenlet import getcurrent, greenlet

_INSTALLED = False
_LOCK = threading.Lock()


class SimThread(greenlet):
    """One CUDA thread of a simulated block: what numba-cuda's thread API reads of it."""

    def __init__(self, manager, block_index, thread_index, args):
        from numba.cuda.simulator.kernelapi import Dim3

        super().__init__(parent=getcurrent())
        self._manager = manager
        self._args = args
        self.blockIdx = Dim3(*block_index)
        self.threadIdx = Dim3(*thread_index)
        x, y, _ = manager._block_dim
        self.thread_id = self.threadIdx.x + x * (self.threadIdx.y + y * self.threadIdx.z)
        self.exception = None  # (exception naming tid and ctaid, traceback) of a failure

    def run(self):
        if self._manager._debug:  # as the simulator's debug mode: a division by zero raises
            np.seterr(divide="raise")
        try:
            self._manager._f(*self._args)
        except Exception as e:
            where = f"tid={list(self.threadIdx)} ctaid={list(self.blockIdx)}"
            self.exception = (type(e)(f"{where}: {e}" if str(e) else where), sys.exc_info()[2])

    def syncthreads(self):
        self.parent.switch()  # run_block resumes this thread once every live one reached a barrier


def host_array(array) -> np.ndarray:
    """The numpy array a simulated device array (or a numpy array) holds: numpy reads a
    simulated bfloat16 array through its buffer as raw bytes (dtype V2), so the simulator's
    numpy models take the array it wraps."""
    return np.asarray(getattr(array, "_ary", array))


def _simulator_thread_api():
    """syncthreads_count / _and / _or: the simulator's own, on `SimThread.syncthreads`."""
    from numba.cuda.simulator.kernel import BlockThread

    for name in ("syncthreads_count", "syncthreads_and", "syncthreads_or"):
        setattr(SimThread, name, getattr(BlockThread, name))


def run_block(manager, grid_point, *args):
    """BlockManager.run: block `grid_point` of `manager`'s launch, every thread to its end."""
    live = [SimThread(manager, grid_point, p, args) for p in np.ndindex(*manager._block_dim)]
    while live:
        for thread in live:
            thread.switch()  # until its next barrier or its end
            if thread.exception is not None:
                exception, traceback = thread.exception
                raise exception.with_traceback(traceback)
        live = [thread for thread in live if not thread.dead]


class _Threading:
    """numba-cuda's kernelapi's `threading`: `current_thread()` is the simulated thread
    running on this thread, if any; everything else is Python's threading."""

    def __getattr__(self, name):
        return getattr(threading, name)

    @staticmethod
    def current_thread():
        running = getcurrent()
        return running if isinstance(running, SimThread) else threading.current_thread()


def shared_array(self, shape, dtype, alignment=None):
    """FakeCUDAShared.array: the simulator's own, but for how it finds the array a call site
    shares across the block. It names the site by the caller's file and line, which numba-cuda
    0.30 reads from `traceback.extract_stack()`: the whole stack, with a `linecache` check
    (a stat of each frame's file) per frame, on every call of every simulated thread, which
    was half of a simulated convolution's time. The caller's frame gives the same two values."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")
    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    if shape == 0:  # dynamic shared memory: one buffer, the most whole elements it holds
        count = self._dynshared_size // dtype.itemsize
        return np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
    frame = sys._getframe(1)
    caller = (frame.f_code.co_filename, frame.f_lineno)
    res = self._allocations.get(caller)
    if res is None:
        res = np.empty(shape, dtype)
        self._allocations[caller] = res
    return res


def _scalar_types() -> frozenset:
    """Python's and numpy's scalar classes: values a numba type casts, never types themselves."""
    return frozenset({bool, int, float, *(np.dtype(c).type for c in "?bhilqBHILQefd")})


def _type_call():
    """numba's `Type.__call__` (`float32(x)` casts x; `float32(int32, int32)` is a signature),
    without the cost a simulated kernel pays on every cast of a scalar: numba 0.68 imports
    `signature` inside the call and asks an ABC whether the value is a Type. Scalars of
    Python's and numpy's own classes are cast at once, everything else as numba does."""
    from numba.core.types.abstract import Type
    from numba.core.typing import signature

    scalars = _scalar_types()

    def __call__(self, *args):
        if len(args) == 1 and (type(args[0]) in scalars or not isinstance(args[0], Type)):
            return self.cast_python_value(args[0])
        return signature(self, *args)

    return __call__


def install() -> None:
    """Make the simulator run blocks with `run_block` (its threads as `SimThread`s), find shared
    arrays with `shared_array` and cast scalars with `_type_call` (once per process)."""
    global _INSTALLED
    if _INSTALLED:
        return
    with _LOCK:
        if _INSTALLED:
            return
        from numba.cuda.simulator import kernel as simulator
        from numba.cuda.simulator import kernelapi

        from numba.core.types.abstract import Type

        _simulator_thread_api()
        simulator.BlockManager.run = run_block
        kernelapi.threading = _Threading()
        kernelapi.FakeCUDAShared.array = shared_array
        Type.__call__ = _type_call()
        _INSTALLED = True
