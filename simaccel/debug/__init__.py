"""simaccel.debug: tools that find where a BYOC flow goes wrong (sanitizer, bisection, trace).

Every tool watches region calls through `simaccel.debug.hooks` (one hook in the runtime).
"""

from .hooks import RegionRun, Watcher, watching
from .trace import trace

__all__ = ["RegionRun", "Watcher", "trace", "watching"]
