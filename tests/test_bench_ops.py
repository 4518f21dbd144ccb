"""`simaccel bench --ops` (the per-op roofline bench): its cases are valid ops of the ISA, its
work counts are right, and it refuses what it cannot do. The timing itself needs a GPU
(results/gpu/*/ops/)."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest

from simaccel.kernels.dtypes import numpy_dtype
from simaccel.ops import get_op
from simaccel.tvm_integration.tools.bench_ops import (CASES, LIMITS, MAX_REL_ERROR, OpCase, _line, _relative_error,
                                                      roofline_row, work_of)
from test_cli import simaccel

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_every_case_is_an_op_of_the_isa_at_a_valid_shape(case):
    op = get_op(case.op)
    shape, dtype = op.infer(list(case.shapes), [case.dtype] * len(case.shapes), **op.all_attrs(case.attrs))
    assert dtype == case.dtype and math.prod(shape) > 0
    # GEMM-like ops are bound by their FLOPs, except a GEMV (at most 4 rows: a decoder step's
    # linear layer), which streams its weight once: by its bytes, as every other op.
    gemv = case.op.startswith(("simaccel.matmul", "simaccel.dense")) and math.prod(case.shapes[0][:-1]) <= 4
    gemm_like = case.op.startswith(("simaccel.matmul", "simaccel.dense", "simaccel.conv2d")) and not gemv
    assert case.work == ("flops" if gemm_like else "bytes")
    if gemv:
        weight_bytes = math.prod(case.shapes[1]) * np.dtype(numpy_dtype(case.dtype)).itemsize
        assert weight_bytes > 50e6  # beyond an H100's or H200's L2: streamed from HBM on every call

def test_work_counts():
    gemm = OpCase("g", "simaccel.matmul", ((64, 32), (32, 16)), {}, "flops")
    assert work_of(gemm, (64, 16)) == (2 * 64 * 16 * 32, 4 * (64 * 32 + 32 * 16 + 64 * 16))
    # conv2d: per output element, one multiply-add per weight element of its group.
    conv = OpCase("c", "simaccel.conv2d", ((2, 8, 10, 10), (6, 4, 3, 3)), {}, "flops")
    assert work_of(conv, (2, 6, 8, 8))[0] == 2 * (2 * 6 * 8 * 8) * (4 * 3 * 3)
    relu = OpCase("r", "simaccel.relu", ((1000,),), {}, "bytes")
    assert work_of(relu, (1000,)) == (0.0, 8000)
    assert work_of(OpCase("r", "simaccel.relu", ((1000,),), {}, "bytes", "float16"), (1000,)) == (0.0, 4000)


def test_a_row_is_measured_against_the_limit_that_bounds_it():
    h200 = LIMITS["NVIDIA H200"]
    gemm = roofline_row(OpCase("g", "simaccel.matmul", ((4096, 4096), (4096, 4096)), {}, "flops"), (4096, 4096), 5000.0, h200)
    assert gemm["unit"] == "FLOP/s" and gemm["achieved"] == pytest.approx(2 * 4096**3 / 5e-3)
    assert gemm["fraction_of_limit"] == pytest.approx(gemm["achieved"] / 66.9e12)
    half = roofline_row(OpCase("h", "simaccel.matmul", ((4096, 4096), (4096, 4096)), {}, "flops", "float16"),
                        (4096, 4096), 500.0, h200)
    assert half["fraction_of_limit"] == pytest.approx(half["achieved"] / 989.4e12)  # the tensor cores' peak
    copy = roofline_row(OpCase("r", "simaccel.relu", ((2**20,),), {}, "bytes"), (2**20,), 2.0, h200)
    assert copy["unit"] == "B/s" and copy["fraction_of_limit"] == pytest.approx(8 * 2**20 / 2e-6 / 4.8e12)
    unknown = roofline_row(OpCase("r", "simaccel.relu", ((8,),), {}, "bytes"), (8,), 1.0, None)
    assert unknown["limit"] is None and unknown["fraction_of_limit"] is None


def test_a_kernel_off_its_reference_is_marked_not_timed_as_the_op():
    import numpy as np

    op = get_op("simaccel.relu")
    x = np.array([-1.0, 2.0, 4.0], np.float32)
    attrs = op.all_attrs({})
    assert _relative_error(op, [x], attrs, np.array([0.0, 2.0, 4.0], np.float32)) == 0
    error = _relative_error(op, [x], attrs, np.array([0.0, 2.0, 4.1], np.float32))
    assert error == pytest.approx(0.1 / 4) and error > MAX_REL_ERROR["float32"]
    row = roofline_row(OpCase("r", "simaccel.relu", ((3,),), {}, "bytes"), (3,), 1.0, None)
    assert "DIFFERS FROM ITS REFERENCE" in _line("r", row | {"max_rel_error": error, "matches_reference": False})
    assert "DIFFERS" not in _line("r", row | {"max_rel_error": 0.0, "matches_reference": True})


@pytest.mark.parametrize("args, message", [
    (("bench", "--ops", "--artifacts", "x"), "bench --ops: times the ISA's kernels alone"),
    (("bench", "--ops", "--report", "new.json"), "it takes no --artifacts or --report"),
    # An earlier report is read before anything is timed (here, before the GPU is looked for).
    (("bench", "--ops", "--compare", "/nonexistent.json"), "bench report /nonexistent.json: no such file"),
    (("bench", "--ops", "--compare", str(ROOT / "results/gpu/2026-12-01-h200-main-loops/bench/bench.json")),
     "a region report (bench.json); give an ops.json"),
])
def test_bench_ops_user_errors(args, message):
    result = simaccel(*args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_without_a_gpu_bench_ops_says_so(tmp_path):
    from numba import cuda

    if cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = simaccel("bench", "--ops", "--out", str(tmp_path))
    assert result.returncode == 2 and "bench --ops: needs an NVIDIA GPU" in result.stderr, result.stderr
