"""Small Relax models built with the BlockBuilder: the demo model and test models.

Every model takes its weights as function parameters (so they stay arguments of the
offloaded regions) and comes with `random_inputs` to feed it.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax


def _param(name: str, shape, dtype: str) -> relax.Var:
    return relax.Var(name, relax.TensorType(shape, dtype))


def demo_cnn(dtype: str = "float32", batch: int = 2) -> tvm.IRModule:
    """A CNN with an MLP head, with TVM-only ops between offloaded regions.

    conv+bias+relu -> max_pool -> conv+bias+relu -> avg_pool   (simaccel region 1)
    reshape (flatten) -> tanh                                  (TVM: no simaccel pattern)
    dense+bias+relu -> layer_norm -> dense+bias -> softmax     (simaccel region 2)
    """
    bb = relax.BlockBuilder()
    x = _param("image", (batch, 3, 16, 16), dtype)
    w1, b1 = _param("conv1_w", (8, 3, 3, 3), dtype), _param("conv1_b", (1, 8, 1, 1), dtype)
    w2, b2 = _param("conv2_w", (16, 8, 3, 3), dtype), _param("conv2_b", (1, 16, 1, 1), dtype)
    fc1_w, fc1_b = _param("fc1_w", (32, 256), dtype), _param("fc1_b", (32,), dtype)
    ln_g, ln_b = _param("ln_gamma", (32,), dtype), _param("ln_beta", (32,), dtype)
    fc2_w, fc2_b = _param("fc2_w", (10, 32), dtype), _param("fc2_b", (10,), dtype)
    params = [x, w1, b1, w2, b2, fc1_w, fc1_b, ln_g, ln_b, fc2_w, fc2_b]
    with bb.function("main", params):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.conv2d(x, w1, padding=(1, 1, 1, 1)))
            h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(h, b1))))
            h = bb.emit(relax.op.nn.max_pool2d(h, pool_size=(2, 2), strides=(2, 2)))
            h = bb.emit(relax.op.nn.conv2d(h, w2, padding=(1, 1, 1, 1)))
            h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(h, b2))))
            h = bb.emit(relax.op.nn.avg_pool2d(h, pool_size=(2, 2), strides=(2, 2)))
            h = bb.emit(relax.op.reshape(h, (batch, 256)))
            h = bb.emit(relax.op.tanh(h))
            h = bb.emit(relax.op.matmul(h, bb.emit(relax.op.permute_dims(fc1_w))))
            h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(h, fc1_b))))
            h = bb.emit(relax.op.nn.layer_norm(h, ln_g, ln_b, axes=[-1]))
            h = bb.emit(relax.op.matmul(h, bb.emit(relax.op.permute_dims(fc2_w))))
            h = bb.emit(relax.op.add(h, fc2_b))
            out = bb.emit_output(relax.op.nn.softmax(h, axis=-1))
        bb.emit_func_output(out)
    return bb.get()


def random_inputs(mod: tvm.IRModule, seed: int = 0, func: str = "main") -> list[np.ndarray]:
    """Random arrays for every parameter of `func`: N(0, 1) scaled by 1/sqrt(fan-in) for weights."""
    rng = np.random.default_rng(seed)
    arrays = []
    for param in mod[func].params:
        shape = [int(d) for d in param.ty.shape.values]
        dtype = str(param.ty.dtype)
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        scale = 1.0 / np.sqrt(fan_in) if "_w" in param.name else 1.0
        arrays.append((rng.standard_normal(shape) * scale).astype(dtype))
    return arrays
