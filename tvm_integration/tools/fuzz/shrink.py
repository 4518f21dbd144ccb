"""Shrinking a failing fuzz case by its choices.

Where it sits: a case is the model that a sequence of choices draws (fuzz/models.py `Draw`);
the campaign (fuzz/campaign.py) hands a failure's choices to `shrink`, on a Dask worker or in
its own process, which looks for the smallest sequence that still fails the same way. Smaller
means shorter, then smaller choice by choice: draws of 0 are the simple ones (one op, small
dims, no second input), so such a sequence draws a smaller model.

The passes (as in the choice-sequence shrinkers of property-based testing tools): drop whole
items (an op node's span of choices, with the choice that counted the nodes lowered by one),
delete runs of choices, set runs to 0, and lower single choices (to 0, else by halving the gap
to the smallest value tried that still fails), repeated while any pass makes progress and the
time allowed lasts.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence


def _smaller(a: Sequence[int], b: Sequence[int]) -> bool:
    """Shortlex order: shorter first, then the smaller choice where they first differ."""
    return (len(a), list(a)) < (len(b), list(b))


Spans = list  # [(start, end, index of the count choice or None)], as fuzz/models.py `Draw.spans`


def shrink(choices: Sequence[int], spans: Spans, fails: Callable[[list[int]], "tuple[list[int], Spans] | None"],
           seconds: float, clock=time.monotonic) -> tuple[list[int], int]:
    """The smallest choices found for which `fails` holds, and the number of candidates tried.

    `fails(candidate)` checks the case that `candidate` draws: None when it does not fail the
    same way, else the choices that draw actually made (a candidate is read with each choice
    capped at its range, so these may be smaller than the candidate) and their spans.
    `choices` (drawn with `spans`) must fail.
    """
    best = list(choices)
    best_spans = list(spans)
    deadline = clock() + seconds
    seen: set[tuple[int, ...]] = set()
    tried = 0

    def attempt(candidate: list[int]) -> bool:
        nonlocal best, best_spans, tried
        key = tuple(candidate)
        if key in seen or not _smaller(candidate, best) or clock() > deadline:
            return False
        seen.add(key)
        tried += 1
        answer = fails(candidate)
        if answer is None:
            return False
        made, best_spans = answer
        best = list(made) if _smaller(made, candidate) else candidate
        return True

    progress = True
    while progress and clock() <= deadline:
        progress = False
        if _drop_an_item(best, best_spans, attempt):
            progress = True
            continue  # items first, while any goes: each one dropped makes every later pass cheaper
        for size in (8, 4, 2, 1):  # delete runs, from the end (later choices depend on earlier ones)
            i = len(best) - size
            while i >= 0:
                if attempt(best[:i] + best[i + size:]):
                    progress = True
                i -= 1
        for size in (8, 4, 2, 1):  # runs set to 0
            for i in range(len(best) - size + 1):
                if any(best[i:i + size]) and attempt(best[:i] + [0] * size + best[i + size:]):
                    progress = True
        for i in range(len(best)):  # each choice lowered as far as it still fails
            if i >= len(best) or best[i] == 0:
                continue
            if attempt(best[:i] + [0] + best[i + 1:]):
                progress = True
                continue
            low = 0  # fails at best[i], not at low
            while i < len(best) and best[i] - low > 1 and clock() <= deadline:
                mid = (low + best[i]) // 2
                if attempt(best[:i] + [mid] + best[i + 1:]):
                    progress = True
                else:
                    low = mid
    return best, tried


def _drop_an_item(best: list[int], spans: Spans, attempt) -> bool:
    """Try dropping each item, from the last (later items read earlier ones); whether one went."""
    for start, end, counter in reversed(spans):
        if end > len(best) or (counter is not None and (counter >= start or best[counter] == 0)):
            continue
        candidate = best[:start] + best[end:]
        if counter is not None:
            candidate[counter] -= 1
        if attempt(candidate):
            return True
    return False
