"""Window attributes shared by convolution and pooling: the launchers and the op rules.

Programs carry strides, dilation and pool sizes as pairs and padding as
(top, left, bottom, right); direct callers may also pass one int or a 1- or 2-tuple.
"""

from __future__ import annotations


def pair(value, op: str, name: str) -> tuple[int, int]:
    """`value` as (height, width)."""
    if isinstance(value, int):
        return (value, value)
    value = tuple(int(e) for e in value)
    if len(value) == 1:
        return (value[0], value[0])
    if len(value) != 2:
        raise ValueError(f"{op} {name} must have 2 values, got {value}")
    return value


def padding4(padding, op: str) -> tuple[int, int, int, int]:
    """`padding` as (top, left, bottom, right)."""
    if isinstance(padding, int):
        return (padding,) * 4
    padding = tuple(int(e) for e in padding)
    if len(padding) == 1:
        return padding * 4
    if len(padding) == 2:
        return padding * 2
    if len(padding) != 4:
        raise ValueError(f"{op} padding must be (top, left, bottom, right), got {padding}")
    return padding


def output_hw(hw, window, strides, padding, dilation) -> tuple[int, int]:
    """(OH, OW) of a strided, padded (top, left, bottom, right), dilated window over (H, W)."""
    (h, w), (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = hw, window, strides, padding, dilation
    return (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
