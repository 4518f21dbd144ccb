"""What the GPU tests (tests/test_gpu_*.py) share: the tolerances, a ledger's zero traffic, one-op Programs."""

from __future__ import annotations

from simaccel.engines.cuda import to_device, to_host  # noqa: F401 (bfloat16 too), the tests' copies


TOLERANCE = {"float32": dict(rtol=1e-4, atol=1e-4), "float16": dict(rtol=2e-2, atol=2e-2),
             "bfloat16": dict(rtol=5e-2, atol=5e-2)}
ZERO = {"host_to_device": 0, "device_to_host": 0, "device_to_device": 0}


def one_op_program(name, shapes, dtype, attrs=None):
    """A Program running op `name` alone on inputs t0, t1, ... of `shapes`, into `out`."""
    from simaccel.ops import get_op
    from simaccel.program import OpNode, Program, TensorSpec

    op = get_op(name)
    attrs = attrs or {}
    out, out_dtype = op.infer(shapes, [dtype] * len(shapes), **op.all_attrs(attrs))
    tensors = (*(TensorSpec(f"t{i}", tuple(s), dtype) for i, s in enumerate(shapes)), TensorSpec("out", tuple(out), out_dtype))
    return Program(name.split(".")[1], tensors, tuple(range(len(shapes))), (len(shapes),),
                   (OpNode(name, tuple(range(len(shapes))), len(shapes), attrs),)).validate()
