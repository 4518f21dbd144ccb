"""The grouped / depthwise conv2d kernel (simaccel.kernels.conv2d_grouped) on the Numba CUDA
simulator against the op registry's numpy reference, which convolutions launch it, its tile
geometry, and its ahead-of-time compile for sm_90 (registers, no spills).

Shapes stay tiny: the simulator runs all 128 threads of every block in Python.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from simaccel.kernels import conv2d as conv_kernels
from simaccel.kernels import conv2d_grouped as grouped
from simaccel.ops import get_op
from kernel_cases import PlanOnlyTarget, _random, check, run_op
from test_kernels_conv2d import CONV_OPS


def attrs_of(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    return dict(strides=strides, padding=padding, dilation=dilation, groups=groups)


def launched(name, arrays, attrs):
    """The kernel functions the launcher picks for these inputs (nothing runs)."""
    op = get_op(name)
    attrs = op.all_attrs(attrs)
    shape, dtype = op.infer([a.shape for a in arrays], [str(a.dtype) for a in arrays], **attrs)
    target = PlanOnlyTarget()
    op.kernel(target, FakeCUDAArray(np.empty(shape, dtype)), *map(FakeCUDAArray, arrays), **attrs)
    return [fn for fn, *_ in target.launches]


def is_grouped(fn) -> bool:
    return fn.__name__.startswith("_conv2d_grouped_kernel_")


def conv_inputs(rng, name, dshape, wshape, dtype="float32"):
    arrays = [_random(rng, dshape, dtype), _random(rng, wshape, dtype, scale=0.5)]
    if "_bias" in name:
        arrays.append(_random(rng, (1, wshape[0], 1, 1), dtype))
    return arrays


# (data shape, weight shape, strides, padding (top, left, bottom, right), dilation, groups): the
# kernel sizes 1, 3, 5, 7 and 1x3 / 3x1; strides 1 and 2 (3 once); dilation 1 and 2; symmetric and
# asymmetric padding; depthwise (groups = C) with channel multipliers 1 and 2 (3 once); groups
# 2 and 4 with 2..8 channels per group (MO 4, 2 and 1 output channels per thread); sizes that
# leave tiles partly outside the output.
GRID = [
    ((1, 2, 5, 6), (2, 1, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 2),
    ((1, 2, 7, 9), (2, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),
    ((2, 3, 9, 7), (3, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 3),
    ((1, 2, 9, 10), (2, 1, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 2),
    ((1, 2, 11, 9), (2, 1, 5, 5), (2, 2), (2, 1, 1, 2), (1, 1), 2),
    ((1, 1, 10, 12), (1, 1, 7, 7), (1, 1), (3, 3, 3, 3), (1, 1), 1),
    ((1, 2, 12, 11), (2, 1, 7, 7), (2, 2), (3, 2, 3, 3), (1, 1), 2),
    ((1, 2, 6, 9), (2, 1, 1, 3), (1, 1), (0, 1, 0, 1), (1, 1), 2),
    ((1, 2, 9, 6), (2, 1, 3, 1), (2, 1), (1, 0, 0, 0), (1, 1), 2),
    ((1, 2, 9, 9), (2, 1, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 2),
    ((1, 2, 10, 9), (2, 1, 3, 3), (2, 2), (2, 1, 0, 2), (2, 1), 2),
    ((1, 2, 7, 8), (4, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),  # multiplier 2
    ((1, 3, 7, 6), (6, 1, 3, 3), (2, 1), (0, 1, 1, 0), (1, 2), 3),  # multiplier 2, asymmetric
    ((1, 2, 6, 6), (6, 1, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 2),  # multiplier 3 (MO 1)
    ((1, 4, 6, 7), (4, 2, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),  # groups 2, CG 2, OG 2
    ((1, 8, 7, 6), (8, 2, 3, 3), (2, 2), (1, 0, 1, 1), (1, 1), 4),  # groups 4, CG 2, OG 2
    ((1, 12, 6, 6), (8, 3, 3, 3), (1, 1), (1, 1, 1, 1), (2, 2), 4),  # groups 4, CG 3, OG 2
    ((1, 16, 5, 7), (16, 8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),  # groups 2, CG 8, OG 8 (MO 4)
    ((1, 8, 6, 5), (8, 4, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 2),  # grouped 1x1, MO 4
    ((2, 4, 5, 5), (12, 2, 2, 3), (3, 2), (1, 1, 2, 0), (1, 1), 2),  # stride 3, OG 6 (MO 2)
    ((1, 3, 4, 4), (5, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),  # ungrouped, 5 output channels
]


@pytest.mark.parametrize("case", range(len(GRID)))
def test_grouped_kernel_matches_the_reference(case):
    dshape, wshape, strides, padding, dilation, groups = GRID[case]
    name = CONV_OPS[case % len(CONV_OPS)]  # plain, bias, relu, bias + relu in turn
    rng = np.random.default_rng(1000 + case)
    arrays = conv_inputs(rng, name, dshape, wshape)
    attrs = attrs_of(strides, padding, dilation, groups)
    assert all(is_grouped(fn) for fn in launched(name, arrays, attrs))
    out, _ = check(name, arrays, attrs)
    if "_relu" in name:
        assert (out >= 0).all() and (out == 0).any()


@pytest.mark.parametrize("case", [1, 4, 11, 15, 18])
def test_grouped_kernel_in_float16(case):
    # float16 in and out, float32 accumulation, one rounding at the store.
    dshape, wshape, strides, padding, dilation, groups = GRID[case]
    rng = np.random.default_rng(1100 + case)
    arrays = conv_inputs(rng, "simaccel.conv2d_bias_relu", dshape, wshape, "float16")
    check("simaccel.conv2d_bias_relu", arrays, attrs_of(strides, padding, dilation, groups))


def test_float16_rounds_once_at_the_store():
    # 2048 + 9 * 1 in float32 is 2057, which float16 rounds to 2056; rounding after each tap
    # (2048 + 1 = 2048 in float16) would leave 2048.
    data = np.ones((1, 1, 3, 3), np.float16)
    data[0, 0, 1, 1] = 2048
    weight = np.ones((1, 1, 3, 3), np.float16)
    out, ref = run_op("simaccel.conv2d", [data, weight], attrs_of(padding=(1, 1, 1, 1)))
    assert out[0, 0, 1, 1] == np.float16(2056) == ref[0, 0, 1, 1]


@pytest.mark.parametrize("where", ["input", "weight"])
def test_padding_is_a_zero_multiplied_like_any_input(where):
    # An inf in the weight meets padding at the image's border (0 * inf is NaN there, as in
    # TVM); an inf or NaN in the input spreads to every output whose window holds it.
    data = np.ones((1, 2, 6, 7), np.float32)
    weight = np.ones((2, 1, 3, 3), np.float32)
    if where == "weight":
        weight[:, 0, 0, 0] = np.inf
    else:
        data[0, 0, 2, 3] = np.inf
        data[0, 1, 4, 0] = np.nan
    attrs = attrs_of(padding=(1, 1, 1, 1), groups=2)
    assert all(is_grouped(fn) for fn in launched("simaccel.conv2d", [data, weight], attrs))
    out, ref = run_op("simaccel.conv2d", [data, weight], attrs)
    assert np.isnan(ref).any()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(out[~np.isnan(out)], ref[~np.isnan(ref)])


def test_more_blocks_than_one_launch_takes(monkeypatch):
    # gridDim.x capped at one block: one launch per block, each from its own first block
    # index (bid0), so every block still lands on its own tile.
    monkeypatch.setattr(grouped, "_MAX_GRID_X", 1)
    rng = np.random.default_rng(1200)
    dshape, wshape = (3, 4, 17, 9), (4, 1, 3, 3)
    arrays = conv_inputs(rng, "simaccel.conv2d_bias_relu", dshape, wshape)
    attrs = attrs_of(padding=(1, 1, 1, 1), groups=4)
    th, tw, mo = grouped.plan(dshape, wshape, (3, 4, 17, 9), 4, (1, 1), (1, 1))
    np_ = grouped.NTHREADS * grouped.PX // (th * tw)
    blocks = -(-3 * 4 // np_) * -(-17 // th) * -(-9 // tw)
    assert blocks > 1
    check("simaccel.conv2d_bias_relu", arrays, attrs, expected_launches=blocks)


@pytest.mark.parametrize("og, groups, pixels, gemm", [
    (1, 32, 12544, False),  # depthwise
    (2, 64, 784, False),  # depthwise, channel multiplier 2
    (4, 32, 3136, False),  # ResNeXt 32x4d, first stage
    (16, 32, 196, False),  # ResNeXt 32x4d, third stage: a quarter of a GEMM tile
    (32, 32, 49, False),
    (64, 2, 196, True),  # a full GEMM tile per group
    (16, 1, 196, True), (15, 1, 196, False),  # ungrouped: the GEMM from 16 channels
    (64, 1, 15, False),  # a tiny image
])
def test_which_convolutions_take_the_implicit_gemm(og, groups, pixels, gemm):
    assert conv_kernels.uses_implicit_gemm(og, groups, pixels, 27) is gemm


def test_resnext_groups_launch_the_grouped_kernel():
    rng = np.random.default_rng(1300)
    arrays = conv_inputs(rng, "simaccel.conv2d", (1, 64, 4, 4), (64, 16, 3, 3))  # 4 groups x 16 channels
    [fn] = launched("simaccel.conv2d", arrays, attrs_of(padding=(1, 1, 1, 1), groups=4))
    assert is_grouped(fn) and fn.geometry["MO"] == 4


def test_kernels_beyond_the_shared_tile_keep_the_direct_kernel():
    rng = np.random.default_rng(1400)
    arrays = conv_inputs(rng, "simaccel.conv2d_relu", (1, 2, 10, 11), (2, 1, 9, 9))
    attrs = attrs_of(padding=(4, 4, 4, 4), groups=2)
    assert launched("simaccel.conv2d_relu", arrays, attrs) == [conv_kernels._conv2d_kernel]
    check("simaccel.conv2d_relu", arrays, attrs)
    # A dilation whose input tile exceeds the shared budget for every tile.
    assert grouped.plan((1, 2, 200, 200), (2, 1, 7, 7), (1, 2, 20, 20), 2, (1, 1), (30, 30)) is None


@pytest.mark.parametrize("oh, ow, planes, tile", [
    (112, 112, 256, (16, 32)),
    (56, 56, 768, (16, 32)),
    (28, 28, 1920, (16, 32)),
    (14, 14, 1920, (8, 16)),  # 4 planes per block
    (7, 7, 7680, (8, 8)),  # 8 planes per block
    (2, 3, 64, (4, 4)),  # 32 planes per block
])
def test_tile_choice(oh, ow, planes, tile):
    assert grouped.choose_tile(oh, ow, planes, 3, 3, 1, 1, 1, 1, 1) == tile


def test_tile_geometry_and_bank_conflicts():
    # Stride 1: a warp's first shared read of the input tile hits 32 distinct banks in the
    # 16 x 32 tile (8 threads a row, 4 rows: an odd pitch), two threads a bank at most in the
    # others (4 or 2 threads a row at 4 words apart: no row pitch separates 8 or 16 rows; one
    # thread a row: 8 planes' rows, planes TIH rows apart).
    for th, tw in grouped.TILES:
        for k, s, d in [(3, 1, 1), (5, 1, 1), (7, 1, 1), (3, 2, 1), (7, 2, 1), (3, 1, 2)]:
            for mo in (1, 2, 4):
                kernel = grouped.grouped_kernel(th, tw, k, k, s, s, d, d, mo, mo == 1)
                g = kernel.geometry
                assert g["NP"] * th * tw == grouped.NTHREADS * grouped.PX
                assert g["TIH"] == (th - 1) * s + (k - 1) * d + 1 and g["PITCH"] >= g["TIW"]
                assert g["bytes"] == 4 * g["NP"] * (g["TIH"] * g["PITCH"] + mo * th * g["SPITCH"])
                if s == 1:
                    tx = tw // grouped.PX
                    first = [(slot * g["TIH"] + lt // tx) * g["PITCH"] + (lt % tx) * grouped.PX
                             for slot, lt in grouped._warp_threads(g["NP"], th * tx)]
                    assert grouped._most_per_bank(first) == (1 if tx == 8 else 2), (th, tw, k, g)


def test_one_function_per_geometry():
    # Launch plans, the "cuda" target's cache and AOT compiles key on the function.
    assert grouped.grouped_kernel(8, 16, 3, 3, 1, 1, 1, 1, 1, True) is grouped.grouped_kernel(8, 16, 3, 3, 1, 1, 1, 1, 1, True)
    fn = grouped.grouped_kernel(8, 16, 3, 3, 1, 1, 1, 1, 1, True)
    assert fn.__name__ == "_conv2d_grouped_kernel_8x16_k3x3_s1x1_d1x1_m1_c1" and "apply_activation(v + b, act)" in fn.source
    assert fn.source.count("apply_activation(") == 1  # one store point


# The bench's shapes (tvm_integration/tools/bench_ops.py), compiled, not run.
CONV = {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1]}
AOT_CASES = [
    ("simaccel.conv2d_bias_relu", [(8, 32, 112, 112), (32, 1, 3, 3), (1, 32, 1, 1)], {**CONV, "groups": 32}),
    ("simaccel.conv2d", [(8, 96, 112, 112), (96, 1, 3, 3)], {**CONV, "strides": [2, 2], "groups": 96}),
    ("simaccel.conv2d", [(8, 240, 28, 28), (240, 1, 5, 5)], {**CONV, "padding": [2, 2, 2, 2], "groups": 240}),
    ("simaccel.conv2d_bias", [(8, 96, 56, 56), (96, 1, 7, 7), (1, 96, 1, 1)], {**CONV, "padding": [3, 3, 3, 3], "groups": 96}),
    ("simaccel.conv2d_relu", [(8, 128, 56, 56), (128, 4, 3, 3)], {**CONV, "groups": 32}),
    ("simaccel.conv2d", [(8, 64, 28, 28), (128, 1, 3, 3)], {**CONV, "groups": 64}),
]


@pytest.mark.parametrize("name, shapes, attrs", AOT_CASES, ids=lambda v: str(v)[:40])
def test_grouped_kernels_compile_for_sm90_without_spills(name, shapes, attrs):
    """No spills and no stack (accumulators, weights and the input row in registers), within
    the launch bounds' 128 registers (4 blocks of 128 threads per SM)."""
    from simaccel.aot import compile_program
    from test_aot import SM90, no_spills
    from gpu_cases import one_op_program

    dtype = "float16" if "bias" in name else "float32"
    [kernel] = compile_program(one_op_program(name, shapes, dtype, attrs), SM90)
    assert is_grouped(kernel.kernel)
    used = no_spills(kernel)
    assert used["stack"] == 0 and used["registers"] <= 128, (kernel.kernel.__name__, used)


def test_the_torch_peer_takes_the_cases_attributes():
    # bench --ops times F.conv2d with each case's strides, padding, dilation and groups
    # (asymmetric padding as an F.pad inside the timed call).
    from simaccel.tvm_integration.tools.bench_ops import _torch_conv2d

    calls = []

    class F:
        @staticmethod
        def pad(x, pad):
            calls.append(("pad", pad))
            return "padded"

        @staticmethod
        def conv2d(x, w, b, **kw):
            calls.append(("conv2d", x, kw))

    _torch_conv2d(F, "x", "w", None, {"strides": [2, 2], "padding": [1, 1, 1, 1], "dilation": [1, 2], "groups": 96})
    _torch_conv2d(F, "x", "w", None, {"strides": [1, 1], "padding": [0, 1, 2, 3], "dilation": [1, 1], "groups": 4})
    assert calls == [("conv2d", "x", dict(stride=(2, 2), padding=(1, 1), dilation=(1, 2), groups=96)),
                     ("pad", (1, 3, 0, 2)),
                     ("conv2d", "padded", dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=4))]
