"""Which builds get native regions, the CUDA architectures they carry, and the constants a region holds itself."""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

import tvm  # noqa: F401  (registers simaccel's errors and runtime functions with tvm-ffi)
import tvm_ffi

from simaccel.launch_plan import View, plan_launches
from simaccel.native.source import NativeRegion
from simaccel.program import TensorSpec
from native_cases import _data_word, constants_program
from native_support import FakeDriver, cuda_tensor, fake_driver, region_library


def test_a_cuda_build_exports_native_regions_that_link_no_cuda_library(tmp_path):
    from simaccel.tvm_integration import build, partition_report
    from simaccel.tvm_integration.backend.native import has_native_regions
    from simaccel.tvm_integration.tools.models import demo_cnn

    mod = demo_cnn(batch=1)
    _, report = partition_report(mod)
    executable = build(mod, "nvidia/nvidia-h100")
    assert has_native_regions(executable)
    executable.export_library(str(tmp_path / "model.so"))
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(tmp_path / "model.so")],
                             capture_output=True, text=True, check=True).stdout
    assert all(f"__tvm_ffi_{region}" in symbols for region in report.regions)
    needed = subprocess.run(["readelf", "-d", str(tmp_path / "model.so")], capture_output=True, text=True).stdout
    assert "libcuda" not in needed and "libcudart" not in needed


def _held(path) -> list[str]:
    """What an exported library's native kernels hold, as its messages say it."""
    import re

    return sorted(set(re.findall(rb"cubins for [sm_0-9, ]+ and PTX for sm_\d+", path.read_bytes())))


@pytest.mark.parametrize("how", ["argument", "environment", "default"])
def test_a_cuda_build_carries_the_architectures_it_is_asked_for(how, tmp_path, monkeypatch):
    """cuda_archs from build(), else $SIMACCEL_CUDA_ARCHS, else the target's: the exported
    library holds a cubin for each (ELF images of those architectures) and the lowest's PTX."""
    import struct

    from simaccel.tvm_integration import build
    from simaccel.tvm_integration.tools.models import matmul_relu

    kwargs = {}
    if how == "argument":
        kwargs["cuda_archs"] = ["sm_75", "8.6", (9, 0)]
    elif how == "environment":
        monkeypatch.setenv("SIMACCEL_CUDA_ARCHS", "75;86 sm_90")
    path = tmp_path / "model.so"
    build(matmul_relu(8), "nvidia/nvidia-a100", **kwargs).export_library(str(path))
    data = path.read_bytes()
    archs = set()
    at = data.find(b"\x7fELF", 1)
    while at != -1:
        if data[at + 4] == 2 and data[at + 7] == 0x41:  # ELF64, the CUDA ABI
            archs.add((struct.unpack_from("<I", data, at + 48)[0] >> 8) & 0xFF)
        at = data.find(b"\x7fELF", at + 1)
    if how == "default":  # the A100 target's sm_80
        assert archs == {80} and _held(path) == [b"cubins for sm_80 and PTX for sm_80"]
    else:
        assert archs == {75, 86, 90} and _held(path) == [b"cubins for sm_75, sm_86, sm_90 and PTX for sm_75"]


@pytest.mark.parametrize("archs, match", [(["sm_60"], r"cuda_archs: 'sm_60' is not a CUDA architecture this toolchain "
                                                      r"compiles for \(one of sm_75, "),
                                          (["ninety"], "cuda_archs: 'ninety' is not"), ([], "cuda_archs is empty"),
                                          ("", "cuda_archs is empty")])
def test_bad_cuda_archs_are_refused_naming_the_entry(archs, match):
    from simaccel import CodegenError
    from simaccel.tvm_integration import build
    from simaccel.tvm_integration.tools.models import matmul_relu

    with pytest.raises(CodegenError, match=match):
        build(matmul_relu(8), "nvidia/nvidia-h100", cuda_archs=archs)


def test_a_bad_cuda_archs_variable_is_refused(monkeypatch):
    from simaccel import CodegenError
    from simaccel.tvm_integration import build
    from simaccel.tvm_integration.tools.models import matmul_relu

    monkeypatch.setenv("SIMACCEL_CUDA_ARCHS", "80,sm_5")
    with pytest.raises(CodegenError, match=r"\$SIMACCEL_CUDA_ARCHS: 'sm_5' is not a CUDA architecture"):
        build(matmul_relu(8), "nvidia/nvidia-h100")


def test_cpu_builds_and_native_false_keep_python_regions(monkeypatch):
    from simaccel.tvm_integration import build
    from simaccel.tvm_integration.backend.native import has_native_regions
    from simaccel.tvm_integration.tools.models import matmul_relu

    mod = matmul_relu(8)
    assert not has_native_regions(build(mod, "llvm"))
    assert not has_native_regions(build(mod, "nvidia/nvidia-h100", native=False))
    monkeypatch.setenv("SIMACCEL_NATIVE", "0")
    assert not has_native_regions(build(mod, "nvidia/nvidia-h100"))


def test_the_native_switch_refuses_what_it_cannot_do(monkeypatch):
    from simaccel import CodegenError
    from simaccel.tvm_integration import build
    from simaccel.tvm_integration.tools.models import matmul_relu

    with pytest.raises(CodegenError, match="native regions need a CUDA target, got .*llvm"):
        build(matmul_relu(8), "llvm", native=True)
    monkeypatch.setenv("SIMACCEL_NATIVE", "sometimes")
    with pytest.raises(CodegenError, match="SIMACCEL_NATIVE='sometimes': use 1/0/auto"):
        build(matmul_relu(8), "nvidia/nvidia-h100")


def test_without_a_cpp_compiler_a_cuda_build_says_so(monkeypatch):
    """native=True: a CodegenError naming the compiler; auto: a warning, and Python regions."""
    from simaccel import CodegenError
    from simaccel.tvm_integration import build
    from simaccel.tvm_integration.backend.native import has_native_regions
    from simaccel.tvm_integration.tools.models import matmul_relu

    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(CodegenError, match="native regions cannot be built here: no C\\+\\+ compiler '/nonexistent/g\\+\\+'"):
        build(matmul_relu(8), "nvidia/nvidia-h100", native=True)
    with pytest.warns(UserWarning, match="regions of this CUDA build run through Python: no C\\+\\+ compiler"):
        executable = build(matmul_relu(8), "nvidia/nvidia-h100")
    assert not has_native_regions(executable)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_regions_constants_are_its_own_memory_written_once_per_stream(tmp_path, monkeypatch, dtype):
    """A 0-d constant of a Program is no argument of the region: the region allocates it and
    writes its value with one memset per device and stream, before its first launch."""
    program = constants_program(dtype)
    monkeypatch.setenv("SIMACCEL_CUDA_DRIVER", str(fake_driver(tmp_path)))
    library, _ = region_library([NativeRegion("r_consts", program)], tmp_path)
    driver = FakeDriver(fake_driver(tmp_path))
    driver.reset()
    x, y = (cuda_tensor(np.ones((4, 6), dtype)) for _ in range(2))
    for stream in (21, 21, 22):
        with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", 0), stream):
            library["r_consts"](x, y)
    assert driver.counter("memsets") == 2 * len(program.constants)  # two streams, two constants
    launches, planned = driver.launches(), plan_launches(program)
    assert len(launches) == 3 * len(planned)
    for launch, plan in zip(launches, planned * 3):
        for c in program.constants:
            if any(isinstance(a, View) and a.tensor == c for a in plan.args):
                pointer = launch["words"][_data_word(program, plan, c)]
                held = np.frombuffer(ctypes.string_at(pointer, np.dtype(dtype).itemsize), dtype)[0]
                assert held == np.asarray(program.tensors[c].value, dtype)


@pytest.mark.parametrize("dtype, value, words", [
    ("float32", 0.5, [0x3F000000]), ("float16", -2.0, [0xC000]), ("int8", -1, [0xFF]),
    ("float64", 1.5, [0, 0x3FF80000]), ("int64", -2, [0xFFFFFFFE, 0xFFFFFFFF]),
])
def test_constant_values_become_the_words_region_h_memsets(dtype, value, words):
    from simaccel.native.source import _value_words

    assert _value_words(TensorSpec("c", (), dtype, value)) == words
