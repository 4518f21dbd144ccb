"""simaccel.attention (relax.nn.attention): the kernel against its numpy reference on the
simulator, the reference against torch's scaled_dot_product_attention, models against TVM
alone (static, causal both ways, symbolic lengths), and what stays on TVM with its reason."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
from tvm import relax
from tvm.script import relax as R

from harness import decoder_example
from kernel_cases import DTYPES, TOL, RecordingTarget
from simaccel.launch_plan import View
from simaccel.ops import get_op
from simaccel.testing import assert_matches_tvm, assert_offloads
from simaccel.tvm_integration.backend.partition import partition_report

CAUSAL = {None: dict(causal=False, bottom_right=False), "TopLeft": dict(causal=True, bottom_right=False),
          "BottomRight": dict(causal=True, bottom_right=True)}


def _inputs(rng, b, s, t, h, d, dv, dtype):
    return [rng.standard_normal(shape).astype(dtype) for shape in ((b, s, h, d), (b, t, h, d), (b, t, h, dv))]


def _run_kernel(arrays, attrs):
    op = get_op("simaccel.attention")
    shape, dtype = op.infer([a.shape for a in arrays], [str(a.dtype) for a in arrays], **attrs)
    out = np.full(shape, np.nan, dtype)
    target = RecordingTarget()
    launches = op.kernel(target, FakeCUDAArray(out), *map(FakeCUDAArray, arrays), **attrs)
    return out, op.reference(*arrays, **attrs), launches


# (batch, query rows, keys, heads, head dim, value head dim)
SHAPES = [(1, 3, 5, 2, 8, 8), (2, 5, 3, 1, 33, 40), (1, 1, 9, 3, 64, 64), (1, 4, 4, 1, 256, 7), (1, 2, 1, 2, 1, 1),
          (1, 3, 70, 2, 16, 16), (1, 34, 33, 1, 8, 12)]  # more keys than a warp's chunk of 32, causal rows across chunks


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", sorted(CAUSAL, key=str))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_kernel_matches_its_reference(shape, mask, dtype):
    arrays = _inputs(np.random.default_rng(sum(shape)), *shape, dtype)
    attrs = dict(scale=0.3, **CAUSAL[mask])
    out, ref, launches = _run_kernel(arrays, attrs)
    assert launches == 1 and out.dtype == ref.dtype == np.dtype(dtype)
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), **TOL[dtype])


def test_an_empty_key_set_gives_zeros_and_nan_spreads_over_its_row():
    arrays = _inputs(np.random.default_rng(0), 1, 3, 0, 2, 4, 4, "float32")
    out, ref, _ = _run_kernel(arrays, dict(scale=1.0, **CAUSAL[None]))
    assert (out == 0).all() and (ref == 0).all()
    arrays = _inputs(np.random.default_rng(1), 1, 3, 4, 1, 4, 4, "float32")
    arrays[1][0, 2, 0, 1] = np.nan  # key 2: every query row that sees it is NaN
    out, ref, _ = _run_kernel(arrays, dict(scale=1.0, **CAUSAL["TopLeft"]))
    assert np.isnan(out[0, 2:]).all() and np.isfinite(out[0, :2]).all()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))


def test_a_nan_key_in_a_later_chunk_spreads_over_the_rows_that_see_it():
    """The one-warp kernel scores keys 32 at a time: a NaN in the third chunk (key 68) makes
    the rows that see it NaN (BottomRight: rows 1 and 2 of 3 against 70 keys), not row 0."""
    arrays = _inputs(np.random.default_rng(2), 1, 3, 70, 2, 16, 16, "float32")
    arrays[1][0, 68, 1, 5] = np.nan  # head 1 only
    out, ref, _ = _run_kernel(arrays, dict(scale=0.25, **CAUSAL["BottomRight"]))
    assert np.isnan(out[0, 1:, 1]).all() and np.isfinite(out[0, 0, 1]).all() and np.isfinite(out[0, :, 0]).all()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_allclose(out, ref, equal_nan=True, **TOL["float32"])


@pytest.mark.parametrize("s, t", [(4, 4), (3, 6), (6, 3)])
@pytest.mark.parametrize("mask", sorted(CAUSAL, key=str))
def test_the_reference_is_torchs_scaled_dot_product_attention_where_torch_means_the_same(s, t, mask):
    """torch's is_causal is TopLeft; its BottomRight (a causal_lower_right bias) keeps key j for
    query i where j <= i + t - s, which is TVM's |s - t| only where t >= s."""
    torch = pytest.importorskip("torch")
    if mask == "BottomRight" and s > t:
        pytest.skip("TVM's BottomRight offset is |s - t|, torch's t - s")
    q, k, v = _inputs(np.random.default_rng(s * t), 2, s, t, 3, 8, 8, "float32")
    tq, tk, tv = (torch.from_numpy(a).permute(0, 2, 1, 3) for a in (q, k, v))
    keep = None
    if mask is not None:
        keep = torch.ones(s, t, dtype=torch.bool).tril(t - s if mask == "BottomRight" else 0)
    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=keep).permute(0, 2, 1, 3).numpy()
    got = get_op("simaccel.attention").reference(q, k, v, scale=8 ** -0.5, **CAUSAL[mask])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def attention_module(dtype, s, t, heads=2, d=16, dv=16, mask=None, scale=None, batch=2):
    bb = relax.BlockBuilder()
    q = relax.Var("q", R.Tensor((batch, s, heads, d), dtype))
    k = relax.Var("k", R.Tensor((batch, t, heads, d), dtype))
    v = relax.Var("v", R.Tensor((batch, t, heads, dv), dtype))
    with bb.function("main", [q, k, v]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.attention(q, k, v, scale=scale, causal_mask=mask))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("s, t, mask", [(5, 7, None), (7, 5, "TopLeft"), (3, 9, "BottomRight"), (7, 5, "BottomRight")])
def test_attention_models_offload_and_match_tvm_alone(s, t, mask, dtype, engine):
    mod = attention_module(dtype, s, t, mask=mask, dv=8)
    assert_offloads(mod, ["simaccel.attention"])
    assert_matches_tvm(mod, engines=[engine])


def test_a_given_scale_is_the_models():
    assert_matches_tvm(attention_module("float32", 4, 4, scale=0.05, mask="TopLeft"), engines=["ref"])


def test_symbolic_lengths_take_one_build_at_every_length():
    """A decode step's shapes: s query rows against a cache of t keys, both symbolic."""
    s, t = tvm.tirx.Var("s", "int64"), tvm.tirx.Var("t", "int64")
    mod = attention_module("float32", s, t, mask="BottomRight")
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {"s": 16, "t": 64})
    assert_offloads(mod, ["simaccel.attention"])
    assert_matches_tvm(mod, sizes=[{"s": 1, "t": 1}, {"s": 1, "t": 37}, {"s": 5, "t": 5}, {"s": 16, "t": 64}],
                       engines=["ref", "sim"])


@pytest.mark.parametrize("d, reason", [(300, "query head dim 300 is over 256")])
def test_what_the_kernel_cannot_take_stays_on_tvm_with_its_reason(d, reason):
    _, report = partition_report(attention_module("float32", 4, 4, d=d, dv=8))
    assert not report.regions and any(reason in why for _, _, why in report.kept), report.format()


@pytest.mark.parametrize("upper, offloaded", [(256, True), (257, False)])
def test_a_symbolic_head_dim_offloads_only_where_its_bounds_keep_it_within_the_kernel(upper, offloaded):
    """The head dim limit is the kernel's, not the op's (TVM alone runs larger heads), so it is
    decided by the bounds, never required per call: no call within the bounds is refused."""
    d = tvm.tirx.Var("d", "int64")
    mod = attention_module("float32", 4, 4, d=d, dv=8, scale=0.125)  # the default scale reads d's value
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {"d": upper})
    _, report = partition_report(mod)
    if offloaded:
        assert_offloads(mod, ["simaccel.attention"])
        assert_matches_tvm(mod, sizes=[{"d": 1}, {"d": 256}], engines=["ref"])
    else:
        assert not report.regions and "d" in report.format() and "256" in report.format(), report.format()


# -- an additive bias (relax.nn.attention_bias: torch's float attn_mask) ----------------------

def bias_module(dtype, s, t, bias_shape, heads=2, kv_heads=None, d=8, mask=None, scale=None):
    """relax.nn.attention with a bias input of `bias_shape` (broadcast to (1, heads, s, t)); with
    `kv_heads`, keys and values of fewer heads repeated per group (GQA as Relax writes it)."""
    bb = relax.BlockBuilder()
    kv = kv_heads or heads
    q = relax.Var("q", R.Tensor((1, s, heads, d), dtype))
    k, v = (relax.Var(n, R.Tensor((1, t, kv, d), dtype)) for n in "kv")
    bias = relax.Var("bias", R.Tensor(bias_shape, dtype))
    with bb.function("main", [q, k, v, bias]):
        with bb.dataflow():
            if kv_heads:
                k, v = (bb.emit(relax.op.repeat(x, heads // kv, axis=2)) for x in (k, v))
            out = bb.emit_output(relax.op.nn.attention(q, k, v, bias, scale=scale, causal_mask=mask))
        bb.emit_func_output(out)
    return bb.get()


# Bias shapes: per score, a padding mask per batch (B, 1, 1, T), one per query row (1, 1, S, T),
# per head (1, H, 1, T); with causal masks both ways, grouped heads, keys past a warp's chunk.
BIAS_CASES = [((1, 2, 5, 7), None, None), ((1, 1, 1, 7), "TopLeft", None), ((1, 1, 5, 7), "BottomRight", None),
              ((1, 2, 1, 7), None, 1), ((1, 4, 5, 40), "BottomRight", 2)]


def _kernel_names(target):
    return [fn.__name__ for fn, *_ in target.launches]


@pytest.mark.parametrize("bias_dtype", ["operands", "float32"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias_shape, mask, kv_heads", BIAS_CASES, ids=str)
def test_the_kernel_adds_the_bias_as_its_reference_does(bias_shape, mask, kv_heads, dtype, bias_dtype):
    """The kernel (16-bit: the tensor-core tile's model; float32: the one-warp kernel) against the
    reference, which adds the bias (float32 or the operands' dtype) to the scaled scores before
    the mask; a bias of -inf drops a key from its rows, and dropping it by hand gives the same
    output."""
    _, heads, _, t = bias_shape
    heads, s = max(heads, 2 * (kv_heads or 1)), 5
    rng = np.random.default_rng(t)
    arrays = [rng.standard_normal(shape).astype(dtype) for shape in
              ((1, s, heads, 64), (1, t, kv_heads or heads, 64), (1, t, kv_heads or heads, 64))]
    bias = rng.standard_normal(bias_shape).astype(dtype if bias_dtype == "operands" else "float32")
    bias[..., 3] = -np.inf  # key 3 takes no part anywhere
    attrs = dict(scale=0.2, **CAUSAL[mask])
    op = get_op("simaccel.attention_bias")
    shape, out_dtype = op.infer([a.shape for a in arrays + [bias]], [dtype] * 3 + [str(bias.dtype)], **attrs)
    out = np.full(shape, np.nan, out_dtype)
    target = RecordingTarget()
    assert op.kernel(target, FakeCUDAArray(out), *map(FakeCUDAArray, arrays + [bias]), **attrs) == 1
    [name] = _kernel_names(target)
    assert name.startswith("_attention_tile_kernel_bias_d64" if dtype != "float32" else "_attention_kernel"), name
    ref = op.reference(*arrays, bias, **attrs)
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), **TOL[dtype])
    unbiased = get_op("simaccel.attention").reference(*arrays, **attrs)
    assert np.abs(ref.astype(np.float32) - unbiased).max() > 0.01  # the bias changed the output
    if mask is None:  # without key 3 and its bias, by hand: the same output
        keep = [j for j in range(t) if j != 3]
        dropped = op.reference(arrays[0], arrays[1][:, keep], arrays[2][:, keep], bias[..., keep], **attrs)
        np.testing.assert_allclose(ref, dropped, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("d", [32, 64])
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_decode_step_s_bias_is_read_by_every_key_split(dtype, d):
    """One query row of 8 heads over 2 key/value heads against 600 keys: the keys split (then
    combine), on the one-warp kernel (head dim 32, or float32) or the tensor-core tiles (16-bit
    at 64), each split reading the bias of its own keys."""
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(shape).astype(dtype) for shape in ((1, 1, 8, d), (1, 600, 2, d), (1, 600, 2, d))]
    bias = (rng.standard_normal((1, 1, 1, 600)) * 3).astype(dtype)
    bias[..., 100:130] = -np.inf  # masked keys inside one split
    attrs = dict(scale=0.2, **CAUSAL["BottomRight"])
    op = get_op("simaccel.attention_bias")
    out = np.full((1, 1, 8, d), np.nan, dtype)
    target = RecordingTarget()
    assert op.kernel(target, FakeCUDAArray(out), *map(FakeCUDAArray, arrays + [bias]), **attrs) == 2
    tiles = dtype != "float32" and d == 64
    assert _kernel_names(target)[0] == (f"_attention_split_kernel_bias_d64{'' if dtype == 'float16' else '_' + dtype}"
                                        if tiles else "_attention_split_kernel"), _kernel_names(target)
    np.testing.assert_allclose(out.astype(np.float32), op.reference(*arrays, bias, **attrs).astype(np.float32),
                               **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_tiles_read_a_bias_per_score_over_grouped_heads_and_several_tiles(dtype):
    """A bias per (batch, head, row, key) over 130 query rows of 4 heads grouped 2 to a key/value
    head (260 packed rows: 5 tiles of 64, the last part full) and 150 keys (3 key tiles, the
    last part full), causal from the bottom right: every packed row reads its own head's and
    row's bias."""
    rng = np.random.default_rng(11)
    b, s, t, h, hkv = 2, 130, 150, 4, 2
    arrays = [rng.standard_normal(shape).astype(dtype) for shape in ((b, s, h, 64), (b, t, hkv, 64), (b, t, hkv, 64))]
    bias = (rng.standard_normal((b, h, s, t)) * 2).astype(dtype)
    attrs = dict(scale=0.125, **CAUSAL["BottomRight"])
    op = get_op("simaccel.grouped_attention_bias")
    out = np.full((b, s, h, 64), np.nan, dtype)
    target = RecordingTarget()
    assert op.kernel(target, FakeCUDAArray(out), *map(FakeCUDAArray, arrays + [bias]), **attrs) == 1
    assert _kernel_names(target)[0].startswith("_attention_tile_kernel_bias_d64")
    np.testing.assert_allclose(out.astype(np.float32), op.reference(*arrays, bias, **attrs).astype(np.float32),
                               **TOL[dtype])


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("bias_shape, mask, kv_heads", BIAS_CASES[:4], ids=str)
def test_attention_with_a_bias_offloads_and_matches_tvm_alone(bias_shape, mask, kv_heads, dtype, engine):
    _, _, s, t = bias_shape
    mod = bias_module(dtype, 5, t, bias_shape, kv_heads=kv_heads, mask=mask)
    assert_offloads(mod, ["simaccel.grouped_attention_bias" if kv_heads else "simaccel.attention_bias"])
    assert_matches_tvm(mod, engines=[engine])


def test_a_bias_over_symbolic_lengths_takes_one_build_at_every_length():
    """A decode step's padding mask (1, 1, s, t) over s query rows and a cache of t keys, both
    symbolic: one build, checked at 1, middle sizes and the upper bounds (a split decode step
    among them: 1 row against 600 keys)."""
    s, t = tvm.tirx.Var("s", "int64"), tvm.tirx.Var("t", "int64")
    mod = bias_module("float32", s, t, (1, 1, s, t), mask="BottomRight")
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {"s": 16, "t": 600})
    assert_offloads(mod, ["simaccel.attention_bias"])
    assert_matches_tvm(mod, sizes=[{"s": 1, "t": 1}, {"s": 1, "t": 600}, {"s": 5, "t": 37}, {"s": 16, "t": 600}],
                       engines=["ref", "sim"])


@pytest.mark.parametrize("bias_shape", [(1, 2, 5, 1), (2, 2, 5, 7), (1, 3, 5, 7), (2, 5, 7)], ids=str)
def test_a_bias_that_does_not_fit_the_scores_is_refused_naming_it(bias_shape):
    """Relax refuses such a bias itself; a Program given one is refused by the op's shape rule."""
    from simaccel.errors import ShapeError

    op = get_op("simaccel.attention_bias")
    shapes = [(1, 5, 2, 8), (1, 7, 2, 8), (1, 7, 2, 8), bias_shape]
    with pytest.raises(ShapeError, match="bias"):
        op.infer(shapes, ["float32"] * 4, scale=0.1, causal=False, bottom_right=False)


def test_a_cuda_build_of_the_bfloat16_decoder_is_all_native(tmp_path, caplog):
    """examples/decoder.py's model (GQA attention over KV caches, rotary embeddings, SwiGLU;
    symbolic sequence and cache) built for the H100 at its GPU size: every region native (size
    plans traced through attention's launcher), none a Python region, and the library exports
    it. Its results are the GPU tests'."""
    import logging

    from simaccel.tvm_integration import build
    from simaccel.tvm_integration.backend.native import has_native_regions

    example = decoder_example()
    with caplog.at_level(logging.INFO, logger="simaccel.codegen"):
        executable = build(example.decoder("bfloat16", example.GPU), "nvidia/nvidia-h100")
    assert not [r.message for r in caplog.records if "Python region" in r.message]
    assert has_native_regions(executable)
    executable.export_library(str(tmp_path / "decoder.so"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_the_decoder_runs_natively_on_the_gpu_and_matches_tvm_alone(dtype):
    """The same model built for CUDA by simaccel (native regions) and by TVM alone, at its GPU
    size (head dim 64: the tensor-core attention tiles in float16 and bfloat16): a prefill of
    100 tokens, then 3 decode steps, each fed the caches the step before returned (TVM tensors
    on the GPU), TVM alone picking the tokens; logits and caches compared at every step."""
    from simaccel.compare import array_difference
    from simaccel.tvm_integration import build, build_tvm_only

    example = decoder_example()
    config = example.GPU
    mod = example.decoder(dtype, config)
    ours, theirs = build(mod, "nvidia/nvidia-h100"), build_tvm_only(mod, "nvidia/nvidia-h100")
    dev = tvm.cuda(0)
    rng = np.random.default_rng(0)
    weights, prompt = example.random_weights(dtype, rng, config), rng.integers(0, config.vocab, 100)
    for step, (want, got) in enumerate(example.lockstep(theirs, ours, dtype, prompt, 3, weights, dev, config)):
        for index, (g, w) in enumerate(zip(got, want)):
            found = array_difference(g.numpy(), w.numpy(), dtype=dtype, scaled=True)
            assert found.ok, f"step {step}, output {index}: {found.reason}"


# -- keys split over blocks (flash-decoding) ------------------------------------------------

def test_keys_split_where_the_tiles_leave_the_gpu_idle():
    """A decode step's few tiles get the largest power of two of splits (at most 32) whose blocks
    stay within SPLIT_BLOCKS; a launch that fills the GPU, or few keys, none."""
    from simaccel.kernels.attention import SPLIT_BLOCKS, key_splits

    assert [key_splits(tiles, 4096) for tiles in (1, 8, 9, 16, 24, 64, 65, 128, 129)] == [32, 32, 16, 16, 8, 4, 2, 2, 1]
    assert key_splits(8, 511) == 1 and key_splits(8, 512) == 32
    splits = {tiles: key_splits(tiles, 10**6) for tiles in range(1, 1000)}
    assert all(n == 1 or tiles * n <= SPLIT_BLOCKS for tiles, n in splits.items())  # what PARTIAL_ROWS is sized for


# (batch, query rows, keys, query heads, key/value heads, head dim): decode steps and a short
# prefill whose tiles are few, grouped and not
SPLIT_SHAPES = [(1, 1, 600, 8, 2, 64), (3, 1, 1030, 4, 4, 128), (1, 5, 700, 4, 2, 64), (2, 2, 2049, 2, 1, 128)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("mask", sorted(CAUSAL, key=str))
@pytest.mark.parametrize("shape", SPLIT_SHAPES + [(1, 1, 530, 4, 1, 32)], ids=str)
def test_split_keys_match_the_reference(shape, mask, dtype):
    """The tile kernel (float16, bfloat16 at head dims 64 and 128) or the one-warp kernel
    (float32, head dim 32) over key splits, then the combining kernel, on the simulator: the
    splits' shares in the workspace, weighed by their maxima. TopLeft's rows see only the first
    keys, so most splits have none (max -inf, sum 0)."""
    b, s, t, h, hkv, d = shape
    rng = np.random.default_rng(sum(shape))
    arrays = [rng.standard_normal(x).astype(dtype) for x in ((b, s, h, d), (b, t, hkv, d), (b, t, hkv, d))]
    attrs = dict(scale=0.15, **CAUSAL[mask])
    out, ref, launches = _run_kernel(arrays, attrs)
    assert launches == 2
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_split_keys_spread_a_nan_and_give_rows_without_keys_zero(dtype):
    """A NaN key in one split makes every row that sees it NaN after the combination, whatever
    the other splits' maxima; rows whose every score is -inf (an -inf query against finite keys)
    are 0, as the reference's."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(x).astype(dtype) for x in ((1, 2, 4, 64), (1, 900, 2, 64), (1, 900, 2, 64)))
    k[0, 700, 1, 3] = np.nan  # key/value head 1: query heads 2 and 3
    q[0, 0, 0, :], q[0, 0, 0, 0], k[0, :, 0, 0] = 0, np.inf, -1  # query row 0 of head 0: every score -inf
    attrs = dict(scale=0.125, **CAUSAL[None])
    out, ref, launches = _run_kernel([q, k, v], attrs)
    assert launches == 2 and np.isnan(ref[0, :, 2:].astype(np.float32)).all()
    assert (ref[0, 0, 0] == 0).all() and (out[0, 0, 0] == 0).all() and np.isfinite(ref[0, 1, 0].astype(np.float32)).all()
    np.testing.assert_array_equal(np.isnan(out.astype(np.float32)), np.isnan(ref.astype(np.float32)))
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), equal_nan=True, **TOL[dtype])


def test_attention_ops_of_a_region_share_one_workspace_natively(tmp_path):
    """Two decode attentions in one region: their split launches view the region's one
    workspace (a float32 row of Dv + 2 per partial row, PARTIAL_ROWS of them), which the native
    source writes as one more tensor, kind -4, that the launches' pointers are patched to."""
    from simaccel.kernels.attention import PARTIAL_ROWS
    from simaccel.launch_plan import WORKSPACE, LaunchPlan
    from simaccel.native.source import NativeRegion, library_source
    from simaccel.program import OpNode, Program, TensorSpec

    q, kv, out = (1, 1, 8, 64), (1, 1000, 2, 64), (1, 1, 8, 64)
    tensors = tuple(TensorSpec(n, x, "float16") for n, x in [("q", q), ("k", kv), ("v", kv), ("a", out), ("b", out)])
    attrs = {"scale": 0.125, "causal": True, "bottom_right": True}
    program = Program("two", tensors, (0, 1, 2), (4,), (OpNode("simaccel.attention", (0, 1, 2), 3, attrs),
                                                          OpNode("simaccel.attention", (3, 1, 2), 4, attrs))).validate()
    plan = LaunchPlan.of(program)
    assert plan.workspace == PARTIAL_ROWS * 66 * 4
    assert sum(isinstance(a, View) and a.tensor == WORKSPACE for launch in plan.launches for a in launch.args) == 4
    source = library_source([NativeRegion("two", program)], ((9, 0),))
    assert f'{{"workspace", 1, 8, 1, kShape0_5, {plan.workspace}, {plan.workspace}, 1, nullptr}}' in source
    assert "const int8_t kKinds0[] = {1, 1, 1, 0, 2, -4};" in source
    patched = [line.split("{")[1].rstrip("};").split(", ") for line in source.splitlines()
               if line.startswith("const int32_t kPatchTensor0_")]
    assert [tensors.count("5") for tensors in patched] == [1, 1] * 2  # each split launch and each combining one


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("symbolic, sanitize", [(True, False), (False, True), (True, True)],
                         ids=["native", "native-sanitized", "python-sanitized"])
def test_split_decode_steps_run_on_the_gpu_through_the_workspace(symbolic, sanitize, dtype):
    """A GQA decode step built for CUDA by simaccel: short caches take the tiles (float16) or the
    one-warp kernel (float32) alone, long ones (512 keys and more) the key splits through the
    region's workspace. Over a symbolic cache
    natively (size plans), over a fixed one natively and sanitized (the workspace with guard
    bands, checked after every op), over a symbolic one sanitized (a Python region on the cuda
    engine, whose plan allocates the workspace). Each against the reference."""
    from simaccel.tvm_integration import build
    from simaccel.tvm_integration.backend.native import has_native_regions

    t = tvm.tirx.Var("t", "int64") if symbolic else 1000
    mod = grouped_module(dtype, 1, t, heads=8, kv_heads=2, d=64)
    if symbolic:
        mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {"t": 4096})
    executable = build(mod, "nvidia/nvidia-h100", sanitize=sanitize)
    assert has_native_regions(executable) == (not (symbolic and sanitize))
    vm = relax.VirtualMachine(executable, tvm.cuda(0))
    rng = np.random.default_rng(11)
    op = get_op("simaccel.attention")
    for keys in (100, 511, 512, 1000, 4096) if symbolic else (1000,):
        q, k, v = (rng.standard_normal(x).astype(dtype) for x in ((2, 1, 8, 64), (2, keys, 2, 64), (2, keys, 2, 64)))
        got = vm["main"](*(tvm.runtime.tensor(a, tvm.cuda(0)) for a in (q, k, v))).numpy()
        want = op.reference(q, k, v, scale=0.125, **CAUSAL["BottomRight"])
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), **TOL[dtype])


# -- grouped-query attention (GQA) ----------------------------------------------------------

def grouped_module(dtype, s, t, heads=4, kv_heads=2, d=16, mask="BottomRight", axis=2, repeats=None):
    """attention of keys and values repeated per query-head group, as a GQA decoder writes it in Relax."""
    bb = relax.BlockBuilder()
    q = relax.Var("q", R.Tensor((2, s, heads, d), dtype))
    k, v = (relax.Var(n, R.Tensor((2, t, kv_heads, d), dtype)) for n in "kv")
    with bb.function("main", [q, k, v]):
        with bb.dataflow():
            kr, vr = (bb.emit(relax.op.repeat(x, repeats or heads // kv_heads, axis=axis)) for x in (k, v))
            out = bb.emit_output(relax.op.nn.attention(q, kr, vr, causal_mask=mask))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 3, 70, 8, 2, 64), (2, 65, 65, 4, 4, 128), (1, 5, 9, 6, 3, 8), (2, 1, 130, 16, 2, 64)],
                         ids=str)
def test_grouped_heads_kernels_match_the_reference(shape, dtype):
    """Both kernels (tensor-core tiles at head dims 64 and 128 in float16 and bfloat16, the
    warp per row otherwise) with key/value heads shared by groups of query heads, on the
    simulator; the reference repeats each key/value head over its group."""
    b, s, t, h, hkv, d = shape
    rng = np.random.default_rng(sum(shape))
    arrays = [rng.standard_normal(x).astype(dtype) for x in ((b, s, h, d), (b, t, hkv, d), (b, t, hkv, d))]
    attrs = dict(scale=0.2, **CAUSAL["BottomRight"])
    out, ref, launches = _run_kernel(arrays, attrs)
    assert launches == 1
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), **TOL[dtype])
    repeated = [arrays[0]] + [np.repeat(a, h // hkv, axis=2) for a in arrays[1:]]
    np.testing.assert_array_equal(ref, get_op("simaccel.attention").reference(*repeated, **attrs))


def test_the_grouped_reference_is_torchs_with_enable_gqa():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal(x).astype("float32") for x in ((2, 5, 6, 8), (2, 5, 2, 8), (2, 5, 2, 8)))
    tq, tk, tv = (torch.from_numpy(a).permute(0, 2, 1, 3) for a in (q, k, v))
    if "enable_gqa" not in torch.nn.functional.scaled_dot_product_attention.__doc__:
        pytest.skip("this torch has no enable_gqa")
    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True, enable_gqa=True)
    got = get_op("simaccel.attention").reference(q, k, v, scale=8 ** -0.5, **CAUSAL["TopLeft"])
    np.testing.assert_allclose(got, want.permute(0, 2, 1, 3).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_repeated_keys_and_values_fold_into_grouped_attention(dtype, engine):
    """R.repeat of the keys and values along the head axis is not computed: the op reads the
    key/value heads themselves. Matches TVM alone, which repeats them."""
    mod = grouped_module(dtype, 5, 7, heads=4, kv_heads=2, d=64)
    assert_offloads(mod, ["simaccel.grouped_attention"])
    assert_matches_tvm(mod, engines=[engine])


def test_grouped_attention_over_a_symbolic_cache():
    """A GQA decode step and prefill from one build: s query rows against t keys, both symbolic."""
    s, t = tvm.tirx.Var("s", "int64"), tvm.tirx.Var("t", "int64")
    mod = grouped_module("float16", s, t, heads=8, kv_heads=2, d=64)
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {"s": 16, "t": 80})
    assert_offloads(mod, ["simaccel.grouped_attention"])
    assert_matches_tvm(mod, sizes=[{"s": 1, "t": 1}, {"s": 1, "t": 70}, {"s": 16, "t": 16}, {"s": 3, "t": 80}],
                       engines=["ref", "sim"])


@pytest.mark.parametrize("axis, repeats, reason", [
    (1, 2, "not a repeat of each key/value head per group of the query's 2 heads along the head axis "
           "(key (2, 3, 2, 16) repeated 2 times along axis 1; value (2, 3, 2, 16) repeated 2 times along axis 1)")])
def test_a_repeat_that_is_not_a_head_group_is_not_folded(axis, repeats, reason):
    """Keys repeated along the sequence: plain attention of the repeated keys, the repeats kept
    on TVM, each with the grouped pattern's reason (they have no pattern of their own); only the
    attention itself is said to be offloaded apart from the pattern."""
    mod = grouped_module("float32", 4, 3, heads=2, kv_heads=2, axis=axis, repeats=repeats)
    _, report = partition_report(mod)
    assert list(report.regions.values()) == [["simaccel.attention"]], report.format()
    assert [op for _, op, _ in report.kept] == ["relax.repeat"] * 2, report.format()
    assert all(why == f"simaccel.grouped_attention rejected: {reason}" for _, _, why in report.kept), report.format()
    assert [(var, pattern) for var, pattern, _ in report.apart] == [("gv", "simaccel.grouped_attention")], report.format()
    assert_matches_tvm(mod, engines=["ref"])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_decoder_matches_its_torch_twin_from_prefill_through_decode(dtype):
    """examples/decoder.py's model against the same model in torch (`torch_twin`: SDPA with
    enable_gqa and a bottom-right causal mask) with the same weights, on the ref engine: a
    prefill of 9 tokens, then 2 decode steps, each side fed its own returned caches."""
    torch = pytest.importorskip("torch")
    from simaccel.compare import array_difference
    from simaccel.tvm_integration import build

    example = decoder_example()
    rng = np.random.default_rng(3)
    weights, prompt = example.random_weights(dtype, rng), rng.integers(0, example.SMALL.vocab, 9)
    twin = example.torch_twin(weights, dtype)
    to_torch = lambda a: torch.from_numpy(np.asarray(a, np.float32)).to(getattr(torch, dtype))  # noqa: E731
    caches, position, tokens = [to_torch(a) for a in example.empty_caches(dtype)], 0, prompt[None, :]
    picks = []
    for got in example.generate(build(example.decoder(dtype), "llvm"), dtype, prompt, 2, weights, tvm.cpu(),
                                next_token=lambda last: picks[-1]):
        want = twin(torch.from_numpy(np.asarray(tokens, "int64")),
                    *map(to_torch, example.rotary_tables(position, tokens.shape[1], dtype)), caches)
        for index, (g, w) in enumerate(zip(got, want)):
            found = array_difference(np.asarray(g.numpy(), np.float32), w.float().numpy(), dtype=dtype, scaled=True)
            assert found.ok, f"at position {position}, output {index}: {found.reason}"
        caches, position = want[1:], position + tokens.shape[1]
        picks.append(example.greedy(want[0].float().numpy()[0, -1]))
        tokens = np.asarray([[picks[-1]]])
