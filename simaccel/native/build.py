"""Native region build: the generated C++ compiled to an object that TVM links into its library.

Where it sits: the codegen writes the source (simaccel.native.source) and calls
`compile_object`; the object becomes a TVM `static_library` module, which
`Executable.export_library` (and `Executable.jit`, for use in the same process) links into
the model's shared library. Only a C++ compiler and tvm-ffi's headers are needed: the code
links no CUDA library.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import EngineError

HERE = Path(__file__).resolve().parent
CXX_ENV = "CXX"


def compiler() -> list[str]:
    """The C++ compiler command: $CXX, else g++ (else c++)."""
    configured = os.environ.get(CXX_ENV, "").strip()
    if configured:
        return shlex.split(configured)
    return [shutil.which("g++") or shutil.which("c++") or "g++"]


def compiler_missing() -> str | None:
    """None when the C++ compiler can be run here, else why not."""
    command = compiler()
    if shutil.which(command[0]) is None:
        return f"no C++ compiler {command[0]!r} (set ${CXX_ENV} or install g++): native regions are compiled C++"
    return None


def compile_object(source: str, name: str = "simaccel_regions") -> bytes:
    """The object file (bytes) compiled from `source`, a file of simaccel.native.source."""
    import tvm_ffi.libinfo

    reason = compiler_missing()
    if reason:
        raise EngineError(reason)
    with tempfile.TemporaryDirectory(prefix="simaccel-native-") as tmp:
        src, obj = Path(tmp) / f"{name}.cc", Path(tmp) / f"{name}.o"
        src.write_text(source)
        command = [*compiler(), "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-c", str(src), "-o", str(obj),
                   f"-I{HERE}", f"-I{tvm_ffi.libinfo.find_include_path()}",
                   f"-I{tvm_ffi.libinfo.find_dlpack_include_path()}"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise EngineError(f"compiling the native regions failed ({shlex.join(command)}):\n{done.stderr[-4000:]}")
        return obj.read_bytes()
