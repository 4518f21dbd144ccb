"""Seeded random inputs, shared by the demo, the tests, the GPU artifacts and the benchmark.

The same (specs, seed) gives the same arrays on every machine, so a library built on one
machine can be fed and checked on another without carrying its inputs.
"""

from __future__ import annotations

import numpy as np


def random_arrays(specs, seed: int = 0) -> list[np.ndarray]:
    """One array per (name, shape, dtype): N(0, 1), scaled by 1/sqrt(fan-in) for weights.

    A tensor counts as a weight when its name contains "_w" (e.g. "fc1_w", "conv_w3").
    """
    rng = np.random.default_rng(seed)
    arrays = []
    for name, shape, dtype in specs:
        shape = tuple(int(d) for d in shape)
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        scale = 1.0 / np.sqrt(fan_in) if "_w" in name else 1.0
        arrays.append((rng.standard_normal(shape, dtype=np.float32) * scale).astype(dtype))
    return arrays
