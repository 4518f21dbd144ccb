"""Inference rewrites before partitioning (tvm_integration/rewrites/inference.py): an inference
batch_norm with constant statistics becomes multiply + add, so conv -> batch_norm -> relu
(every torch.export CNN) is one region; anything else is left to TVM with its reason."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

from compare import assert_same
from harness import compare_with_tvm, offloaded_ops, run_vm, tvm_alone
from simaccel.tvm_integration import build, partition_report
from simaccel.tvm_integration.tools.models import random_inputs


def conv_bn_relu(dtype="float32", training=False, stats_as_params=False, conv_bias=False, axis=1):
    """x -> conv2d (constant weight) [-> + bias] -> batch_norm -> relu, statistics constant or parameters."""
    rng = np.random.default_rng(0)
    x = relax.Var("x", relax.TensorType((2, 3, 8, 8), dtype))
    stats = [rng.uniform(0.5, 1.5, 4), rng.standard_normal(4), rng.standard_normal(4), rng.uniform(0.2, 2.0, 4)]
    params = [x]
    if stats_as_params:
        names = ("gamma", "beta", "mean", "var")
        stats = [relax.Var(n, relax.TensorType((4,), dtype)) for n in names]
        params += stats
    else:
        stats = [relax.const(s.astype(dtype)) for s in stats]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.conv2d(x, relax.const(rng.standard_normal((4, 3, 3, 3)).astype(dtype)), padding=1))
            if conv_bias:
                h = bb.emit(relax.op.add(h, relax.const(rng.standard_normal((1, 4, 1, 1)).astype(dtype))))
            if axis != 1:
                h = bb.emit(relax.op.permute_dims(h, [0, 2, 3, 1]))
            norm = bb.emit(relax.op.nn.batch_norm(h, *stats, axis=axis, epsilon=1e-3, training=training))
            out = bb.emit_output(relax.op.nn.relu(bb.emit(relax.TupleGetItem(norm, 0))))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("conv_bias", [False, True])
def test_an_inference_batch_norm_joins_the_conv_in_one_region(clean_runtime, dtype, engine, conv_bias):
    mod = conv_bn_relu(dtype, conv_bias=conv_bias)
    _, report = partition_report(mod)
    assert len(report.regions) == 1 and report.kept == []
    folded = [] if conv_bias else ["1 multiply by a per-channel constant folded into the weights of the conv2d before it"]
    assert report.rewritten == ["1 relax.nn.batch_norm (inference, constant statistics) rewritten as multiply + add", *folded]
    # Without a bias of its own the conv takes the scale into its weights: one conv2d_bias_relu.
    assert list(report.regions.values()) == [["simaccel.conv2d_bias_relu"] if not conv_bias else
                                             ["simaccel.conv2d_bias", "simaccel.multiply", "simaccel.add", "simaccel.relu"]]
    assert "rewritten first: 1 relax.nn.batch_norm" in report.format()
    if dtype == "float32":
        compare_with_tvm(mod, engine)  # against TVM alone's own batch_norm
        return
    # TVM 0.27's CPU build returns a float16 batch_norm's result as float32 (the module says
    # float16): compare the values in float16.
    arrays = random_inputs(mod, 0)
    want = tvm_alone(mod, arrays)
    with clean_runtime.use_engine(engine):
        got = run_vm(build(mod), arrays)
    assert got.dtype == np.float16
    assert_same(got, want.astype(np.float16), dtype)


def test_a_batch_norm_over_the_last_axis(clean_runtime):
    mod = conv_bn_relu(axis=-1)
    assert "simaccel.multiply" in offloaded_ops(mod)
    compare_with_tvm(mod, "ref")


@pytest.mark.parametrize("change", [{"training": True}, {"stats_as_params": True}])
def test_a_batch_norm_that_is_not_inference_arithmetic_stays_on_tvm(clean_runtime, change):
    mod = conv_bn_relu(**change)
    _, report = partition_report(mod)
    assert report.rewritten == []
    assert [op for _, op, _ in report.kept] == ["relax.nn.batch_norm"]
    compare_with_tvm(mod, "ref")
