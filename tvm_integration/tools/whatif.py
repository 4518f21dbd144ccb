"""`simaccel whatif`: one model under several device profiles, by the timing model.

    simaccel whatif MODEL.py|--demo --profile a.json --profile b.json [--png roofline.png]

Where it sits: a tool over partitioning (each profile decides what goes to the accelerator and
how regions split), the codegen's Programs (`region_program`, what the runtime would run) and
simaccel.timing. Nothing runs: for each profile it prints the regions, each region's modeled
time per call and what bounds it, the total, and the ops left on TVM (not modeled: they run
where TVM runs them), and can draw a roofline chart, one panel per profile, its roofs and
each op at its arithmetic intensity. The Python call is `whatif(mod, profiles)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import SimAccelError
from ...timing import RegionTime, model_program, region_bound


@dataclass
class ProfileTime:
    """The model of one profile on one module."""

    profile: object  # simaccel.DeviceProfile
    regions: list[RegionTime]
    kept: int  # ops left on TVM

    @property
    def seconds(self) -> float:
        return sum(region.seconds for region in self.regions)


def whatif(mod, profiles) -> list[ProfileTime]:
    """For each profile (with `performance`), the modeled time of every region of `mod`
    partitioned for it."""
    from ..backend.codegen import region_program
    from ..backend.partition import partition_report
    from ..backend.patterns import sync_patterns

    results = []
    for profile in profiles:
        if profile.performance is None:
            raise SimAccelError(f"profile {profile.name} has no performance figures to model (its `performance` field: "
                                "peak_flops, memory_bandwidth, ...; see examples/profiles/)")
        partitioned, report = partition_report(mod, profile)
        specs = sync_patterns()
        programs = [region_program(gvar.name_hint, func, specs) for gvar, func in partitioned.functions.items()
                    if func.attrs is not None and func.attrs.get("Codegen") == "simaccel"]
        programs.sort(key=lambda p: p.name)
        regions = [model_program(p, profile.performance) for p in programs]
        results.append(ProfileTime(profile, regions, len(report.kept)))
    return results


def format_whatif(results: list[ProfileTime]) -> str:
    lines = []
    for result in results:
        p = result.profile
        lines.append(f"profile {p.name}: {len(result.regions)} region(s), modeled {result.seconds * 1e6:.2f} us a call"
                     f"{f'; {result.kept} op(s) left on TVM, not modeled' if result.kept else ''}")
        for region in result.regions:
            lines.append(f"    {_short(region.region, 56):56s} {region.seconds * 1e6:10.2f} us  {len(region.ops)} op(s), "
                         f"bound by {region_bound(region)}")
    if len(results) > 1 and all(r.seconds for r in results):
        base = results[0]
        for other in results[1:]:
            lines.append(f"{other.profile.name} / {base.profile.name}: {other.seconds / base.seconds:.2f}x the modeled time")
    return "\n".join(lines)


def write_roofline(results: list[ProfileTime], path: str) -> None:
    """A PNG: per profile, its roofs (peak per dtype, memory bandwidth) and each op of its regions
    at (operations per byte, operations per second as modeled)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for ax, result in zip(axes[0], results):
        perf = result.profile.performance
        ops = [op for region in result.regions for op in region.ops if op.flops and math.isfinite(op.intensity)]
        lo = min([op.intensity for op in ops] + [0.1]) / 2
        hi = max([op.intensity for op in ops] + [1e3]) * 2
        xs = [lo * (hi / lo) ** (k / 100) for k in range(101)]
        for dtype, peak in perf.peak_flops:
            ax.plot(xs, [min(peak, x * perf.memory_bandwidth) for x in xs], label=f"roof {dtype}")
        if perf.scratchpad_bandwidth:  # an op whose tensors are all intermediates moves them at this rate
            top = max(peak for _, peak in perf.peak_flops)
            ax.plot(xs, [min(top, x * perf.scratchpad_bandwidth) for x in xs], "--", label="scratchpad roof")
        for op in ops:
            ax.scatter(op.intensity, op.flops / max(op.compute, op.memory), s=12)
            ax.annotate(op.op.split(".", 1)[1], (op.intensity, op.flops / max(op.compute, op.memory)), fontsize=6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("operations per byte")
        ax.set_ylabel("operations per second (modeled)")
        ax.set_title(f"{result.profile.name}: {result.seconds * 1e6:.1f} us a call")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def whatif_command(args) -> int:
    from ...profile import DeviceProfile
    from .build_library import load_model
    from . import models

    profiles = [DeviceProfile.load(path) for path in args.profiles]
    for profile in profiles:
        profile.check_ops()
    mod = models.demo_cnn("float32") if args.demo else load_model(args.model)
    results = whatif(mod, profiles)
    print(format_whatif(results))
    if args.png:
        write_roofline(results, args.png)
        print(f"wrote {args.png}")
    return 0


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
