"""Ledger: counters that belong to one runtime instance.

Offloaded calls, op executions and kernel launches per op, bytes that simaccel itself
copied (host->device, device->host, device->device) and wall time per region.
Zero-copy execution leaves the byte counters at 0: that is the point of the project.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict


class Ledger:
    def __init__(self):
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Clear every counter."""
        with self._lock:
            self._calls = 0
            self._ops = Counter()
            self._launches = Counter()
            self._bytes = {"host_to_device": 0, "device_to_host": 0, "device_to_device": 0}
            self._region_calls = Counter()
            self._region_seconds = defaultdict(float)

    def record_region(self, name: str, seconds: float) -> None:
        with self._lock:
            self._calls += 1
            self._region_calls[name] += 1
            self._region_seconds[name] += seconds

    def record_op(self, op: str, launches: int) -> None:
        with self._lock:
            self._ops[op] += 1
            self._launches[op] += launches

    def record_copy(self, direction: str, nbytes: int) -> None:
        """Count bytes simaccel copied; direction is a key of snapshot()["bytes"]."""
        with self._lock:
            self._bytes[direction] += int(nbytes)

    def snapshot(self) -> dict:
        """A plain-dict copy of every counter, safe to keep after later calls."""
        with self._lock:
            return {
                "offloaded_calls": self._calls,
                "ops": dict(self._ops),
                "kernel_launches": dict(self._launches),
                "bytes": dict(self._bytes),
                "regions": {
                    name: {"calls": self._region_calls[name], "seconds": self._region_seconds[name]}
                    for name in self._region_calls
                },
            }
