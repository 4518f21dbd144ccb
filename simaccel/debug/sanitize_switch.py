"""The sanitizer's switches: whether region calls are checked for memory and stream defects.

Where it sits: a debugging tool's view of the sanitize switch of simaccel.switches, which the
runtime reads on every Python region call (ref, sim, cuda engines) and then runs the call under
the sanitizer's watcher (simaccel.debug.sanitizer); native regions read the SANITIZE bit of the
debug word (simaccel.debug.flags), which is kept set whenever sanitizing is on anywhere in the
process. What the checks are: docs/debugging.md.

The switch, first match wins: an open `sanitize(...)` block (per thread / task), then
`set_sanitize(True | False)`, then $SIMACCEL_SANITIZE (1/true/yes/on or 0/false/no/off; unset
or empty: off). A Program built with `build(..., sanitize=True)` (`Program.sanitize`) is
sanitized on every call whatever the switch says.
"""

from __future__ import annotations

from ..switches import SANITIZE_ENV, sanitize, sanitizing, set_sanitize
from ..switches import update_sanitize_bit as update_flag

__all__ = ["SANITIZE_ENV", "sanitize", "sanitizing", "set_sanitize", "update_flag"]
