"""What a case or a model writes on stderr, captured at the file descriptor; a process's last words.

Where it sits: `simaccel fuzz` (fuzz/campaign.py) and `simaccel conformance`
(conformance/check.py) keep what each case or model writes on stderr (TVM's C++ log writes
there itself, not through Python) with its record and off the console (`stderr_captured`);
`tail` gives the last line a fresh process (runs.run_fresh) wrote, TVM's warnings aside.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections import deque
from dataclasses import dataclass, field

# A warning of TVM's C++ log (LOG(WARNING)): "[06:21:16] /project/src/runtime/vm/executable.cc:276: Warning: Scope Saving:"
TVM_WARNING = re.compile(r"^\[\d\d:\d\d:\d\d\] \S+:\d+: Warning: ")
TIME_STAMP = re.compile(r"^\[\d\d:\d\d:\d\d\] ")
LOG_LINES_KEPT = 40  # the last lines a case (or model) wrote on stderr, kept in its record
LOG_DISTINCT_KEPT = 5  # distinct lines kept per batch of cases (the campaign's summary shows some)


def tail(result) -> str:
    """The last line a process wrote on stderr, TVM's own warnings ("Scope Loaded:", ...) aside."""
    lines = [line for line in result.stderr.strip().splitlines() if not TVM_WARNING.match(line)]
    return (lines or ["no error output"])[-1][:300]


def _flush_stderr() -> None:
    """Python's text written so far goes out on the file descriptor it was written for."""
    for stream in {id(s): s for s in (sys.stderr, sys.__stderr__) if s is not None}.values():
        with contextlib.suppress(Exception):
            stream.flush()


@dataclass
class CapturedLog:
    """What a block wrote on stderr: how many lines, the last LOG_LINES_KEPT of them, and its
    first few distinct ones (TVM's time stamps left out)."""

    count: int = 0
    lines: list = field(default_factory=list)
    distinct: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"stderr_lines": self.count, "stderr": self.lines} if self.count else {}


@contextlib.contextmanager
def stderr_captured(folder):
    """What this process writes to file descriptor 2 while the block runs goes to a file in
    `folder`, not to the console; yields a `CapturedLog`, filled when the block ends.

    TVM's C++ log writes there directly, not through Python's sys.stderr ("Scope Saving:" at
    every export of a VM executable with memory scopes, TOPI's warnings while compiling), as
    does anything else a case runs; `simaccel fuzz` and `simaccel conformance` keep these lines
    with the case's or model's record and the console to progress and results. The file stays
    in `folder` if the process dies in the block (in this process's fuzz campaign, `folder` is
    the case's OUT/running/ folder: the crash's last words are left there)."""
    _flush_stderr()
    saved = os.dup(2)
    fd, path = tempfile.mkstemp(prefix="stderr-", suffix=".txt", dir=str(folder))
    log = CapturedLog()
    try:
        os.dup2(fd, 2)
        yield log
    finally:
        _flush_stderr()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)
        last = deque(maxlen=LOG_LINES_KEPT)
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")[:300]
                log.count += 1
                last.append(line)
                bare = TIME_STAMP.sub("", line)
                if len(log.distinct) < LOG_DISTINCT_KEPT and bare not in log.distinct:
                    log.distinct.append(bare)
        log.lines = list(last)
        os.unlink(path)

