"""What the kernel tests (tests/test_kernels_*.py) share: an op run on the Numba CUDA simulator
("sim" target) and compared with the op registry's numpy reference.

The tests run every registered op through `op.kernel` on tiny shapes (the simulator runs one
Python thread per CUDA thread), including sizes that are not multiples of the matmul tile and
float16 and bfloat16 inputs, and compare it with `op.reference`. Launches go through a recording target
that also checks each launch passes only views of the caller's arrays (no host copies).
"""

from __future__ import annotations

import numpy as np
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from simaccel.kernels import KernelTarget
from simaccel.ops import get_op
from simaccel.ops.rules import FLOAT_DTYPES


DTYPES = FLOAT_DTYPES  # float32, float16, bfloat16
# A kernel and its reference both compute in float32 and round once: bfloat16's 8 bits of
# precision give 2**-8 relative for one rounding, float16's 11 bits 2**-11.
TOL = {"float32": dict(rtol=1e-4, atol=1e-4), "float16": dict(rtol=2e-2, atol=2e-2),
       "bfloat16": dict(rtol=3e-2, atol=3e-2)}


class RecordingTarget(KernelTarget):
    """The "sim" target, recording every launch's grid, block and arguments."""

    def __init__(self):
        super().__init__("sim")
        self.launches = []
        self.workspaces = []  # what the launcher asked for beyond its arrays (KernelTarget.workspace)

    def launch(self, fn, grid, block, *args, shared_bytes=0):
        self.launches.append((fn, grid, block, args))
        super().launch(fn, grid, block, *args, shared_bytes=shared_bytes)

    def workspace(self, shape, dtype):
        self.workspaces.append(super().workspace(shape, dtype))
        return self.workspaces[-1]


def _random(rng, shape, dtype, scale=1.0):
    return np.asarray(rng.standard_normal(shape) * scale).astype(dtype)


def run_op(name, arrays, attrs=None, *, expected_launches=1):
    """Run op `name` on the simulator; return (kernel output, reference output)."""
    op = get_op(name)
    attrs = op.all_attrs(attrs or {})
    assert op.takes(len(arrays)), (name, op.inputs)
    shape, dtype = op.infer([a.shape for a in arrays], [str(a.dtype) for a in arrays], **attrs)
    originals = [a.copy() for a in arrays]
    # Fill with NaN (an integer output: its lowest value) so any element the kernel fails to write shows up.
    out = np.full(shape, np.iinfo(dtype).min if np.dtype(dtype).kind in "iu" else np.nan, dtype=dtype)
    target = RecordingTarget()
    launches = op.kernel(target, FakeCUDAArray(out), *[FakeCUDAArray(a) for a in arrays], **attrs)
    assert launches == expected_launches == len(target.launches)
    for _, _, _, args in target.launches:
        for arg in args:
            if isinstance(arg, FakeCUDAArray):
                # Only no-copy views of the caller's arrays (or the workspace it asked for) may reach a
                # kernel (an empty view has no memory to share).
                assert not arg._ary.size or any(np.shares_memory(arg._ary, a) for a in (out, *arrays, *(w._ary for w in target.workspaces))), name
            else:
                assert isinstance(arg, (int, float)), (name, type(arg))
    for a, orig in zip(arrays, originals):
        assert a.tobytes() == orig.tobytes(), name  # inputs are left alone (bits: NaN too, in any ml_dtypes)
    ref = op.reference(*arrays, **attrs)
    assert ref.shape == out.shape and ref.dtype == out.dtype
    return out, ref


def check(name, arrays, attrs=None, *, expected_launches=1):
    out, ref = run_op(name, arrays, attrs, expected_launches=expected_launches)
    assert not np.isnan(out).any(), f"{name}: kernel left output elements unwritten"
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), **TOL[str(out.dtype)])
    return out, ref


class PlanOnlyTarget(KernelTarget):
    """Records launches without running them (for checking launch geometry cheaply)."""

    def __init__(self):
        super().__init__("sim")
        self.launches = []

    def launch(self, fn, grid, block, *args, shared_bytes=0):
        self.launches.append((fn, grid, block, args))


def _misaligned(array, elements=1):
    """A copy of `array` whose data starts `elements` elements past a 16-byte boundary."""
    buf = np.empty(array.size + 16, array.dtype)
    skip = (-buf.ctypes.data % 16) // array.itemsize + elements
    out = buf[skip:skip + array.size].reshape(array.shape)
    out[...] = array
    return out
