"""Each kernel at real sizes on a real GPU against its numpy reference: tilings, unaligned views, float16 and bfloat16 tensor cores."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_cases import TOLERANCE, one_op_program, to_device, to_host
from simaccel.ops.rules import FLOAT_DTYPES

pytestmark = pytest.mark.gpu  # skipped, with the reason, where no GPU exists


KERNEL_CASES = [
    ("simaccel.dense_bias_gelu", [(300, 257), (129, 257), (129,)], {}),
    ("simaccel.matmul_relu", [(2, 100, 64), (64, 200)], {}),
    # The sliced-K tiling (kernels/matmul.py `tiling`): few 64x64 tiles, long K; batched; a
    # pointwise convolution of a 7x7 stage on it.
    ("simaccel.dense_bias_gelu", [(256, 3072), (768, 3072), (768,)], {}),
    ("simaccel.matmul", [(2, 3, 77, 64), (2, 3, 64, 77)], {}),
    # The GEMV (at most 4 rows): a classifier, both forms of B, K not a multiple of 4 (element
    # by element loads), column tails, a decoder step's batched attention.
    ("simaccel.dense_bias_gelu", [(1, 1280), (1000, 1280), (1000,)], {}),
    ("simaccel.matmul_relu", [(3, 1283), (1283, 70)], {}),
    ("simaccel.dense", [(2, 1283), (37, 1283)], {}),
    ("simaccel.matmul_bias", [(4, 768), (768, 3075), (3075,)], {}),
    ("simaccel.matmul", [(2, 4, 1, 64), (2, 4, 64, 77)], {}),
    # The GEMV at K = 1..3 (fewer elements than a lane's load; the H200 fuzz campaign's case 28
    # had a 1x1 @ 1x2 dense), in both forms of B.
    ("simaccel.dense_bias", [(1, 1), (2, 1), (2,)], {}),
    ("simaccel.matmul", [(3, 2), (2, 33)], {}),
    ("simaccel.dense", [(4, 3), (70, 3)], {}),
    ("simaccel.conv2d_bias_relu", [(2, 320, 7, 7), (1280, 320, 1, 1), (1, 1280, 1, 1)],
     {"strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1}),
    ("simaccel.conv2d_bias_relu", [(2, 16, 33, 31), (24, 16, 3, 3), (1, 24, 1, 1)],
     {"strides": [2, 1], "padding": [1, 1, 2, 0], "dilation": [1, 2], "groups": 1}),
    ("simaccel.conv2d_transpose", [(2, 64, 33, 31), (64, 32, 4, 4)],
     {"strides": [2, 2], "padding": [1, 1, 1, 1], "output_padding": [0, 0], "dilation": [1, 1], "groups": 1}),
    ("simaccel.conv2d_transpose", [(1, 16, 20, 21), (16, 4, 3, 3)],
     {"strides": [2, 3], "padding": [1, 0, 0, 2], "output_padding": [1, 2], "dilation": [1, 1], "groups": 4}),
    ("simaccel.max_pool2d", [(2, 8, 65, 63)], {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1], "dilation": [1, 1]}),
    ("simaccel.avg_pool2d", [(2, 8, 65, 63)],
     {"pool_size": [3, 2], "strides": [2, 1], "padding": [1, 0, 1, 1], "dilation": [1, 1], "count_include_pad": False}),
    ("simaccel.softmax", [(3, 77, 1000)], {}),
    ("simaccel.layer_norm", [(3, 77, 768), (768,), (768,)], {"epsilon": 1e-5}),
    # The decoder ops: RMSNorm, rotary embeddings' sin / cos / negative, attention (prefill,
    # causal both ways, and a decode row against a long cache).
    ("simaccel.rms_norm", [(3, 77, 768), (768,)], {"epsilon": 1e-5}),
    ("simaccel.sin", [(1000, 513)], {}),
    ("simaccel.cos", [(1000, 513)], {}),
    ("simaccel.negative", [(1000, 513)], {}),
    ("simaccel.attention", [(2, 77, 8, 64), (2, 77, 8, 64), (2, 77, 8, 64)], {"scale": 0.125, "causal": True, "bottom_right": False}),
    ("simaccel.attention", [(1, 50, 4, 128), (1, 300, 4, 128), (1, 300, 4, 96)], {"scale": 0.09, "causal": True, "bottom_right": True}),
    ("simaccel.attention", [(4, 1, 8, 128), (4, 1000, 8, 128), (4, 1000, 8, 128)], {"scale": 0.09, "causal": False, "bottom_right": False}),
    # Grouped-query attention on the tensor-core tiles: prefill of 4 query heads per key/value
    # head (800 packed rows), a decode step of 4 heads against 4097 keys, more rows than keys.
    ("simaccel.attention", [(2, 200, 8, 128), (2, 200, 2, 128), (2, 200, 2, 128)], {"scale": 0.09, "causal": True, "bottom_right": True}),
    ("simaccel.attention", [(3, 1, 32, 128), (3, 4097, 8, 128), (3, 4097, 8, 128)], {"scale": 0.09, "causal": True, "bottom_right": True}),
    ("simaccel.attention", [(1, 130, 6, 64), (1, 70, 3, 64), (1, 70, 3, 64)], {"scale": 0.2, "causal": True, "bottom_right": True}),
    # Attention with a bias (16-bit: the tiles; float32: the one-warp kernel): a padding mask per
    # batch over grouped heads, a bias per score, and a decode step whose keys split (the split
    # kernels read the bias).
    ("simaccel.attention_bias", [(2, 77, 8, 64), (2, 90, 2, 64), (2, 90, 2, 64), (2, 1, 1, 90)],
     {"scale": 0.125, "causal": True, "bottom_right": True}),
    ("simaccel.attention_bias", [(1, 33, 4, 128), (1, 33, 4, 128), (1, 33, 4, 128), (1, 4, 33, 33)],
     {"scale": 0.09, "causal": False, "bottom_right": False}),
    ("simaccel.attention_bias", [(1, 1, 32, 128), (1, 3000, 8, 128), (1, 3000, 8, 128), (1, 1, 1, 3000)],
     {"scale": 0.09, "causal": True, "bottom_right": True}),
    ("simaccel.add", [(4, 1, 30, 50), (7, 1, 50)], {}),
    ("simaccel.multiply", [(1000, 513), (513,)], {}),
    ("simaccel.gelu", [(1000, 513)], {}),
    # The PyTorch ISA: attention's batched matmuls, MobileNet's depthwise convolution, the rest.
    ("simaccel.matmul", [(2, 4, 77, 64), (2, 4, 64, 77)], {}),
    ("simaccel.matmul_bias", [(8, 1, 100, 33), (1, 3, 33, 70), (70,)], {}),
    ("simaccel.conv2d_bias", [(2, 96, 57, 55), (96, 1, 3, 3), (1, 96, 1, 1)],
     {"strides": [2, 2], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 96}),
    ("simaccel.conv2d", [(1, 32, 20, 20), (64, 8, 3, 3)], {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 4}),
    # The grouped kernel (kernels/conv2d_grouped.py): 5x5 and 7x7 depthwise, ResNeXt's groups of
    # 4 and of 16 channels, a channel multiplier with strides, dilation and asymmetric padding.
    ("simaccel.conv2d_bias_relu", [(2, 48, 29, 31), (48, 1, 5, 5), (1, 48, 1, 1)],
     {"strides": [1, 1], "padding": [2, 2, 2, 2], "dilation": [1, 1], "groups": 48}),
    ("simaccel.conv2d_bias", [(2, 40, 30, 27), (40, 1, 7, 7), (1, 40, 1, 1)],
     {"strides": [1, 1], "padding": [3, 3, 3, 3], "dilation": [1, 1], "groups": 40}),
    ("simaccel.conv2d_relu", [(2, 128, 23, 25), (128, 4, 3, 3)],
     {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 32}),
    ("simaccel.conv2d", [(3, 64, 14, 14), (64, 16, 3, 3)], {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 4}),
    ("simaccel.conv2d", [(2, 24, 15, 17), (48, 1, 3, 3)], {"strides": [2, 2], "padding": [1, 0, 2, 1], "dilation": [2, 2], "groups": 24}),
    ("simaccel.clip", [(1000, 513)], {"min": 0.0, "max": 0.5}),
    ("simaccel.divide", [(300, 257), (257,)], {}),
    ("simaccel.power", [(300, 257), (257,)], {}),
    ("simaccel.silu", [(1000, 513)], {}),
    ("simaccel.gelu_tanh", [(1000, 513)], {}),
    ("simaccel.rsqrt", [(1000, 513)], {}),
    ("simaccel.broadcast_to", [(1, 30, 1)], {"shape": [4, 7, 30, 50]}),
    ("simaccel.permute_dims", [(2, 77, 12, 64)], {"axes": [0, 2, 1, 3]}),
    ("simaccel.permute_dims", [(1, 16, 2, 3, 256)], {"axes": [3, 1, 2, 0, 4]}),
    ("simaccel.strided_slice", [(3, 64, 2, 256)], {"begin": [1, 0, 0, 3], "end": [2, 64, 2, 256], "strides": [1, 2, 1, 3]}),
    ("simaccel.mean", [(8, 512, 7, 7)], {"axes": [2, 3], "keepdims": True}),
    ("simaccel.sum", [(64, 1000)], {"axes": [1], "keepdims": False}),
    ("simaccel.max", [(4, 1000, 33)], {"axes": [1], "keepdims": False}),
    ("simaccel.mean", [(8, 300, 1001)], {"axes": [1], "keepdims": False}),  # 8 threads an output, a tail
    ("simaccel.reshape", [(4, 77, 768)], {"shape": [308, 768]}),
    ("simaccel.concat", [(8, 64, 28, 28), (8, 3, 28, 28), (8, 128, 28, 28)], {"axis": 1}),
    # Large launches: elementwise and gather kernels with ILP elements per thread (>= 2^20
    # elements, tails), softmax and layer norm with a row cache (>= 1024 rows), a spatial
    # mean as row sums, the implicit-GEMM convolution at a ResNet stage (tap-major K).
    ("simaccel.add", [(3, 700, 513), (700, 1)], {}),
    ("simaccel.gelu", [(2049, 515)], {}),
    ("simaccel.clip", [(2049, 515)], {"min": -0.5, "max": 0.5}),
    ("simaccel.permute_dims", [(4, 300, 9, 101)], {"axes": [0, 2, 1, 3]}),
    ("simaccel.softmax", [(1100, 1000)], {}),
    ("simaccel.layer_norm", [(1030, 2100), (2100,), (2100,)], {"epsilon": 1e-5}),
    ("simaccel.mean", [(16, 256, 56, 56)], {"axes": [2, 3], "keepdims": True}),
    ("simaccel.conv2d_bias_relu", [(8, 64, 56, 56), (64, 64, 3, 3), (1, 64, 1, 1)],
     {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1}),
    # A 1x1 kernel with stride 2 (not pointwise: it takes the implicit GEMM, K of 256 channels).
    ("simaccel.conv2d", [(2, 256, 14, 14), (512, 256, 1, 1)], {"strides": [2, 2], "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1}),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name, shapes, attrs", KERNEL_CASES, ids=[c[0] for c in KERNEL_CASES])
def test_kernels_at_real_sizes(name, shapes, attrs, dtype):
    _check_at_real_size(name, shapes, attrs, dtype)


# Convolutions and float32 matmuls on both of their tilings, forced: 64 x 64 tiles and sliced
# K on 32 x 32 (kernels/conv2d.py and kernels/matmul.py `tiling` choose by the tile count): a
# partial channel tile (80 = 64 + 16), partial pixel tiles, strides, dilation, asymmetric
# padding; two groups of 64 channels; a 5x5 kernel; K of 33 and 100 (a K tail, several slices).
TILING_CASES = [
    ("simaccel.conv2d_bias_relu", [(8, 32, 121, 47), (80, 32, 3, 3), (1, 80, 1, 1)],
     {"strides": [2, 1], "padding": [1, 0, 2, 1], "dilation": [1, 2], "groups": 1}),
    ("simaccel.conv2d", [(8, 64, 30, 30), (128, 32, 3, 3)], {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 2}),
    ("simaccel.conv2d_relu", [(2, 48, 20, 21), (70, 48, 5, 5)], {"strides": [1, 1], "padding": [2, 2, 2, 2], "dilation": [1, 1], "groups": 1}),
    ("simaccel.dense_bias_gelu", [(300, 33), (129, 33), (129,)], {}),
    ("simaccel.matmul_relu", [(2, 100, 100), (100, 200)], {}),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("tiles", ["64x64", "sliced"])
@pytest.mark.parametrize("name, shapes, attrs", TILING_CASES, ids=[c[0] for c in TILING_CASES])
def test_both_tilings_at_real_sizes(name, shapes, attrs, tiles, dtype, monkeypatch):
    from simaccel.kernels import conv2d, matmul

    for module in (conv2d, matmul):  # 0: never sliced; past any tile count: always (where K allows)
        monkeypatch.setattr(module, "MIN_SMALL_TILES", 0 if tiles == "64x64" else 1 << 40)
    _check_at_real_size(name, shapes, attrs, dtype)


def _check_at_real_size(name, shapes, attrs, dtype, tolerance=None):
    """Op `name`'s kernel on the GPU on random inputs of `shapes`, against its numpy reference
    (within `tolerance`'s dtype's tolerance: by default the inputs')."""
    from numba import cuda

    from simaccel.data import random_arrays
    from simaccel.kernels import KernelTarget
    from simaccel.ops import get_op

    op = get_op(name)
    arrays = random_arrays([(f"t{i}_w" if i == 1 else f"t{i}", s, dtype) for i, s in enumerate(shapes)], seed=1)
    if name in ("simaccel.rsqrt", "simaccel.divide"):  # away from 0: relative errors stay those of the op
        arrays[-1] = (np.abs(arrays[-1]) + 0.5).astype(dtype)
    if name == "simaccel.power":  # a positive base: real results
        arrays[0] = (np.abs(arrays[0]) + 0.5).astype(dtype)
    attrs = op.all_attrs(attrs)
    want = op.reference(*arrays, **attrs)
    shape, out_dtype = op.infer([a.shape for a in arrays], [dtype] * len(arrays), **attrs)
    out = cuda.device_array(shape, dtype=out_dtype)
    stream = cuda.stream()
    launches = op.kernel(KernelTarget("cuda", stream), out, *[to_device(a, stream) for a in arrays], **attrs)
    got = to_host(out, stream)
    stream.synchronize()
    assert launches >= 1
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **TOLERANCE[tolerance or dtype])


def off_alignment(a, stream):
    """`a` on the device as a view one element into its buffer: 4 or 2 bytes past an aligned address."""
    buffer = to_device(np.concatenate([np.zeros(1, a.dtype), a.reshape(-1)]), stream)
    return buffer[1:].reshape(a.shape)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", ["simaccel.dense_bias_relu", "simaccel.matmul"])
def test_matmul_main_loops_on_unaligned_operands(name, dtype):
    # The C++ main loops copy 16-byte vectors where rows are 16-byte aligned, else element by
    # element: views one element into their buffers take the second path, at real sizes.
    from numba import cuda

    from simaccel.kernels import KernelTarget
    from simaccel.ops import get_op

    op = get_op(name)
    rng = np.random.default_rng(3)
    M, K, N = 300, 256, 264
    shapes = [(M, K), (N, K) if name.startswith("simaccel.dense") else (K, N)] + [(N,)] * ("_bias" in name)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    attrs = op.all_attrs({})
    want = op.reference(*arrays, **attrs)
    stream = cuda.stream()
    views = [off_alignment(a, stream) for a in arrays]
    out = cuda.device_array((M, N), dtype=dtype)
    op.kernel(KernelTarget("cuda", stream), out, *views, **attrs)
    got = to_host(out, stream)
    stream.synchronize()
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mask", ["TopLeft", "BottomRight", None])
@pytest.mark.parametrize("rows, keys, launches", [(70, 90, 1), (2, 900, 2)], ids=["prefill", "split"])
def test_attention_tiles_on_unaligned_views_and_special_values(rows, keys, launches, mask, dtype):
    """The tensor-core tiles (head dim 64, 4 query heads over 2) with operands one element off
    their 16-byte alignment (staged by element loads, not cp.async), then with a NaN in a key
    some row sees (with TopLeft, 2 query rows see keys 0 and 1 only): the rows that see it NaN,
    as in the reference, the rest equal. A short query against 900
    keys takes the key splits (16 blocks a tile) and the combining launch."""
    from numba import cuda

    from simaccel.kernels import KernelTarget
    from simaccel.ops import get_op

    op = get_op("simaccel.attention")
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in ((2, rows, 4, 64), (2, keys, 2, 64), (2, keys, 2, 64)))
    attrs = dict(scale=0.125, causal=mask is not None, bottom_right=mask == "BottomRight")
    stream = cuda.stream()
    for special in (False, True):
        if special:
            k[1, min(keys // 3, rows - 1) if mask == "TopLeft" else keys // 3, 0, 5] = np.nan  # a key some row sees
        want = op.reference(q, k, v, **attrs)
        views = [off_alignment(a, stream) for a in (q, k, v)]
        out = cuda.device_array(q.shape, dtype=dtype)
        assert op.kernel(KernelTarget("cuda", stream), out, *views, **attrs) == launches
        got = to_host(out, stream)
        stream.synchronize()
        np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), np.isnan(want.astype(np.float32)))
        if special:
            assert np.isnan(want.astype(np.float32)).any()
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), equal_nan=True, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name, shapes, attrs", [("simaccel.softmax", [(2048, 1024)], {}),
                                                 ("simaccel.layer_norm", [(2048, 1024), (1024,), (1024,)], {"epsilon": 1e-5}),
                                                 ("simaccel.softmax", [(4096, 64)], {}),
                                                 ("simaccel.layer_norm", [(4096, 64), (64,), (64,)], {"epsilon": 1e-5}),
                                                 ("simaccel.softmax", [(64, 20000)], {}),
                                                 ("simaccel.sum", [(512, 4096)], {"axes": [1], "keepdims": False})],
                         ids=str)
def test_row_kernels_on_views_off_the_vector_alignment(name, shapes, attrs, dtype):
    # The row kernels move 16-byte vectors where every array is 16-byte aligned, else elements
    # (kernels/vector.py): each array in turn one element into its buffer, at real sizes.
    from numba import cuda

    from simaccel.kernels import KernelTarget
    from simaccel.ops import get_op

    op = get_op(name)
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    attrs = op.all_attrs(attrs)
    want = op.reference(*arrays, **attrs)
    shape, out_dtype = op.infer([a.shape for a in arrays], [dtype] * len(arrays), **attrs)
    stream = cuda.stream()

    def off(a):
        buffer = to_device(np.concatenate([np.zeros(1, a.dtype), a.reshape(-1)]), stream)
        return buffer[1:].reshape(a.shape)

    for moved in range(len(arrays) + 1):  # which array is off the alignment (len: the output)
        inputs = [off(a) if i == moved else to_device(a, stream) for i, a in enumerate(arrays)]
        out = off(np.zeros(shape, out_dtype)) if moved == len(arrays) else cuda.device_array(shape, dtype=out_dtype)
        op.kernel(KernelTarget("cuda", stream), out, *inputs, **attrs)
        got = to_host(out, stream)
        stream.synchronize()
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", ["bool", "int8", "float64", "int64"])
@pytest.mark.parametrize("name, inputs, attrs", [("simaccel.relu", 1, {}), ("simaccel.clip", 1, {"min": 0.0, "max": 1.0}),
                                                 ("simaccel.add", 2, {}), ("simaccel.softmax", 1, {}),
                                                 ("simaccel.sum", 1, {"axes": [1], "keepdims": False})],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_vector_copies_of_every_element_size(name, inputs, attrs, dtype):
    # Arrays outside the ISA's dtypes (Programs a user or the sanitizer builds) take the vector
    # copies too: 1-byte elements (bool's byte through numba's data model) and 32-byte vectors
    # (four float64s as two 16-byte accesses); test_aot checks the instructions, this the values.
    from numba import cuda

    from simaccel.kernels import KernelTarget
    from simaccel.ops import get_op

    op = get_op(name)
    rng = np.random.default_rng(5)
    # int8 values in -1..1: sums of a row stay far inside int8 (wrapping is not the question here).
    scale = 1 if dtype == "int8" else 3
    values = [rng.standard_normal((512, 1024)) * scale for _ in range(inputs)]
    arrays = [(v if dtype == "float64" else np.rint(v).clip(-scale, scale)).astype(dtype) for v in values]
    attrs = op.all_attrs(attrs)
    want = op.reference(*arrays, **attrs)
    stream = cuda.stream()
    out = cuda.device_array(want.shape, dtype=want.dtype)
    op.kernel(KernelTarget("cuda", stream), out, *[to_device(a, stream) for a in arrays], **attrs)
    got = to_host(out, stream)
    stream.synchronize()
    if dtype == "float64" or name in ("simaccel.softmax", "simaccel.sum"):
        # float32 arithmetic inside: a sum's error scales with the sum of its terms' magnitudes
        atol = 4 * np.finfo(np.float32).eps * max(np.abs(a.astype(np.float64)).sum(axis=-1).max() for a in arrays)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-5, atol=atol)
    else:
        np.testing.assert_array_equal(got, want)


# float16 GEMMs whose tiles, K slices and rows are partial, in both forms of B, batched and
# broadcast: on the H200 the cubin's main loop is wgmma (sm_90a), its accumulator layout and
# shared-memory descriptors differ from mma.sync's, and a wrong one is wrong only in places.
TENSOR_CORE_SHAPES = [
    ("simaccel.matmul", [(300, 40), (40, 200)]),  # K: one partial slice; M, N: partial tiles
    ("simaccel.matmul", [(256, 1000), (1000, 384)]),  # K = 31 slices + a tail of 8
    ("simaccel.matmul", [(129, 17), (17, 130)]),  # rows of 34 bytes: the element-load path
    ("simaccel.matmul_bias_relu", [(3, 130, 64), (3, 64, 257), (257,)]),
    ("simaccel.matmul", [(2, 1, 70, 96), (1, 3, 96, 136)]),  # broadcast batch dims
    ("simaccel.dense_bias", [(300, 1000), (200, 1000), (200,)]),
    ("simaccel.dense", [(65, 24), (129, 24)]),
    ("simaccel.dense_bias_gelu", [(512, 4096), (1024, 4096), (1024,)]),
    ("simaccel.dense", [(7, 9, 33), (250, 33)]),
    # 128 x 256 tiles (kernels.tensor_core.width: at least MIN_WIDE_TILES of them, N > 128)
    ("simaccel.matmul", [(2000, 72), (72, 3000)]),  # K: a slice of 64 and a tail of 8; M, N tails
    ("simaccel.dense_bias_gelu", [(2100, 1000), (2900, 1000), (2900,)]),
    ("simaccel.matmul", [(2049, 33), (33, 2050)]),  # rows of 66 bytes: the element-load path
    ("simaccel.dense", [(2100, 45), (2300, 45)]),  # the same, the dense form
    ("simaccel.matmul_bias_relu", [(16, 300, 64), (16, 64, 1000), (1000,)]),  # batched
    ("simaccel.matmul", [(4, 1, 257, 96), (1, 8, 96, 520)]),  # broadcast batch dims
]


def _tensor_core_case(name, shapes, seed, dtype="float16"):
    from simaccel.ops import get_op

    op = get_op(name)
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1, 1, s).astype(dtype) for s in shapes]
    attrs = op.all_attrs({})
    want = op.reference(*[a.astype(np.float32) for a in arrays], **attrs).astype(np.float64)  # the ISA has no float64
    return op, arrays, attrs, want


def _assert_tensor_core_close(got, want, shapes, err_msg="", dtype="float16"):
    """Within the output's rounding (float16: 2**-11, bfloat16: 2**-8 relative) of sums of K
    products of numbers within [-1, 1], summed in float32."""
    scale = np.sqrt(shapes[0][-1])
    rtol = 1e-2 if dtype == "float16" else 1e-2 + 2.0**-8
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=2e-3 * scale, err_msg=err_msg)


TENSOR_CORE_DTYPES = ("float16", "bfloat16")


@pytest.mark.parametrize("dtype", TENSOR_CORE_DTYPES)
@pytest.mark.parametrize("name, shapes", TENSOR_CORE_SHAPES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(TENSOR_CORE_SHAPES)])
def test_tensor_core_matmuls_on_partial_tiles(name, shapes, dtype):
    """Numba's own compile on this GPU (sm_90a on an H100/H200): every element of the output
    against numpy (float32 operands), within the dtype's rounding of sums of up to 4096 products."""
    from numba import cuda

    from simaccel.kernels import KernelTarget

    op, arrays, attrs, want = _tensor_core_case(name, shapes, 5, dtype)
    shape, _ = op.infer([a.shape for a in arrays], [dtype] * len(arrays), **attrs)
    stream = cuda.stream()
    out = cuda.device_array(shape, dtype=dtype)
    op.kernel(KernelTarget("cuda", stream), out, *[to_device(a, stream) for a in arrays], **attrs)
    got = to_host(out, stream)
    stream.synchronize()
    _assert_tensor_core_close(got, want, shapes, dtype=dtype)


@pytest.mark.parametrize("dtype", TENSOR_CORE_DTYPES)
def test_native_tensor_core_matmuls_on_partial_tiles(clean_runtime, tmp_path, dtype):
    """The same GEMMs in one native library: the cubins simaccel.aot links for sm_90 (sm_90a's
    wgmma main loop), launched from C++ on TVM's tensors."""
    import tvm

    from simaccel.aot import toolchain_missing
    from simaccel.native.source import NativeRegion

    from simaccel.tvm_integration.tools.deploy import prepare_cuda

    reason = toolchain_missing()
    if reason:
        pytest.skip(reason)
    from native_support import region_library

    prepare_cuda()  # a runtime-only TVM run on its own: TVM's CUDA device API
    programs = {f"tc{i}": one_op_program(name, shapes, dtype) for i, (name, shapes) in enumerate(TENSOR_CORE_SHAPES)}
    library, _ = region_library([NativeRegion(s, p) for s, p in programs.items()], tmp_path)
    for i, (name, shapes) in enumerate(TENSOR_CORE_SHAPES):
        _, arrays, _, want = _tensor_core_case(name, shapes, 5, dtype)
        tensors = [tvm.runtime.tensor(a, tvm.cuda(0)) for a in arrays]
        got = tvm.runtime.tensor(np.zeros(want.shape, dtype), tvm.cuda(0))
        library[f"tc{i}"](*tensors, got)
        _assert_tensor_core_close(got.numpy(), want, shapes, f"{name} {shapes}", dtype)


# int8 GEMMs (kernels/matmul_int8.py, dp4a): tails of the 64 x 64 tile and the 32-deep stage,
# batched and broadcast weights, a GEMV, both forms of B; and a K of 2^17 + 64 whose int32 sums
# of -128 * -128 wrap, as numpy's int32 matmul does.
INT8_CASES = [("simaccel.dense", [(300, 257), (129, 257)]), ("simaccel.matmul", [(2, 100, 67), (67, 200)]),
              ("simaccel.matmul", [(2, 3, 77, 64), (3, 64, 77)]), ("simaccel.dense", [(1, 4096), (1000, 4096)]),
              ("simaccel.matmul", [(1024, 512), (512, 1024)])]


@pytest.mark.parametrize("name, shapes", INT8_CASES, ids=[f"{n}-{s[0]}" for n, s in INT8_CASES])
def test_int8_matmuls_sum_exactly_on_the_gpu(name, shapes):
    from numba import cuda

    from simaccel.kernels import KernelTarget
    from simaccel.ops import get_op

    op = get_op(name)
    rng = np.random.default_rng(5)
    arrays = [rng.integers(-128, 128, s, dtype=np.int8) for s in shapes]
    attrs = op.all_attrs({"out_dtype": "int32"})
    stream = cuda.stream()
    out = cuda.device_array(op.infer(shapes, ["int8"] * 2, **attrs)[0], dtype=np.int32)
    op.kernel(KernelTarget("cuda", stream), out, *[to_device(a, stream) for a in arrays], **attrs)
    got = to_host(out, stream)
    stream.synchronize()
    np.testing.assert_array_equal(got, op.reference(*arrays, **attrs))


def test_int8_sums_wrap_on_the_gpu_as_int32_arithmetic_does():
    from numba import cuda

    from simaccel.kernels import KernelTarget
    from simaccel.ops import get_op

    op = get_op("simaccel.dense")
    many = np.full((2, 2**17 + 64), -128, np.int8)
    attrs = op.all_attrs({"out_dtype": "int32"})
    stream = cuda.stream()
    out = cuda.device_array((2, 2), dtype=np.int32)
    op.kernel(KernelTarget("cuda", stream), out, to_device(many, stream), to_device(many, stream), **attrs)
    got = to_host(out, stream)
    stream.synchronize()
    want = np.matmul(many.astype(np.int32), many.T.astype(np.int32))
    assert (want < 0).all() and np.array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name, shapes", [("simaccel.dense", [(300, 257), (129, 257)]),
                                          ("simaccel.matmul", [(2, 3, 77, 64), (2, 3, 64, 300)])], ids=str)
def test_16_bit_matmuls_widen_to_float32_on_the_gpu(name, shapes, dtype):
    """Tensor-core sums stored in float32 unrounded: within float32's tolerance of the reference,
    which the same sums rounded to the operands' dtype are not."""
    _check_at_real_size(name, shapes, {"out_dtype": "float32"}, dtype, tolerance="float32")
