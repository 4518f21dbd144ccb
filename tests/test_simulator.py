"""kernels/simulator.py: the simulator's blocks, their threads as greenlets, run to the same
results, barriers and errors as with numba-cuda's own thread-per-CUDA-thread scheduler."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda, int32

from simaccel.kernels import KernelTarget
from simaccel.kernels import simulator as blocks


def _reverse_in_shared(out, x):
    s = cuda.shared.array(64, int32)
    t = cuda.threadIdx.x
    s[t] = x[cuda.blockIdx.x * 64 + t]
    cuda.syncthreads()
    out[cuda.blockIdx.x * 64 + t] = s[63 - t]


def _early_exit(out):
    # Threads 0..15 end before the barriers; the others meet at two of them (a barrier waits
    # for the block's live threads), each reading what its neighbour wrote before the barrier.
    s = cuda.shared.array(64, int32)
    t = cuda.threadIdx.x
    if t < 16:
        out[t] = -1
        return
    s[t] = t
    cuda.syncthreads()
    v = s[16 + (t - 15) % 48]
    cuda.syncthreads()
    s[t] = v * 2
    cuda.syncthreads()
    out[t] = s[t]


def _fails_in_one_thread(out):
    t = cuda.threadIdx.x
    if t == 5:
        out[1000] = 1  # past the end: IndexError on the simulator
    cuda.syncthreads()
    out[t] = t


def _votes(out):
    t = cuda.threadIdx.x
    out[0] = cuda.syncthreads_count(t % 3 == 0)
    out[1] = cuda.syncthreads_and(t < 100)
    out[2] = cuda.syncthreads_or(t == 7)


def test_a_barrier_orders_shared_memory_across_the_block():
    x = np.arange(3 * 64, dtype=np.int32)
    out = np.zeros_like(x)
    KernelTarget("sim").launch(_reverse_in_shared, (3,), (64,), out, x)
    np.testing.assert_array_equal(out, x.reshape(3, 64)[:, ::-1].reshape(-1))
    from numba.cuda.simulator import kernel as simulator

    assert simulator.BlockManager.run is blocks.run_block


def test_threads_that_end_leave_the_barrier():
    out = np.zeros(64, np.int32)
    KernelTarget("sim").launch(_early_exit, (1,), (64,), out)
    t = np.arange(16, 64)
    np.testing.assert_array_equal(out[:16], -1)
    np.testing.assert_array_equal(out[16:], 2 * (16 + (t - 15) % 48))


def test_an_exception_aborts_the_block_and_names_its_thread():
    out = np.zeros(32, np.int32)
    with pytest.raises(IndexError, match=r"tid=\[5, 0, 0\] ctaid=\[0, 0, 0\]: index 1000 is out of bounds"):
        KernelTarget("sim").launch(_fails_in_one_thread, (2,), (32,), out)


def test_block_votes_count_every_thread():
    out = np.zeros(3, np.int32)
    KernelTarget("sim").launch(_votes, (1,), (96,), out)
    assert out.tolist() == [32, 1, 1]


def _lanes_and_atomics(lanes, total):
    t = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    lanes[cuda.blockIdx.x, t] = cuda.laneid
    cuda.atomic.add(total, 0, 1)
    cuda.syncthreads()
    cuda.atomic.add(total, 1, t)


def test_a_3d_block_numbers_its_threads_and_lanes_as_cuda_does():
    """Thread ids run x fastest (laneid = id % 32) in every block; atomics see every thread."""
    lanes, total = np.full((2, 4 * 5 * 3), -1, np.int32), np.zeros(2, np.int64)
    KernelTarget("sim").launch(_lanes_and_atomics, (2,), (4, 5, 3), lanes, total)
    np.testing.assert_array_equal(lanes, np.tile(np.arange(60) % 32, (2, 1)))
    assert total.tolist() == [120, 2 * sum(range(60))]


def test_the_threads_of_python_outside_a_kernel_are_pythons():
    """Outside a simulated block, the simulator's `threading.current_thread()` is Python's own."""
    import threading

    from numba.cuda.simulator import kernelapi

    KernelTarget("sim").launch(_reverse_in_shared, (1,), (64,), np.zeros(64, np.int32), np.arange(64, dtype=np.int32))
    assert kernelapi.threading.current_thread() is threading.current_thread()
    seen = []
    worker = threading.Thread(target=lambda: seen.append(kernelapi.threading.current_thread()))
    worker.start()
    worker.join()
    assert seen == [worker]


def test_without_greenlet_the_sim_engine_says_what_to_install(monkeypatch):
    """An install made without its dependencies (pip --no-deps): the sim engine cannot run and
    says why; the kernels layer's own launcher names greenlet too."""
    import sys

    import simaccel.kernels as kernels_package
    from simaccel import EngineError
    from simaccel.engines import _ENGINES, get_engine
    from simaccel.kernels import target

    def _a_kernel_never_compiled_before(out):
        out[0] = 1

    monkeypatch.setitem(sys.modules, "greenlet", None)  # `import greenlet` raises ImportError
    monkeypatch.delitem(_ENGINES, "sim", raising=False)
    with pytest.raises(EngineError, match=r"engine 'sim' cannot run here: .*greenlet.*pip install 'greenlet>=3.1,<4'"):
        get_engine("sim")
    monkeypatch.delitem(sys.modules, "simaccel.kernels.simulator", raising=False)
    monkeypatch.delattr(kernels_package, "simulator", raising=False)
    with pytest.raises(ImportError, match=r"the simulator's blocks need greenlet: pip install 'greenlet>=3.1,<4'"):
        target.compile_kernel(_a_kernel_never_compiled_before, "sim")
