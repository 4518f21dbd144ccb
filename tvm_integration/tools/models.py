"""Small Relax models built with the BlockBuilder: the demo model and test models.

Every model takes its weights as function parameters (so they stay arguments of the
offloaded regions) and comes with `random_inputs` to feed it.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ...data import random_arrays
from ...shapes import evaluate


def _param(name: str, shape, dtype: str) -> relax.Var:
    return relax.Var(name, relax.TensorType(shape, dtype))


def demo_cnn(dtype: str = "float32", batch: int = 2) -> tvm.IRModule:
    """A CNN with an MLP head, with TVM-only ops between offloaded regions.

    conv+bias+relu -> max_pool -> conv+bias+relu -> avg_pool   (simaccel region 1)
    leaky_relu                                                 (TVM: no simaccel pattern)
    reshape (flatten) -> dense+bias+relu -> layer_norm
                      -> dense+bias -> softmax                 (simaccel region 2; the reshape
                                                                is a view: no kernel, no copy)
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
            h = bb.emit(relax.op.nn.leakyrelu(h, 0.1))
            h = bb.emit(relax.op.reshape(h, (batch, 256)))
            h = bb.emit(relax.op.matmul(h, bb.emit(relax.op.permute_dims(fc1_w))))
            h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(h, fc1_b))))
            h = bb.emit(relax.op.nn.layer_norm(h, ln_g, ln_b, axes=[-1]))
            h = bb.emit(relax.op.matmul(h, bb.emit(relax.op.permute_dims(fc2_w))))
            h = bb.emit(relax.op.add(h, fc2_b))
            out = bb.emit_output(relax.op.nn.softmax(h, axis=-1))
        bb.emit_func_output(out)
    return bb.get()


def param_specs(mod: tvm.IRModule, func: str = "main", sizes: dict | None = None) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, dtype) of every parameter of `func`; symbolic dims at `sizes` (size var -> value)."""
    from ..backend.sizes import dim_of

    return [(p.name, tuple(evaluate(dim_of(d), sizes or {}) for d in p.ty.shape.values), str(p.ty.dtype))
            for p in mod[func].params]


def random_inputs(mod: tvm.IRModule, seed: int = 0, func: str = "main", sizes: dict | None = None) -> list[np.ndarray]:
    """Seeded random arrays for every parameter of `func` (see simaccel.data.random_arrays), its
    symbolic dims at `sizes`."""
    return random_arrays(param_specs(mod, func, sizes), seed)


def hetero_chain(dtype: str = "float32", rows: int = 64, features: int = 256, hidden: int = 512) -> tvm.IRModule:
    """TVM -> simaccel -> TVM, returning every stage so buffers can be checked.

    h0 = leaky_relu(x)               (TVM kernel)
    h1 = relu(h0 @ fc_w^T + fc_b)    (simaccel region: reads h0 where TVM wrote it)
    h2 = log_softmax(h1)             (TVM kernel: reads h1 where simaccel wrote it)
    returns (h0, h1, h2)
    """
    bb = relax.BlockBuilder()
    x = _param("x", (rows, features), dtype)
    w, b = _param("fc_w", (hidden, features), dtype), _param("fc_b", (hidden,), dtype)
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            h0 = bb.emit(relax.op.nn.leakyrelu(x, 0.1))
            h1 = bb.emit(relax.op.matmul(h0, bb.emit(relax.op.permute_dims(w))))
            h1 = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(h1, b))))
            h2 = bb.emit(relax.op.nn.log_softmax(h1))
            out = bb.emit_output(relax.Tuple([h0, h1, h2]))
        bb.emit_func_output(out)
    return bb.get()


def long_upstream(dtype: str = "float32", channels: int = 32, size: int = 512) -> tvm.IRModule:
    """A slow TVM kernel right before a simaccel region, to test stream ordering.

    depthwise conv2d 9x9 on NHWC data (TVM only: simaccel takes NCHW; milliseconds on a GPU) ->
    permute to NCHW -> max_pool2d 8x8 -> conv2d+bias+relu (simaccel) -> log_softmax (TVM)
    """
    bb = relax.BlockBuilder()
    x = _param("x", (1, size, size, channels), dtype)
    dw = _param("dw_w", (channels, 1, 9, 9), dtype)
    w, b = _param("conv_w", (16, channels, 3, 3), dtype), _param("conv_b", (1, 16, 1, 1), dtype)
    with bb.function("main", [x, dw, w, b]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.conv2d(x, dw, padding=4, groups=channels, data_layout="NHWC", out_layout="NHWC"))
            h = bb.emit(relax.op.permute_dims(h, [0, 3, 1, 2]))
            h = bb.emit(relax.op.nn.max_pool2d(h, pool_size=(8, 8), strides=(8, 8)))
            h = bb.emit(relax.op.nn.conv2d(h, w, padding=1))
            h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(h, b))))
            out = bb.emit_output(relax.op.nn.log_softmax(h, axis=1))
        bb.emit_func_output(out)
    return bb.get()


def matmul_relu(n: int, dtype: str = "float32") -> tvm.IRModule:
    """One region: relu(x @ mm_w) with n x n operands (the benchmark's GEMM cases)."""
    bb = relax.BlockBuilder()
    x, w = _param("x", (n, n), dtype), _param("mm_w", (n, n), dtype)
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.relu(bb.emit(relax.op.matmul(x, w))))
        bb.emit_func_output(out)
    return bb.get()


def conv_bias_relu(batch: int, channels: int, size: int, groups: int = 1, dtype: str = "float32") -> tvm.IRModule:
    """One region: relu(conv2d(x, w) + b), 3x3, stride 1, padding 1, `channels` in and out in
    `groups` groups (the benchmark's convolution cases: ResNet's stages, MobileNet's depthwise)."""
    bb = relax.BlockBuilder()
    x = _param("x", (batch, channels, size, size), dtype)
    w = _param("conv_w", (channels, channels // groups, 3, 3), dtype)
    b = _param("conv_b", (1, channels, 1, 1), dtype)
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.conv2d(x, w, padding=(1, 1, 1, 1), groups=groups))
            out = bb.emit_output(relax.op.nn.relu(bb.emit(relax.op.add(h, b))))
        bb.emit_func_output(out)
    return bb.get()
