"""Testing your own accelerator ops with pytest: copy this file into your repository's tests.

    pytest examples/test_my_backend.py                          on every engine this machine has
    pytest examples/test_my_backend.py --simaccel-engines=ref   on the numpy references only

`pip install simaccel` brings the pytest plugin (simaccel.testing). Its fixture
`simaccel_engine` runs a test once per engine (ref, sim, cuda, native) and skips, with the
reason, the ones this machine cannot run (cuda and native need a GPU). Here an op of our own,
mybackend.abs, is declared for each test and forgotten after it; the model is

    h = abs(x)                 mybackend.abs        } one simaccel region
    out = relu(h @ w)          simaccel.matmul_relu }
"""

import math

import numpy as np
import pytest
from numba import cuda
from tvm import relax

from simaccel import DeviceProfile
from simaccel.ops import OpFamily, Reject, relax_op
from simaccel.testing import assert_matches_tvm, assert_offloads, declared


# -- our op: |x|, in float32 only ----------------------------------------------------------------
def abs_kernel(out, x, n):  # one thread per element of flat views
    i = cuda.grid(1)
    if i < n:
        out[i] = abs(x[i])


def launch_abs(target, out, data):
    n = math.prod(tuple(data.shape))
    if n:
        target.launch(abs_kernel, (n + 127) // 128, 128, target.reshape(out, (n,)), target.reshape(data, (n,)), n)
    return int(n > 0)  # kernels launched


def float32_only(match):
    if match.dtypes["data"] != "float32":
        raise Reject("mybackend.abs runs in float32 only")
    return {}


def abs_family():
    return OpFamily(name="mybackend.abs", inputs=("data",), pattern=relax_op("relax.abs", "data"),
                    from_relax=float32_only, infer=lambda shapes: shapes[0], reference=np.abs, kernel=launch_abs,
                    doc="|x|")


@pytest.fixture
def my_ops():
    """mybackend.abs for one test: declared on entry, forgotten after it."""
    with declared(abs_family()) as family:
        yield family


def model(dtype="float32"):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8, 16), dtype))
    w = relax.Var("fc_w", relax.TensorType((16, 4), dtype))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            h = bb.emit(relax.op.abs(x))
            out = bb.emit_output(relax.op.nn.relu(relax.op.matmul(h, w)))
        bb.emit_func_output(out)
    return bb.get()


# -- what partitioning does -------------------------------------------------------------------------
def test_our_op_joins_the_built_in_ones_in_one_region(my_ops):
    assert_offloads(model(), ops=["mybackend.abs", "simaccel.matmul"], regions=1, kept=0)


def test_without_our_op_abs_stays_on_tvm():
    report = assert_offloads(model(), ops=["simaccel.matmul_relu"], regions=1, kept=1)
    assert report.kept[0][1] == "relax.abs"


def test_our_op_says_why_it_leaves_float16_to_tvm(my_ops):
    report = assert_offloads(model("float16"), ops=["simaccel.matmul"], kept=1)
    assert "mybackend.abs runs in float32 only" in report.kept[0][2]


def test_a_device_without_our_op(my_ops):
    matmul_only = DeviceProfile(name="matmul-only", ops={"simaccel.matmul"})
    assert_offloads(model(), ops=["simaccel.matmul_relu"], regions=1, kept=1, profile=matmul_only)


# -- what running does: the same results as TVM alone, on each engine ---------------------------------
def test_the_model_matches_tvm(my_ops, simaccel_engine):
    [run] = assert_matches_tvm(model(), engines=[simaccel_engine])
    assert run.ledger["ops"] == {"mybackend.abs": 1, "simaccel.matmul_relu": 1}


def test_the_model_matches_tvm_on_inputs_of_our_own(simaccel_declare, simaccel_engine):
    simaccel_declare(abs_family())  # the fixture form of declared(): forgotten after the test
    x = np.linspace(-2, 2, 8 * 16, dtype="float32").reshape(8, 16)
    w = np.eye(16, 4, dtype="float32")
    [run] = assert_matches_tvm(model(), [x, w], rtol=1e-6, atol=1e-6, engines=[simaccel_engine])
    np.testing.assert_array_equal(run.outputs[0], np.abs(x)[:, :4])
