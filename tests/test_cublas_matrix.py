"""TVM's own cuBLAS BYOC test matrix as a yardstick (apache/tvm tests/python/relax/test_codegen_cublas.py).

The matmul modules its tests build, with the stock wheel's `tvm.relax.testing.get_relax_matmul_module`
(epilogues bias, relu and gelu; a transposed weight; batched and broadcast operands; symbolic
batch dims; float16 and float32, and bfloat16 too; int8 to int32 and bfloat16 to float32),
partitioned by simaccel: every op offloads, and one build matches TVM alone at sizes drawn for
the symbolic dims (int8 exactly).
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.relax.testing import get_relax_matmul_module
from tvm.script import relax as R

from simaccel.compare import array_difference
from simaccel.tvm_integration.backend.partition import partition_report
from simaccel.tvm_integration.backend.pipeline import build, build_tvm_only

A, B = tvm.tirx.Var("a", "int64"), tvm.tirx.Var("b", "int64")
EPILOGUES = {"none": (False, None), "bias": (True, None), "relu": (True, R.nn.relu), "gelu": (True, R.nn.gelu)}
FLOAT_CASES = [  # (x shape, y shape, y transposed, epilogue): test_matmul_offload's
    ((8, 8), (8, 8), False, "none"),
    ((A, 6), (6, 16), False, "bias"),
    ((4, 16), (16, 128), True, "relu"),
    ((35, 8), (8, 8), True, "gelu"),
    ((6, 32, 8), (6, 8, 10), False, "bias"),
    ((6, 32, 8), (6, 8, 10), True, "none"),
    ((A, 32, 8), (A, 8, 10), True, "gelu"),
    ((5, 3, 32, 8), (5, 3, 8, 10), True, "relu"),
    ((A, 3, 32, 8), (A, 3, 8, 10), True, "relu"),
    ((A, B, 32, 8), (A, B, 8, 10), True, "relu"),
    ((5, 3, 32, 8), (8, 10), False, "none"),
]


def matmul_module(x_shape, y_shape, transposed, epilogue, in_dtype, out_dtype):
    """The module TVM's test builds, and the y shape it passes (transposed where it says)."""
    with_bias, activation = EPILOGUES[epilogue]
    y_given = (*y_shape[:-2], y_shape[-1], y_shape[-2]) if transposed else y_shape
    mod = get_relax_matmul_module(x_shape, y_given, in_dtype, out_dtype, transposed_y=transposed,
                                  bias_shape=(y_shape[-1],) if with_bias else None, activation=activation)
    return mod, y_given, with_bias


def _concrete(shape, sizes):
    return tuple(sizes[d.name] if isinstance(d, tvm.tirx.Var) else d for d in shape)


@pytest.mark.parametrize("dtype", ["float16", "float32", "bfloat16"])
@pytest.mark.parametrize("x_shape, y_shape, transposed, epilogue", FLOAT_CASES, ids=str)
def test_tvms_cublas_matmuls_offload_whole_and_match_tvm_alone(x_shape, y_shape, transposed, epilogue, dtype):
    mod, y_given, with_bias = matmul_module(x_shape, y_shape, transposed, epilogue, dtype, dtype)
    _, report = partition_report(mod)
    assert not report.kept and report.regions, report.format()
    ours, theirs = build(mod, "llvm"), build_tvm_only(mod, "llvm")
    rng = np.random.default_rng(0)
    for sizes in ({"a": 1, "b": 1}, {"a": 13, "b": 3}):
        arrays = [rng.standard_normal(_concrete(s, sizes)).astype(dtype) for s in (x_shape, y_given)]
        if with_bias:
            arrays.append(rng.standard_normal((y_shape[-1],)).astype(dtype))
        got, want = (relax.VirtualMachine(e, tvm.cpu())["main"](*map(tvm.runtime.tensor, arrays)).numpy()
                     for e in (ours, theirs))
        found = array_difference(got, want, scaled=True)
        assert found.ok, f"at {sizes}: {found.reason}"


WIDENING_CASES = [  # (in dtype, out dtype, x shape, y shape)
    ("int8", "int32", (16, 32), (32, 8)),  # test_matmul_igemm_offload
    ("int8", "int32", (A, 8), (8, 16)),
    ("bfloat16", "float32", (10, 32), (32, 64)),  # test_matmul_bfloat16_offload
    ("float16", "float32", (A, 3, 32, 8), (A, 3, 8, 10)),  # and the same widening, batched over a symbolic dim
    ("int8", "int32", (A, 70, 37), (37, 67)),
]


@pytest.mark.parametrize("in_dtype, out_dtype, x_shape, y_shape", WIDENING_CASES, ids=str)
def test_its_int8_and_widening_matmuls_offload_and_match_tvm_alone(in_dtype, out_dtype, x_shape, y_shape):
    mod, y_given, _ = matmul_module(x_shape, y_shape, False, "none", in_dtype, out_dtype)
    _, report = partition_report(mod)
    assert not report.kept and list(report.regions.values()) == [["simaccel.matmul"]], report.format()
    ours, theirs = build(mod, "llvm"), build_tvm_only(mod, "llvm")
    rng = np.random.default_rng(1)
    for sizes in ({"a": 1}, {"a": 5}):
        shapes = [_concrete(s, sizes) for s in (x_shape, y_given)]
        arrays = ([rng.integers(-128, 128, s, dtype=np.int8) for s in shapes] if in_dtype == "int8" else
                  [rng.standard_normal(s).astype(in_dtype) for s in shapes])
        got, want = (relax.VirtualMachine(e, tvm.cpu())["main"](*map(tvm.runtime.tensor, arrays)).numpy()
                     for e in (ours, theirs))
        assert got.dtype == want.dtype == np.dtype(out_dtype)
        if in_dtype == "int8":
            np.testing.assert_array_equal(got, want)
        else:
            found = array_difference(got, want, scaled=True)
            assert found.ok, f"at {sizes}: {found.reason}"


def test_an_int8_matmul_that_keeps_int8_stays_on_tvm_with_its_reason():
    """Relax's int8 matmul without out_dtype sums in int8; simaccel's int8 GEMM gives int32 only."""
    mod, _, _ = matmul_module((16, 32), (32, 8), False, "none", "int8", "int8")
    _, report = partition_report(mod)
    assert not report.regions
    assert "int8 operands need out_dtype int32" in " ".join(r for _, op, r in report.kept if op == "relax.matmul")


@pytest.mark.gpu
@pytest.mark.parametrize("in_dtype, out_dtype, x_shape, y_shape", WIDENING_CASES[1:4], ids=str)
def test_its_int8_and_widening_matmuls_run_natively_on_the_gpu(in_dtype, out_dtype, x_shape, y_shape):
    """Built for CUDA by simaccel (native regions; the int8 GEMM's dp4a, the tensor cores' float32
    store) and by TVM alone, at sizes drawn for the symbolic dim: int8 exactly."""
    from simaccel.tvm_integration.backend.native import has_native_regions

    mod, y_given, _ = matmul_module(x_shape, y_shape, False, "none", in_dtype, out_dtype)
    if any(isinstance(d, tvm.tirx.Var) for d in x_shape):
        mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {"a": 64})
    ours, theirs = build(mod, "nvidia/nvidia-h100"), build_tvm_only(mod, "nvidia/nvidia-h100")
    assert has_native_regions(ours)
    rng = np.random.default_rng(2)
    for sizes in ({"a": 1}, {"a": 50}, {"a": 64}):  # 1, a middle size, the upper bound
        shapes = [_concrete(s, sizes) for s in (x_shape, y_given)]
        arrays = ([rng.integers(-128, 128, s, dtype=np.int8) for s in shapes] if in_dtype == "int8" else
                  [rng.standard_normal(s).astype(in_dtype) for s in shapes])
        got, want = (relax.VirtualMachine(e, tvm.cuda(0))["main"](*(tvm.runtime.tensor(a, tvm.cuda(0)) for a in arrays))
                     .numpy() for e in (ours, theirs))
        if in_dtype == "int8":
            np.testing.assert_array_equal(got, want)
        else:
            found = array_difference(got, want, scaled=True)
            assert found.ok, f"at {sizes}: {found.reason}"
