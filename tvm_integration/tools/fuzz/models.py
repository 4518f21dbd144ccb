"""The fuzzer's models in one import: the public names of the modules they are split into.

`simaccel fuzz` draws random Relax models, each with its own float64 numpy reference. By concern:

- fuzz/choices.py: `Draw`, the recorded random choices a model is drawn from (what the shrinker
  shrinks), and `Config`, what the drawn models may hold;
- fuzz/vocabulary.py: the built-in ops (`OPS` of `FuzzOp`): Relax builder, shape, float64 semantics;
- fuzz/user_ops.py: users' declared families with a fuzz hook as nodes (`UserFuzzOp`);
- fuzz/case.py: a model (`Case` of `Value`s), its Relax module and reference, `fuzz_op`, JSON;
- fuzz/build.py: the `Builder`, op group by op group, with its table of op kinds (`KINDS`);
- fuzz/draw.py: `draw_case`, and `drawable_user_families`.
"""

from .build import DIMS, TINY_DIMS
from .case import Case, Value, case_from_json, case_to_json, fuzz_op
from .choices import Config, Draw
from .draw import PROBES, draw_case, drawable_user_families
from .user_ops import UserFuzzOp, is_user_op, relax_call, relax_shape, user_families
from .vocabulary import OPS, FuzzOp

__all__ = ["Case", "Config", "DIMS", "Draw", "FuzzOp", "OPS", "PROBES", "TINY_DIMS", "UserFuzzOp", "Value",
           "case_from_json", "case_to_json", "draw_case", "drawable_user_families", "fuzz_op", "is_user_op",
           "relax_call", "relax_shape", "user_families"]
