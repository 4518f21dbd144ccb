"""Device profile: what the accelerator supports (dtypes, ranks, sizes).

The same profile object is read by the partition check functions (what may be offloaded) and
enforced by the runtime when it plans a Program (what may be executed), so the two cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import DtypeError, ShapeError


@dataclass(frozen=True)
class DeviceProfile:
    """Limits of one simulated accelerator.

    Parameters
    ----------
    name:
        A label shown in reports and errors.
    dtypes:
        Element types the accelerator computes in (accumulation is always float32).
    max_rank:
        Largest tensor rank an op accepts.
    max_elements:
        Largest element count of one tensor (kernels index with 32-bit integers).
    ops:
        Op names this device runs; None means every registered op.
    """

    name: str = "simaccel-default"
    dtypes: tuple[str, ...] = ("float32", "float16")
    max_rank: int = 4
    max_elements: int = 2**31 - 1
    ops: frozenset[str] | None = field(default=None)

    def why_not_tensor(self, role: str, shape, dtype: str) -> str | None:
        """One-line reason why a tensor cannot be handled, or None if it can."""
        if dtype not in self.dtypes:
            return f"{role} dtype {dtype} is not supported (profile {self.name}: {', '.join(self.dtypes)})"
        if len(shape) > self.max_rank:
            return f"{role} rank {len(shape)} exceeds the profile's max rank {self.max_rank}"
        count = 1
        for dim in shape:
            count *= int(dim)
        if count > self.max_elements:
            return f"{role} has {count} elements, more than the profile's {self.max_elements}"
        return None

    def why_not_op(self, op: str) -> str | None:
        if self.ops is not None and op not in self.ops:
            return f"op {op} is not enabled in profile {self.name}"
        return None

    def check_tensor(self, op: str, role: str, shape, dtype: str) -> None:
        """Raise DtypeError / ShapeError if the tensor is outside the profile."""
        reason = self.why_not_tensor(role, shape, dtype)
        if reason is None:
            return
        kind = DtypeError if reason.startswith(f"{role} dtype") else ShapeError
        raise kind(f"{op}: {reason} (shape {tuple(shape)}, dtype {dtype})")


DEFAULT_PROFILE = DeviceProfile()
