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


BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

# Numba's names of the element types numpy spells otherwise (numba-cuda's bfloat16 type).
_NUMBA_NAMES = {"__nv_bfloat16": "bfloat16"}


def numpy_dtype(dtype) -> np.dtype:
    """The numpy dtype of `dtype`: a numpy dtype, its name, a Numba type or an array's dtype
    (a simulated array's numpy one, a device array's or a Numba array type's)."""
    if isinstance(dtype, np.dtype):
        return dtype
    name = str(dtype)
    return np.dtype(_NUMBA_NAMES.get(name, name))


def is_float(dtype) -> bool:
    """Whether `dtype` (as `numpy_dtype` takes it) is a float type: float16/32/64 or bfloat16."""
    dtype = numpy_dtype(dtype)
    return dtype.kind == "f" or dtype == BFLOAT16


def min_value(dtype) -> float:
    """TVM's `te.min_value` of float `dtype`, where its max pooling and max reductions start (and
    pad) from: the most negative finite value, but for bfloat16 float32's, which TVM gives a
    bfloat16 immediate and which rounds to -inf where it is stored (a window all padding).
    ml_dtypes' finfo, not numpy's: older ml_dtypes do not teach numpy's bfloat16."""
    dtype = numpy_dtype(dtype)
    return float(ml_dtypes.finfo(np.float32 if dtype == BFLOAT16 else dtype).min)


def round_bfloat16(x):
    """`x` rounded to the nearest bfloat16 (ties to even), as a float32."""
    return np.float32(ml_dtypes.bfloat16(np.float32(x)))


# dtype -> the expression rounding a float32 `{}` to it and back, over the names in NAMESPACE
ROUNDING = {"float32": "{}", "float16": "float32(float16({}))", "bfloat16": "round_bfloat16({})"}
