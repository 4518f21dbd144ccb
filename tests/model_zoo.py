"""Relax models for the tests: single-op models and a seeded random model generator.

Every model takes its weights as parameters. `random_model(seed)` draws a chain of ops
(convolutions, pooling, matmuls, normalisations, elementwise ops, and ops only TVM runs)
with consistent shapes, so the tests exercise combinations nobody wrote by hand.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax


class ModelBuilder:
    """Collects parameters while the body is emitted, then makes `main`."""

    def __init__(self, dtype: str = "float32"):
        self.dtype = dtype
        self.params: list[relax.Var] = []
        self.bindings: list[tuple[str, object]] = []

    def param(self, name: str, shape, dtype: str | None = None) -> relax.Var:
        var = relax.Var(f"{name}{len(self.params)}", relax.TensorType(tuple(shape), dtype or self.dtype))
        self.params.append(var)
        return var

    def module(self, body) -> tvm.IRModule:
        """`body()` builds the output expression, creating parameters as it goes.

        Nested calls are flattened by the BlockBuilder into one binding per op.
        """
        bb = relax.BlockBuilder()
        with bb.function("main"):
            with bb.dataflow():
                out = bb.emit_output(body())
            bb.emit_func_output(out, params=self.params)
        return bb.get()


def single_op(make, inputs, dtype="float32") -> tvm.IRModule:
    """A model whose body is `make(*params)` over parameters of the given shapes."""
    builder = ModelBuilder(dtype)
    params = [builder.param("p", shape, dt or dtype) for shape, dt in inputs]
    return builder.module(lambda: make(*params))


# -- random models ----------------------------------------------------------------------------
def random_model(seed: int, dtype: str = "float32", tiny: bool = False) -> tvm.IRModule:
    rng = np.random.default_rng(seed)
    b = ModelBuilder(dtype)
    op = relax.op

    def pick(*choices):
        return choices[int(rng.integers(len(choices)))]

    def body():
        if rng.random() < 0.5:
            shape = [int(rng.integers(1, 3)), int(rng.integers(1, 4)), *(int(rng.integers(4, 7 if tiny else 10)),) * 2]
        else:
            shape = [int(rng.integers(1, 4)), int(rng.integers(2, 8 if tiny else 24))]
        x = b.param("x", shape)
        for _ in range(int(rng.integers(3, 7))):
            if len(shape) == 4:
                n, c, h, w = shape
                choice = pick("conv", "conv", "pool", "act", "eltwise", "tvm", "flatten")
                if choice == "conv":
                    k = pick(1, 3) if min(h, w) >= 3 else 1
                    stride = pick(1, 2)
                    pad = pick(0, 1) if k == 3 else 0
                    o = int(rng.integers(1, 5 if tiny else 9))
                    x = op.nn.conv2d(x, b.param("conv_w", (o, c, k, k)), strides=stride, padding=pad)
                    shape = [n, o, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1]
                    if rng.random() < 0.7:
                        x = op.add(x, b.param("conv_b", (1, o, 1, 1)))
                    if rng.random() < 0.6:
                        x = op.nn.relu(x)
                elif choice == "pool" and min(h, w) >= 2:
                    pool = pick(op.nn.max_pool2d, op.nn.avg_pool2d)
                    stride, pad = pick(1, 2), pick(0, 1)
                    kwargs = {"count_include_pad": bool(rng.random() < 0.5)} if pool is op.nn.avg_pool2d else {}
                    x = pool(x, pool_size=2, strides=stride, padding=pad, **kwargs)
                    shape = [n, c, (h + 2 * pad - 2) // stride + 1, (w + 2 * pad - 2) // stride + 1]
                elif choice == "act":
                    x = pick(op.nn.relu, op.nn.gelu)(x)
                elif choice == "eltwise":
                    other = b.param("e", pick((1, c, 1, 1), tuple(shape), (w,)))
                    x = pick(op.add, op.multiply)(x, other)
                elif choice == "tvm":
                    x = pick(op.tanh, op.sigmoid, op.exp)(x)
                elif choice == "flatten":
                    x = op.reshape(x, (n, c * h * w))
                    shape = [n, c * h * w]
            else:
                rows, f = shape
                choice = pick("linear", "linear", "softmax", "layer_norm", "act", "eltwise", "tvm")
                if choice == "linear":
                    out = int(rng.integers(2, 8 if tiny else 24))
                    if rng.random() < 0.5:
                        x = op.matmul(x, op.permute_dims(b.param("fc_w", (out, f))))
                    else:
                        x = op.matmul(x, b.param("mm_w", (f, out)))
                    shape = [rows, out]
                    if rng.random() < 0.7:
                        x = op.add(x, b.param("fc_b", pick((out,), (1, out))))
                    if rng.random() < 0.6:
                        x = pick(op.nn.relu, op.nn.gelu)(x)
                elif choice == "softmax":
                    x = op.nn.softmax(x, axis=-1)
                elif choice == "layer_norm":
                    x = op.nn.layer_norm(x, b.param("ln_g", (f,)), b.param("ln_b", (f,)), axes=[-1])
                elif choice == "act":
                    x = pick(op.nn.relu, op.nn.gelu)(x)
                elif choice == "eltwise":
                    x = pick(op.add, op.multiply)(x, b.param("e", pick((f,), (rows, f), (1, f))))
                else:
                    x = pick(op.tanh, op.sigmoid)(x)
        return x

    return b.module(body)
