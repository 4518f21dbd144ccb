import tvm, numpy as np
from tvm import relax
from simaccel.tvm_integration import build_tvm_only, default_target
x = relax.Var("x", relax.TensorType((1,), "float32"))
bb = relax.BlockBuilder()
with bb.function("main", [x]):
    with bb.dataflow():
        out = bb.emit_output(relax.op.strided_slice(x, [0], [1], [0], [-1]))
    bb.emit_func_output(out)
dev = tvm.cuda(0)
r = relax.VirtualMachine(build_tvm_only(bb.get(), default_target("cuda")), dev)["main"](tvm.runtime.tensor(np.ones(1, "float32"), dev))
dev.sync()
print("TVM alone: empty backward slice ran", r.shape)
