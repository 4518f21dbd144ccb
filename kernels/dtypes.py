"""Element types as the kernels see them: which dtypes are floats (bfloat16 is one, though
numpy, through ml_dtypes, gives it kind "V"), and a float32 rounded to a narrower float dtype
and read back: how a kernel's value is rounded where the op it stands in for would store it
(kernels/epilogue.py's fused groups).

float16 rounds through Numba's own float16. bfloat16 has no Numba scalar on the simulator
(numba-cuda's `numba.cuda.bf16` is CUDA only), so `round_bfloat16` is a plain function that
the simulator runs with ml_dtypes' bfloat16 (round to nearest even), and that CUDA kernels
compile to numba-cuda's `__nv_bfloat16` conversions (cuda_bf16.h: round to nearest even too,
NaN kept) through the overload kernels/epilogue.py registers. This module imports no Numba:
the ISA's declarations read `is_float` (and `import tvm` loads no Numba).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np


def is_float(dtype) -> bool:
    """Whether numpy `dtype` (or its name) is a float type: float16/32/64 or bfloat16."""
    dtype = np.dtype(str(dtype)) if not isinstance(dtype, np.dtype) else dtype
    return dtype.kind == "f" or dtype == np.dtype(ml_dtypes.bfloat16)


def round_bfloat16(x):
    """`x` rounded to the nearest bfloat16 (ties to even), as a float32."""
    return np.float32(ml_dtypes.bfloat16(np.float32(x)))


# dtype -> the expression rounding a float32 `{}` to it and back, over the names in NAMESPACE
ROUNDING = {"float32": "{}", "float16": "float32(float16({}))", "bfloat16": "round_bfloat16({})"}
