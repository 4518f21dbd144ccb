"""What the native region tests (tests/test_native_*.py) share: Programs, their input arrays, and
where a launch's parameters hold a tensor's data pointer."""

from __future__ import annotations

import numpy as np

from simaccel.launch_plan import View
from simaccel.program import OpNode, Program, TensorSpec


def chain_program() -> Program:
    """dense_bias -> softmax -> gelu: two intermediates, one output; nothing fuses (softmax is
    not elementwise, and gelu alone needs no kernel of its own), so every op launches."""
    t = (TensorSpec("x", (4, 6), "float32"), TensorSpec("w", (8, 6), "float32"), TensorSpec("b", (8,), "float32"),
         TensorSpec("h", (4, 8), "float32"), TensorSpec("g", (4, 8), "float32"), TensorSpec("y", (4, 8), "float32"))
    ops = (OpNode("simaccel.dense_bias", (0, 1, 2), 3), OpNode("simaccel.softmax", (3,), 4), OpNode("simaccel.gelu", (4,), 5))
    return Program("chain", t, (0, 1, 2), (5,), ops).validate()


def views_program() -> Program:
    """Views: of an input (read by relu), of an intermediate (read by softmax), and one that is
    a region output (copied into the caller's buffer)."""
    t = (TensorSpec("x", (2, 3, 4), "float32"), TensorSpec("x_rows", (6, 4), "float32"), TensorSpec("h", (6, 4), "float32"),
         TensorSpec("h_wide", (2, 12), "float32"), TensorSpec("y", (2, 12), "float32"), TensorSpec("h_flat", (24,), "float32"))
    ops = (OpNode("simaccel.reshape", (0,), 1, {"shape": [6, 4]}), OpNode("simaccel.relu", (1,), 2),
           OpNode("simaccel.reshape", (2,), 3, {"shape": [2, 12]}), OpNode("simaccel.softmax", (3,), 4),
           OpNode("simaccel.flatten", (2,), 5, {"shape": [24]}))
    return Program("views", t, (0,), (4, 5), ops).validate()


def arrays_for(program: Program, seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = program.inputs + program.outputs
    return [rng.standard_normal(program.tensors[i].shape).astype(program.tensors[i].dtype) for i in ids]


def dims3(value) -> tuple:
    dims = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    return dims + (1,) * (3 - len(dims))


def constants_program(dtype: str) -> Program:
    """Scalar constants the region holds itself: y = x * 0.5 + (-1.25), the constants 0-d."""
    t = (TensorSpec("x", (4, 6), dtype), TensorSpec("half", (), dtype, 0.5), TensorSpec("h", (4, 6), dtype),
         TensorSpec("shift", (), dtype, -1.25), TensorSpec("y", (4, 6), dtype))
    ops = (OpNode("simaccel.multiply", (0, 1), 2), OpNode("simaccel.add", (2, 3), 4))
    return Program(f"consts_{dtype}", t, (0,), (4,), ops).validate()


def _data_word(program: Program, launch, tensor: int) -> int:
    """The index of the word holding tensor `tensor`'s data pointer in `launch`'s parameters."""
    index = 0
    for arg in launch.args:
        if isinstance(arg, View):
            if program.views.get(arg.tensor, arg.tensor) == tensor:
                return index + 4
            index += 5 + 2 * len(arg.shape)
        else:
            index += 1
    raise AssertionError(f"launch reads no tensor {tensor}")
