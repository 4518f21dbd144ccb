"""RMSNorm as a user-defined instruction: import this module (or name it in $SIMACCEL_OPS)."""
import math

import numpy as np
from numba import cuda, float32
from simaccel.ops import OpFamily, Reject, ShapeError, attrs, declare, relax_op


def rms_norm(data, weight, *, epsilon):  # the numpy reference (float32; cast to the output dtype)
    x = data.astype(np.float32)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + np.float32(epsilon)) * weight.astype(np.float32)


def rms_norm_kernel(out, x, w, rows, cols, epsilon):  # one thread per row
    r = cuda.grid(1)
    if r < rows:
        total = float32(0.0)
        for i in range(cols):
            total += float32(x[r, i]) * float32(x[r, i])
        scale = float32(1.0) / math.sqrt(total / float32(cols) + float32(epsilon))
        for i in range(cols):
            out[r, i] = float32(x[r, i]) * scale * float32(w[i])


def launch(target, out, data, weight, *, epsilon):  # shapes and attributes arrive validated
    *lead, cols = data.shape  # (a simulated array's shape takes no negative index)
    rows, view = math.prod(lead), (math.prod(lead), cols)
    if rows * cols:
        target.launch(rms_norm_kernel, (rows + 127) // 128, 128, target.reshape(out, view),
                      target.reshape(data, view), weight, rows, cols, epsilon)
    return int(rows * cols > 0)  # kernels launched


def infer(shapes, *, epsilon):  # the output shape; ShapeError for inputs the op does not take
    if not shapes[0] or tuple(shapes[1]) != shapes[0][-1:]:
        raise ShapeError(f"myaccel.rms_norm: weight {shapes[1]} must be {shapes[0][-1:]} for data {shapes[0]}")
    return shapes[0]


def from_relax(match):  # Relax's attributes -> the op's, or the reason the match stays on TVM
    if [a % len(match.shapes["data"]) for a in match.attrs["axes"]] != [len(match.shapes["data"]) - 1]:
        raise Reject(f"rms_norm over axes {match.attrs['axes']} (only the last axis)")
    return {"epsilon": match.attrs["epsilon"]}


declare(OpFamily(
    name="myaccel.rms_norm", inputs=("data", "weight"), pattern=relax_op("relax.nn.rms_norm", "data", "weight"),
    attrs={"epsilon": attrs.positive_float}, from_relax=from_relax, infer=infer, reference=rms_norm, kernel=launch,
    fuzz=lambda shape, draw: ({"weight": shape[-1:]}, {"axes": [-1], "epsilon": 1e-5}) if len(shape) > 1 else None))
