"""A block scheduler for numba-cuda's CUDA simulator that waits instead of polling.

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


def install() -> None:
    """Make the simulator run blocks with `run_block` (once per process)."""
    global _INSTALLED, _THREAD
    if _INSTALLED:
        return
    with _LOCK:
        if _INSTALLED:
            return
        from numba.cuda.simulator import kernel as simulator

        _THREAD = _thread_class()
        simulator.BlockManager.run = run_block
        _INSTALLED = True
