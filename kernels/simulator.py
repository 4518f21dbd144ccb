"""A block scheduler for numba-cuda's CUDA simulator that waits instead of polling, and two
costs of every simulated thread taken out (`shared_array`, `_type_call`).

Used by kernels/target.py: the first kernel compiled for the "sim" target installs it
(`install`), so every simulated launch of the process runs its blocks through `run_block`.

The simulator runs each CUDA thread of a block as a Python thread. Its own BlockManager.run
(numba-cuda 0.30) starts them and then spins in the launching thread, polling every thread's
"blocked in syncthreads" flag and `is_alive()` until all are done; the spinning thread
competes for the GIL with the threads doing the work. Here a block is a condition variable
instead: `syncthreads` counts the threads that reached it and the last one releases them all;
a thread that ends leaves the count (as on the simulator before, a barrier waits for the
block's live threads only); the launching thread only joins. Semantics kept from the
simulator's: the first exception of any thread aborts the block (threads waiting at or
reaching a barrier raise "abort flag set ...") and is re-raised to the launcher with the
thread's tid and ctaid in its message; syncthreads_count / _and / _or and everything else
of the thread API are the simulator's own (they call `syncthreads`). tests/test_simulator.py
holds the cases.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

_INSTALLED = False
_LOCK = threading.Lock()


class _Block:
    """The barrier and the abort state of one simulated block."""

    def __init__(self, threads: int):
        self.cond = threading.Condition()
        self.live = threads
        self.waiting = 0
        self.generation = 0
        self.error = None  # (exception, traceback) of the first thread that raised

    def _release(self):
        self.waiting = 0
        self.generation += 1
        self.cond.notify_all()

    def syncthreads(self):
        with self.cond:
            if self.error is not None:
                raise RuntimeError("abort flag set on syncthreads call")
            generation = self.generation
            self.waiting += 1
            if self.waiting == self.live:
                self._release()
            else:
                while generation == self.generation and self.error is None:
                    self.cond.wait()
            if self.error is not None:
                raise RuntimeError("abort flag set on syncthreads clear")

    def leave(self, exception):
        with self.cond:
            self.live -= 1
            if exception is not None and self.error is None:
                self.error = exception
                self.cond.notify_all()  # the others stop at their barrier
            elif self.waiting and self.waiting == self.live:
                self._release()


def _thread_class():
    from numba.cuda.simulator import kernel as simulator

    class BlockThread(simulator.BlockThread):
        """The simulator's thread (thread indices, exception capture), on a `_Block`."""

        def __init__(self, f, manager, block_index, thread_index, debug, block: _Block):
            super().__init__(f, manager, block_index, thread_index, debug)
            self.block = block

        def run(self):
            try:
                super().run()  # sets self.exception (message with tid and ctaid) on a failure
            finally:
                self.block.leave(self.exception)

        def syncthreads(self):
            self.block.syncthreads()

    return BlockThread


_THREAD = None


def run_block(manager, grid_point, *args):
    """BlockManager.run: block `grid_point` of `manager`'s launch, every thread to its end."""
    points = list(np.ndindex(*manager._block_dim))
    block = _Block(len(points))

    def target():
        manager._f(*args)

    threads = [_THREAD(target, manager, grid_point, p, manager._debug, block) for p in points]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if block.error is not None:
        exception, traceback = block.error
        raise exception.with_traceback(traceback)


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
    """Make the simulator run blocks with `run_block`, find shared arrays with `shared_array`
    and cast scalars with `_type_call` (once per process)."""
    global _INSTALLED, _THREAD
    if _INSTALLED:
        return
    with _LOCK:
        if _INSTALLED:
            return
        from numba.cuda.simulator import kernel as simulator
        from numba.cuda.simulator import kernelapi

        _THREAD = _thread_class()
        from numba.core.types.abstract import Type

        simulator.BlockManager.run = run_block
        kernelapi.FakeCUDAShared.array = shared_array
        Type.__call__ = _type_call()
        _INSTALLED = True
