"""A user's model file, as `simaccel build` and `simaccel conformance --models` read it."""

from tvm import relax

bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType((4, 16), "float32"))
w = relax.Var("w", relax.TensorType((16, 8), "float32"))
with bb.function("main", [x, w]):
    with bb.dataflow():
        h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.matmul(x, w))))
        out = bb.emit_output(relax.op.add(h, h))
    bb.emit_func_output(out)
mod = bb.get()
