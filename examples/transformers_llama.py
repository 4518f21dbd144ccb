"""The transformers library's LLaMA through torch.export to simaccel: partition report, build, verified run.

A `LlamaForCausalLM` from a small config (random weights: 2 layers, hidden 64, 4 query heads
over 2 key/value heads, vocabulary 128) runs its forward over one prompt; it is exported with
`torch.export.export` at that length, imported with TVM's `from_exported_program`,
partitioned for simaccel (the report says what was rewritten, what runs where and why), built,
run, and its logits compared with torch's own (simaccel.compare's rule). TVM alone is built
too where it can be: TVM 0.27 cannot build this model for the CPU (its legalization fails on
the mask code transformers writes), which the output says; its CUDA build faults on the GPU
(a misaligned write in its cumsum kernel), so with --engine cuda it is not run. Exit status 0 when simaccel matches torch,
1 when it does not, 2 when torch or transformers is not installed (the message says how to
install them) or there is no GPU for `--engine cuda`.

    pip install '.[torch]'
    python examples/transformers_llama.py [--attention eager|sdpa] [--dtype float32|float16|bfloat16] [--engine ref|sim|cuda]
"""

from __future__ import annotations

import argparse
import sys

try:
    import torch
    import transformers  # noqa: F401 - the model comes from it (tools/torch_models.llama_logits)
except ModuleNotFoundError as e:
    if e.name not in ("torch", "transformers"):  # installed but broken: show the real error
        raise
    print(f"examples/transformers_llama.py needs {e.name}, which is not installed: pip install '.[torch]' in the "
          "simaccel checkout (or pip install 'simaccel[torch]')", file=sys.stderr)
    sys.exit(2)  # a user error, not a mismatch
import numpy as np
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

import simaccel
from simaccel.compare import array_difference
from simaccel.tvm_integration import build, build_tvm_only, default_target, partition_report
from simaccel.tvm_integration.tools.deploy import outputs_as_list
from simaccel.tvm_integration.tools.torch_models import llama_logits

CONFIG = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attention", choices=["eager", "sdpa"], default="eager")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    parser.add_argument("--engine", choices=["ref", "sim", "cuda"], default="ref")
    parser.add_argument("--seq", type=int, default=8, help="prompt length (the export's static length)")
    args = parser.parse_args(argv)
    device = "cuda" if args.engine == "cuda" else "cpu"
    if device == "cuda" and not tvm.cuda(0).exist:
        print("--engine cuda: TVM finds no CUDA GPU on this machine", file=sys.stderr)
        return 2

    logits = llama_logits(CONFIG, args.attention, args.dtype)  # LlamaForCausalLM's forward to its logits, seed 0
    ids = torch.randint(0, CONFIG["vocab_size"], (1, args.seq))
    print(f"[1] LlamaForCausalLM ({args.attention} attention, {args.dtype}): torch.export, then TVM's "
          "from_exported_program")
    with torch.no_grad():
        mod = from_exported_program(torch.export.export(logits, (ids,)), keep_params_as_input=False)
        want = logits(ids).float().numpy()

    print("[2] partition for simaccel")
    _, report = partition_report(mod)
    print("    " + report.format().replace("\n", "\n    "))

    print(f"[3] build and run on engine {args.engine}")
    target = default_target(device)
    dev = tvm.cuda(0) if device == "cuda" else tvm.cpu()
    executable = build(mod, target)
    with simaccel.get_runtime().use_engine("auto" if device == "cuda" else args.engine):
        got = outputs_as_list(relax.VirtualMachine(executable, dev)["main"](tvm.runtime.tensor(ids.numpy(), dev)))[0]
    got = got.numpy().astype(np.float32)
    if device == "cuda":
        print("    TVM alone: not run: TVM 0.27's CUDA build of this model faults on the GPU (a misaligned "
              "shared-memory write in its cumsum kernel, seen on an H100), which would end this process")
    else:
        try:
            theirs = relax.VirtualMachine(build_tvm_only(mod, target), dev)
            alone = outputs_as_list(theirs["main"](tvm.runtime.tensor(ids.numpy(), dev)))[0].numpy().astype(np.float32)
            found = array_difference(got, alone, scaled=True, dtype=args.dtype)
            print(f"    TVM alone: {'matches' if found.ok else 'differs: ' + found.reason}")
        except Exception as e:  # noqa: BLE001 - TVM alone failing is what this model shows in TVM 0.27
            print(f"    TVM alone: cannot build this model ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
    found = array_difference(got, want, scaled=True, dtype=args.dtype)
    print(f"logits {tuple(got.shape)}: max abs error vs torch {found.max_error:.3g}")
    print(f"RESULT: {'match' if found.ok else 'mismatch: ' + found.reason}")
    return 0 if found.ok else 1


if __name__ == "__main__":
    sys.exit(main())
