"""Causal and padding masks, split and ceil-mode max pooling, end to end: offloaded models
against TVM alone (and torch), and the partition reports that say nothing stays on TVM.

The Relax-built cases need no torch; the torch.export ones (a GPT-style block with
``torch.ones(T, T).tril()`` and masked_fill, a padding mask from lengths via
``arange(T) < lengths[:, None]``, nn.TransformerDecoderLayer with a causal mask, and
torchvision's squeezenet1_1 at 64x64) skip without the torch extra.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tvm
from tvm import relax

from compare import assert_same
from harness import compare_with_tvm
from model_zoo import single_op
from simaccel.tvm_integration import partition_report


def one_region_nothing_kept(mod, regions: int = 1):
    _, report = partition_report(mod)
    assert len(report.regions) == regions and not report.kept, report.format()
    return report


# -- Relax-built cases (no torch) -------------------------------------------------------------
@pytest.mark.parametrize("engine", ["ref", "sim"])
# (4, 1, 2, (0, 0, 1, 1)): the last window starts in the end padding (PyTorch drops it; TVM
# keeps it, all padding: the dtype's lowest value).
@pytest.mark.parametrize("size, window, strides, padding", [(8, 3, 2, 0), (9, 3, 2, 1), (7, 2, 2, 0), (6, 3, 3, 1),
                                                            (4, 1, 2, (0, 0, 1, 1)), (5, 2, 2, (1, 1, 0, 0))])
def test_ceil_mode_max_pooling_matches_tvm(size, window, strides, padding, engine):
    mod = single_op(lambda x: relax.op.nn.max_pool2d(x, window, strides, padding, ceil_mode=True),
                    [((1, 2, size, size), None)])
    one_region_nothing_kept(mod)
    compare_with_tvm(mod, engine)


def test_ceil_mode_average_pooling_stays_on_tvm_and_says_why():
    mod = single_op(lambda x: relax.op.nn.avg_pool2d(x, 3, 2, ceil_mode=True), [((1, 2, 8, 8), None)])
    _, report = partition_report(mod)
    assert not report.regions and "average pooling with ceil_mode=True" in report.kept[0][2]


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("sections, axis", [(3, 1), ([1, 4], -1), (2, 0), ([2, 3], 1)])
def test_split_becomes_slices_and_matches_tvm(sections, axis, engine):
    def make(x):
        parts = relax.op.split(x, sections, axis)
        count = sections if isinstance(sections, int) else len(sections) + 1
        return relax.Tuple([relax.op.multiply(relax.TupleGetItem(parts, i), relax.const(float(i + 1)))
                            for i in range(count)])

    mod = single_op(make, [((4, 6), None)])
    # Each piece and its multiply: a region of its own (TVM merges only connected composites).
    report = one_region_nothing_kept(mod, sections if isinstance(sections, int) else len(sections) + 1)
    assert any("relax.split" in note for note in report.rewritten)
    compare_with_tvm(mod, engine)


def causal_mask_relax(t: int = 8, dtype: str = "float32"):
    """scores (2, t, t) masked by arange(t)[None] - arange(t)[:, None] <= 0, then where: what
    torch.ones(t, t).tril() exports as, plus a where over an input-dependent mask."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, t, t), dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            cols = bb.emit(relax.op.expand_dims(relax.op.arange(0, t, 1, "int64"), [0]))
            rows = bb.emit(relax.op.expand_dims(relax.op.arange(0, t, 1, "int64"), [1]))
            keep = bb.emit(relax.op.less_equal(bb.emit(relax.op.subtract(cols, rows)), relax.const(0, "int64")))
            masked = bb.emit(relax.op.where(keep, x, relax.const(float("-inf"), dtype)))
            soft = bb.emit(relax.op.nn.softmax(masked))
            # input-dependent mask: where the scores are positive, through int and bool ops
            pos = bb.emit(relax.op.logical_not(relax.op.less_equal(x, relax.const(0.0, dtype))))
            count = bb.emit(relax.op.astype(pos, "int64"))
            twice = bb.emit(relax.op.add(count, count))
            out = bb.emit_output(relax.Tuple([soft, relax.op.astype(twice, dtype),
                                              relax.op.where(pos, soft, relax.op.zeros_like(soft))]))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_causal_mask_offloads_and_matches_tvm(engine, dtype):
    mod = causal_mask_relax(6, dtype)
    report = one_region_nothing_kept(mod)
    assert any("computed at build time" in note for note in report.rewritten), report.format()
    compare_with_tvm(mod, engine)


# -- torch.export models ----------------------------------------------------------------------
def _torch():
    torch = pytest.importorskip("torch", reason="the torch.export models need torch: pip install '.[torch]'")
    pytest.importorskip("torchvision", reason="squeezenet needs torchvision: pip install '.[torch]'")
    return torch


def _export(module, *args):
    torch = _torch()
    from tvm.relax.frontend.torch import from_exported_program

    with torch.no_grad():
        exported = torch.export.export(module.eval(), args)
    return from_exported_program(exported, keep_params_as_input=False)


def _models():
    torch = _torch()
    from torch import nn

    class CausalBlock(nn.Module):
        """A GPT-style block: its causal mask is torch.ones(t, t).tril() == 0, applied by masked_fill."""

        def __init__(self, d=32, heads=4):
            super().__init__()
            self.heads = heads
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            att = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
            att = att.masked_fill(torch.ones(t, t).tril() == 0, float("-inf")).softmax(-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    class PaddingMask(nn.Module):
        """Mean over the valid positions of each sequence: the mask is arange(t) < lengths[:, None]."""

        def __init__(self, d=32):
            super().__init__()
            self.fc = nn.Linear(d, d)

        def forward(self, x, lengths):
            keep = torch.arange(x.shape[1])[None, :] < lengths[:, None]
            return self.fc(x).masked_fill(~keep[:, :, None], 0.0).sum(1) / lengths[:, None].to(x.dtype)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True)

        def forward(self, x, memory):
            mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
            return self.layer(x, memory, tgt_mask=mask, tgt_is_causal=True)

    import torchvision

    x = torch.randn(2, 8, 32)
    return {
        "causal_block": (CausalBlock(), (x,)),
        "padding_mask": (PaddingMask(), (x, torch.tensor([3, 8]))),
        "transformer_decoder": (Decoder(), (x, torch.randn(2, 6, 32))),
        "squeezenet1_1": (torchvision.models.squeezenet1_1(), (torch.randn(1, 3, 64, 64),)),
    }


@functools.lru_cache(maxsize=None)
def _exported(name):
    """Model `name` (seeded weights), its example inputs and its Relax module: once per test process."""
    _torch().manual_seed(0)
    module, args = _models()[name]
    return module, args, _export(module, *args)


# squeezenet on the simulator would take minutes (every CUDA thread interpreted in Python).
@pytest.mark.parametrize("name, engine", [("causal_block", "ref"), ("causal_block", "sim"), ("padding_mask", "ref"),
                                          ("padding_mask", "sim"), ("transformer_decoder", "ref"),
                                          ("transformer_decoder", "sim"), ("squeezenet1_1", "ref")])
def test_a_masked_or_fire_module_model_offloads_whole_and_matches_tvm_and_torch(name, engine):
    torch = _torch()
    module, args, mod = _exported(name)
    one_region_nothing_kept(mod)
    arrays = [a.numpy() for a in args]
    got, _, ledger = compare_with_tvm(mod, engine, arrays=arrays)
    assert ledger["offloaded_calls"] == 1
    with torch.no_grad():
        want = module(*args).numpy()
    assert_same(got[0] if isinstance(got, list) else got, want, "float32")


def test_a_float_mask_built_from_shapes_is_folded_and_matches_tvm():
    """swin's shifted-window mask: zeros, slice_scatter of a broadcast scalar, then arithmetic on
    it, all from shapes and scalars: computed at build time; a weight (x's own operand) is not."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((6, 6), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            zeros = bb.emit(relax.op.full((6, 6), relax.const(0.0, "float32"), "float32"))
            ones = bb.emit(relax.op.broadcast_to(relax.const(1.0, "float32"), (2, 6)))
            mask = bb.emit(relax.op.slice_scatter(zeros, ones, 0, 2, 1, axis=0))
            scaled = bb.emit(relax.op.multiply(mask, relax.const(-100.0, "float32")))
            weight = relax.const(np.arange(36, dtype="float32").reshape(6, 6))
            out = bb.emit_output(relax.op.add(relax.op.add(x, scaled), relax.op.permute_dims(weight)))
        bb.emit_func_output(out)
    mod = bb.get()
    _, report = partition_report(mod)
    assert any(note.startswith("4 mask expression") for note in report.rewritten), report.format()
    assert "simaccel.permute_dims" in [op for ops in report.regions.values() for op in ops]  # the weight's: not folded
    assert not report.kept, report.format()
    compare_with_tvm(mod, "ref")


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_position_ids_from_a_padding_mask_are_offloaded(engine):
    """HF decoders' `position_ids = attention_mask.cumsum(-1) - 1`, then masked_fill(mask == 0, 1):
    cumsum over int64 with the integer ops around it, one region, over a symbolic length; the
    ids then index a table (take). Against TVM alone at several lengths."""
    from tvm.script import relax as R

    from simaccel.testing import assert_matches_tvm

    t = tvm.tirx.Var("t", "int64")
    bb = relax.BlockBuilder()
    mask = relax.Var("mask", R.Tensor((2, t), "int64"))
    table = relax.Var("table", R.Tensor((64, 8), "float32"))
    op = relax.op
    with bb.function("main", [mask, table]):
        with bb.dataflow():
            ids = bb.emit(op.subtract(bb.emit(op.cumsum(mask, axis=-1)), relax.const(1, "int64")))
            ids = bb.emit(op.where(bb.emit(op.equal(mask, relax.const(0, "int64"))), relax.const(1, "int64"), ids))
            out = bb.emit_output(op.take(table, ids, axis=0))
        bb.emit_func_output(out)
    mod = bb.get()
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {"t": 48})
    one_region_nothing_kept(mod)
    rng = np.random.default_rng(0)
    for length in (1, 9, 48):
        masks = (np.arange(length)[None, :] >= rng.integers(0, length, (2, 1))).astype("int64")  # left padding
        assert_matches_tvm(mod, [masks, rng.standard_normal((64, 8)).astype("float32")], engines=[engine])
