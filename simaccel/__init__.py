"""simaccel: a simulated on-GPU accelerator for testing TVM BYOC flows.

The core (this package and `simaccel.kernels`) knows nothing of TVM: it executes Programs
on DLPack tensors. `simaccel.tvm_integration` connects it to TVM Relax.

Imported from a source checkout (Python started in the checkout's root, where the folder
`simaccel/` comes before any installed copy), `simaccel.kernels` and `simaccel.tvm_integration`
are the checkout's top-level `kernels/` and `tvm_integration/`, as setup.py's `package_dir`
makes them in an install.
"""

import importlib.util
import os
import sys

# numpy's bfloat16 (np.dtype("bfloat16")): ml_dtypes registers it; TVM and numba-cuda read
# bfloat16 arrays as ml_dtypes' too.
import ml_dtypes  # noqa: F401


class _CheckoutFolders:
    """Finds exactly `simaccel.kernels` and `simaccel.tvm_integration` in a source checkout."""

    def __init__(self, folders: dict[str, str]):
        self.folders = folders

    def find_spec(self, fullname, path=None, target=None):
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(fullname, os.path.join(folder, "__init__.py"),
                                                      submodule_search_locations=[folder])


def _map_checkout_folders() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    folders = {f"{__name__}.{name}": os.path.join(root, name) for name in ("kernels", "tvm_integration")}
    installed = os.path.isdir(os.path.join(here, "kernels"))  # pip put the folders inside the package
    checkout = os.path.isfile(os.path.join(root, "setup.py")) and all(
        os.path.isfile(os.path.join(folder, "__init__.py")) for folder in folders.values())
    if checkout and not installed and not any(isinstance(f, _CheckoutFolders) for f in sys.meta_path):
        sys.meta_path.append(_CheckoutFolders(folders))


_map_checkout_folders()

# The package's parts, imported once the checkout's folders can be found (the core imports
# simaccel.kernels). This module is the top of the floor plan (docs/design.md): it re-exports.
from .errors import (  # noqa: E402
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
from .debug.timeline import trace  # noqa: E402
from .profile import DEFAULT_PROFILE, DeviceProfile  # noqa: E402
from .runtime import get_runtime  # noqa: E402

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
    "trace",
]
