"""The backend a campaign checks against TVM alone: simaccel, or any BYOC backend.

Where it sits: under `simaccel fuzz` (fuzz/check.py) and `simaccel conformance`
(conformance/check.py). Both build every model twice, with a backend and with TVM alone, and
compare. The backend is simaccel's (`partition_report` + `build`), unless `--partition
module:function` names another one's partition function, one that follows TVM's
`partition_for_<x>` convention: it takes a Relax IRModule and returns it with the offloaded
parts as functions carrying a ``Codegen`` attribute, whose codegen (``relax.ext.<x>``) the
module registers when it is imported. Such a backend is built as TVM's own BYOC flow builds
it: the partition function, ``relax.transform.RunCodegen()``, ``tvm.compile``.

`module` is a module name or a .py file's path (as in $SIMACCEL_OPS); a Dask worker imports it
from the same spec, so its codegen is registered there too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...errors import SimAccelError

SIMACCEL = "simaccel"
# simaccel's engines, by the device their builds run on ("native": the CUDA build's native regions)
ENGINE_DEVICE = {"ref": "cpu", "sim": "cpu", "cuda": "cuda", "native": "cuda"}
# The runtime's engine choice while an engine's build runs ("native": no Python engine chosen).
RUNTIME_ENGINE = {"native": "auto"}
# Another backend has no simaccel engines: it is checked where its builds run, "cpu" (llvm) or "cuda".
BACKEND_ENGINES = {"cpu": "cpu", "cuda": "cuda"}


def engine_device(engine: str) -> str:
    """Where `engine`'s builds run: "cpu" or "cuda"."""
    return ENGINE_DEVICE.get(engine) or BACKEND_ENGINES[engine]


def check_engines(engines, backend: "Backend", command: str) -> None:
    """A SimAccelError (EngineError) now, not every model skipped later, for an engine the
    backend does not have or that cannot run here (cuda without a GPU); and the partition
    function of another backend imported once, so a wrong --partition says so first."""
    from ...engines import get_engine

    known = ENGINE_DEVICE if backend.is_simaccel else BACKEND_ENGINES
    for engine in engines:
        if engine not in known:
            raise SimAccelError(f"{command}: unknown engine {engine!r} for {backend.name}; choose from "
                                f"{', '.join(known)}" + ("" if backend.is_simaccel else
                                                         " (another backend runs where its build runs)"))
        if backend.is_simaccel:
            get_engine("cuda" if ENGINE_DEVICE[engine] == "cuda" else engine)
        else:
            import tvm

            if engine == "cuda" and not tvm.cuda(0).exist:
                raise SimAccelError(f"{command}: engine cuda for {backend.name} needs an NVIDIA GPU that TVM's "
                                    "CUDA runtime finds (tvm.cuda(0).exist is False here)")
    if not backend.is_simaccel:
        backend.partition_function()


def parse_partition(spec: str) -> str:
    """`--partition`'s value checked for form: "module:function" or "path.py:function", paths made absolute."""
    module, sep, function = spec.rpartition(":")
    if not sep or not module or not function.isidentifier():
        raise SimAccelError(f"--partition {spec}: expected MODULE:FUNCTION or FILE.py:FUNCTION, e.g. "
                            "my_backend:partition_for_my_npu")
    return f"{os.path.abspath(module) if module.endswith('.py') else module}:{function}"


@dataclass(frozen=True)
class Backend:
    """simaccel (`spec` "simaccel") or the BYOC backend whose partition function `spec` names."""

    spec: str = SIMACCEL

    @property
    def is_simaccel(self) -> bool:
        return self.spec == SIMACCEL

    @property
    def name(self) -> str:
        """How reports name it: "simaccel", or the partition function's name."""
        return self.spec if self.is_simaccel else self.spec.rpartition(":")[2]

    def partition_function(self):
        """The partition function `spec` names, imported (its module registers its codegen)."""
        from ...ops.registry import import_entry

        module_name, _, function = parse_partition(self.spec).rpartition(":")
        try:
            module = import_entry(module_name)
        except Exception as e:  # the user's module: its error is the message
            raise SimAccelError(f"--partition {self.spec}: cannot import {module_name}: {type(e).__name__}: {e}") from e
        found = getattr(module, function, None)
        if not callable(found):
            raise SimAccelError(f"--partition {self.spec}: {module_name} has no function {function}")
        return found

    def partition(self, mod, profile=None):
        """(the partitioned module, its `PartitionReport`): regions and the ops kept, with reasons."""
        import tvm

        from ..backend.partition import partition_report, region_report

        if self.is_simaccel:
            return partition_report(mod, profile)
        partitioned = self.partition_function()(mod)
        if not isinstance(partitioned, tvm.IRModule):
            raise SimAccelError(f"--partition {self.spec}: returned a {type(partitioned).__name__}, not a tvm.IRModule")
        report = region_report(partitioned, [], codegen=None, unmatched=f"{self.name} does not offload {{op}}")
        report.backend = self.name
        return partitioned, report

    def build(self, mod, target, native=None, partitioned=None):
        """The backend's build of `mod` for `target` (`partitioned`: its partition, already made)."""
        import tvm
        from tvm import relax

        from ..backend.pipeline import build

        if self.is_simaccel:
            return build(mod, target, native=native)
        if partitioned is None:
            partitioned, _ = self.partition(mod)
        executable = tvm.compile(relax.transform.RunCodegen()(partitioned), target=target)
        return executable
