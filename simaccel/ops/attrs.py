"""Attribute kinds of the ISA: what a Program may give for each attribute of an op.

Each kind checks one value as it stands in a Program (JSON types: lists, ints, floats,
bools) and returns it normalised, or raises ValueError saying what is wrong; the Program
validator turns that into a ProgramError naming the op and the attribute. Nothing is
coerced: a stride of 1.5, "2" or True is refused, not rounded or parsed.
"""

from __future__ import annotations

import math

from ..shapes import Dim


def _ints(value, count: int, low: int, what: str) -> tuple[int, ...]:
    fits = isinstance(value, (list, tuple)) and len(value) == count
    if not fits or any(type(v) is not int or v < low for v in value):
        raise ValueError(f"must be a list of {count} {what}, got {value!r}")
    return tuple(value)


def pair(value) -> tuple[int, int]:
    """(height, width), both >= 1: strides, dilation, pool sizes."""
    return _ints(value, 2, 1, "integers >= 1")


def output_padding(value) -> tuple[int, int]:
    """(height, width), both >= 0: rows and columns a transposed convolution adds at the end."""
    return _ints(value, 2, 0, "integers >= 0")


def padding(value) -> tuple[int, int, int, int]:
    """(top, left, bottom, right), each >= 0."""
    return _ints(value, 4, 0, "integers >= 0 (top, left, bottom, right)")


def flag(value) -> bool:
    """true or false."""
    if type(value) is not bool:
        raise ValueError(f"must be true or false, got {value!r}")
    return value


def positive_float(value) -> float:
    """A finite number > 0 (an epsilon)."""
    if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a finite number > 0, got {value!r}")
    return float(value)


def count(value) -> int:
    """An integer >= 1 (groups)."""
    if type(value) is not int or value < 1:
        raise ValueError(f"must be an integer >= 1, got {value!r}")
    return value


def integer(value) -> int:
    """Any integer (an axis, a count)."""
    if type(value) is not int:
        raise ValueError(f"must be an integer, got {value!r}")
    return value


def number(value) -> float:
    """A finite number."""
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value!r}")
    return float(value)


INFINITIES = ("inf", "-inf")  # how a bound's infinite value is written (Program JSON has no inf)


def bound(value) -> float:
    """A bound that may be open: a finite number, or "inf" / "-inf" (clip's upper bound of
    hardsigmoid, which TVM's importer writes as clip(x, 0, inf))."""
    if value in INFINITIES:
        return float(value)
    return number(value)



def shape(value) -> tuple:
    """A tensor shape: a list of integers >= 0 or symbolic sizes (simaccel.shapes.Dim, which a
    Program binds at each call), rank 0 to 6."""
    if not isinstance(value, (list, tuple)) or len(value) > 6:
        raise ValueError(f"must be a list of at most 6 integers >= 0, got {value!r}")
    if any(isinstance(v, Dim) for v in value):
        static = [v for v in value if not isinstance(v, Dim)]
        _ints(static, len(static), 0, "integers >= 0 or symbolic sizes")
        return tuple(value)
    return _ints(value, len(value), 0, "integers >= 0")


def axes(value) -> tuple[int, ...]:
    """Distinct axes (integers >= 0, the rank is checked by the op's shape rule)."""
    if not isinstance(value, (list, tuple)) or len(value) > 6:
        raise ValueError(f"must be a list of at most 6 distinct integers >= 0, got {value!r}")
    found = _ints(value, len(value), 0, "distinct integers >= 0")
    if len(set(found)) != len(found):
        raise ValueError(f"must be distinct, got {value!r}")
    return found


def dtype(value) -> str:
    """An element type of the ISA (simaccel.ops.rules.ISA_DTYPES), as its name."""
    from .rules import ISA_DTYPES

    if value not in ISA_DTYPES:
        raise ValueError(f"must be one of {', '.join(ISA_DTYPES)}, got {value!r}")
    return value
