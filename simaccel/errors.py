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
    """An op declaration (simaccel.ops.OpFamily) that is malformed, or a name already taken, or
    one of its hooks that fails or answers what no declaration may (a `from_relax` returning
    other attributes, an `out_dtype` rule giving no dtype, a reference whose result is not the
    op's declared output)."""


class SanitizerError(SimAccelError):
    """A defect the sanitizer (simaccel.debug.sanitize) caught in a region call.

    `kind` says which: "unwritten" (output elements an op never wrote), "out_of_bounds" (bytes
    written outside a tensor), "input_written" (an op changed a tensor it only reads), "fault"
    (the GPU faulted in an op's kernels), "stream" (a launch that is not on the call's stream),
    "capture" (what cannot happen during CUDA-graph capture) or "index" (a kernel indexed an
    array out of range, on the simulator). `region`, `op` and `tensor` name where (None when
    not known).

    The message ends with a tag, ``[sanitizer: kind=K region=R op=OP tensor=T]`` (the parts
    not known left out), from which an error made from the message alone gets its attributes
    back: TVM's FFI carries only the message across a region call, and native regions
    (simaccel/native/sanitize.h) write the same tag.
    """

    KINDS = ("unwritten", "out_of_bounds", "input_written", "fault", "stream", "capture", "index")
    _FIELDS = ("kind", "region", "op", "tensor")

    def __init__(self, message: str = "", *, region: str | None = None, op: str | None = None,
                 tensor: str | None = None, kind: str | None = None):
        given = {"kind": kind, "region": region, "op": op, "tensor": tensor}
        if kind is not None:
            message = f"{message} {self.tag(**given)}"
        else:
            given.update(self.parse(message))
        super().__init__(message)
        self.kind, self.region, self.op, self.tensor = (given[f] for f in self._FIELDS)

    @classmethod
    def tag(cls, **fields) -> str:
        """``[sanitizer: kind=K region=R op=OP tensor=T]`` of the fields that are not None."""
        parts = " ".join(f"{f}={fields[f]}" for f in cls._FIELDS if fields.get(f) is not None)
        return f"[sanitizer: {parts}]"

    @classmethod
    def parse(cls, message: str) -> dict:
        """The fields of the tag at the end of `message` (empty if it has none)."""
        import re

        found = re.search(r"\[sanitizer: ([^\]]*)\]\s*$", message)
        if not found:
            return {}
        fields = dict(part.split("=", 1) for part in found.group(1).split() if "=" in part)
        return {f: fields[f] for f in cls._FIELDS if f in fields}
