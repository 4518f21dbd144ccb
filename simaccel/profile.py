"""Device profile: the limits of the accelerator being simulated, set by the user.

Which ops it runs, in which dtypes, up to which rank, how many bytes one tensor and one
region (its scratchpad: every tensor a region touches) may take, and the alignment its DMA
needs of the buffers it is handed. Partitioning reads the profile (what may be offloaded,
with the reason when not); the runtime enforces it when it validates a Program and binds
tensors, so the two cannot drift.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from .errors import DtypeError, LayoutError, ShapeError, SimAccelError, UnsupportedOpError
from .timing import Performance, shown, unknown_names

# TVM allocates every buffer at a multiple of this (kAllocAlignment in TVM's runtime), so a
# region's tensors always meet a profile alignment up to it.
TVM_ALIGNMENT = 64


@dataclass(frozen=True)
class DeviceProfile:
    """Limits of one simulated accelerator.

    Parameters
    ----------
    name:
        A label shown in reports and errors.
    ops:
        Op names or family names this device runs (e.g. ``{"simaccel.conv2d",
        "simaccel.add"}``: conv2d with all its fused variants); None means every declared op.
    dtypes:
        Element types the accelerator handles, of the ISA's (`simaccel.ops.rules.ISA_DTYPES`):
        float ones compute in float32; integer and bool ones (masks, indices) exactly in their
        own type.
    max_rank:
        Largest tensor rank an op accepts.
    max_tensor_bytes:
        Largest size of one tensor in bytes; None: no limit.
    max_region_bytes:
        Scratchpad size: the most bytes all tensors of one region (inputs, outputs,
        intermediates) may take together; larger regions are split. None: no limit.
    alignment:
        Byte alignment the data pointer of every tensor handed to a region must have (a
        power of two); None: the element size.
    max_elements:
        Largest element count of one tensor (the kernels index with 32-bit integers).
    performance:
        How fast it is (simaccel.timing.Performance: peak operations per second per dtype,
        memory and scratchpad bandwidth, dispatch costs, the DMA of host-staged data), for
        the timing model; None: no modeled times. In JSON, an object of those fields.

    Every field is checked when a profile is made (in Python, `from_dict`, `load`): a bad one
    is a SimAccelError naming the profile, the field (``performance.peak_flops``...) and what
    is wrong with it; `performance` is checked against `simaccel.timing.SCHEMA`.
    """

    name: str = "simaccel-default"
    ops: frozenset[str] | None = field(default=None)
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16", "int64", "int32", "int8", "bool")
    max_rank: int = 6
    max_tensor_bytes: int | None = None
    max_region_bytes: int | None = None
    alignment: int | None = None
    max_elements: int = 2**31 - 1
    performance: Performance | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise SimAccelError(f"profile: name must be a non-empty string, got {shown(self.name)}")
        if self.ops is not None:
            if not isinstance(self.ops, (list, tuple, set, frozenset)) or not all(isinstance(o, str) for o in self.ops):
                raise SimAccelError(f"profile {self.name}: ops must be a set of op or family names, got {shown(self.ops)}")
            object.__setattr__(self, "ops", frozenset(self.ops))
        object.__setattr__(self, "dtypes", _dtypes(self.name, self.dtypes))
        for name in ("max_rank", "max_tensor_bytes", "max_region_bytes", "alignment", "max_elements"):
            value = getattr(self, name)
            if value is None and name in ("max_tensor_bytes", "max_region_bytes", "alignment"):
                continue
            if type(value) is not int or value < (0 if name == "max_rank" else 1):
                raise SimAccelError(f"profile {self.name}: {name} must be a positive integer"
                                    f"{' (or 0)' if name == 'max_rank' else ''}, got {shown(value)}")
        if self.alignment is not None and self.alignment & (self.alignment - 1):
            raise SimAccelError(f"profile {self.name}: alignment must be a power of two, got {self.alignment}")
        if self.performance is not None and not isinstance(self.performance, Performance):
            try:  # an object of its fields (a profile's JSON), checked against simaccel.timing.SCHEMA
                object.__setattr__(self, "performance", Performance.from_dict(self.performance))
            except SimAccelError as e:
                raise SimAccelError(f"profile {self.name}: {e}") from e

    # -- reading and writing -------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict) -> "DeviceProfile":
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict):
            text = repr(data) if len(repr(data)) <= 60 else repr(data)[:57] + "..."
            raise SimAccelError(f"a device profile is an object of the fields {sorted(known)}, "
                                f"got a {type(data).__name__}: {text}")
        unknown = [name for name in data if name not in known]
        if unknown:
            who = f"profile {data['name']}" if isinstance(data.get("name"), str) and data["name"] else "a device profile"
            raise SimAccelError(f"{who}: " + unknown_names("field", unknown, "fields", [f.name for f in fields(cls)]))
        return cls(**data)  # every field checked by __post_init__ (JSON lists for ops and dtypes too)

    @classmethod
    def load(cls, path: str) -> "DeviceProfile":
        """A profile from a JSON file of the same fields."""
        try:
            with open(path, encoding="utf-8") as f:
                return cls.from_dict(json.load(f))
        except (OSError, ValueError, SimAccelError) as e:
            raise SimAccelError(f"device profile {path}: {e}") from e

    def to_dict(self) -> dict:
        data = asdict(self)
        data["ops"] = sorted(self.ops) if self.ops is not None else None
        data["dtypes"] = list(self.dtypes)
        data["performance"] = self.performance.to_dict() if self.performance is not None else None
        return data

    def check_ops(self) -> None:
        """UnsupportedOpError naming every entry of `ops` that is neither an op nor an op family
        of the ISA (users' ones included), so that a misspelt name is not a profile that quietly
        offloads nothing. Checked when the profile is used (partitioning, `--profile`), by
        then users' ops are declared."""
        if self.ops is None:
            return
        from .ops.registry import families, list_ops

        names = {family.name for family in families()}
        unknown = sorted(self.ops - names - set(list_ops()))
        if unknown:
            raise UnsupportedOpError(
                f"profile {self.name}: ops {unknown} are neither ops nor op families of the simaccel ISA "
                f"(`simaccel ops` lists them; users' ops must be declared first, or named in $SIMACCEL_OPS); "
                f"families: {', '.join(sorted(names))}")

    # -- the checks ----------------------------------------------------------------------
    def why_not_op(self, op: str, family: str | None = None) -> str | None:
        """One-line reason why op `op` (of `family`) is not enabled, or None if it is."""
        if self.ops is not None and op not in self.ops and (family is None or family not in self.ops):
            return f"op {op} is not enabled in profile {self.name}"
        return None

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
        size = count * np.dtype(dtype).itemsize
        if self.max_tensor_bytes is not None and size > self.max_tensor_bytes:
            return f"{role} {tuple(shape)} {dtype} takes {size} bytes, more than profile {self.name}'s {self.max_tensor_bytes} per tensor"
        return None

    def why_not_region(self, nbytes: int, what: str = "the region") -> str | None:
        """One-line reason why `nbytes` of tensors do not fit the scratchpad, or None."""
        if self.max_region_bytes is not None and nbytes > self.max_region_bytes:
            return f"{what} needs {nbytes} bytes, more than profile {self.name}'s {self.max_region_bytes}-byte scratchpad"
        return None

    @property
    def limits_bytes(self) -> bool:
        """Whether it limits the bytes of a tensor or of a region (checked at the size vars' upper
        bounds for symbolic shapes, so those need one)."""
        return self.max_tensor_bytes is not None or self.max_region_bytes is not None

    def why_not_alignment(self) -> str | None:
        """Why no tensor TVM allocates can be relied on to be aligned enough, or None."""
        if self.alignment is not None and self.alignment > TVM_ALIGNMENT:
            return (f"profile {self.name} needs {self.alignment}-byte aligned tensors; TVM aligns its buffers "
                    f"to {TVM_ALIGNMENT} bytes")
        return None

    def check_tensor(self, op: str, role: str, shape, dtype: str) -> None:
        """Raise DtypeError / ShapeError if the tensor is outside the profile."""
        reason = self.why_not_tensor(role, shape, dtype)
        if reason is None:
            return
        kind = DtypeError if reason.startswith(f"{role} dtype") else ShapeError
        raise kind(f"{op}: {reason} (shape {tuple(shape)}, dtype {dtype})")

    def check_address(self, where: str, address: int) -> None:
        """LayoutError if a boundary tensor's data pointer breaks the profile's alignment."""
        if self.alignment is not None and address % self.alignment:
            raise LayoutError(f"{where} data pointer {address:#x} is not aligned to the {self.alignment} bytes "
                              f"profile {self.name} needs")


def _dtypes(name: str, dtypes) -> tuple[str, ...]:
    """A profile's `dtypes` checked: a list of the ISA's dtypes (simaccel.ops.rules.ISA_DTYPES: no
    op may declare another), so that a misspelt one is not a dtype quietly left on TVM."""
    from .ops.rules import ISA_DTYPES

    if not isinstance(dtypes, (list, tuple)) or not all(isinstance(d, str) for d in dtypes):
        raise SimAccelError(f"profile {name}: dtypes must be a list of dtype names (known: {', '.join(ISA_DTYPES)}), "
                            f"got {shown(dtypes)}")
    unknown = [d for d in dtypes if d not in ISA_DTYPES]
    if unknown:
        raise SimAccelError(f"profile {name}: dtypes: " + unknown_names("dtype", unknown, "known", ISA_DTYPES))
    return tuple(dtypes)


DEFAULT_PROFILE = DeviceProfile()

PROFILE_ENV = "SIMACCEL_PROFILE"
_LOADED: dict[tuple, DeviceProfile] = {}
_LOCK = threading.Lock()


def active_profile() -> DeviceProfile:
    """The profile partitioning and the runtime use when none is given: the JSON file named in
    $SIMACCEL_PROFILE (read again when it changes), else `DEFAULT_PROFILE`."""
    path = os.environ.get(PROFILE_ENV, "")
    if not path:
        return DEFAULT_PROFILE
    try:
        key = (os.path.abspath(path), os.stat(path).st_mtime_ns)
    except OSError as e:
        raise SimAccelError(f"${PROFILE_ENV}={path}: {e.strerror or e}") from e
    with _LOCK:
        profile = _LOADED.get(key)
        if profile is None:
            profile = _LOADED[key] = DeviceProfile.load(path)
    return profile
