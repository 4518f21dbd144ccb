"""A PyTorch module through torch.export to simaccel: partition report, build, verified run.

    class Block(nn.Module): conv -> batch_norm -> ReLU6 -> depthwise conv -> mean -> flatten -> linear

is exported with `torch.export.export`, imported with TVM's `from_exported_program`,
partitioned for simaccel (the report says what was rewritten, what runs where and why),
built with simaccel and with TVM alone, run on the same input and compared with each other
and with torch itself (simaccel.compare's rule, as every simaccel tool judges a result). Exit
status 0 when they match, 1 when they do not, 2 when torch is not installed (the message says
how to install it) or there is no GPU for `--engine cuda`.

    pip install '.[torch]'
    python examples/torch_export.py [--engine ref|sim|cuda] [--seed N]

`simaccel demo --model resnet18` (and mobilenet_v2, transformer_encoder, mlp_mixer) runs the
same flow on real architectures.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

try:
    import torch
    from torch import nn
except ModuleNotFoundError as e:
    if e.name != "torch":  # torch is there but broken: show the real error
        raise
    print("examples/torch_export.py needs PyTorch, which is not installed: pip install '.[torch]' in the "
          "simaccel checkout (or pip install 'simaccel[torch]')", file=sys.stderr)
    sys.exit(2)  # a user error, not a mismatch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

import simaccel
from simaccel.compare import array_difference
from simaccel.tvm_integration import build, build_tvm_only, default_target, partition_report


class Block(nn.Module):
    """A MobileNet-like block: every op in it is one simaccel has."""

    def __init__(self, channels: int = 8, classes: int = 10):
        super().__init__()
        self.expand = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(channels)
        self.depthwise = nn.Conv2d(channels, channels, 3, stride=2, padding=1, groups=channels)
        self.head = nn.Linear(channels, classes)

    def forward(self, x):
        x = nn.functional.relu6(self.norm(self.expand(x)))
        x = self.depthwise(x).mean(dim=(2, 3))
        return self.head(torch.flatten(x, 1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["ref", "sim", "cuda"], default="ref")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    device = "cuda" if args.engine == "cuda" else "cpu"
    if device == "cuda" and not tvm.cuda(0).exist:
        print("--engine cuda: TVM finds no CUDA GPU on this machine", file=sys.stderr)
        return 2

    torch.manual_seed(args.seed)
    model = Block().eval()
    with torch.no_grad():  # running statistics of a trained model, not the identity
        model.norm.running_mean.uniform_(-0.5, 0.5)
        model.norm.running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, 3, 16, 16)
    print("[1] torch.export, then TVM's from_exported_program")
    with torch.no_grad():
        mod = from_exported_program(torch.export.export(model, (x,)), keep_params_as_input=False)
        want_torch = model(x).numpy()

    print("[2] partition for simaccel")
    _, report = partition_report(mod)
    print(textwrap.indent(report.format(), "    "))

    target, dev = default_target(device), tvm.device(device, 0)
    print(f"[3] build with simaccel and with TVM alone (target {target.kind.name})")
    ours, theirs = build(mod, target), build_tvm_only(mod, target)
    data = tvm.runtime.tensor(x.numpy(), dev)
    runtime = simaccel.get_runtime()
    runtime.ledger.reset()
    print(f"[4] run on {dev}, simaccel engine {args.engine!r}")
    with runtime.use_engine(args.engine):
        got = relax.VirtualMachine(ours, dev)["main"](data)[0].numpy()
    want = relax.VirtualMachine(theirs, dev)["main"](data)[0].numpy()

    ledger = runtime.ledger.snapshot()
    print(f"    {ledger['offloaded_calls']} region call(s); ops: "
          + ", ".join(f"{op} x{n}" for op, n in ledger["ops"].items()))
    vs_tvm, vs_torch = array_difference(got, want, scaled=True), array_difference(got, want_torch, scaled=True)
    print(f"\noutput {got.shape}: max abs error vs TVM alone {vs_tvm.max_error:.3g}, vs torch {vs_torch.max_error:.3g}")
    for name, found in (("TVM alone", vs_tvm), ("torch", vs_torch)):
        if not found.ok:
            print(f"    differs from {name}: {found.reason}")
    ok = vs_tvm.ok and vs_torch.ok
    print("RESULT: match" if ok else "RESULT: MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
