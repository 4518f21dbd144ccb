"""PyTorch models exported with symbolic sizes (torch.export's `Dim`): one build, several shapes.

Where it sits: a tool beside torch_models.py. `simaccel conformance` checks each of these as
one build run at several shapes (1, a middle size and the upper bounds), each against TVM
alone and torch; scripts/symbolic_bench_gpu.py times them on a GPU at the "bench" size.

Each model: a transformer-style MLP block and an attention encoder block with a dynamic batch
and sequence length, and a CNN with a dynamic batch. torch is an optional extra, as for
torch_models.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import SimAccelError

NAMES = ("dyn_mlp", "dyn_encoder", "dyn_cnn")
SIZES = ("small", "bench")


@dataclass(frozen=True)
class DynamicModel:
    """A torch module in eval mode with its dynamic dims (`dims`: axis -> (name, upper bound)),
    the per-sample shape after them (`rest`), and the sizes it is run at."""

    name: str
    module: Any
    dims: dict
    rest: tuple[int, ...]
    sizes: tuple[tuple[int, ...], ...]
    doc: str

    def to_relax(self):
        """The Relax module of torch.export with `Dim`s: one function for every size in the bounds."""
        import torch
        from torch.export import Dim
        from tvm.relax.frontend.torch import from_exported_program

        example = torch.zeros(*(2 for _ in self.dims), *self.rest)
        dynamic = {axis: Dim(name, max=upper) for axis, (name, upper) in self.dims.items()}
        with torch.no_grad():
            exported = torch.export.export(self.module, (example,), dynamic_shapes=(dynamic,))
        return from_exported_program(exported, keep_params_as_input=False, unwrap_unit_return_tuple=True)

    def inputs(self, size: tuple[int, ...], seed: int = 0) -> np.ndarray:
        return np.random.default_rng([seed, *size]).standard_normal((*size, *self.rest)).astype(np.float32)

    def run(self, x: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            return self.module(torch.from_numpy(x)).numpy()


def load(name: str, size: str = "small", seed: int = 0) -> DynamicModel:
    """Model `name` of NAMES at `size` (SIZES), its weights seeded."""
    try:
        import torch
    except ImportError as e:
        raise SimAccelError("dynamic models need torch: pip install 'simaccel[torch]'") from e
    if name not in NAMES:
        raise SimAccelError(f"unknown dynamic model {name!r}; choose from {', '.join(NAMES)}")
    if size not in SIZES:
        raise SimAccelError(f"dynamic model size {size!r}: choose from {', '.join(SIZES)}")
    torch.manual_seed(seed)
    nn, small = torch.nn, size == "small"
    if name == "dyn_mlp":
        d, seq = (32, 64) if small else (384, 512)
        module = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.LayerNorm(d))
        dims, rest = {0: ("batch", 8 if small else 16), 1: ("seq", seq)}, (d,)
        doc = "Linear-GELU-Linear-LayerNorm over (batch, seq, d), batch and seq dynamic"
    elif name == "dyn_encoder":
        d, seq = (32, 64) if small else (128, 256)
        module = _Encoder(nn, d)
        dims, rest = {0: ("batch", 8), 1: ("seq", seq)}, (d,)
        doc = "an attention encoder block (Q K^T, softmax, A V, layer norms, MLP), batch and seq dynamic"
    else:
        c, hw, batch = (8, 16, 16) if small else (32, 32, 64)
        module = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                               nn.Linear(2 * c * (hw // 4) ** 2, 10))
        dims, rest = {0: ("batch", batch)}, (3, hw, hw)
        doc = "a two-layer CNN with pooling and a classifier, batch dynamic"
    uppers = tuple(upper for _, upper in dims.values())
    middle = tuple(max(1, u // 2 - 1) for u in uppers)
    sizes = (tuple(1 for _ in uppers), middle, uppers)
    return DynamicModel(name, module.eval(), dims, rest, sizes, doc)


def _Encoder(nn, d: int):
    import torch

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k = nn.Linear(d, d), nn.Linear(d, d)
            self.up, self.down, self.norm = nn.Linear(d, 4 * d), nn.Linear(4 * d, d), nn.LayerNorm(d)

        def forward(self, x):
            attention = torch.softmax(self.q(x) @ self.k(x).transpose(1, 2) / float(d) ** 0.5, dim=-1) @ x
            h = self.norm(x + attention)
            return self.norm(h + self.down(nn.functional.gelu(self.up(h))))

    return Encoder()
