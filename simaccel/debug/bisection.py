"""`simaccel.debug.bisect`: find the first region and op of a model whose result is wrong.

Where it sits: bisection builds and runs models, so it needs TVM; its implementation is
`simaccel.tvm_integration.tools.bisect` (which captures region calls with
`simaccel.debug.capture.Capture`). The core imports nothing of the TVM side (tests/test_isa.py
reads every import, string ones included; tests/test_imports.py checks that `import simaccel`
loads no TVM), so the TVM layer registers the implementation as "bisect" (simaccel.provided)
and this function looks it up when it is called.
"""

from __future__ import annotations

from ..errors import SimAccelError
from ..provided import provided


def bisect(mod, inputs, *, target="llvm", engine=None, rtol=None, atol=None, profile=None, out_dir=None, **options):
    """Run `mod` (a Relax IRModule) built with simaccel once on `inputs`, capturing every
    region call, recompute each op from its captured inputs with its numpy reference and with
    TVM alone, and return a `BisectReport` naming the first op (or region) whose output leaves
    tolerance, with a reproducer written to `out_dir`. See
    simaccel.tvm_integration.tools.bisect.bisect for every option."""
    try:
        implementation = provided("bisect")
    except ImportError as e:
        raise SimAccelError(f"simaccel.debug.bisect builds the model with TVM, which cannot be imported here "
                            f"({type(e).__name__}: {e}); install apache-tvm") from e
    return implementation(mod, inputs, target=target, engine=engine, rtol=rtol, atol=atol, profile=profile,
                          out_dir=out_dir, **options)
