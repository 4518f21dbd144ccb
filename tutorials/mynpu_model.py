"""The model the three tutorial stages partition for mynpu (tutorials/01_first_accelerator.py
writes it out and explains it; stages 2 and 3 import it from here):

    h = x @ w^T + b                   simaccel.dense_bias  (built in)
    a = leaky_relu(h, alpha=0.1)      mynpu.leaky_relu
    y = log_softmax(a)                mynpu.log_softmax    (the last axis)
    z = log_softmax(cumprod(a), 0)     TVM, both
"""

from tvm import relax


def model(dtype="float32"):
    """dense + bias -> leaky_relu -> log_softmax, and cumprod -> log_softmax over axis 0."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((16, 8), dtype))
    w = relax.Var("w", relax.TensorType((8, 8), dtype))
    b = relax.Var("b", relax.TensorType((8,), dtype))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            h = bb.emit(relax.op.add(relax.op.matmul(x, relax.op.permute_dims(w)), b))
            a = bb.emit(relax.op.nn.leakyrelu(h, alpha=0.1))
            y = bb.emit(relax.op.nn.log_softmax(a))
            c = bb.emit(relax.op.cumprod(a, axis=1))
            z = bb.emit(relax.op.nn.log_softmax(c, axis=0))
            out = bb.emit_output(relax.Tuple([y, z]))
        bb.emit_func_output(out)
    return bb.get()
