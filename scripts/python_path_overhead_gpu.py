"""Per-call wall time of the Python "cuda" engine path on a GPU machine (Runtime.invoke, as TVM's
region call makes it): matmul+relu at 8x8 and 1024^3 on TVM's CUDA tensors, the median of 7
batches, then a cProfile of 200 calls. To set two versions side by side, install the other one
(`git archive REV | tar x -C old && pip install --target /tmp/oldsite ./old`) and alternate
`PYTHONPATH=/tmp/oldsite:$PYTHONPATH python3 -P scripts/python_path_overhead_gpu.py` with a plain run
in fresh processes: one process's figures vary up to 2x from the next's.
"""
import cProfile, io, pstats, statistics, sys, time
import numpy as np
import tvm
import simaccel
from simaccel.program import OpNode, Program, TensorSpec
from simaccel.runtime import Runtime
from simaccel.tvm_integration.tools.deploy import prepare_cuda
prepare_cuda()
print("simaccel from", simaccel.__file__)
dev = tvm.cuda(0)
for n, calls in ((8, 2000), (1024, 500)):
    specs = (TensorSpec("a", (n, n), "float32"), TensorSpec("b", (n, n), "float32"), TensorSpec("h", (n, n), "float32"),
             TensorSpec("y", (n, n), "float32"))
    prog = Program(f"mm{n}", specs, (0, 1), (3,), (OpNode("simaccel.matmul", (0, 1), 2, {}), OpNode("simaccel.relu", (2,), 3, {})))
    rt = Runtime()
    a = tvm.runtime.tensor(np.random.rand(n, n).astype("float32"), dev)
    b = tvm.runtime.tensor(np.random.rand(n, n).astype("float32"), dev)
    y = tvm.runtime.tensor(np.zeros((n, n), "float32"), dev)
    key, text = f"{prog.name}:{prog.fingerprint()}", prog.to_json()
    with rt.use_engine("cuda"):
        for _ in range(20):
            rt.invoke(key, text, a, b, y)
        dev.sync()
        samples = []
        for _ in range(7):
            t = time.perf_counter()
            for _ in range(calls // 7):
                rt.invoke(key, text, a, b, y)
            dev.sync()
            samples.append((time.perf_counter() - t) / (calls // 7) * 1e6)
        print(f"mm{n}: {statistics.median(samples):.1f} us per call (batches {[round(s, 1) for s in sorted(samples)]})")
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(200):
            rt.invoke(key, text, a, b, y)
        dev.sync()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
        print(s.getvalue())
