"""Model structures beyond straight chains, against TVM alone on both CPU engines.

relax's `linear` helper, one region with several outputs, a reshaped conv bias with a
residual add, attention-style batched matmuls (both operands batched) and a bias-first add.
"""

import pytest
from tvm import relax

from harness import compare_with_tvm, offloaded_ops

op = relax.op


def tensor(name, shape, dtype="float32"):
    return relax.Var(name, relax.TensorType(shape, dtype))


def model(params, body):
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(body(bb))
        bb.emit_func_output(out)
    return bb.get()


def linear():
    x, w, b = tensor("x", (4, 8)), tensor("fc_w", (6, 8)), tensor("fc_b", (6,))
    return model([x, w, b], lambda bb: op.linear(x, w, b)), ["simaccel.dense_bias"]


def two_outputs():
    x, w = tensor("x", (4, 8)), tensor("mm_w", (8, 8))

    def body(bb):
        h = bb.emit(op.nn.relu(bb.emit(op.matmul(x, w))))
        return relax.Tuple([bb.emit(op.nn.softmax(h)), bb.emit(op.nn.gelu(h))])

    return model([x, w], body), ["simaccel.matmul_relu", "simaccel.softmax", "simaccel.gelu"]


def residual_conv():
    x, w, b = tensor("x", (1, 4, 9, 9)), tensor("conv_w", (4, 4, 3, 3)), tensor("conv_b", (4,))

    def body(bb):
        c = bb.emit(op.add(bb.emit(op.nn.conv2d(x, w, padding=1)), bb.emit(op.reshape(b, (1, 4, 1, 1)))))
        return op.nn.max_pool2d(bb.emit(op.nn.relu(bb.emit(op.add(c, x)))), 2, strides=2)

    # The bias reshape is a view of the region's input: no kernel, no copy.
    ops = ["simaccel.reshape", "simaccel.conv2d_bias", "simaccel.add", "simaccel.relu", "simaccel.max_pool2d"]
    return model([x, w, b], body), ops


def attention():
    q, k, v = (tensor(n, (2, 5, 8)) for n in "qkv")

    def body(bb):
        scores = bb.emit(op.matmul(q, bb.emit(op.permute_dims(k, [0, 2, 1]))))
        p = bb.emit(op.nn.softmax(bb.emit(op.multiply(scores, relax.const(0.35, "float32")))))
        return op.matmul(p, v)

    return model([q, k, v], body), ["simaccel.permute_dims", "simaccel.matmul", "simaccel.multiply", "simaccel.softmax",
                                    "simaccel.matmul"]  # both operands batched


def bias_first_float16():
    f16 = "float16"
    x, w, b = tensor("x", (3, 16), f16), tensor("mm_w", (16, 16), f16), tensor("b", (16,), f16)
    g, beta = tensor("g", (16,), f16), tensor("beta", (16,), f16)

    def body(bb):
        h = bb.emit(op.add(b, bb.emit(op.matmul(x, w))))
        return op.nn.gelu(bb.emit(op.nn.layer_norm(h, g, beta, axes=[1])))

    return model([x, w, b, g, beta], body), ["simaccel.matmul_bias", "simaccel.layer_norm", "simaccel.gelu"]


MODELS = [linear, two_outputs, residual_conv, attention, bias_first_float16]


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("make", MODELS, ids=[m.__name__ for m in MODELS])
def test_model_matches_tvm(make, engine):
    mod, expected_ops = make()
    assert offloaded_ops(mod) == expected_ops
    compare_with_tvm(mod, engine)
