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
"""

from __future__ import annotations

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
        return torchvision.models.resnet18(), (1, 3, 224, 224) if full else (1, 3, 16, 16), \
            "torchvision resnet18: conv + batch_norm + relu, residual adds, max pool, global average pool, linear"
    if name == "mobilenet_v2":
        model = torchvision.models.mobilenet_v2(width_mult=1.0 if full else 0.25)
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
    raise SimAccelError(f"no torch model named {name!r}; the models are {', '.join(MODEL_NAMES)}")


MODEL_NAMES = ("resnet18", "mobilenet_v2", "transformer_encoder", "mlp_mixer")


def load(name: str, size: str = "full", seed: int = 0) -> TorchModel:
    """Model `name` (one of MODEL_NAMES) at `size` ("full" or "small"), weights drawn with `seed`."""
    if size not in SIZES:
        raise SimAccelError(f"model size must be one of {SIZES}, got {size!r}")
    torch, torchvision = _torch()
    torch.manual_seed(seed)
    module, shape, doc = _build(name, size, torch, torchvision)
    if name in ("resnet18", "mobilenet_v2"):
        _randomise_batch_norm(module, torch, seed)
    return TorchModel(name, module.eval(), shape, doc)


def _randomise_batch_norm(module, torch, seed: int) -> None:
    """Running statistics and affine parameters away from their initial 0 / 1, as in a trained
    model: otherwise every inference batch_norm is the identity and a wrong fold would pass."""
    generator = torch.Generator().manual_seed(seed + 1)
    for layer in module.modules():
        if isinstance(layer, torch.nn.BatchNorm2d):
            n = layer.num_features
            with torch.no_grad():
                layer.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
                layer.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
                layer.weight.copy_(torch.rand(n, generator=generator) + 0.5)
                layer.bias.copy_(torch.randn(n, generator=generator) * 0.1)
