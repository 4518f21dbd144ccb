"""Implementations the TVM layer provides for names the core exports.

Where it sits: at the bottom of simaccel (it imports only simaccel.errors). The core imports
nothing of `simaccel.tvm_integration` (tests/test_isa.py reads every import, string ones
included), yet some names it exports are implemented there, because they build and run models
with TVM: `simaccel.debug.bisect`, `simaccel.testing.assert_matches_tvm` and its kin. The TVM
layer registers them (`provide`) when its package is imported, which a plain `import tvm` does
(the `tvm.backends` entry point imports `simaccel.tvm_integration.backend.autoload`), and so
do the pytest plugin and every tool; the core looks them up by name when they are used
(`provided`), importing tvm first where nothing has registered them yet.
"""

from __future__ import annotations

import importlib

from .errors import SimAccelError

_PROVIDED: dict[str, str] = {}  # name -> "module" or "module:attribute"


def provide(name: str, where: str) -> None:
    """Register `where` ("module" or "module:attribute", imported when first used) as `name`."""
    _PROVIDED[name] = where


def provided(name: str):
    """The module or object registered as `name`. ImportError where TVM (or the part the
    implementation needs) cannot be imported; SimAccelError where nothing registered it."""
    if name not in _PROVIDED:
        importlib.import_module("tvm")  # its backends entry point imports the TVM layer, which provides
    where = _PROVIDED.get(name)
    if where is None:
        raise SimAccelError(f"nothing provides simaccel's {name!r}: import simaccel.tvm_integration first "
                            "(TVM's backend autoload is off here)")
    module, _, attribute = where.partition(":")
    found = importlib.import_module(module)
    return getattr(found, attribute) if attribute else found
