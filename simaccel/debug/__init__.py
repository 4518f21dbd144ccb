"""simaccel.debug: tools that find where a BYOC flow goes wrong (sanitizer, bisection, trace).

Every tool watches region calls through `simaccel.debug.hooks` (one hook in the runtime).
"""

from .hooks import RegionRun, Watcher, watching
from .sanitize import sanitize, sanitizing, set_sanitize  # `sanitize` here is the switch, not its module

__all__ = ["RegionRun", "Watcher", "watching", "sanitize", "sanitizing", "set_sanitize"]
