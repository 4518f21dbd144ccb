"""Partitioning: which parts of a Relax module run on simaccel.

`partition_for_simaccel` fuses every accepted pattern match into a composite function and
merges adjacent composites into one region (a function with ``Codegen="simaccel"``), the
unit the codegen turns into a Program. `partition_report` says, for every op of the
original module, whether it was offloaded and, if not, why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
from tvm import relax

from ..profile import DEFAULT_PROFILE, DeviceProfile
from .patterns import Rejection, checking, registered_patterns


@dataclass
class PartitionReport:
    """What went where: offloaded regions and the ops that stayed on TVM, with reasons."""

    regions: dict[str, list[str]] = field(default_factory=dict)  # region symbol -> composite op names
    kept: list[tuple[str, str, str]] = field(default_factory=list)  # (var, relax op, reason)

    def format(self) -> str:
        lines = [f"offloaded to simaccel: {len(self.regions)} region(s)"]
        for name, ops in self.regions.items():
            lines.append(f"  {name}: {' -> '.join(ops)}")
        lines.append(f"kept on TVM: {len(self.kept)} op(s)")
        for var, op, reason in self.kept:
            lines.append(f"  {var} = {op}: {reason}")
        return "\n".join(lines)


def partition_for_simaccel(mod: tvm.IRModule, profile: DeviceProfile | None = None) -> tvm.IRModule:
    """Partition `mod` into simaccel regions (functions with ``Codegen="simaccel"``) and TVM code.

    Parameters
    ----------
    mod:
        A Relax module with static shapes.
    profile:
        The device profile the check functions read; the default matches the runtime's.

    Returns
    -------
    The partitioned module. Run `relax.transform.RunCodegen()` (or use
    `simaccel.tvm_integration.build`) to turn the regions into simaccel Programs.
    """
    return _partition(mod, profile or DEFAULT_PROFILE, [])


def partition_report(mod: tvm.IRModule, profile: DeviceProfile | None = None) -> tuple[tvm.IRModule, PartitionReport]:
    """Partition like `partition_for_simaccel` and also say where each op of `main` went."""
    rejections: list[Rejection] = []
    partitioned = _partition(mod, profile or DEFAULT_PROFILE, rejections)
    return partitioned, _report(partitioned, rejections)


def _partition(mod, profile, rejections):
    with checking(profile, rejections):
        mod = relax.transform.FuseOpsByPattern(
            registered_patterns(), bind_constants=False, annotate_codegen=False
        )(mod)
    return relax.transform.MergeCompositeFunctions()(mod)


def _report(mod, rejections) -> PartitionReport:
    report = PartitionReport()
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function) and func.attrs and func.attrs.get("Codegen") == "simaccel":
            report.regions[gvar.name_hint] = _composites(func)
    reasons: dict[str, str] = {}
    for r in rejections:  # the most fused pattern is checked first; keep its reason
        reasons.setdefault(r.var, f"{r.pattern} rejected: {r.reason}")
    main = mod["main"]
    for block in main.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                name = binding.var.name
                report.kept.append(
                    (name, value.op.name, reasons.get(name, f"simaccel has no pattern for {value.op.name}"))
                )
    return report


def _composites(region: relax.Function) -> list[str]:
    names = []
    for block in region.body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.Function) and binding.value.attrs:
                names.append(str(binding.value.attrs["Composite"]))
    return names
