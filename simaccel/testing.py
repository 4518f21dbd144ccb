"""simaccel.testing: test your own ops, device profiles and models against TVM alone.

What a team writes in its own repository's tests (examples/test_my_backend.py is one to copy):

* the pytest fixture `simaccel_engine`, parametrised over the engines this machine can run
  (`ref`, `sim`, `cuda`, `native`; choose with ``--simaccel-engines=ref,sim`` or the ini option
  ``simaccel_engines``); an engine that cannot run here is skipped with the reason;
* `assert_matches_tvm(mod, inputs, rtol=..., atol=..., engines=[simaccel_engine])`: builds the
  model with simaccel and with TVM alone, runs both and compares every output; the sanitizer
  is on, and on a mismatch the bisection's report says which op of which region went wrong;
* `assert_offloads(mod, ops=[...], regions=N, profile=...)`: the partition report says so;
* `declared(family, ...)` (a with-block) and the fixture `simaccel_declare`: ops declared for
  one test and forgotten after it.

Layout, and why. Building and partitioning need TVM, so the implementation is on the TVM side,
`simaccel.tvm_integration.tools.testing`, and the pytest hooks are
`simaccel.tvm_integration.tools.pytest_plugin`, which setup.py's `pytest11` entry point names
(so `pip install simaccel` gives every pytest run the fixture and the option). The core
(`simaccel/`) must not import TVM (tests/test_imports.py) nor any layer above it
(tests/test_isa.py), yet `simaccel.testing` is the name users should import. So this module
holds only what needs no TVM (the engines' table and `declared`, from the core's op
registry) and hands every other name over from the TVM side on first use (module
`__getattr__`, through what the TVM layer provides: `simaccel.provided("testing")`): `import simaccel.testing` stays cheap and TVM-free, and the
core still depends on nothing above it when it is imported. tests/test_testing_plugin.py
checks both.
"""

from __future__ import annotations

from .ops.registry import declared
from .provided import provided

# name -> (device its tensors live on, runtime engine, what it is). "native" runs regions of
# a CUDA build compiled to C++ (simaccel.native) with the runtime's "auto" choice.
TEST_ENGINES = {
    "ref": ("cpu", "ref", "numpy references on the CPU"),
    "sim": ("cpu", "sim", "the Numba kernels on the Numba CUDA simulator (slow: keep shapes small)"),
    "cuda": ("cuda", "cuda", "the Numba kernels on a GPU through numba-cuda (Python region functions)"),
    "native": ("cuda", "auto", "native regions on a GPU: C++ launching the AOT-compiled kernels, no Python"),
}

_LAZY = ("Engine", "Match", "assert_matches_tvm", "assert_offloads")

__all__ = ["TEST_ENGINES", "declared", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return getattr(provided("testing"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
