"""Ledger: counters that belong to one runtime instance.

Offloaded calls, op executions and kernel launches per op, bytes that simaccel itself
copied (host->device, device->host, device->device) and wall time per region.
Zero-copy execution leaves the byte counters at 0: that is the point of the project.
It also keeps each region's Program, so that `modeled` can put the timing model's figure
(simaccel.timing) beside the measured time of every region.
An optional trace records, for every boundary tensor of every call, the memory address the
accelerator used, so a test can check that it is TVM's own buffer.

Native regions (simaccel.native) count their calls themselves, in memory the ledger hands
them (`native_counters`: calls, nanoseconds, bytes copied, and each op's kernel launches, as
the plan of each call launched them); `snapshot` adds those counts in, so the ledger shows both
paths. Native calls are not traced. Every copy is announced as a COPY event
(simaccel.events: the timeline trace listens).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections import Counter, defaultdict

from . import events
from .timing import modeled_beside_measured


class _NativeRegion:
    """The counters one native region updates, with what they mean for the ledger."""

    def __init__(self, name: str, ops: list[str]):
        self.name, self.ops = name, ops
        # calls, nanoseconds, copied bytes, then each op's kernel launches (those of the plan each
        # call ran: a symbolic region's differ with its sizes)
        self.counts = (ctypes.c_int64 * (3 + len(ops)))()
        self.baseline = [0] * len(self.counts)

    def since_reset(self) -> list[int]:
        return [now - then for now, then in zip(self.counts, self.baseline)]


class Ledger:
    def __init__(self):
        self._lock = threading.Lock()
        self.tracing = False
        self._native: list[_NativeRegion] = []
        self._programs: dict = {}  # native region name -> its Program (kept, as the region's counters are)
        # region name -> its Program for regions run through Runtime.execute: weak, so the ledger never
        # keeps alive a Program the runtime's bounded cache has evicted (a region is modeled while it lives)
        self._run_programs = weakref.WeakValueDictionary()
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
            for region in self._native:
                region.baseline = list(region.counts)

    def native_counters(self, name: str, ops: list[str], program=None) -> int:
        """Address of the int64 counters a native region of `name` (with `ops`, and its Program
        where the caller could read it) updates: calls, nanoseconds, copied bytes, then one
        count of kernel launches per op; kept forever."""
        region = _NativeRegion(name, list(ops))
        with self._lock:
            self._native.append(region)
            if program is not None:
                self._programs[name] = program
        return ctypes.addressof(region.counts)

    def record_region(self, name: str, seconds: float, program=None) -> None:
        with self._lock:
            self._calls += 1
            self._region_calls[name] += 1
            self._region_seconds[name] += seconds
            if program is not None:
                self._run_programs[name] = program

    def programs(self) -> dict:
        """The Programs of the regions counted so far (name -> Program), for the timing model
        (`modeled`): every native region's, and those of regions run through the runtime whose
        Program is still in its cache."""
        with self._lock:
            return {**self._run_programs, **self._programs}

    def modeled(self, performance, staged: bool = False):
        """Each region counted since the last reset, measured time per call beside the time the
        timing model gives for an accelerator of `performance` (simaccel.timing.modeled_beside_measured)."""
        return modeled_beside_measured(self.snapshot(), self.programs(), performance, staged)

    def record_op(self, op: str, launches: int) -> None:
        with self._lock:
            self._ops[op] += 1
            self._launches[op] += launches

    @property
    def copy_observers(self) -> tuple:
        """Who is told of every copy: the COPY listeners of simaccel.events (the timeline trace)."""
        return events.listeners(events.COPY)

    def record_copy(self, direction: str, nbytes: int) -> None:
        """Count bytes simaccel copied; direction is a key of snapshot()["bytes"]."""
        with self._lock:
            self._bytes[direction] += int(nbytes)
        events.announce(events.COPY, direction, nbytes)

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
        """A plain-dict copy of every counter (Python and native regions), safe to keep."""
        with self._lock:
            calls, ops, launches = self._calls, Counter(self._ops), Counter(self._launches)
            bytes_ = dict(self._bytes)
            region_calls, seconds = Counter(self._region_calls), defaultdict(float, self._region_seconds)
            for region in self._native:
                n, nanoseconds, copied, *op_launches = region.since_reset()
                if n == 0:
                    continue
                calls += n
                region_calls[region.name] += n
                seconds[region.name] += nanoseconds * 1e-9
                bytes_["device_to_device"] += copied
                for op, count in zip(region.ops, op_launches):
                    ops[op] += n
                    launches[op] += count
            return {
                "offloaded_calls": calls,
                "ops": dict(ops),
                "kernel_launches": dict(launches),
                "bytes": bytes_,
                "regions": {name: {"calls": region_calls[name], "seconds": seconds[name]} for name in region_calls},
            }
