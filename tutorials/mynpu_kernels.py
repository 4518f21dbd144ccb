"""mynpu's kernels: module-level Numba CUDA kernel functions and their launchers.

``mynpu_ops.py`` names the launchers (``kernel="mynpu_kernels:launch_leaky_relu"``); simaccel
imports this module on the first launch. A launcher gets a kernel target, the output and the
inputs as device arrays viewing TVM's buffers in place, and the attributes; it launches through
``target.launch`` and returns how many kernels it launched. Everything arrives validated (the
shape rule and the dtypes were checked), and the kernels compute in float32 and store into the
output's dtype. The same functions run on the Numba CUDA simulator (``sim``), on a GPU through
numba-cuda (``cuda``) and, compiled ahead of time, in a CUDA build's native regions.
Tutorial 2 (``02_kernels_and_constraints.py``) walks through this file.
"""

import math

from numba import cuda, float32

THREADS = 128  # threads per block


def leaky_relu_kernel(out, x, n, alpha):  # one thread per element of flat views
    i = cuda.grid(1)
    if i < n:
        v = float32(x[i])
        out[i] = v if v > float32(0.0) else v * float32(alpha)


def launch_leaky_relu(target, out, data, *, alpha):
    n = math.prod(tuple(data.shape))
    if n:
        target.launch(leaky_relu_kernel, (n + THREADS - 1) // THREADS, THREADS,
                      target.reshape(out, (n,)), target.reshape(data, (n,)), n, alpha)
    return int(n > 0)  # kernels launched (none for an empty tensor)


def log_softmax_kernel(out, x, rows, cols):  # one thread per row of (rows, cols) views
    r = cuda.grid(1)
    if r < rows:
        top = float32(x[r, 0])
        for i in range(1, cols):
            top = max(top, float32(x[r, i]))
        total = float32(0.0)
        for i in range(cols):
            total += math.exp(float32(x[r, i]) - top)
        log_total = math.log(total)
        for i in range(cols):
            out[r, i] = (float32(x[r, i]) - top) - log_total


def launch_log_softmax(target, out, data):
    *lead, cols = tuple(data.shape)  # (a simulated array's shape takes no negative index)
    rows = math.prod(lead)
    if rows * cols:
        view = (rows, cols)
        target.launch(log_softmax_kernel, (rows + THREADS - 1) // THREADS, THREADS,
                      target.reshape(out, view), target.reshape(data, view), rows, cols)
    return int(rows * cols > 0)
