"""The matmul-softmax-matmul chain torch.export writes, rewritten as one attention op
(tvm_integration/rewrites/attention.py).

Each chain is a small torch module (transformers' eager attention, with its `repeat_kv` for
grouped-query attention; SDPA with an additive mask, which torch.export decomposes) in BHSD,
exported and imported by TVM's torch frontend. Those the rewrite takes become one
`simaccel.attention` (or `simaccel.grouped_attention`) with no matmul or softmax left; those
it must leave (a mask that is an input, a mask that is not causal, a scale that is a tensor)
stay the chain. Every case is run against TVM alone (which runs the chain as written) and
torch.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch", reason="the torch.export tests need torch: pip install '.[torch]'")

from compare import assert_same  # noqa: E402
from simaccel.testing import assert_matches_tvm, assert_offloads  # noqa: E402
from simaccel.tvm_integration import partition_report  # noqa: E402
from simaccel.tvm_integration.rewrites.attention import MASKED, _causal  # noqa: E402

FUSED = {"simaccel.attention", "simaccel.grouped_attention", "simaccel.attention_bias",
         "simaccel.grouped_attention_bias"}


def _mask(kind: str, s: int, t: int):
    """An additive mask of constants (static shapes: torch.export's arange, compared and
    filled), or None."""
    import torch

    i, j = torch.arange(s)[:, None], torch.arange(t)[None, :]
    hidden = {"top_left": j > i, "bottom_right": j > i + (t - s), "window": (j > i) | (j < i - 2)}.get(kind)
    if hidden is None:
        return None
    return torch.where(hidden, float("-inf"), 0.0)


def _chain(form: str, mask: str, *, dtype="float32", heads=4, kv_heads=4, s=7, t=7, d=16, cast=True, seed=0):
    """(mod, inputs, want): an attention chain as torch.export writes it, its inputs, torch's output."""
    import ml_dtypes
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    group = heads // kv_heads

    def repeat_kv(x):  # transformers' repeat_kv: expand at axis 2, then merge with the heads
        b, h, n, e = x.shape
        return x[:, :, None, :, :].expand(b, h, group, n, e).reshape(b, h * group, n, e)

    class Chain(torch.nn.Module):
        def forward(self, q, k, v, *given):
            k, v = repeat_kv(k), repeat_kv(v)
            additive = given[0] if given else _mask(mask, q.shape[2], k.shape[2])
            if form == "sdpa":
                if additive is not None and not given:  # a constant's -inf as transformers writes it
                    additive = torch.maximum(additive, torch.tensor(torch.finfo(q.dtype).min)).to(q.dtype)
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=additive)
            if form == "scaled_q":  # the scale applied to the query and the keys' transpose, as SDPA's decomposition
                scores = torch.matmul(q * d ** -0.25, k.transpose(2, 3) * d ** -0.25)
            else:
                scores = torch.matmul(q, k.transpose(2, 3)) / d ** 0.5
            if additive is not None:
                scores = scores + additive
            weights = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(weights, v)
            # TVM's frontend widens a 16-bit matmul's result to float32: a cast back rounds it (cast=True)
            return out.float().to(q.dtype) if cast else out

    rng = np.random.default_rng(seed)
    shapes = [(1, heads, s, d), (1, kv_heads, t, d), (1, kv_heads, t, d)]
    numpy_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    inputs = [rng.standard_normal(shape).astype(numpy_dtype) for shape in shapes]
    if mask == "input":
        inputs.append(np.where(rng.random((1, 1, s, t)) < 0.3, -1e4, 0.0).astype(numpy_dtype))
    tensors = tuple(torch.from_numpy(x.astype(np.float32)).to(getattr(torch, dtype)) for x in inputs)
    with torch.no_grad():
        want = Chain()(*tensors).float().numpy()
    mod = from_exported_program(torch.export.export(Chain(), tensors))
    return mod, inputs, want


def _offloaded(mod) -> tuple[list[str], list[str]]:
    _, report = partition_report(mod)
    return [op for ops in report.regions.values() for op in ops], report.rewritten


FUSING = [
    # (form, mask, dtype, heads, kv_heads, s, t)
    ("eager", "top_left", "float32", 4, 4, 7, 7),
    ("eager", "none", "float32", 4, 4, 5, 9),
    ("eager", "bottom_right", "float32", 4, 4, 3, 9),
    ("eager", "top_left", "float16", 4, 2, 7, 7),
    ("eager", "bottom_right", "bfloat16", 6, 2, 2, 11),
    ("scaled_q", "top_left", "float32", 4, 1, 6, 6),
    ("sdpa", "top_left", "float32", 4, 4, 7, 7),
    ("sdpa", "top_left", "float16", 4, 2, 9, 9),
    ("sdpa", "bottom_right", "bfloat16", 4, 4, 4, 10),
]


@pytest.mark.parametrize("form,mask,dtype,heads,kv_heads,s,t", FUSING,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}x{c[4]}-{c[5]}x{c[6]}" for c in FUSING])
def test_a_chain_becomes_one_attention_op_and_matches_tvm_alone_and_torch(form, mask, dtype, heads, kv_heads, s, t):
    mod, inputs, want = _chain(form, mask, dtype=dtype, heads=heads, kv_heads=kv_heads, s=s, t=t)
    ops, rewritten = _offloaded(mod)
    assert any("rewritten as relax.nn.attention" in note for note in rewritten), rewritten
    assert FUSED & set(ops) and not {"simaccel.matmul", "simaccel.softmax"} & set(ops), ops
    if kv_heads < heads:
        assert "simaccel.grouped_attention" in ops  # repeat_kv's copy is never computed
    assert_offloads(mod, regions=1, kept=0)
    for run in assert_matches_tvm(mod, inputs, engines=["ref", "sim"]):
        assert_same(run.outputs[0].astype(np.float32), want, dtype)


BIASED = [
    # (form, mask, dtype, kv_heads): a mask given as an input (padding), a sliding window (a
    # constant of no causal pattern)
    ("eager", "input", "float32", 4), ("sdpa", "input", "float32", 4), ("eager", "window", "float32", 4),
    ("eager", "input", "float16", 2), ("sdpa", "input", "bfloat16", 2), ("eager", "window", "bfloat16", 4),
    ("sdpa", "window", "float16", 4),
]


@pytest.mark.parametrize("form,mask,dtype,kv_heads", BIASED, ids=["-".join(map(str, c)) for c in BIASED])
def test_a_chain_with_any_other_mask_becomes_one_attention_op_with_a_bias(form, mask, dtype, kv_heads):
    """A mask that is an input or a constant of no causal pattern is the op's bias
    (simaccel.attention_bias: added to the scaled scores), read in the operands' dtype; the
    chain is one op, matching TVM alone (which runs the chain) and torch."""
    mod, inputs, want = _chain(form, mask, dtype=dtype, kv_heads=kv_heads)
    ops, rewritten = _offloaded(mod)
    assert any("rewritten as relax.nn.attention" in note for note in rewritten), rewritten
    fused = "simaccel.grouped_attention_bias" if kv_heads < 4 else "simaccel.attention_bias"
    assert fused in ops and not {"simaccel.matmul", "simaccel.softmax"} & set(ops), ops
    assert_offloads(mod, regions=1, kept=0)
    for run in assert_matches_tvm(mod, inputs, engines=["ref", "sim"]):
        assert_same(run.outputs[0].astype(np.float32), want, dtype)


@pytest.mark.parametrize("form,mask,dtype,cast", [("eager", "top_left", "float16", False),
                                                 ("eager", "input", "bfloat16", False)])
def test_a_chain_the_op_does_not_compute_stays_a_chain_and_matches(form, mask, dtype, cast):
    """A 16-bit chain whose float32 result the model keeps: the op rounds its result to its
    operands' dtype, which the chain does not. It stays as written, offloaded op by op, and
    matches TVM alone to the output's own (float32) tolerance."""
    mod, inputs, want = _chain(form, mask, dtype=dtype, kv_heads=2, cast=cast)
    ops, rewritten = _offloaded(mod)
    assert not FUSED & set(ops) and "simaccel.softmax" in ops, ops
    assert not any("relax.nn.attention" in note for note in rewritten)
    for run in assert_matches_tvm(mod, inputs, engines=["ref"]):
        assert_same(run.outputs[0].astype(np.float32), want, dtype)


def test_a_scale_that_is_a_tensor_stays_a_chain():
    """The op's scale is a number: scores multiplied by an input tensor are not attention's."""
    import tvm
    from tvm.script import relax as R

    @tvm.script.ir_module
    class Module:
        @R.function
        def main(q: R.Tensor((1, 2, 5, 8), "float32"), k: R.Tensor((1, 2, 5, 8), "float32"),
                 v: R.Tensor((1, 2, 5, 8), "float32"), c: R.Tensor((1, 2, 5, 5), "float32")):
            with R.dataflow():
                scores = R.matmul(q, R.permute_dims(k, axes=[0, 1, 3, 2]))
                p = R.nn.softmax(R.multiply(scores, c), axis=-1)
                out = R.matmul(p, v)
                R.output(out)
            return out

    ops, _ = _offloaded(Module)
    assert "simaccel.softmax" in ops and not FUSED & set(ops), ops
    assert_matches_tvm(Module, engines=["ref"])


def test_a_chain_with_a_head_dim_over_the_ops_limit_stays_a_chain():
    mod, inputs, want = _chain("eager", "top_left", heads=2, kv_heads=2, s=3, t=3, d=264)
    ops, _ = _offloaded(mod)
    assert not FUSED & set(ops), ops
    for run in assert_matches_tvm(mod, inputs, engines=["ref"]):
        assert_same(run.outputs[0], want, "float32")


@pytest.mark.parametrize("s,t", [(4, 4), (3, 8), (8, 3)])
def test_the_mask_patterns_the_rewrite_reads(s, t):
    i, j = np.arange(s)[:, None], np.arange(t)[None, :]
    hide = lambda keep: np.where(keep, 0.0, -np.inf).astype(np.float32)  # noqa: E731
    assert _causal(np.zeros((1, 1, s, t), np.float32), s, t) is None
    assert _causal(hide(j <= i)[None, None], s, t) == "TopLeft"
    if s < t:  # (with s > t, TVM's offset |s - t| lets every row see every key: no mask)
        assert _causal(hide(j <= i + abs(s - t))[None, None], s, t) == "BottomRight"
    finite = np.where(j <= i, 0.0, MASKED).astype(np.float32)
    assert _causal(finite, s, t) == "TopLeft"  # float16's lowest stands for -inf
    assert _causal(np.where(j <= i, 0.0, -1.0).astype(np.float32), s, t) is False  # a bias, not a mask
    assert _causal(hide((j <= i) & (j >= i - 1)), s, t) is False  # a window
    heads = np.stack([hide(j <= i), hide(j <= i + 1)])[None]
    assert _causal(heads, s, t) is False  # a pattern per head
    assert _causal(hide(j <= i), s + 1, t) is False  # not the scores' shape


def test_a_profile_without_the_attention_op_keeps_the_chain():
    """The rewrite asks the partitioner's profile first: where the op is not enabled, no
    relax.nn.attention is made (it would run on TVM's own legalization instead of the chain),
    and the chain's ops offload as the profile allows."""
    from simaccel import DeviceProfile

    mod, inputs, want = _chain("eager", "top_left", kv_heads=2)
    profile = DeviceProfile(name="no-attention", ops={"simaccel.matmul", "simaccel.softmax", "simaccel.add",
                                                     "simaccel.divide", "simaccel.reshape", "simaccel.permute_dims"})
    _, report = partition_report(mod, profile)
    ops = [op for region in report.regions.values() for op in region]
    assert "simaccel.softmax" in ops and not FUSED & set(ops), ops
    assert not any("relax.nn.attention" in note for note in report.rewritten)
    for run in assert_matches_tvm(mod, inputs, engines=["ref"], profile=profile):
        assert_same(run.outputs[0], want, "float32")


@pytest.mark.parametrize("causal", [False, True])
def test_torchs_multihead_attention_becomes_one_attention_op_and_matches(causal):
    """nn.MultiheadAttention merges heads with the batch before its chain ((B H, S, D) tensors
    viewed as (B, H, S, D) for the scores): the op reads those 4-D views. Its causal mask is a
    constant (a bool mask built from the static length)."""
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    class SelfAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(32, 4, batch_first=True)

        def forward(self, x):
            n = x.shape[1]
            mask = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None
            return self.attn(x, x, x, attn_mask=mask, need_weights=False)[0]

    torch.manual_seed(0)
    model, x = SelfAttention().eval(), torch.randn(2, 6, 32)
    with torch.no_grad():
        want = model(x).numpy()
    mod = from_exported_program(torch.export.export(model, (x,)), keep_params_as_input=False)
    ops, _ = _offloaded(mod)
    assert "simaccel.attention" in ops and "simaccel.softmax" not in ops, ops
    for run in assert_matches_tvm(mod, [x.numpy()], engines=["ref", "sim"]):
        assert_same(run.outputs[0], want, "float32")


def test_a_chain_over_a_symbolic_batch_and_length_is_one_attention_op_in_one_build():
    """With no mask, nothing of the chain needs a static size: nn.MultiheadAttention exported with
    a dynamic batch and sequence is one attention op, one build run at three sizes."""
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    class SelfAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(32, 4, batch_first=True)

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0]

    torch.manual_seed(0)
    batch, length = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("length", min=2, max=32)
    exported = torch.export.export(SelfAttention().eval(), (torch.randn(2, 6, 32),),
                                   dynamic_shapes={"x": {0: batch, 1: length}})
    mod = from_exported_program(exported, keep_params_as_input=False)
    ops, _ = _offloaded(mod)
    assert "simaccel.attention" in ops and "simaccel.softmax" not in ops, ops
    b, s, _ = (str(d) for d in mod["main"].params[0].ty.shape.values)
    assert_matches_tvm(mod, sizes=[{b: 1, s: 2}, {b: 3, s: 17}, {b: 8, s: 32}], engines=["ref"])
    assert_matches_tvm(mod, sizes=[{b: 2, s: 5}], engines=["sim"])  # the simulator at a small size
