"""The "sim" engine: runs the accelerator's Numba CUDA kernels on the Numba CUDA simulator.

The same kernel code as the "cuda" engine, executed on the CPU one Python thread per CUDA
thread: slow, so meant for tiny shapes. Arrays are FakeCUDAArray wrappers of numpy views of
the caller's buffers, so kernels write TVM's memory in place.
"""

from __future__ import annotations

from .base import Engine


class SimEngine(Engine):
    name = "sim"
    description = "Numba CUDA kernels on the Numba CUDA simulator (CPU; tiny shapes)"

    def execute(self, call, node, op, inputs, output) -> int:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        from ..kernels import KernelTarget

        return op.kernel(
            KernelTarget("sim"), FakeCUDAArray(output), *[FakeCUDAArray(a) for a in inputs], **op.all_attrs(node.attrs)
        )
