"""The random choices a fuzz model is drawn from (`Draw`), and what the drawn models may hold
(`Config`).

Where it sits: the bottom of drawing. The builder (fuzz/build.py) and fuzz/draw.py make every
choice through a `Draw`, which records it; a failing model is shrunk by shrinking its choices
(fuzz/shrink.py), and a campaign draws case i of seed S from numpy's generator seeded with
(S, i), so the same seed draws the same models wherever they run.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import numpy as np


class Draw:
    """The random choices of one model: `integer(lo, hi)` gives an int in [lo, hi].

    Every choice with more than one answer is recorded in `choices`, as its offset from `lo`:
    `Draw.replay(choices)` makes the same model again, and a shorter or smaller sequence makes a
    simpler one (what the campaign's shrinker, fuzz/shrink.py, searches). `spans` records where
    the choices of each drawn item (an op node) are, with the index of the choice that counted
    the items: the shrinker drops an item by deleting its span and lowering that count."""

    def __init__(self, integer: Callable[[int, int], int]):
        self.integer = integer
        self.choices: list[int] = []
        self.spans: list[tuple[int, int, int | None]] = []  # (start, end, index of the count choice)

    def count(self, lo: int, hi: int) -> tuple[int, int | None]:
        """A number of items to draw, and the index of its choice (None where there was no choice)."""
        at = len(self.choices)
        n = self.int(lo, hi)
        return n, at if len(self.choices) > at else None

    @contextlib.contextmanager
    def item(self, counter: int | None):
        """The choices made in the block are one item of the count at `counter`."""
        start = len(self.choices)
        yield
        self.spans.append((start, len(self.choices), counter))

    def int(self, lo: int, hi: int) -> int:
        if hi <= lo:
            return lo
        value = self.integer(lo, hi)
        self.choices.append(value - lo)
        return value

    def choice(self, options):
        return options[self.int(0, len(options) - 1)]

    def chance(self, percent: int) -> bool:
        """True `percent` times in 100; a draw of 0 (where shrinking leads) is False."""
        return self.int(0, 99) >= 100 - percent

    @classmethod
    def seeded(cls, seed) -> "Draw":
        """Choices from numpy's generator seeded with `seed` (an int or a sequence of ints)."""
        rng = np.random.default_rng(seed)
        return cls(lambda lo, hi: int(rng.integers(lo, hi + 1)))

    @classmethod
    def replay(cls, choices) -> "Draw":
        """The recorded `choices` again, each capped at its range; past their end, every choice
        is its range's low end."""
        it = iter(choices)
        return cls(lambda lo, hi: lo + min(max(next(it, 0), 0), hi - lo))


@dataclass
class Config:
    """What the drawn models may hold."""

    dtypes: tuple[str, ...] = ("float32", "float16")
    max_ops: int = 8
    tiny: bool = False  # small dims only (the simulator)
    specials_percent: int = 10  # float32 models whose first input holds NaN and inf
    zero_dim_percent: int = 2  # dims drawn as 0 (TVM's CUDA build refuses most zero-size tensors)
    user_ops: bool = True  # draw users' declared ops too (those with a fuzz hook), where there are any
