"""The project's exceptions: every error simaccel raises on bad input is one of these.

They are raised at the boundaries (partition check, codegen, runtime validation, engine
choice) and name the op, tensor, shape, dtype or device involved.
"""

__all__ = [
    "SimAccelError",
    "UnsupportedOpError",
    "ShapeError",
    "DtypeError",
    "DeviceError",
    "LayoutError",
    "ProgramError",
    "EngineError",
    "CodegenError",
    "OpDeclarationError",
]


class SimAccelError(Exception):
    """Base class of every error raised by simaccel."""


class UnsupportedOpError(SimAccelError):
    """An op name that the accelerator's ISA does not have."""


class ShapeError(SimAccelError):
    """A tensor whose shape breaks an op's rule or a Program's declaration."""


class DtypeError(SimAccelError):
    """A tensor whose dtype the op or the device profile does not support."""


class DeviceError(SimAccelError):
    """A tensor on a device that the chosen engine cannot reach, or on mixed devices."""


class LayoutError(SimAccelError):
    """A tensor that is not compact row-major, or whose data pointer is misaligned."""


class ProgramError(SimAccelError):
    """A Program (the codegen's output) that is malformed or of an unknown version."""


class EngineError(SimAccelError):
    """An unknown engine name, or an engine that cannot run on this machine."""


class CodegenError(SimAccelError):
    """A region the codegen cannot turn into a Program."""


class OpDeclarationError(SimAccelError):
    """An op declaration (simaccel.ops.OpFamily) that is malformed, or a name already taken."""
