"""Element types as the kernels see them: which dtypes are floats (bfloat16 is one, though
numpy, through ml_dtypes, gives it kind "V"), and a float32 rounded to a narrower float dtype
and read back: how a kernel's value is rounded where the op it stands in for would store it
(kernels/epilogue.py's fused groups).

float16 rounds through Numba's own float16. bfloat16 has no Numba scalar on the simulator
(numba-cuda's `numba.cuda.bf16` is CUDA only), so `round_bfloat16` is a plain function that
the simulator runs with ml_dtypes' bfloat16 (round to nearest even), and that CUDA kernels
compile to numba-cuda's `__nv_bfloat16` conversions (cuda_bf16.h: round to nearest even too,
NaN kept), through the overload below.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from numba import float32
from numba.cuda.extending import overload


def is_float(dtype) -> bool:
    """Whether numpy `dtype` (or its name) is a float type: float16/32/64 or bfloat16."""
    dtype = np.dtype(str(dtype)) if not isinstance(dtype, np.dtype) else dtype
    return dtype.kind == "f" or dtype == np.dtype(ml_dtypes.bfloat16)


def round_bfloat16(x):
    """`x` rounded to the nearest bfloat16 (ties to even), as a float32."""
    return np.float32(ml_dtypes.bfloat16(np.float32(x)))


@overload(round_bfloat16, target="cuda")
def _round_bfloat16_cuda(x):
    from numba.cuda.bf16 import bfloat16

    def impl(x):
        return float32(bfloat16(float32(x)))

    return impl


# dtype -> the expression rounding a float32 `{}` to it and back, over the names in NAMESPACE
ROUNDING = {"float32": "{}", "float16": "float32(float16({}))", "bfloat16": "round_bfloat16({})"}
