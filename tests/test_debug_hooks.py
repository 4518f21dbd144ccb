"""The runtime's one hook for debugging tools (simaccel.debug.hooks): order, content, routing."""

import numpy as np
import pytest

from simaccel.debug import Watcher, hooks, watching

from test_runtime import mlp_expected, mlp_inputs, mlp_program


class Recorder(Watcher):
    def __init__(self):
        self.events = []

    def region_start(self, run):
        self.events.append(("start", run.program.name, [role for _, role, _ in run.boundary]))

    def op_start(self, run, index):
        self.events.append(("op_start", run.op_name(index)))

    def op_end(self, run, index):
        self.events.append(("op_end", run.op_name(index), run.to_host(run.program.ops[index].output).copy()))

    def region_end(self, run):
        self.events.append(("end", run.to_host(run.program.outputs[0]).copy()))


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_a_watcher_sees_every_op_in_order_with_its_output(clean_runtime, engine):
    x, w, b = mlp_inputs()
    y = np.zeros((4, 6), np.float32)
    recorder = Recorder()
    with clean_runtime.use_engine(engine), watching(recorder):
        clean_runtime.run(mlp_program(), x, w, b, y)
    kinds = [e[0] for e in recorder.events]
    assert kinds == ["start", "op_start", "op_end", "op_start", "op_end", "end"]
    assert recorder.events[0] == ("start", "mlp", ["input", "input", "input", "output"])
    assert [e[1] for e in recorder.events if e[0] == "op_start"] == ["simaccel.dense_bias_relu", "simaccel.softmax"]
    hidden = np.maximum(x.astype(np.float64) @ w.T + b, 0)
    np.testing.assert_allclose(recorder.events[2][2], hidden, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(recorder.events[-1][1], mlp_expected(x, w, b), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(recorder.events[-1][1], y)


def test_no_watcher_after_the_block_and_routing_follows_it(clean_runtime):
    class Wants(Watcher):
        python_regions = True

    assert hooks.active() == ()
    assert not clean_runtime.route_flag_set()
    with watching(Wants()):
        assert clean_runtime.route_flag_set()
    assert hooks.active() == ()
    assert not clean_runtime.route_flag_set()
    with watching(Watcher()):  # a watcher that does not want every region leaves natives alone
        assert not clean_runtime.route_flag_set()
