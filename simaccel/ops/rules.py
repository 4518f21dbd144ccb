"""Shape rules shared by the built-in op declarations (and usable by users' own).

A rule raises ShapeError saying what is wrong; `OpDef.infer` puts the op's name in front.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import ShapeError
from ..requirements import at_least  # noqa: F401  (a rule's range check of sizes: ints, or symbolic ones)
from ..shapes import broadcast_shapes

# Float dtypes are stored as they are and computed in float32, rounded once on store.
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
INT_DTYPES = ("int64", "int32", "int8")
# Every dtype an op may declare (OpFamily.dtypes, role_dtypes, out_dtype): the float ones an
# op computes in (float32 accumulation), and the integer and bool ones of index and mask
# arithmetic (simaccel/ops/builtin/masks.py), which are computed exactly in their own type.
ISA_DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)

# A dtype's name as TVM and numpy write it: bool, int8 ... uint64, float16 ... float64, bfloat16,
# the narrow floats (float8_e4m3fn, float6_e2m3fn, float4_e2m1fn, ...), with lanes (float4_e2m1fnx2).
_DTYPE_NAME = re.compile(r"(bool|u?int\d+|b?float\d+(_e\d+m\d+[a-z]*)?)(x\d+)?")


def is_dtype_name(name) -> bool:
    """Whether `name` names an element type (any, not only the ISA's): what tells a rule that
    gives a dtype the ISA lacks (the op stays on TVM) from one that gives no dtype at all (a
    bug in the declaration)."""
    return isinstance(name, str) and _DTYPE_NAME.fullmatch(name) is not None


def check_rank(role: str, shape, low: int, high: int) -> None:
    """ShapeError unless `low <= len(shape) <= high` (the op's name is added by simaccel)."""
    if not low <= len(shape) <= high:
        want = f"rank {low}" if low == high else f"rank {low}..{high}"
        raise ShapeError(f"{role} must have {want}, got shape {tuple(shape)}")


BROADCAST_RANK = 6  # the highest rank of a broadcasting op's result
BROADCAST_INDEX_DIMS = 4  # the dims its kernel divides an index into (kernels/grid.py's RANK)


def broadcast_result(shapes) -> tuple:
    """The numpy broadcast of `shapes`, for the broadcasting kernels: rank <= 6, and at most 4
    index dims once its dims of 1 are dropped and each pair of neighbours that every input
    walks alike (broadcast along both, or along neither) is merged, as kernels/grid.py's
    `collapse_dims` merges them: (B, G, 1, S, D) -> (B, G, R, S, D) is 3 such dims. A symbolic
    dim is never taken to be 1. ShapeError otherwise."""
    shapes = [tuple(s) for s in shapes]
    try:
        out = tuple(broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(f"shapes {', '.join(map(str, shapes))} do not broadcast") from None
    check_rank("result", out, 0, BROADCAST_RANK)
    one = lambda d: isinstance(d, (int, np.integer)) and d == 1  # noqa: E731
    runs, last = 0, None
    for k, d in enumerate(out):
        if one(d):
            continue
        walk = tuple(k < len(out) - len(s) or one(s[k - len(out) + len(s)]) for s in shapes)
        runs, last = runs + (walk != last), walk
    if runs > BROADCAST_INDEX_DIMS:
        raise ShapeError(f"result {out} of {', '.join(map(str, shapes))} is {runs} broadcast dims once merged "
                         f"(at most {BROADCAST_INDEX_DIMS})")
    return out


def is_bias_for(kind: str, bias_shape, out_shape) -> bool:
    """Whether adding `bias_shape` to `out_shape` (numpy broadcasting) adds one value per
    channel (axis 1 of NCHW, kind "channel") or per column (last axis, kind "row"),
    leaving the result's shape as it is."""
    shape, out = tuple(bias_shape), tuple(out_shape)
    if kind == "channel":
        return len(out) == 4 and len(shape) <= 4 and (1,) * (4 - len(shape)) + shape == (1, out[1], 1, 1)
    return 1 <= len(shape) <= len(out) and all(d == 1 for d in shape[:-1]) and shape[-1] == out[-1]


def output_hw(hw, window, strides, padding, dilation) -> tuple[int, int]:
    """(OH, OW) of a strided, padded (top, left, bottom, right), dilated window over (H, W)."""
    (h, w), (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = hw, window, strides, padding, dilation
    return (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (w + pl + pr - dw * (kw - 1) - 1) // sw + 1


def padding4(padding) -> list[int]:
    """Relax's padding (1, 2 or 4 values) as (top, left, bottom, right)."""
    padding = [int(p) for p in padding]
    return padding * 4 if len(padding) == 1 else padding * 2 if len(padding) == 2 else padding


def f32(array) -> np.ndarray:
    return np.asarray(array, dtype=np.float32)


def window_taps(x: np.ndarray, pad_value, window, strides, padding, dilation):
    """For each tap (i, j) of a 2-D window over NCHW `x`: ((i, j), the strided slice it reads).

    The slice has the output's spatial shape; `x` is padded with `pad_value` first.
    """
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = window, strides, padding, dilation
    oh, ow = output_hw(x.shape[2:], window, strides, padding, dilation)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=pad_value)
    for i in range(kh):
        for j in range(kw):
            yield (i, j), xp[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
