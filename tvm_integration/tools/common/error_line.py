"""An exception as one line, for verdicts, reasons and the command line's messages.

Where it sits: every tool that reports a failure it caught (fuzz and conformance verdicts,
`simaccel run`'s and `simaccel bisect`'s errors, loading a library) says it with `error_line`.
"""

from __future__ import annotations

import os


def error_line(e: BaseException) -> str:
    """An exception as one line: its type and the last line of its message (TVM's errors end with it);
    for one with no message (a bare `assert`), the place that raised it."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    if lines:
        return f"{type(e).__name__}: {lines[-1]}"
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return type(e).__name__
    code = tb.tb_frame.f_code
    return f"{type(e).__name__} in {_short_path(code.co_filename)}:{tb.tb_lineno} ({code.co_name})"


def _short_path(filename: str) -> str:
    """A file's path from its package on (tvm/..., simaccel/...), as a reader finds it."""
    parts = filename.replace(os.sep, "/").split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in ("site-packages", "dist-packages"):
            return "/".join(parts[i + 1:])
    return filename
