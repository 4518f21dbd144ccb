"""The "ref" engine: runs each op's numpy reference on host memory.

The fast hardware-free path (no Numba import, no kernels) and the oracle the others are
tested against. Results are written into the caller's buffers in place. IEEE special values
(NaN, inf, overflow) are results here, not events: numpy's warnings about them are silenced.
A reference's result is checked against the op's declared output before it is copied
(`OpDef.reference`: an array of the output's shape, never broadcast, in a dtype that casts to
the output's), so a user's reference that returns None, a list or a wrong shape is an
OpDeclarationError naming the op, not a wrong answer.
"""

from __future__ import annotations

import numpy as np

from .base import Engine


class RefEngine(Engine):
    name = "ref"
    description = "numpy references on host memory (fast, no GPU needed)"

    def execute(self, call, node, op, inputs, output, launches=()) -> int:
        with np.errstate(all="ignore"):
            np.copyto(output, op.reference(*inputs, **op.all_attrs(node.attrs)), casting="same_kind")
        return 0
