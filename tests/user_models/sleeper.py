"""A user's model file that hangs where $SIMACCEL_TEST_FAULTS names "hang" (the Dask workers of
tests/test_fuzz_cluster.py): a conformance run on the cluster must report it as a hang and go on."""

import os
import time

from tvm import relax

if "hang" in os.environ.get("SIMACCEL_TEST_FAULTS", ""):
    time.sleep(120)

bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType((8,), "float32"))
with bb.function("main", [x]):
    with bb.dataflow():
        out = bb.emit_output(relax.op.nn.relu(x))
    bb.emit_func_output(out)
mod = bb.get()
