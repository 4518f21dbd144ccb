"""simaccel.debug: tools that find where a BYOC flow goes wrong (sanitizer, bisection, trace).

Every tool watches region calls through `simaccel.debug.hooks` (one hook in the runtime).
Where it sits: above the runtime, which knows none of it: the tools listen to its events
(simaccel.events); importing this package (which `import simaccel` does) registers the
sanitizer's checks.
"""

from . import sanitizer  # noqa: F401  (registers the watcher of sanitized calls: simaccel.events.SANITIZE)
from .bisection import bisect
from .capture import Capture, RegionCapture
from .hooks import RegionRun, Watcher, watching
from .sanitize_switch import sanitize, sanitizing, set_sanitize
from .timeline import trace

__all__ = ["Capture", "RegionCapture", "RegionRun", "Watcher", "bisect", "sanitize", "sanitizing", "set_sanitize", "trace",
           "watching"]
