"""The "sim" engine: runs the accelerator's Numba CUDA kernels on the Numba CUDA simulator.

The same kernel code as the "cuda" engine, executed on the CPU, every CUDA thread
interpreted (a greenlet each, kernels/simulator.py): slow, so meant for tiny shapes. Arrays are FakeCUDAArray wrappers of numpy views of
the caller's buffers, so kernels write TVM's memory in place.

Numba's simulator runs one launch at a time per process (it keeps the simulated thread
indices in process-wide state), so region calls on this engine take turns: callers on
several threads are serialised, not failed.
"""

from __future__ import annotations

import contextlib
import re
import threading
import warnings

from ..launch_plan import replay
from .base import Engine

_ONE_AT_A_TIME = threading.Lock()



def silence_float_warnings(launches) -> None:
    """Ignore numpy's RuntimeWarnings from the modules of the kernels `launches` run, from
    simaccel's kernels (their device helpers, fused epilogues' generated code), from the
    modules of a fused kernel's elementwise steps (users' too), and from the simulator's arrays
    and numba's scalar types (a store into a float16 array, or float16(x), casts there).

    The simulator does a kernel's float math on numpy scalars, in threads of its own, so NaN
    and inf results (and float16 overflow) raise RuntimeWarnings there; on a GPU they are plain
    results. This holds for every op's kernel, users' too. The filters go in front of the others at every call
    (`warnings.filterwarnings` keeps one copy of each), so a caller's ``error`` filter set
    meanwhile (pytest's ``-W error``) does not turn a NaN into a failed launch.
    """
    from ..kernels.target import simulated

    ran = set()
    for launch in launches:
        ran.add(simulated(launch.kernel).__module__)
        ran.update(getattr(launch.kernel, "step_modules", ()))  # a fused kernel's elementwise steps
    # numba.core.types: a cast such as float16(x) in simulated code is numpy's cast, run there.
    modules = {r"simaccel\.kernels\.", r"numba\.cuda\.simulator\.", r"numba\.core\.types\."} | {re.escape(m) + r"\Z" for m in ran}
    for module in sorted(modules):
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=module)


class SimEngine(Engine):
    name = "sim"
    description = "Numba CUDA kernels on the Numba CUDA simulator (CPU; tiny shapes)"

    @contextlib.contextmanager
    def activate(self, call):
        with super().activate(call), _ONE_AT_A_TIME:
            yield

    launches_kernels = True

    def available(self) -> str | None:
        import importlib.util

        from ..kernels.target import GREENLET

        if importlib.util.find_spec("greenlet") is None:
            return f"it runs a block's CUDA threads on greenlet, which simaccel installs with it: pip install '{GREENLET}'"
        return None

    def execute(self, call, node, op, inputs, output, launches=()) -> int:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        from ..kernels import KernelTarget

        arrays = {i: FakeCUDAArray(a) for i, a in zip(node.inputs, inputs)}
        arrays[node.output] = FakeCUDAArray(output)
        silence_float_warnings(launches)
        replay(launches, KernelTarget("sim"), arrays)
        return len(launches)
