"""A thread's passes over one row: the loops the row kernels (kernels/normalization.py) share.

A row kernel's thread keeps `cache` values of its row in a local array, in runs of `vec`
(VEC where the kernel's vector copy runs, else 1; kernels/vector.py): in the pass that starts
at element p, slot j (a multiple of `vec`) holds elements p + first + (j // vec) * stride + k,
k < vec, where `first` is the thread's first element of a pass and `stride` = threads x vec.
A slot is in the row where `whole` (the kernel knows the thread's whole pass lies in the row:
nothing is checked), else where `live` (the thread has a row: a lane group past the last row
has none) and its first element is below the row length D. Softmax, layer norm and the row
sums, a block or a group of lanes per row, call these with the flags their layout fixes.

Built once per copy of a kernel's row loop (`row_passes`; `long_row_passes` for the tail of a
row longer than a block's caches), as device functions inlined where they are called. They use nothing of `cuda`: the simulator swaps that in the kernel's module only.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from numba import float32
from numba.cuda.extending import register_jitable


def row_passes(load_values, store_values, vec: int, cache: int, shift: bool = True) -> SimpleNamespace:
    """The passes below (load, add, add_squares, exp_add, scale_store, normalize_store) for a
    loop moving `vec` elements an access (`load_values` / `store_values` of
    kernels.vector.accessors) and keeping `cache` values a thread; a kernel's loop binds the
    ones it calls to names of its own (Numba calls functions, not attributes of an object).
    Without `shift` (RMS norm), normalize_store adds no beta and never reads it."""

    @register_jitable(inline="always")
    def load(values, x, base, p, first, stride, D, whole, live):
        """The slots of the pass from `p` that are in the row, loaded from x[base + i]."""
        for j in range(0, cache, vec):
            i = p + first + (j // vec) * stride
            if whole or (live and i < D):
                load_values(values, j, x, base + i)

    @register_jitable(inline="always")
    def add(acc, values, p, first, stride, D, whole, live):
        """`acc` plus each value of the pass's slots in the row, added in slot order."""
        for j in range(0, cache, vec):
            if whole or (live and p + first + (j // vec) * stride < D):
                for k in range(j, j + vec):
                    acc += values[k]
        return acc

    @register_jitable(inline="always")
    def add_squares(acc, values, mean, p, first, stride, D, whole, live):
        """`acc` plus (value - mean)^2 of each value of the pass's slots in the row, in slot order."""
        for j in range(0, cache, vec):
            if whole or (live and p + first + (j // vec) * stride < D):
                for k in range(j, j + vec):
                    d = values[k] - mean
                    acc += d * d
        return acc

    @register_jitable(inline="always")
    def exp_add(values, row_max, first, stride, D, whole, live):
        """Each value of the slots in the row replaced by exp(value - row_max); their sum."""
        acc = float32(0.0)
        for j in range(0, cache, vec):
            if whole or (live and first + (j // vec) * stride < D):
                for k in range(j, j + vec):
                    e = float32(math.exp(values[k] - row_max))
                    values[k] = e
                    acc += e
        return acc

    @register_jitable(inline="always")
    def scale_store(out, base, values, inv, first, stride, D, whole, live):
        """Each value of the slots in the row times `inv`, stored to out[base + i]."""
        for j in range(0, cache, vec):
            i = first + (j // vec) * stride
            if whole or (live and i < D):
                for k in range(j, j + vec):
                    values[k] *= inv
                store_values(out, base + i, values, j)

    @register_jitable(inline="always")
    def normalize_store(out, base, values, gamma, beta, g, b, mean, rstd, first, stride, D, whole, live):
        """(value - mean) * rstd * gamma + beta for the slots in the row, stored to
        out[base + i]; gamma and beta loaded an access at a time (into `g` and `b`) before
        the values they scale are stored."""
        for j in range(0, cache, vec):
            i = first + (j // vec) * stride
            if whole or (live and i < D):
                load_values(g, 0, gamma, i)
                if shift:
                    load_values(b, 0, beta, i)
                for k in range(vec):
                    v = (values[j + k] - mean) * rstd * g[k]
                    values[j + k] = v + b[k] if shift else v
                store_values(out, base + i, values, j)

    return SimpleNamespace(load=load, add=add, add_squares=add_squares, exp_add=exp_add, scale_store=scale_store,
                           normalize_store=normalize_store)


def long_row_passes(load_values, store_values, vec: int, cache: int, shift: bool = True) -> SimpleNamespace:
    """The passes over the tail of a row longer than a block's caches (online_add,
    load_normalize_store, load_exp_scale_store): a slot is in the row where its first element
    is below D. `shift` as in `row_passes`."""

    @register_jitable(inline="always")
    def online_add(values, p, first, stride, D, tm, ts):
        """The pass's values in the row folded into an online softmax sum: (tm, ts), the running
        max and the sum of exp(v - tm), rescaled when tm grows. v == tm adds exp(0) = 1 without
        computing v - tm, which is NaN for two infinities of one sign."""
        for j in range(0, cache, vec):
            if p + first + (j // vec) * stride < D:
                for k in range(j, j + vec):
                    v = values[k]
                    if v > tm:
                        ts = ts * float32(math.exp(tm - v)) + float32(1.0)
                        tm = v
                    elif v == tm:
                        ts += float32(1.0)
                    else:
                        ts += float32(math.exp(v - tm))
        return tm, ts

    @register_jitable(inline="always")
    def load_normalize_store(out, base, values, x, gamma, beta, g, b, mean, rstd, p, first, stride, D):
        """The pass from `p` of row `base` of x, with its gamma and beta (into `g` and `b`,
        `cache` long), loaded, normalized as `normalize_store` does and stored."""
        for j in range(0, cache, vec):
            i = p + first + (j // vec) * stride
            if i < D:
                load_values(values, j, x, base + i)
                load_values(g, j, gamma, i)
                if shift:
                    load_values(b, j, beta, i)
        for j in range(0, cache, vec):
            i = p + first + (j // vec) * stride
            if i < D:
                for k in range(j, j + vec):
                    v = (values[k] - mean) * rstd * g[k]
                    values[k] = v + b[k] if shift else v
                store_values(out, base + i, values, j)

    @register_jitable(inline="always")
    def load_exp_scale_store(out, base, values, x, row_max, inv, p, first, stride, D):
        """The pass from `p` of row `base` of x loaded; exp(value - row_max) * inv stored."""
        for j in range(0, cache, vec):
            i = p + first + (j // vec) * stride
            if i < D:
                load_values(values, j, x, base + i)
        for j in range(0, cache, vec):
            i = p + first + (j // vec) * stride
            if i < D:
                for k in range(j, j + vec):
                    values[k] = float32(math.exp(values[k] - row_max)) * inv
                store_values(out, base + i, values, j)

    return SimpleNamespace(online_add=online_add, load_normalize_store=load_normalize_store,
                           load_exp_scale_store=load_exp_scale_store)
