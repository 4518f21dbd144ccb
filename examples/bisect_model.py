"""A model file for `simaccel bisect` (docs/debugging.md, "Bisection"): tanh | log_softmax (kept on
TVM) | sigmoid -> abs -> exp, a Relax IRModule `mod` as `simaccel build` reads it.

With the planted defect of tests/user_ops/wrong_op.py declared (`wrongaccel.abs` replaces
`relax.abs`, 0.25 off in one element), bisection names that op in the second region:

    SIMACCEL_OPS=tests/user_ops/wrong_op.py simaccel bisect examples/bisect_model.py -o repro

Without it, abs runs on TVM alone and every region matches (exit 0).
"""

from tvm import relax

bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType((2, 8), "float32"))
with bb.function("main", [x]):
    with bb.dataflow():
        h = bb.emit(relax.op.nn.log_softmax(bb.emit(relax.op.tanh(x))))
        out = bb.emit_output(bb.emit(relax.op.exp(bb.emit(relax.op.abs(bb.emit(relax.op.sigmoid(h)))))))
    bb.emit_func_output(out)
mod = bb.get()
