"""The conv2d kernels on the simulator (direct, grouped, implicit GEMM) and their choice, against the references."""

from __future__ import annotations

import numpy as np
import pytest
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from simaccel.ops import get_op
from kernel_cases import DTYPES, TOL, PlanOnlyTarget, _random, check, run_op


CONV_OPS = ["simaccel.conv2d", "simaccel.conv2d_bias", "simaccel.conv2d_relu", "simaccel.conv2d_bias_relu"]

# (data shape, weight shape, strides, padding (top, left, bottom, right), dilation, groups)
CONV_CASES = [
    ((1, 3, 5, 6), (4, 3, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((2, 2, 7, 6), (3, 2, 3, 2), (2, 1), (1, 0, 2, 1), (1, 2), 1),
    ((1, 3, 6, 5), (2, 3, 1, 1), (1, 2), (0, 0, 0, 0), (1, 1), 1),
    ((1, 1, 6, 6), (5, 1, 2, 3), (3, 2), (2, 1, 0, 1), (2, 1), 1),
    ((2, 4, 6, 5), (4, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 4),  # depthwise (MobileNet)
    ((1, 6, 5, 5), (4, 3, 3, 2), (1, 1), (1, 0, 1, 1), (1, 1), 2),  # two groups of 3 channels
    ((1, 3, 5, 5), (6, 1, 2, 2), (1, 1), (0, 0, 0, 0), (2, 2), 3),  # depthwise, 2 outputs per channel
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", CONV_OPS)
def test_conv2d_ops(name, dtype):
    idx = CONV_OPS.index(name)
    rng = np.random.default_rng(100 + idx)
    for case, (dshape, wshape, strides, padding, dilation, groups) in enumerate(CONV_CASES):
        arrays = [_random(rng, dshape, dtype), _random(rng, wshape, dtype, scale=0.5)]
        if "_bias" in name:
            o = wshape[0]
            arrays.append(_random(rng, (1, o, 1, 1) if case % 2 == 0 else (o, 1, 1), dtype))
        out, _ = check(name, arrays, dict(strides=strides, padding=padding, dilation=dilation, groups=groups))
        if "_relu" in name:
            assert (out >= 0).all()


# Convolutions with at least MIN_GEMM_CHANNELS output channels (a full 64-channel tile per group
# where grouped: conv2d.uses_implicit_gemm) run as an implicit GEMM (channels inner: the C++ K loop, sliced at these sizes): channel tails (17 of 64 rows), pixel tiles crossed
# (100 pixels), K not a multiple of the slice (27, 18, 5), strides, asymmetric padding,
# dilation, two groups, a 1x1 convolution (a plain GEMM over pixels); the last three with
# channels per group a multiple of the K slice (16), where K runs channels fastest.
GEMM_CONV_CASES = [
    ((1, 3, 6, 7), (17, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((2, 4, 9, 7), (128, 2, 3, 3), (2, 1), (1, 0, 2, 1), (1, 2), 2),
    ((1, 5, 9, 8), (16, 5, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((1, 2, 10, 10), (20, 2, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((1, 16, 6, 5), (17, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((2, 32, 8, 8), (128, 16, 3, 3), (1, 1), (1, 0, 2, 1), (1, 2), 2),
    ((1, 32, 4, 5), (20, 32, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
]


def _conv_inputs(name, case, dtype, rng):
    dshape, wshape, strides, padding, dilation, groups = case
    arrays = [_random(rng, dshape, dtype), _random(rng, wshape, dtype, scale=0.5)]
    if "_bias" in name:
        arrays.append(_random(rng, (1, wshape[0], 1, 1), dtype))
    return arrays, dict(strides=strides, padding=padding, dilation=dilation, groups=groups)


@pytest.mark.parametrize("tiles", ["as chosen", "64x64 forced"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(GEMM_CONV_CASES)))
def test_conv2d_as_implicit_gemm(case, dtype, tiles, monkeypatch):
    """Each case on the kernel its shape takes (these small images: the sliced 32 x 32 tiles
    where K is channels inner and long enough), and with 64 x 64 tiles forced."""
    from simaccel.kernels import conv2d as conv_kernels

    if tiles == "64x64 forced":
        monkeypatch.setattr(conv_kernels, "MIN_SMALL_TILES", 0)

    name = CONV_OPS[case % len(CONV_OPS)]
    arrays, attrs = _conv_inputs(name, GEMM_CONV_CASES[case], dtype, np.random.default_rng(400 + case))
    target = PlanOnlyTarget()
    op = get_op(name)
    out = np.empty(op.infer([a.shape for a in arrays], [dtype] * len(arrays), **op.all_attrs(attrs))[0], dtype)
    op.kernel(target, FakeCUDAArray(out), *map(FakeCUDAArray, arrays), **op.all_attrs(attrs))
    channels_inner = GEMM_CONV_CASES[case][1][1] % 16 == 0
    (kernel,) = [fn for fn, *_ in target.launches]
    if conv_kernels.is_pointwise(arrays[1].shape, attrs["strides"], attrs["padding"], attrs["groups"]):
        assert kernel.__name__.startswith("_matmul_")  # a pointwise conv: the matmul kernels, bias in the epilogue
    else:
        N, _, _, _ = arrays[0].shape
        O, CG, KH, KW = arrays[1].shape
        P = out.shape[2] * out.shape[3]
        groups = attrs["groups"]
        if channels_inner and conv_kernels.tiling(O // groups, P, CG * KH * KW, N * groups) == "sliced":
            assert kernel is conv_kernels._SLICED_KERNELS[dtype] and tiles == "as chosen"
        else:
            assert kernel is conv_kernels._GEMM_KERNELS[(True, dtype) if channels_inner else (False, None)]
    check(name, arrays, attrs)


def _random_conv(rng):
    """A random valid conv2d (data, weight shapes and attributes) for the kernel tests."""
    while True:
        groups = int(rng.choice([1, 1, 2, 3]))
        cg = int(rng.choice([1, 3, 16, 17, 32]))
        og = int(rng.choice([1, 5, 16, 20, 33]))
        kh, kw = (int(k) for k in rng.integers(1, 4, 2))
        strides = tuple(int(v) for v in rng.integers(1, 3, 2))
        dilation = tuple(int(v) for v in rng.integers(1, 3, 2))
        padding = tuple(int(v) for v in rng.integers(0, 3, 4))
        h, w = (int(v) for v in rng.integers(1, 10, 2))
        dshape, wshape = (int(rng.integers(1, 3)), cg * groups, h, w), (og * groups, cg, kh, kw)
        attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups)
        try:
            out, _ = get_op("simaccel.conv2d").infer([dshape, wshape], ["float32"] * 2,
                                                    **get_op("simaccel.conv2d").all_attrs(attrs))
        except Exception:
            continue
        if 0 not in out:  # an empty output launches nothing (tests/test_zero_size.py has those)
            return dshape, wshape, attrs


@pytest.mark.parametrize("seed", range(8))
def test_conv2d_random_shapes(seed):
    """Random convolutions of every kind the launcher tells apart (direct; implicit GEMM with
    K channel-major or tap-major; channel and pixel tails; groups), each against its reference."""
    rng = np.random.default_rng(900 + seed)
    for _ in range(3):
        dshape, wshape, attrs = _random_conv(rng)
        name = CONV_OPS[int(rng.integers(len(CONV_OPS)))]
        arrays = [_random(rng, dshape, "float32"), _random(rng, wshape, "float32", scale=0.5)]
        if "_bias" in name:
            arrays.append(_random(rng, (1, wshape[0], 1, 1), "float32"))
        check(name, arrays, attrs)


@pytest.mark.parametrize("out_channels, size, gemm", [(16, 4, True), (15, 4, False), (64, 3, False)])
def test_conv2d_kernel_choice(out_channels, size, gemm):
    # The implicit GEMM from 16 output channels (ungrouped) and 16 output pixels per image;
    # below either the grouped kernel (kernels/conv2d_grouped.py, tests/test_conv2d_grouped.py).
    from simaccel.kernels import conv2d as conv_kernels

    op = get_op("simaccel.conv2d")
    # (3x3, padded: a 1x1 convolution would take the matmul kernels, `is_pointwise`)
    attrs = op.all_attrs(dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1))
    data, weight = np.zeros((2, 3, size, size), np.float32), np.zeros((out_channels, 3, 3, 3), np.float32)
    target = PlanOnlyTarget()
    out = np.zeros((2, out_channels, size, size), np.float32)
    op.kernel(target, FakeCUDAArray(out), FakeCUDAArray(data), FakeCUDAArray(weight), **attrs)
    [(fn, *_)] = target.launches
    if gemm:
        assert fn is conv_kernels._GEMM_KERNELS[False, None]
    else:
        assert fn.__name__.startswith("_conv2d_grouped_kernel_"), fn.__name__


def test_conv2d_implicit_gemm_beyond_the_grid_caps(monkeypatch):
    # 70 output channels: two row tiles of 64 in two launches (gridDim.y capped at 1); 2
    # images x 1 group in two more (gridDim.z capped at 1): four launches, one output.
    from simaccel.kernels import conv2d as conv_kernels

    monkeypatch.setattr(conv_kernels, "_MAX_GRID_YZ", 1)
    case = ((2, 3, 4, 5), (70, 3, 2, 2), (1, 1), (1, 0, 0, 1), (1, 1), 1)
    arrays, attrs = _conv_inputs("simaccel.conv2d_bias_relu", case, "float32", np.random.default_rng(410))
    check("simaccel.conv2d_bias_relu", arrays, attrs, expected_launches=4)


@pytest.mark.parametrize("out_channels", [4, 16], ids=["grouped", "implicit-gemm"])
def test_conv2d_padding_is_a_zero_multiplied_like_any_input(out_channels):
    # An infinite weight tap that meets padding (the top-left tap of a 2x2 kernel on a 1-pixel
    # pad, in output row 0 and column 0): 0 * inf is NaN there, as in TVM; elsewhere inf.
    data = np.ones((1, 1, 7, 7), np.float32)
    weight = np.ones((out_channels, 1, 2, 2), np.float32)
    weight[:, 0, 0, 0] = np.inf
    attrs = dict(strides=(2, 2), padding=(1, 1, 0, 0), dilation=(1, 1), groups=1)
    out, ref = run_op("simaccel.conv2d", [data, weight], attrs)
    assert np.isnan(ref[:, :, 0, 0]).all()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(out[~np.isnan(out)], ref[~np.isnan(ref)])


# Transposed convolutions (kernels/conv2d_transpose.py): strides with output_padding, groups,
# asymmetric padding, dilation, a kernel larger than its stride, a 1x1 one, padding that crops
# everything but one row.
TRANSPOSE_CASES = [
    ((2, 4, 5, 6), (4, 3, 3, 3), {"strides": [2, 2], "padding": [1, 1, 1, 1], "output_padding": [1, 1], "dilation": [1, 1], "groups": 1}),
    ((1, 6, 4, 3), (6, 2, 2, 3), {"strides": [2, 3], "padding": [0, 1, 1, 0], "output_padding": [0, 2], "dilation": [1, 1], "groups": 3}),
    ((1, 2, 5, 5), (2, 2, 3, 3), {"strides": [1, 1], "padding": [0, 0, 0, 0], "output_padding": [0, 0], "dilation": [2, 1], "groups": 1}),
    ((1, 3, 3, 3), (3, 1, 4, 4), {"strides": [2, 2], "padding": [1, 1, 1, 1], "output_padding": [0, 0], "dilation": [1, 1], "groups": 3}),
    ((3, 5, 2, 4), (5, 7, 1, 1), {"strides": [1, 2], "padding": [0, 0, 0, 0], "output_padding": [0, 1], "dilation": [1, 1], "groups": 1}),
    ((1, 2, 3, 3), (2, 1, 3, 3), {"strides": [1, 1], "padding": [2, 0, 2, 4], "output_padding": [0, 0], "dilation": [1, 1], "groups": 1}),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("data_shape, weight_shape, attrs", TRANSPOSE_CASES, ids=str)
def test_conv2d_transpose_against_its_reference_and_torch(data_shape, weight_shape, attrs, dtype):
    rng = np.random.default_rng(len(data_shape) + sum(weight_shape))
    arrays = [_random(rng, data_shape, dtype), _random(rng, weight_shape, dtype)]
    out, ref = check("simaccel.conv2d_transpose", arrays, attrs)
    torch = pytest.importorskip("torch")
    pt, pl, pb, pr = attrs["padding"]
    if (pt, pl) == (pb, pr):  # torch pads symmetrically: its result is the reference's
        want = torch.nn.functional.conv_transpose2d(*(torch.from_numpy(a.astype(np.float32)) for a in arrays),
                                                    stride=attrs["strides"], padding=(pt, pl), groups=attrs["groups"],
                                                    output_padding=attrs["output_padding"], dilation=attrs["dilation"])
        np.testing.assert_allclose(ref.astype(np.float32), want.numpy().astype(dtype).astype(np.float32), **TOL[dtype])


@pytest.mark.parametrize("attrs, message", [
    ({"output_padding": [2, 0]}, "output_padding 2 along the height is not below its stride 2 or dilation 1"),
    ({"padding": [5, 0, 5, 0]}, "crops more than"),
    ({"groups": 3}, "groups=3 does not divide the 4 input channels"),
])
def test_conv2d_transpose_shapes_it_does_not_take_are_shape_errors(attrs, message):
    from simaccel.errors import ShapeError

    op = get_op("simaccel.conv2d_transpose")
    base = {"strides": [2, 2], "padding": [0, 0, 0, 0], "output_padding": [0, 0], "dilation": [1, 1], "groups": 1}
    with pytest.raises(ShapeError, match=message):
        op.infer([(1, 4, 3, 3), (4, 2, 3, 3)], ["float32"] * 2, **op.all_attrs({**base, **attrs}))
