"""PyTorch models through torch.export (tvm_integration/tools/torch_models.py): the whole
architectures partition into few regions, and every engine computes what TVM alone computes.

torch and torchvision come with the `torch` extra (the README's test command installs it);
without them these tests skip and say why. Partitions are checked on the full-size models;
runs use the small sizes (the same architectures at a small input, or narrower), on `ref`
and on `sim` (the Numba kernels on the CUDA simulator). The GPU runs are
scripts/torch_models_gpu.py's (results/gpu/).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch", reason="the torch.export tests need torch and torchvision: pip install '.[torch]' "
                    "after the test extra (README: one command cannot install both)")
pytest.importorskip("torchvision", reason="the torch.export tests need torchvision: pip install '.[torch]'")

from compare import assert_same  # noqa: E402
from harness import compare_with_tvm, small_torch_model  # noqa: E402
from simaccel.tvm_integration import partition_report  # noqa: E402
from simaccel.tvm_integration.tools import torch_models  # noqa: E402
from simaccel.tvm_integration.tools.models import random_inputs  # noqa: E402

# The targets: at most this many regions for the whole model.
REGION_TARGETS = {"resnet18": 2, "mobilenet_v2": 2, "transformer_encoder": 3, "mlp_mixer": 1}
# What may stay on TVM: nothing. The encoder's attention chain, with its guard that turns a
# fully masked row into zeros (equal, logical_not, astype to int8, max, full_like, where), is
# one simaccel.attention (tvm_integration/rewrites/attention.py); a chain the rewrite leaves
# offloads op by op (the mask ops: simaccel/ops/builtin/masks.py).
MAY_STAY: dict[str, set[str]] = {}


@pytest.mark.parametrize("name", torch_models.MODEL_NAMES)
def test_a_whole_model_is_at_most_its_target_of_regions(name):
    model = torch_models.load(name, "full")
    _, report = partition_report(model.to_relax())
    assert 1 <= len(report.regions) <= REGION_TARGETS[name], report.format()
    assert {op for _, op, _ in report.kept} <= MAY_STAY.get(name, set()), report.format()
    assert all(reason for _, _, reason in report.kept)  # whatever stays says why


ATOL_SCALE = 1e-4


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("name", torch_models.MODEL_NAMES)
def test_a_model_matches_tvm_alone_and_torch(name, engine):
    # These run only where the torch extra is installed. A whole model's float32 outputs
    # differ from TVM alone's and torch's by their sums' order: errors are judged against the
    # output's scale (mobilenet_v2's class 7, 0.00136 of a largest 0.247, is 1.08e-5 off torch's).
    model, mod = small_torch_model(name)
    arrays = random_inputs(mod, seed=1)
    got, _, ledger = compare_with_tvm(mod, engine, arrays=arrays, atol_scale=ATOL_SCALE)
    assert ledger["offloaded_calls"] >= 1
    assert ledger["bytes"]["host_to_device"] == ledger["bytes"]["device_to_host"] == 0
    first = got[0] if isinstance(got, list) else got
    theirs = model.run(arrays[0]).astype(first.dtype)
    assert_same(first, theirs, "float32", atol=ATOL_SCALE * float(np.abs(theirs).max()))


def test_views_in_a_real_model_cost_no_kernel_and_no_copy(clean_runtime):
    _, mod = small_torch_model("mlp_mixer")
    _, _, ledger = compare_with_tvm(mod, "sim")
    assert ledger["ops"]["simaccel.reshape"] >= 4
    assert ledger["kernel_launches"].get("simaccel.reshape", 0) == 0  # every reshape was a view
    assert ledger["bytes"]["device_to_device"] == 0


def test_a_missing_model_name_is_a_clear_error():
    from simaccel import SimAccelError

    with pytest.raises(SimAccelError, match="no torch model named 'resnet19'; the models are resnet18, mobilenet_v2"):
        torch_models.load("resnet19")


def test_torch_is_optional(monkeypatch):
    import builtins

    from simaccel import SimAccelError

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name.split(".")[0] in ("torch", "torchvision"):
            raise ImportError(f"No module named '{name}'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(SimAccelError, match=r"need torch and torchvision .*pip install 'simaccel\[torch\]'"):
        torch_models.load("resnet18")


def test_reference_outputs_are_not_trivial():
    # The checks above compare real numbers: outputs vary across the batch of classes.
    model = torch_models.load("resnet18", "small")
    out = model.run(np.random.default_rng(0).standard_normal(model.input_shape).astype(np.float32))
    assert out.shape == (1, 10) and float(out.std()) > 1e-3  # the small resnet18 has 10 classes


def _decoder_block():
    """A LLaMA-style toy block: token embedding (nn.Embedding: take), RMSNorm, a projection
    and rotary embeddings (x * cos + rotate_half(x) * sin, rotate_half by negative and concat)
    of positions given as an input; its Relax module from torch.export."""
    import torch
    from torch import nn
    from tvm.relax.frontend.torch import from_exported_program

    class DecoderBlock(nn.Module):
        def __init__(self, vocab=11, dim=8):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.norm = nn.RMSNorm(dim, eps=1e-5)
            self.proj = nn.Linear(dim, dim, bias=False)
            self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim))

        def forward(self, tokens, positions):
            q = self.proj(self.norm(self.embed(tokens)))
            freqs = positions[..., None] * self.inv_freq
            emb = torch.cat((freqs, freqs), dim=-1)
            half = q.shape[-1] // 2
            rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
            return q * emb.cos() + rotated * emb.sin()

    torch.manual_seed(0)
    model = DecoderBlock().eval()
    tokens = np.array([[0, 10, 3, 3, 7], [5, 1, 0, 9, 2]], np.int64)  # in range: nn.Embedding's (and TVM's fast take's)
    positions = np.tile(np.arange(5, dtype=np.float32) * 7, (2, 1))  # angles past 2 pi
    program = torch.export.export(model, (torch.from_numpy(tokens), torch.from_numpy(positions)))
    with torch.no_grad():
        want = model(torch.from_numpy(tokens), torch.from_numpy(positions)).numpy()
    return from_exported_program(program, keep_params_as_input=False), [tokens, positions], want


def test_a_decoder_block_is_one_region_and_matches_tvm_alone_and_torch():
    """Embedding, RMSNorm (torch.export writes it as power, mean, add, rsqrt and multiplies)
    and rotary embeddings: every op offloaded, in one region, on ref and sim."""
    from simaccel.testing import assert_matches_tvm, assert_offloads

    mod, inputs, want = _decoder_block()
    report = assert_offloads(mod, ["simaccel.take", "simaccel.negative", "simaccel.sin", "simaccel.cos", "simaccel.rsqrt"],
                             regions=1, kept=0)
    assert "simaccel.astype" in next(iter(report.regions.values()))  # tokens to int32, as the frontend casts them
    for run in assert_matches_tvm(mod, inputs, engines=["ref", "sim"]):
        assert_same(run.outputs[0], want, "float32")


def _eager_attention(dtype: str, form: str = "eager"):
    """Attention as a model written without SDPA writes it (transformers' eager attention): Q K^T
    scaled, future keys masked, softmax in float32 cast back, times V, in `dtype`. TVM's torch
    frontend writes its batched matmuls of 16-bit operands with out_dtype float32."""
    import ml_dtypes
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    class EagerAttention(torch.nn.Module):
        def forward(self, q, k, v):
            scores = torch.matmul(q, k.transpose(2, 3)) / q.shape[-1] ** 0.5
            future = torch.arange(k.shape[2])[None, :] > torch.arange(q.shape[2])[:, None]
            scores = scores + torch.where(future, float("-inf"), 0.0)
            weights = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            return torch.matmul(weights, v)

    class MaskedSdpa(torch.nn.Module):
        """transformers' sdpa attention as torch.export traces it: an additive mask of the dtype's
        lowest value (torch decomposes SDPA with a mask into the chain, with its guard for rows
        that mask every key)."""

        def forward(self, q, k, v):
            future = torch.arange(k.shape[2])[None, :] > torch.arange(q.shape[2])[:, None]
            mask = torch.where(future, torch.finfo(q.dtype).min, 0.0).to(q.dtype)[None, None]
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    model = EagerAttention() if form == "eager" else MaskedSdpa()

    rng = np.random.default_rng(4)
    inputs = [rng.standard_normal((1, 4, 9, 16)).astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
              for _ in range(3)]
    tensors = tuple(torch.from_numpy(x.astype(np.float32)).to(getattr(torch, dtype)) for x in inputs)
    with torch.no_grad():
        want = model(*tensors).float().numpy()
    return from_exported_program(torch.export.export(model, tensors)), inputs, want


@pytest.mark.parametrize("form", ["eager", "masked_sdpa"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_16_bit_eager_attention_is_one_region_and_matches_tvm_alone_and_torch(dtype, form):
    """Its matmuls widen to float32 (simaccel.matmul's out_dtype), so nothing stays on TVM. The
    masked SDPA's chain (its result cast back to 16 bits) is one attention op
    (tests/test_attention_chains.py); the eager one keeps its float32 result, which the op would
    round, so it stays the chain."""
    from simaccel.testing import assert_matches_tvm, assert_offloads

    mod, inputs, want = _eager_attention(dtype, form)
    ops = ["simaccel.matmul", "simaccel.softmax"] if form == "eager" else ["simaccel.attention"]
    assert_offloads(mod, ops, regions=1, kept=0)
    for run in assert_matches_tvm(mod, inputs, engines=["ref", "sim"]):
        assert_same(run.outputs[0].astype(np.float32), want, dtype)


def test_a_transposed_convolution_decoder_is_one_region_and_matches_tvm_alone_and_torch():
    """ConvTranspose2d (stride 2, output_padding, groups) then ReLU and a conv: simaccel.conv2d_transpose."""
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    from simaccel.testing import assert_matches_tvm, assert_offloads

    class Upsample(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
            self.conv = torch.nn.Conv2d(6, 3, 3, padding=1)

        def forward(self, x):
            return self.conv(torch.relu(self.up(x)))

    torch.manual_seed(0)
    model, x = Upsample().eval(), torch.randn(2, 4, 5, 7)
    mod = from_exported_program(torch.export.export(model, (x,)), keep_params_as_input=False)
    assert_offloads(mod, ["simaccel.conv2d_transpose", "simaccel.conv2d_bias"], regions=1, kept=0)
    with torch.no_grad():
        want = model(x).numpy()
    for run in assert_matches_tvm(mod, [x.numpy()], engines=["ref", "sim"]):
        assert_same(run.outputs[0], want, "float32")
