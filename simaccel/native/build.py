"""Native region build: the generated C++ compiled to an object that TVM links into its library.

Where it sits: the codegen writes the source (simaccel.native.source) and calls
`compile_object`; the object becomes a TVM `static_library` module, which
`Executable.export_library` (and `Executable.jit`, for use in the same process) links into
the model's shared library. Only a C++ compiler and tvm-ffi's headers are needed: the code
links no CUDA library.

The object is two files linked into one (`-r`): the library's tables and region functions,
compiled per library (half a second), and the runtime (region.h and the headers it includes,
every `*.h` of this folder), the same for every library and two seconds of -O2 code
generation, compiled once per compiler, flags and header text and kept in a cache folder
($SIMACCEL_CACHE_DIR, else $XDG_CACHE_HOME/simaccel, else ~/.cache/simaccel; where it cannot
be written, the runtime is compiled each time). Its symbols are hidden: each model's shared
library keeps its own runtime (TVM links one region object, from one codegen call, into each).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from ..errors import EngineError

HERE = Path(__file__).resolve().parent
CXX_ENV = "CXX"
CACHE_ENV = "SIMACCEL_CACHE_DIR"
FLAGS = ("-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden")
# The runtime's text, with runtime_source's: every header of this folder (region.h includes
# the others), all of it in the cache key.
HEADERS = tuple(sorted(path.name for path in HERE.glob("*.h")))
_RUNTIMES: dict[str, bytes] = {}  # cache key -> the runtime's object, in this process
_RUNTIME_LOCK = threading.Lock()


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


def cache_dir() -> Path:
    """Where compiled runtimes are kept: $SIMACCEL_CACHE_DIR, else $XDG_CACHE_HOME/simaccel, else ~/.cache/simaccel."""
    configured = os.environ.get(CACHE_ENV, "").strip()
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "simaccel"


def _include_flags() -> list[str]:
    import tvm_ffi.libinfo

    return [f"-I{HERE}", f"-I{tvm_ffi.libinfo.find_include_path()}", f"-I{tvm_ffi.libinfo.find_dlpack_include_path()}"]


def _compile(source: str, name: str, tmp: Path) -> Path:
    """`source` compiled to an object in `tmp`; EngineError with the compiler's message if it fails."""
    src, obj = tmp / f"{name}.cc", tmp / f"{name}.o"
    src.write_text(source)
    command = [*compiler(), *FLAGS, "-c", str(src), "-o", str(obj), *_include_flags()]
    _run(command, f"compiling the native regions failed ({shlex.join(command)})")
    return obj


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise EngineError(f"{what}:\n{done.stderr[-4000:]}")


def _runtime_key() -> str:
    """What the runtime's object depends on: the compiler (its path and version), the flags,
    the include folders and the runtime's source and headers."""
    from .source import runtime_source

    command = compiler()
    path = shutil.which(command[0]) or ""
    stat = os.stat(path) if path else None
    version = _compiler_version(tuple(command), path, stat and (stat.st_mtime_ns, stat.st_size))
    digest = hashlib.sha256()
    for part in (shlex.join(command), path, version, *FLAGS, *_include_flags(),
                 runtime_source(), *((HERE / header).read_text() for header in HEADERS)):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:32]


@functools.lru_cache(maxsize=16)
def _compiler_version(command: tuple, path: str, stamp) -> str:
    """`command --version`, asked once per compiler file (`path` and its `stamp`: a replaced
    compiler is asked again), not once per build."""
    return subprocess.run([*command, "--version"], capture_output=True, text=True).stdout


def _runtime_object(tmp: Path) -> Path:
    """The runtime's object (region.h and its headers) as a file in `tmp`: from this process,
    the cache folder or, where neither has it, compiled (and cached)."""
    from .source import runtime_source

    key = _runtime_key()
    obj = tmp / "simaccel_runtime.o"
    with _RUNTIME_LOCK:
        if key not in _RUNTIMES:
            cached = cache_dir() / "native" / f"runtime-{key}.o"
            try:
                _RUNTIMES[key] = cached.read_bytes()
            except OSError:
                _RUNTIMES[key] = _compile(runtime_source(), "simaccel_runtime", tmp).read_bytes()
                _store(cached, _RUNTIMES[key])
        obj.write_bytes(_RUNTIMES[key])
    return obj


def _store(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all (a rename; concurrent builds each write their own
    temporary file); a folder that cannot be written is skipped: the next build compiles again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, suffix=".tmp", delete=False) as f:
            f.write(data)
        os.chmod(f.name, 0o644)  # as the compiler writes objects: others may read the cache
        os.replace(f.name, path)
    except OSError:
        pass


def compile_object(source: str, name: str = "simaccel_regions") -> bytes:
    """The object file (bytes) of `source`, a file of simaccel.native.source, linked with the runtime."""
    reason = compiler_missing()
    if reason:
        raise EngineError(reason)
    with tempfile.TemporaryDirectory(prefix="simaccel-native-") as folder:
        tmp = Path(folder)
        tables = _compile(source, name, tmp)
        runtime = _runtime_object(tmp)
        linked = tmp / f"{name}.linked.o"
        command = [*compiler(), "-r", "-nostdlib", str(tables), str(runtime), "-o", str(linked)]
        _run(command, f"linking the native regions with their runtime failed ({shlex.join(command)})")
        return linked.read_bytes()
