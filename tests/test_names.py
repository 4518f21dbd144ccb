"""Names shared by Python and C++ (simaccel.names): one copy, written into the generated C++."""

from __future__ import annotations

import pathlib
import re

import pytest

from simaccel import errors, names
from simaccel.native.build import HEADERS, compile_object
from simaccel.native.source import NativeRegion, library_source, runtime_source
from gpu_cases import one_op_program

ROOT = pathlib.Path(__file__).resolve().parents[1]
NATIVE = ROOT / "simaccel" / "native"
TABLES_H = NATIVE / "tables.h"
RUNTIME_HEADERS = [NATIVE / name for name in HEADERS if name != "tables.h"]  # region.h and the headers it includes
SHARED = [value for _, value in names.CPP_NAMES] + [names.CODEGEN_FUNC]
PYTHON_SOURCES = sorted(p for d in ("simaccel", "kernels", "tvm_integration") for p in (ROOT / d).rglob("*.py"))


def cpp_code(path: pathlib.Path) -> str:
    """The file without its comments (// to the end of a line, /* ... */)."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def runtime_code() -> str:
    """The runtime's C++ (region.h and the headers it includes) without comments."""
    return "\n".join(cpp_code(path) for path in RUNTIME_HEADERS)


@pytest.mark.parametrize("name", SHARED)
def test_region_h_spells_no_shared_name(name):
    assert name not in runtime_code(), f"region.h has its own copy of {name!r}: use its constant (simaccel/names.py)"


@pytest.mark.parametrize("kind", errors.__all__)
def test_region_h_spells_no_error_kind(kind):
    assert f'"{kind}"' not in runtime_code()


def test_region_h_raises_only_through_error_kind_constants():
    code = runtime_code()
    kinds = re.findall(r"\breturn fail\(\s*([^,]*),", code)
    assert len(kinds) > 10 and set(kinds) <= {names.error_kind_constant(k) for k in errors.__all__}, set(kinds)


@pytest.mark.parametrize("name", SHARED)
def test_python_spells_each_shared_name_only_in_simaccel_names(name):
    copies = [str(p.relative_to(ROOT)) for p in PYTHON_SOURCES
              if p.name != "names.py" and re.search(rf"""["']{re.escape(name)}["']""", p.read_text())]
    assert copies == []


def test_the_forwarder_and_the_registration_read_the_same_names():
    from simaccel.tvm_integration.backend import autoload, forwarder

    assert forwarder.INVOKE_FUNC is autoload.INVOKE_FUNC is names.INVOKE_FUNC
    assert autoload.CODEGEN_FUNC is names.CODEGEN_FUNC


def test_every_constant_region_h_uses_is_defined_once_by_the_generator():
    """Each k<Name> that region.h reads but neither it nor tables.h defines comes from the generated runtime file."""
    code = runtime_code()
    used = set(re.findall(r"\bk[A-Z]\w*", code))
    defined_here = set(re.findall(r"constexpr\s+\w+\s+(k[A-Z]\w*)", code + cpp_code(TABLES_H)))
    generated = {line.split()[3].removesuffix("[]") for line in names.cpp_constants()}
    assert len(generated) == len(names.cpp_constants())
    assert {names.error_kind_constant(k) for k in errors.__all__} <= generated
    tvm_ffi_enums = {n for n in used if n.startswith(("kTVMFFI", "kDL"))}
    assert used - defined_here - tvm_ffi_enums <= generated
    assert {constant for constant, _ in names.CPP_NAMES} <= used  # and region.h uses each shared name


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_runtime_defines_the_names_before_region_h_and_a_library_compiles_with_it(dtype):
    """The names are the runtime's (the file holding region.h, compiled once); a library's own file
    holds tables and region functions only, and links with it."""
    lines = runtime_source().splitlines()
    include = lines.index('#include "region.h"')
    for constant in names.cpp_constants():
        assert lines.index(constant) < include
    for value in [value for _, value in names.CPP_NAMES] + list(errors.__all__):
        assert sum(line.count(f'"{value}"') for line in lines) == 1  # once, in its constant
    source = library_source([NativeRegion("r_relu", one_op_program("simaccel.relu", [(3, 5)], dtype, {}))], ((9, 0),))
    assert '#include "region.h"' not in source and not any(constant in source for constant in names.cpp_constants())
    assert compile_object(source)[:4] == b"\x7fELF"
