"""simaccel.ops: the accelerator's ISA, one declaration per op family.

The public API to add an instruction (see docs/adding-an-op.md):

* `OpFamily` - the declaration: Relax pattern, attributes, shape rule, reference, kernel;
* `relax_op` - the Relax expression it replaces (`relax_value` - a shape or number argument,
  `relax_tuple` - a tuple of tensors, each an input);
  `Reject` - a match that stays on TVM;
* `declare`  - add it to the ISA; `attrs` - attribute kinds; `rules` - shape-rule helpers;
* `LaunchTarget` - what a family's kernel launcher launches through;
* `declared` - a with-block whose declarations are forgotten after it (tests);
* `ShapeError` - what a shape rule raises for inputs the op does not take.

Importing this package declares the built-in families; ops declared in users' modules are
loaded from $SIMACCEL_OPS when the registry is first read. Kernels are imported on first launch.
"""

from ..errors import ShapeError
from . import attrs, rules
from .declare import (LaunchTarget, OpDef, OpFamily, RelaxMatch, RelaxPattern, RelaxTuple, RelaxValue, Reject, relax_op,
                      relax_tuple, relax_value)
from .registry import USER_OPS_ENV, declare, declared, families, get_op, list_ops, load_user_ops

from . import builtin  # noqa: E402, F401  (declares the built-in families, through the same API)

__all__ = [
    "LaunchTarget",
    "OpDef",
    "OpFamily",
    "RelaxMatch",
    "RelaxPattern",
    "RelaxTuple",
    "RelaxValue",
    "Reject",
    "ShapeError",
    "USER_OPS_ENV",
    "attrs",
    "declare",
    "declared",
    "families",
    "get_op",
    "list_ops",
    "load_user_ops",
    "relax_op",
    "relax_tuple",
    "relax_value",
    "rules",
]
