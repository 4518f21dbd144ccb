"""Native region objects (simaccel.native.build): a library's tables compiled per library, the
runtime (region.h) compiled once per compiler and header text and kept in a cache folder."""

from __future__ import annotations

import pytest

from simaccel import EngineError
from simaccel.native import build
from simaccel.native.source import NativeRegion, library_source
from gpu_cases import one_op_program


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """A cache folder these tests share (each runtime compile is two seconds)."""
    return tmp_path_factory.mktemp("native-cache")


@pytest.fixture
def compiles(monkeypatch, shared_cache):
    """The names of the files compile_object compiles, with the tests' cache folder and nothing
    kept in this process."""
    monkeypatch.setenv(build.CACHE_ENV, str(shared_cache))
    monkeypatch.setattr(build, "_RUNTIMES", {})
    names = []
    real = build._compile

    def counted(source, name, tmp):
        names.append(name)
        return real(source, name, tmp)

    monkeypatch.setattr(build, "_compile", counted)
    return names


def source(symbol="r_relu", shape=(3, 5)):
    return library_source([NativeRegion(symbol, one_op_program("simaccel.relu", [shape], "float32", {}))], ((9, 0),))


def test_the_runtime_is_compiled_once_then_read_from_the_cache_folder(compiles, tmp_path, monkeypatch):
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "cache"))  # an empty one
    first = build.compile_object(source())
    assert compiles == ["simaccel_regions", "simaccel_runtime"]
    [cached] = (tmp_path / "cache" / "native").glob("runtime-*.o")
    assert cached.read_bytes()[:4] == b"\x7fELF" and not list(cached.parent.glob("*.tmp"))
    # another library in this process: its tables only
    assert build.compile_object(source("r_other", (7,)))[:4] == b"\x7fELF"
    assert compiles == ["simaccel_regions", "simaccel_runtime", "simaccel_regions"]
    # a fresh process (nothing kept in memory): the runtime comes from the folder
    monkeypatch.setattr(build, "_RUNTIMES", {})
    assert build.compile_object(source()) == first
    assert compiles.count("simaccel_runtime") == 1


def test_another_compiler_command_gets_a_runtime_of_its_own(compiles, shared_cache, monkeypatch):
    cached_before = (shared_cache / "native" / f"runtime-{build._runtime_key()}.o").exists()
    build.compile_object(source())
    before = set((shared_cache / "native").glob("runtime-*.o"))
    monkeypatch.setenv(build.CXX_ENV, f"{build.compiler()[0]} -DSIMACCEL_OTHER_BUILD")
    build.compile_object(source())
    assert compiles.count("simaccel_runtime") == 1 + (not cached_before)
    assert len(set((shared_cache / "native").glob("runtime-*.o")) - before) == 1


def test_a_cache_folder_that_cannot_be_written_still_builds(compiles, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(build.CACHE_ENV, str(blocker / "cache"))
    assert build.compile_object(source())[:4] == b"\x7fELF"
    assert compiles.count("simaccel_runtime") == 1 and blocker.read_text() == "not a folder"  # nothing kept


def test_a_cached_runtime_that_does_not_link_is_a_clear_error(compiles, tmp_path, monkeypatch):
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
    (tmp_path / "native").mkdir()
    (tmp_path / "native" / f"runtime-{build._runtime_key()}.o").write_bytes(b"not an object")
    with pytest.raises(EngineError, match=r"linking the native regions with their runtime failed"):
        build.compile_object(source())
    assert "simaccel_runtime" not in compiles


def test_the_library_object_exports_only_its_region_functions(compiles, tmp_path):
    """Both halves are hidden: a model's shared library exports its regions' TVM-FFI functions
    and none of the runtime's (two libraries in one process keep their own runtime)."""
    import shutil
    import subprocess

    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    obj = tmp_path / "regions.o"
    obj.write_bytes(build.compile_object(source()))
    library = tmp_path / "regions.so"
    subprocess.run([*build.compiler(), "-shared", "-o", str(library), str(obj)], check=True)
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
    exported = [line.split()[-1] for line in symbols.stdout.splitlines() if line.split()[1] == "T"]
    assert exported == ["__tvm_ffi_r_relu"]
    assert "simaccel_native" not in symbols.stdout
