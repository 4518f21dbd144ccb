"""simaccel: a simulated on-GPU accelerator for testing TVM BYOC flows.

The core (this package and `simaccel.kernels`) knows nothing of TVM: it executes Programs
on DLPack tensors. `simaccel.tvm_integration` connects it to TVM Relax.
"""

from .errors import (
    CodegenError,
    DeviceError,
    DtypeError,
    EngineError,
    LayoutError,
    OpDeclarationError,
    ProgramError,
    ShapeError,
    SimAccelError,
    UnsupportedOpError,
)
from .profile import DEFAULT_PROFILE, DeviceProfile

__version__ = "0.1.0"

__all__ = [
    "CodegenError",
    "DEFAULT_PROFILE",
    "DeviceError",
    "DeviceProfile",
    "DtypeError",
    "EngineError",
    "LayoutError",
    "OpDeclarationError",
    "ProgramError",
    "ShapeError",
    "SimAccelError",
    "UnsupportedOpError",
    "get_runtime",
]


def get_runtime():
    """The process-wide simaccel runtime (plan cache, engine choice, ledger)."""
    from .runtime import get_runtime as _get_runtime

    return _get_runtime()
