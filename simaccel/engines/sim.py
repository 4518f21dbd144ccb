"""The "sim" engine: runs the accelerator's Numba CUDA kernels on the Numba CUDA simulator.

The same kernel code as the "cuda" engine, executed on the CPU, every CUDA thread
interpreted (a greenlet each, kernels/simulator.py): slow, so meant for tiny shapes. Arrays are FakeCUDAArray wrappers of numpy views of
the caller's buffers, so kernels write TVM's memory in place.

Numba's simulator runs one launch at a time per process (it keeps the simulated thread
indices in process-wide state), so region calls on this engine take turns: callers on
several threads are serialised, not failed.

`index_error` turns a simulated kernel's IndexError into a SanitizerError of kind "index"
naming the op and the tensor it indexed (the runtime asks it of every failed op, always, not
only when sanitizing).
"""

from __future__ import annotations

import contextlib
import re
import threading
import warnings

import numpy as np

from ..errors import SanitizerError
from ..kernels.target import simulated
from ..launch_plan import WORKSPACE, replay
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
        if call.workspace is not None:
            arrays[WORKSPACE] = FakeCUDAArray(call.workspace)
        silence_float_warnings(launches)
        replay(launches, KernelTarget("sim"), arrays)
        return len(launches)


def index_error(program, index: int, inputs: list, output, launches, error: BaseException):
    """A SanitizerError of kind "index" for an IndexError a simulated kernel of op `index` raised,
    naming the array it indexed where the traceback shows it; None for other errors."""
    if not isinstance(error, IndexError):
        return None
    node = program.ops[index]
    arrays = list(zip(node.inputs, inputs)) + [(node.output, output)]
    codes = {simulated(launch.kernel).__code__: launch for launch in launches if hasattr(simulated(launch.kernel), "__code__")}
    tensor, access, launch = None, None, None
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code in codes:
            launch = codes[frame.f_code]
        if frame.f_code.co_name in ("__setitem__", "__getitem__"):
            array = getattr(frame.f_locals.get("self"), "_ary", None)
            if isinstance(array, np.ndarray):
                found = [t for t, a in arrays if isinstance(a, np.ndarray) and _same_memory(array, a)]
                if found:
                    tensor, access = found[0], "wrote" if frame.f_code.co_name == "__setitem__" else "read"
        tb = tb.tb_next
    kernel = f"kernel {simulated(launch.kernel).__name__} (grid {launch.grid}, block {launch.block})" if launch else "a kernel"
    if tensor is None:
        what, name = "indexed an array out of range (not one of the op's tensors: a local or shared array?)", None
    else:
        spec = program.tensors[tensor]
        role = "output" if tensor == node.output else "input"
        what, name = f"{access} its {role} {spec.name!r} {spec.shape} {spec.dtype} out of range", spec.name
    return SanitizerError(
        f"region {program.name}: op {index} ({node.op}): {kernel} {what}: {error}",
        region=program.name, op=node.op, tensor=name, kind="index")


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    from numpy.lib.array_utils import byte_bounds

    lo, hi = byte_bounds(a)
    other_lo, other_hi = byte_bounds(b)
    return lo < other_hi and other_lo < hi or (lo == other_lo and a.size == 0)
