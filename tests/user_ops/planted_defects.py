"""Planted defects for the sanitizer (docs/debugging.md, "Sanitizer"): user ops whose kernels are wrong.

Each op is elementwise over one input, declared the way a user declares an op (outside the
package, docs/adding-an-op.md), with a CORRECT numpy reference, so that the ref engine gives
the right answer and only the kernel is at fault:

* ``planted.skip_last``    (-x, matches ``relax.negative``): its kernel never writes the last element.
* ``planted.past_end``     (|x|, matches ``relax.abs``): its kernel writes one element past its output.
* ``planted.into_input``   (x * x, matches ``relax.square``): its kernel also writes into its input.
* ``planted.other_stream`` (floor(x), matches ``relax.floor``): its launcher launches on a target of
  its own (``KernelTarget("cuda")``: the default stream), not on the one it is given (the call's
  stream, TVM's current one).

And one defect in a reference, which only the ref engine runs (it never runs kernels):

* ``planted.ref_into_input`` (ceil(x), matches ``relax.ceil``): its numpy reference writes its
  result into its input array in place; its kernel is right.

Used by tests/test_sanitize.py (through
$SIMACCEL_OPS) and by the native-region and GPU checks of the sanitizer.
"""
import math

import numpy as np
from numba import cuda
from simaccel.kernels import KernelTarget
from simaccel.ops import OpFamily, declare, relax_op

BLOCK = 128


def _flat(target, out, data):
    n = math.prod(tuple(data.shape))
    return n, target.reshape(out, (n,)), target.reshape(data, (n,))


# -- skips its last element ----------------------------------------------------------------
def skip_last_kernel(out, x, n):
    i = cuda.grid(1)
    if i < n - 1:  # the defect: `i < n`
        out[i] = -x[i]


def launch_skip_last(target, out, data):
    n, out, data = _flat(target, out, data)
    if n:
        target.launch(skip_last_kernel, (n + BLOCK - 1) // BLOCK, BLOCK, out, data, n)
    return int(n > 0)


# -- writes one element past its output ------------------------------------------------------
def past_end_kernel(out, x, n):
    i = cuda.grid(1)
    if i <= n:  # the defect: `i < n`; thread n writes out[n]
        out[i] = abs(x[min(i, n - 1)])


def launch_past_end(target, out, data):
    n, out, data = _flat(target, out, data)
    if n:
        target.launch(past_end_kernel, (n + BLOCK) // BLOCK, BLOCK, out, data, n)  # n + 1 threads or more
    return int(n > 0)


# -- writes into its input ---------------------------------------------------------------------
def into_input_kernel(out, x, n):
    i = cuda.grid(1)
    if i < n:
        v = x[i]
        out[i] = v * v
        x[i] = v * v  # the defect: the input is read-only to an op


def launch_into_input(target, out, data):
    n, out, data = _flat(target, out, data)
    if n:
        target.launch(into_input_kernel, (n + BLOCK - 1) // BLOCK, BLOCK, out, data, n)
    return int(n > 0)


# -- launches on a stream of its own -----------------------------------------------------------
def floor_kernel(out, x, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = math.floor(x[i])


def launch_other_stream(target, out, data):
    n, out, data = _flat(target, out, data)
    if n:
        # The defect: a target of its own, on the default stream, instead of `target`.
        KernelTarget("cuda").launch(floor_kernel, (n + BLOCK - 1) // BLOCK, BLOCK, out, data, n)
    return int(n > 0)


# -- a reference that writes into its input (what the ref engine can catch) ----------------------
def ceil_in_place(data):
    np.ceil(data, out=data)  # the defect: the result belongs in a new array
    return data


def ceil_kernel(out, x, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = math.ceil(x[i])


def launch_ceil(target, out, data):
    n, out, data = _flat(target, out, data)
    if n:
        target.launch(ceil_kernel, (n + BLOCK - 1) // BLOCK, BLOCK, out, data, n)
    return int(n > 0)


def _same(shapes):
    return shapes[0]


declare(OpFamily(name="planted.skip_last", inputs=("data",), pattern=relax_op("relax.negative", "data"),
                 infer=_same, reference=np.negative, kernel=launch_skip_last,
                 doc="-x; planted defect: its kernel skips the last element"))
declare(OpFamily(name="planted.past_end", inputs=("data",), pattern=relax_op("relax.abs", "data"),
                 infer=_same, reference=np.abs, kernel=launch_past_end,
                 doc="|x|; planted defect: its kernel writes one element past its output"))
declare(OpFamily(name="planted.into_input", inputs=("data",), pattern=relax_op("relax.square", "data"),
                 infer=_same, reference=np.square, kernel=launch_into_input,
                 doc="x * x; planted defect: its kernel writes into its input"))
declare(OpFamily(name="planted.other_stream", inputs=("data",), pattern=relax_op("relax.floor", "data"),
                 infer=_same, reference=np.floor, kernel=launch_other_stream,
                 doc="floor(x); planted defect: its launcher launches on a stream of its own"))
declare(OpFamily(name="planted.ref_into_input", inputs=("data",), pattern=relax_op("relax.ceil", "data"),
                 infer=_same, reference=ceil_in_place, kernel=launch_ceil,
                 doc="ceil(x); planted defect: its numpy reference writes into its input"))
