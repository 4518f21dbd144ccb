"""Ledger: counters that belong to one runtime instance.

Offloaded calls, op executions and kernel launches per op, bytes that simaccel itself
copied (host->device, device->host, device->device) and wall time per region.
Zero-copy execution leaves the byte counters at 0: that is the point of the project.
An optional trace records, for every boundary tensor of every call, the memory address the
accelerator used, so a test can check that it is TVM's own buffer.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict


class Ledger:
    def __init__(self):
        self._lock = threading.Lock()
        self.tracing = False
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
            self._trace = []

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

    def record_tensor(self, region: str, role: str, name: str, device: str, address: int) -> None:
        """Trace one boundary tensor (callers check `tracing` first, to skip the formatting)."""
        if self.tracing:
            with self._lock:
                self._trace.append(
                    {"region": region, "role": role, "tensor": name, "device": device, "address": int(address)}
                )

    def trace(self) -> list[dict]:
        """The traced boundary tensors, oldest first (see `tracing`)."""
        with self._lock:
            return [dict(entry) for entry in self._trace]

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
