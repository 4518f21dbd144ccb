"""simaccel.tvm_integration: simaccel as a TVM Relax BYOC backend (`backend/`) and its tools (`tools/`).

* `partition_for_simaccel(mod, profile=None)` - patterns + check functions -> regions
* `partition_report(mod)`                     - the same, plus where each op went and why
* `build(mod, target)` / `build_tvm_only`     - the whole flow / the TVM-only reference
* `register()`                                - codegen + runtime entry (done on `import tvm`)

Only `register` is imported eagerly: the rest needs the full TVM compiler (`tvm.relax`),
which a runtime-only deployment does not have. Importing this package also provides the
core's names implemented here (simaccel.provided: `simaccel.debug.bisect`, `simaccel.testing`).
"""

from ..provided import provide
from .backend.autoload import register

_LAZY = {
    "partition_for_simaccel": "partition",
    "partition_report": "partition",
    "PartitionReport": "partition",
    "build": "pipeline",
    "build_tvm_only": "pipeline",
    "default_target": "pipeline",
}

__all__ = ["register", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".backend.{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


register()
provide("bisect", f"{__name__}.tools.bisect:bisect")
provide("testing", f"{__name__}.tools.testing")
