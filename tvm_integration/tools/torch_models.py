"""PyTorch models through torch.export: the models behind `simaccel demo --model NAME`, the
torch.export tests and scripts/torch_models_gpu.py.

Where it sits: a tool on top of the backend. Each model is built with seeded random weights,
put in eval mode, exported with `torch.export.export` and imported with TVM's
`from_exported_program` (weights become constants), so the Relax module is what a user of
torch.export gets. torch and torchvision are an optional extra (``pip install
'simaccel[torch]'``); without them `load` raises a SimAccelError that says so.

Every model comes in two sizes: "full" (the real architecture at its usual input) and
"small" (the same architecture at a small input, or a narrow copy of it), which is what the
CPU tests and the simulator can run in seconds.

Two sets: MODEL_NAMES, the four models the project times and tunes against, and
UNTUNED_NAMES, a broader set nobody tuned for (issue 21): depthwise and grouped convolutions
with gated activations and squeeze-excite (mobilenet_v3_small, efficientnet_b0,
regnet_y_400mf), channel shuffles (shufflenet_v2_x0_5), concatenated branches (squeezenet1_1's
fire modules with ceil-mode pooling, googlenet's inception blocks), 7x7 depthwise convolutions
with layer norm and GELU (convnext_tiny), a GPT-style causal decoder (mask from
``torch.ones(T, T).tril()``) and an encoder with a padding mask (``arange(T) < lengths``).
Every model with batch norm gets its statistics calibrated (`calibrate_batch_norm`), so
activations neither vanish nor explode through the depth of a randomly initialised network.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import SimAccelError

SIZES = ("full", "small")


@dataclass(frozen=True)
class TorchModel:
    """One model: a torch module in eval mode and the shape of its one float32 input."""

    name: str
    module: Any
    input_shape: tuple[int, ...]
    doc: str

    def to_relax(self):
        """The Relax module torch.export + TVM's importer make of it (weights as constants)."""
        import torch
        from tvm.relax.frontend.torch import from_exported_program

        example = torch.zeros(self.input_shape)
        with torch.no_grad():
            exported = torch.export.export(self.module, (example,))
        return from_exported_program(exported, keep_params_as_input=False)

    def run(self, x: np.ndarray) -> np.ndarray:
        """torch's own result for input `x` (on the CPU, float32)."""
        import torch

        with torch.no_grad():
            out = self.module(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
        return out.numpy()

    def run_all(self, x: np.ndarray) -> list[np.ndarray]:
        """torch's outputs for input `x`, flattened as torch.export flattens them (a dict's
        values in order, tuples element by element)."""
        import torch

        with torch.no_grad():
            out = self.module(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
        leaves, _ = torch.utils._pytree.tree_flatten(out)
        return [leaf.numpy() for leaf in leaves]


def _torch():
    try:
        import torch
        import torchvision
    except ImportError as e:
        raise SimAccelError(
            f"the torch.export models need torch and torchvision ({e}); install them with "
            "pip install 'simaccel[torch]'"
        ) from None
    return torch, torchvision


def llama_logits(config: dict, attention: str, dtype: str, seed: int = 0):
    """transformers' LlamaForCausalLM from `config` (a dict of LlamaConfig's fields; random
    weights from `seed`) with `attention` ("eager" or "sdpa") in `dtype`, as a module from token
    ids to the logits of its forward (no KV cache): what torch.export exports. The `torch`
    extra brings transformers."""
    torch, _ = _torch()
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        raise SimAccelError(f"the LLaMA model needs transformers ({e}); install it with "
                            "pip install 'simaccel[torch]'") from None
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**config, attn_implementation=attention)).eval().to(getattr(torch, dtype))

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids, use_cache=False).logits

    return Logits()


def _mixer_block(nn, tokens: int, channels: int, hidden: int):
    class MixerBlock(nn.Module):
        """One MLP-mixer block: token mixing then channel mixing, each with LayerNorm and a residual."""

        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(channels), nn.LayerNorm(channels)
            self.tokens = nn.Sequential(nn.Linear(tokens, hidden), nn.GELU(), nn.Linear(hidden, tokens))
            self.channels = nn.Sequential(nn.Linear(channels, hidden), nn.GELU(), nn.Linear(hidden, channels))

        def forward(self, x):
            x = x + self.tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
            return x + self.channels(self.norm2(x))

    return MixerBlock()


def _build(name: str, size: str, torch, torchvision):
    nn = torch.nn
    full = size == "full"
    if name == "resnet18":
        model = torchvision.models.resnet18(num_classes=1000 if full else 10)
        if not full:
            _narrow_resnet18(model, nn)
        return model, (1, 3, 224, 224) if full else (1, 3, 16, 16), \
            "torchvision resnet18: conv + batch_norm + relu, residual adds, max pool, global average pool, linear"
    if name == "mobilenet_v2":
        model = torchvision.models.mobilenet_v2(width_mult=1.0 if full else 0.25, num_classes=1000 if full else 10)
        return model, (1, 3, 224, 224) if full else (1, 3, 16, 16), \
            "torchvision mobilenet_v2: inverted residuals, depthwise convolutions, ReLU6, global average pool"
    if name == "transformer_encoder":
        width, heads, ff, seq = (256, 4, 1024, 64) if full else (32, 4, 64, 8)
        model = nn.TransformerEncoderLayer(width, heads, dim_feedforward=ff, batch_first=True)
        return model, (2 if full else 1, seq, width), \
            "nn.TransformerEncoderLayer: multi-head attention (batched matmuls, softmax), layer norms, MLP"
    if name == "mlp_mixer":
        tokens, channels, hidden, batch = (64, 128, 256, 8) if full else (8, 16, 32, 1)
        return _mixer_block(nn, tokens, channels, hidden), (batch, tokens, channels), \
            "an MLP-mixer block: layer norms, transposes, token and channel MLPs with GELU, residuals"
    built = _build_untuned(name, size, torch, torchvision) or _build_zoo(name, size, torch, torchvision)
    if built is None:
        raise SimAccelError(f"no torch model named {name!r}; the models are {', '.join(ALL_NAMES + ZOO_NAMES)}")
    return built


def _build_zoo(name: str, size: str, torch, torchvision):
    """The conformance zoo's other families (ZOO_NAMES): a vision transformer, dense
    connectivity, a NAS-found CNN, grouped bottlenecks, a detection backbone with its FPN."""
    nn, models = torch.nn, torchvision.models
    full = size == "full"
    image = (1, 3, 224, 224) if full else (1, 3, 32, 32)
    if name == "vit":
        from torchvision.models.vision_transformer import VisionTransformer

        model = models.vit_b_16() if full else VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                                                  num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10)
        return model, image, "torchvision vit_b_16: patch embedding (strided conv), class token, encoder blocks, GELU MLP"
    if name == "densenet":
        from torchvision.models.densenet import DenseNet

        model = models.densenet121() if full else DenseNet(growth_rate=8, block_config=(2, 2, 2), num_init_features=16,
                                                           num_classes=10)
        return model, image, "torchvision densenet121: dense blocks (every layer's input concatenates all before it), " \
                             "transitions with average pooling"
    if name == "mnasnet0_5":
        model = models.mnasnet0_5() if full else models.MNASNet(0.25, num_classes=10)
        return model, image, "torchvision mnasnet0_5: NAS-found inverted residuals, 3x3 and 5x5 depthwise convolutions"
    if name == "resnext":
        from torchvision.models.resnet import Bottleneck, ResNet

        model = models.resnext50_32x4d() if full else ResNet(Bottleneck, [1, 1, 1, 1], groups=4, width_per_group=4,
                                                             num_classes=10)
        return model, image, "torchvision resnext50_32x4d: bottlenecks with grouped 3x3 convolutions (32 groups of 4)"
    if name == "resnet_fpn":
        from torchvision.models.detection.backbone_utils import BackboneWithFPN

        body = models.resnet18() if full else models.resnet18(num_classes=10)
        if not full:
            _narrow_resnet18(body, nn)
        widths = [128, 256, 512] if full else [16, 32, 64]
        model = BackboneWithFPN(body, {"layer2": "0", "layer3": "1", "layer4": "2"}, widths, 256 if full else 16)
        return model, image, "a detection backbone: resnet18 with a feature pyramid (1x1 laterals, nearest upsampling, " \
                             "3x3 outputs), four feature maps out"
    return None


def _build_untuned(name: str, size: str, torch, torchvision):
    nn, models = torch.nn, torchvision.models
    full = size == "full"
    if name == "mobilenet_v3_small":
        model = models.mobilenet_v3_small(width_mult=1.0 if full else 0.25)
        return model, (1, 3, 224, 224) if full else (1, 3, 32, 32), \
            "torchvision mobilenet_v3_small: depthwise convolutions, hardswish, hardsigmoid squeeze-excite"
    if name == "efficientnet_b0":
        from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

        # b0 is width 1.0, depth 1.0; the small copy is its first four stages, narrower and
        # shallower (one or two blocks each: a residual, SE, 3x3 and 5x5 depthwise all stay).
        setting, last = _efficientnet_conf("efficientnet_b0", width_mult=1.0 if full else 0.25,
                                           depth_mult=1.0 if full else 0.5)
        setting = setting if full else setting[:4]
        model = EfficientNet(setting, dropout=0.2, last_channel=last, num_classes=1000 if full else 10)
        return model, (1, 3, 224, 224) if full else (1, 3, 32, 32), \
            "torchvision efficientnet_b0: MBConv blocks, SiLU, sigmoid squeeze-excite, depthwise 3x3 and 5x5"
    if name == "squeezenet1_1":
        model = models.squeezenet1_1(num_classes=1000 if full else 10)
        # 34x34 makes every ceil-mode max pool round up (16 -> 8 -> 4 -> 2; floor would give 7, 3, 1).
        return model, (1, 3, 224, 224) if full else (1, 3, 34, 34), \
            "torchvision squeezenet1_1: fire modules (1x1 squeeze, 1x1 and 3x3 expand concatenated), ceil-mode max pool"
    if name == "shufflenet_v2_x0_5":
        if full:
            model = models.shufflenet_v2_x0_5()
        else:
            model = models.ShuffleNetV2([2, 1, 1], [8, 16, 32, 64, 128], num_classes=10)
        return model, (1, 3, 224, 224) if full else (1, 3, 32, 32), \
            "torchvision shufflenet_v2_x0_5: channel split and shuffle (reshape, transpose), depthwise 3x3, concat"
    if name == "regnet_y_400mf":
        if full:
            model = models.regnet_y_400mf()
        else:
            from torchvision.models.regnet import BlockParams, RegNet

            params = BlockParams.from_init_params(depth=4, w_0=16, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25)
            model = RegNet(params, num_classes=10, stem_width=8)
        return model, (1, 3, 224, 224) if full else (1, 3, 32, 32), \
            "torchvision regnet_y_400mf: grouped 3x3 convolutions (group width 8), ReLU/sigmoid squeeze-excite, residuals"
    if name == "googlenet":
        model = models.googlenet(aux_logits=False, init_weights=True, num_classes=1000 if full else 10)
        if not full:
            _narrow_googlenet(model, nn)
        return model, (1, 3, 224, 224) if full else (1, 3, 32, 32), \
            "torchvision googlenet: inception blocks (four branches concatenated), ceil-mode max pools, batch norm"
    if name == "convnext_tiny":
        if full:
            model = models.convnext_tiny()
        else:
            from torchvision.models.convnext import CNBlockConfig, ConvNeXt

            stages = [CNBlockConfig(16, 32, 1), CNBlockConfig(32, 64, 1), CNBlockConfig(64, None, 1)]
            model = ConvNeXt(stages, num_classes=10)
        _randomise_layer_scale(model, torch)
        return model, (1, 3, 224, 224) if full else (1, 3, 32, 32), \
            "torchvision convnext_tiny: 7x7 depthwise convolutions, layer norm over channels (permutes), GELU MLP, layer scale"
    if name == "gpt_decoder":
        width, heads, blocks, seq = (768, 12, 2, 256) if full else (32, 4, 1, 8)
        return _gpt_decoder(nn, width, heads, blocks), (1, seq, width), \
            "GPT-style decoder blocks: causal mask (ones(T, T).tril(), masked_fill), softmax attention, " \
            "tanh-GELU MLP, pre-norm layer norms, residuals"
    if name == "padded_encoder":
        width, heads, ff, seq, lengths = (512, 8, 2048, 128, [128, 96, 64, 17]) if full else (32, 4, 64, 8, [8, 5])
        return _padded_encoder(nn, torch, width, heads, ff, lengths), (len(lengths), seq, width), \
            "a post-norm encoder layer with a padding mask (arange(T) < lengths), masked softmax attention, " \
            "GELU MLP, mean pooling over the valid tokens"
    return None


def _narrow_resnet18(model, nn) -> None:
    """ResNet-18's own layers (stem, max pool, four stages of two basic blocks with strided 1x1
    downsampling, pooled classifier) at an eighth of its width, 8..64 channels, built by
    torchvision's own `_make_layer`: at full width its 512-channel convolutions took over 15
    minutes on the simulator."""
    from torchvision.models.resnet import BasicBlock

    model.inplanes = 8
    model.conv1 = nn.Conv2d(3, 8, kernel_size=7, stride=2, padding=3, bias=False)
    model.bn1 = nn.BatchNorm2d(8)
    model.layer1 = model._make_layer(BasicBlock, 8, 2)
    model.layer2 = model._make_layer(BasicBlock, 16, 2, stride=2)
    model.layer3 = model._make_layer(BasicBlock, 32, 2, stride=2)
    model.layer4 = model._make_layer(BasicBlock, 64, 2, stride=2)
    model.fc = nn.Linear(64, model.fc.out_features)


def _narrow_googlenet(model, nn) -> None:
    """GoogLeNet's own forward (stem, ceil-mode pools, inception blocks, pooled classifier) over
    narrow layers and four of its nine inception blocks (the others are identities), so the
    small model exports and builds in seconds."""
    from torchvision.models.googlenet import BasicConv2d, Inception

    model.conv1 = BasicConv2d(3, 16, kernel_size=7, stride=2, padding=3)
    model.conv2 = BasicConv2d(16, 16, kernel_size=1)
    model.conv3 = BasicConv2d(16, 32, kernel_size=3, padding=1)
    model.inception3a = Inception(32, 8, 8, 16, 4, 8, 8)  # 8 + 16 + 8 + 8 = 40 channels
    model.inception3b = Inception(40, 16, 8, 16, 4, 8, 8)  # 48
    model.inception4a = Inception(48, 16, 8, 16, 4, 8, 8)
    for block in ("inception4b", "inception4c", "inception4d", "inception4e", "inception5a"):
        setattr(model, block, nn.Identity())
    model.inception5b = Inception(48, 16, 16, 32, 4, 8, 8)  # 64
    model.fc = nn.Linear(64, model.fc.out_features)


def _attention_heads(x, qkv, heads: int):
    """(B, T, C) through one (C -> 3C) projection to q, k, v of shape (B, heads, T, C / heads)."""
    batch, seq, width = x.shape
    q, k, v = qkv(x).split(width, dim=2)
    return [t.reshape(batch, seq, heads, width // heads).transpose(1, 2) for t in (q, k, v)]


def _gpt_decoder(nn, width: int, heads: int, blocks: int):
    class DecoderBlock(nn.Module):
        """One GPT-2 block: x + attn(ln(x)) with a causal mask, then x + mlp(ln(x))."""

        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"),
                                     nn.Linear(4 * width, width))

        def forward(self, x):
            import torch

            batch, seq, _ = x.shape
            q, k, v = _attention_heads(self.ln1(x), self.qkv, heads)
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(width // heads))
            causal = torch.ones(seq, seq, device=x.device).tril()
            scores = scores.masked_fill(causal == 0, float("-inf"))
            y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, seq, width)
            x = x + self.proj(y)
            return x + self.mlp(self.ln2(x))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(*[DecoderBlock() for _ in range(blocks)])
            self.ln_f = nn.LayerNorm(width)

        def forward(self, x):
            return self.ln_f(self.blocks(x))

    return Decoder()


def _padded_encoder(nn, torch, width: int, heads: int, ff: int, lengths: list[int]):
    class PaddedEncoder(nn.Module):
        """A post-norm encoder layer over a batch of sequences of the given lengths (a buffer:
        the batch's lengths are part of the model, so its only input stays the float tokens)."""

        def __init__(self):
            super().__init__()
            self.register_buffer("lengths", torch.tensor(lengths, dtype=torch.int64))
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.ff = nn.Sequential(nn.Linear(width, ff), nn.GELU(), nn.Linear(ff, width))

        def forward(self, x):
            batch, seq, _ = x.shape
            valid = torch.arange(seq, device=x.device)[None, :] < self.lengths[:, None]  # (B, T)
            q, k, v = _attention_heads(x, self.qkv, heads)
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(width // heads)
            scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
            y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, seq, width)
            h = self.norm1(x + self.proj(y))
            h = self.norm2(h + self.ff(h))
            weight = valid.to(x.dtype)[:, :, None]
            return (h * weight).sum(dim=1) / weight.sum(dim=1)

    return PaddedEncoder()


MODEL_NAMES = ("resnet18", "mobilenet_v2", "transformer_encoder", "mlp_mixer")
UNTUNED_NAMES = ("mobilenet_v3_small", "efficientnet_b0", "squeezenet1_1", "shufflenet_v2_x0_5", "regnet_y_400mf",
                 "googlenet", "convnext_tiny", "gpt_decoder", "padded_encoder")
ALL_NAMES = MODEL_NAMES + UNTUNED_NAMES
# The conformance zoo's other families (`simaccel conformance`, tools/conformance/zoo.py).
ZOO_NAMES = ("vit", "densenet", "mnasnet0_5", "resnext", "resnet_fpn")


def load(name: str, size: str = "full", seed: int = 0) -> TorchModel:
    """Model `name` (one of ALL_NAMES or ZOO_NAMES) at `size` ("full" or "small"), weights drawn with `seed`."""
    if size not in SIZES:
        raise SimAccelError(f"model size must be one of {SIZES}, got {size!r}")
    torch, torchvision = _torch()
    torch.manual_seed(seed)
    module, shape, doc = _build(name, size, torch, torchvision)
    calibrate_batch_norm(module, torch, shape, seed)
    return TorchModel(name, module.eval(), shape, doc)


def calibrate_batch_norm(module, torch, input_shape: tuple[int, ...], seed: int, batches: int = 3,
                         batch: int = 8) -> bool:
    """Batch-norm statistics as a trained model has them: the affine parameters drawn away from
    their initial 1 / 0 (otherwise an inference batch_norm is nearly the identity and a wrong
    fold would pass), then the running mean and variance measured by running the model in train
    mode on `batches` random N(0, 1) batches of `batch` inputs (momentum None: the plain average
    over them), so every layer's output is normalised as in training and activations neither
    vanish nor explode with depth. The module is left in eval mode. False when it has no batch norm."""
    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return False
    generator = torch.Generator().manual_seed(seed + 1)
    momenta = [layer.momentum for layer in norms]
    with torch.no_grad():
        for layer in norms:
            n = layer.num_features
            layer.weight.copy_(torch.rand(n, generator=generator) + 0.5)
            layer.bias.copy_(torch.randn(n, generator=generator) * 0.1)
            layer.reset_running_stats()
            layer.momentum = None
        module.train()
        for _ in range(batches):
            module(torch.randn((batch, *input_shape[1:]), generator=generator))
        for layer, momentum in zip(norms, momenta):
            layer.momentum = momentum
    module.eval()
    return True


def _randomise_layer_scale(module, torch) -> None:
    """ConvNeXt's layer scale starts at 1e-6, which makes every block all but the identity (a
    wrong block would pass); trained models have values of order 0.1-1."""
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name.endswith("layer_scale"):
                param.copy_(torch.rand(param.shape, generator=generator) * 0.5 + 0.25)
