"""simaccel.kernels: the accelerator's Numba CUDA kernels (its "ISA" implementation).

Kernels are plain functions at module scope, launched through a `KernelTarget` that wraps
them for the Numba CUDA simulator ("sim") or for a real GPU ("cuda"). This package never
imports TVM.
"""

from .target import KernelTarget, compile_kernel

__all__ = ["KernelTarget", "compile_kernel"]
