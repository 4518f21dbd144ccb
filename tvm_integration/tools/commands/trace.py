"""`simaccel trace`: a timeline trace read back: time per op kind and the gaps between kernels, or a PNG.

The work is the core's (simaccel/debug/timeline_summary.py): a trace file holds no TVM.
"""

from __future__ import annotations

import os

from ....errors import SimAccelError
from . import OK

NAME = "trace"


def add_parser(subparsers) -> None:
    trace = subparsers.add_parser(
        NAME,
        help="read a timeline trace: time per op kind and gaps between kernels (--summary), a PNG (--png)",
        description="Read a trace written by simaccel.trace / $SIMACCEL_TRACE / --trace: --summary prints the time "
        "per op kind (simaccel ops, TVM kernels and builtins) and the gaps between consecutive kernels on each track; "
        "--png draws a timeline, one row per track (needs pip install 'simaccel[trace]').",
    )
    trace.add_argument("trace_file", metavar="TRACE.json", help="the trace to read")
    trace.add_argument("--summary", action="store_true", help="print the summary (the default when --png is not given)")
    trace.add_argument("--png", metavar="OUT.png", help="draw the timeline into this PNG")


def check(args) -> None:
    pass


def run(args) -> int:
    """The summary of a trace file and/or its PNG timeline."""
    from ....debug.timeline_summary import format_summary, load, summarize, write_png

    document = load(args.trace_file)
    if args.png:
        check_dir = os.path.dirname(os.path.abspath(args.png))
        if not os.path.isdir(check_dir):
            raise SimAccelError(f"--png {args.png}: no folder {check_dir}")
        write_png(document, args.png)
        print(f"wrote {args.png}")
    if args.summary or not args.png:
        print(format_summary(summarize(document)))
    return OK
