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
    "SanitizerError",
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


class SanitizerError(SimAccelError):
    """A region call the sanitizer (simaccel.debug) caught misbehaving.

    `kind` is one of `KINDS`; `region`, `op` (the op's name), `op_index` and `tensor` say
    where. Native regions raise it with a message only (TVM-FFI builds the exception from
    its text): "[kind] region SYMBOL on cuda:N: op I (NAME) ... 'TENSOR' ...", which is read
    back into those attributes.
    """

    KINDS = ("unwritten", "out_of_bounds", "input_written", "fault", "stream", "capture", "index")

    def __init__(self, message: str, *, region=None, op=None, tensor=None, kind=None, op_index=None):
        super().__init__(message)
        if kind is None:
            import re

            tag = re.match(r"^\[(\w+)\] region (\S+)", message)
            at = re.search(r"\bop (\d+) \(([^)]+)\)", message)
            named = re.search(r"'([^']+)'", message)
            kind = tag.group(1) if tag else None
            region = region if region is not None else (tag.group(2) if tag else None)
            if at and op is None:
                op_index, op = int(at.group(1)), at.group(2)
            tensor = tensor if tensor is not None else (named.group(1) if named else None)
        self.kind, self.region, self.op, self.op_index, self.tensor = kind, region, op, op_index, tensor
