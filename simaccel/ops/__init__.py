"""simaccel.ops: the accelerator's ISA (op registry, shape rules, numpy references).

Importing this package registers every op. Kernels are imported only when first launched.
"""

from . import conv2d, elementwise, matmul, normalization, pool2d  # noqa: F401  (registers the ops)
from .registry import OpDef, get_op, list_ops, register_op

__all__ = ["OpDef", "get_op", "list_ops", "register_op"]
