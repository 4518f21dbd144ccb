"""User ops with faults that show only in the processes told to show them: a fuzz campaign's
workers (tests/test_fuzz_cluster.py starts its Dask workers with $SIMACCEL_TEST_FAULTS set).

Each is elementwise over one input, drawn by `simaccel fuzz` (a fuzz hook), with a numpy
reference that is right unless $SIMACCEL_TEST_FAULTS (comma-separated) names its fault:

* ``faults.trunc`` (matches ``relax.trunc``), fault ``wrong``: its reference adds 1, a wrong
  result the campaign must find, shrink and save;
* ``faults.round`` (matches ``relax.round``), fault ``crash``: on inputs of 3 dimensions its
  reference ends the process at once (exit status 3), as a crash in a kernel or in TVM does;
* ``faults.sign`` (matches ``relax.sign``), fault ``hang``: on inputs of 3 dimensions its
  reference sleeps for an hour, past any per-case time limit.
"""
import math
import os
import time

import numpy as np
from numba import cuda
from simaccel.ops import OpFamily, declare, relax_op

FAULTS_ENV = "SIMACCEL_TEST_FAULTS"
CRASH_STATUS = 3


def _faults() -> set[str]:
    return set(filter(None, os.environ.get(FAULTS_ENV, "").split(",")))


def trunc(data):
    return np.trunc(data) + (1 if "wrong" in _faults() else 0)


def rounded(data):
    if "crash" in _faults() and data.ndim == 3:
        os._exit(CRASH_STATUS)
    return np.round(data)


def sign(data):
    if "hang" in _faults() and data.ndim == 3:
        time.sleep(3600)
    return np.sign(data)


def _unary_kernel(fn):
    @cuda.jit
    def kernel(out, x, n):
        i = cuda.grid(1)
        if i < n:
            out[i] = fn(x[i])
    return kernel


def _launcher(kernel):
    def launch(target, out, data):
        n = math.prod(tuple(data.shape))
        if n:
            target.launch(kernel, (n + 127) // 128, 128, target.reshape(out, (n,)), target.reshape(data, (n,)), n)
        return int(n > 0)
    return launch


def _trunc_device(v):
    return math.trunc(v)


def _round_device(v):
    return round(v)


def _sign_device(v):
    return (v > 0) - (v < 0)


def _same(shapes):
    return shapes[0]


def _fuzz(shape, draw):  # any shape: no arguments beyond the input
    return {}, {}


for name, relax_name, reference, device in (("faults.trunc", "relax.trunc", trunc, _trunc_device),
                                            ("faults.round", "relax.round", rounded, _round_device),
                                            ("faults.sign", "relax.sign", sign, _sign_device)):
    declare(OpFamily(name=name, inputs=("data",), pattern=relax_op(relax_name, "data"), infer=_same,
                     reference=reference, kernel=_launcher(_unary_kernel(cuda.jit(device=True)(device))),
                     fuzz=_fuzz, doc=f"{relax_name}; a planted fault for campaigns (${FAULTS_ENV})"))
