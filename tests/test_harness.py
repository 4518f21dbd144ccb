"""tests/harness.py's memory of TVM alone's outputs: it answers only for the same model
(constants' data included) and the same inputs, and hands out copies."""

from __future__ import annotations

import numpy as np
import tvm
from tvm.script import relax as R

from harness import run_vm, tvm_alone
from simaccel.tvm_integration import build_tvm_only


def _add_constant(values):
    @R.function
    def main(x: R.Tensor((2,), "float32")):
        return R.add(x, R.const(np.array(values, "float32")))

    return tvm.IRModule({"main": main})


def test_models_that_differ_only_in_a_constant_get_their_own_outputs():
    x = np.array([1.0, 2.0], "float32")
    for values in ([1.0, 1.0], [2.0, 1.0], [1.0, 1.0]):
        np.testing.assert_array_equal(tvm_alone(_add_constant(values), [x]), x + np.array(values, "float32"))


def test_other_inputs_get_their_own_outputs_and_callers_get_copies():
    mod = _add_constant([1.0, 1.0])
    for x in (np.array([1.0, 2.0], "float32"), np.array([5.0, -3.0], "float32")):
        first = tvm_alone(mod, [x])
        np.testing.assert_array_equal(first, run_vm(build_tvm_only(mod), [x]))
        first[:] = 0  # a caller writing into its result does not change the next caller's
        np.testing.assert_array_equal(tvm_alone(mod, [x]), x + 1)
