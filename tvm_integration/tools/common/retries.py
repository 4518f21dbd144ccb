"""The lost-worker policy of a campaign on a cluster: a lost task is run again once; lost twice,
what its worker said last (a hang, a lost GPU context) or else a crash.

Where it sits: `simaccel fuzz` (fuzz/campaign.py: a batch of cases) and `simaccel conformance`
(conformance/run.py: a model) submit tasks to an executor (tools/executors.py) that reports a
task whose worker died or was ended as `Lost`. Both retry it once as it was; a second loss is
the campaign's to act on: the fuzzer splits a batch into single cases, and a single case or a
model lost twice is reported as a failure at the stage `lost_twice` gives.
"""

from __future__ import annotations

from .verdicts import CRASH


class Retries:
    """The tasks retried so far (`retried`, in the order they were lost) on `executor`."""

    def __init__(self, executor):
        self.executor = executor
        self.retried: list = []

    def again(self, key, fn, *args) -> bool:
        """Submit the lost task `key` again, the first time it is lost; False when it was retried already."""
        if key in self.retried:
            return False
        self.retried.append(key)
        self.executor.submit(key, fn, *args)
        return True


def lost_twice(events: list[dict], field: str, value, reason: str) -> tuple[str, str, str]:
    """(stage, error, reason) of a task lost for good: the last worker event whose `field` is
    `value` (a hang past the time limit, a lost GPU context), else a crash with `reason`."""
    event = next((e for e in reversed(events) if e.get(field) == value), None)
    stage = event["stage"] if event else CRASH
    return stage, "WorkerLost" if stage == CRASH else "TimeLimit", event["reason"] if event else reason
