"""The transformers library's LLaMA on a GPU: simaccel (native regions) against TVM alone and torch.

    python3 scripts/llama_gpu.py OUT_DIR [--repeat 20] [--seq 32]

On a machine with the full TVM, torch and transformers (docs/gpu.md): a LlamaForCausalLM from a
small config (random weights: 2 layers, hidden 256, 8 query heads over 2 key/value heads,
vocabulary 1024), with transformers' "sdpa" and "eager" attention, in float32, float16 and
bfloat16; its forward over one prompt of --seq tokens (logits only, no cache), exported with
torch.export at that static length and imported with TVM's `from_exported_program`. Each case
records where every op went (regions, and each op kept on TVM with its reason), then builds
for CUDA with simaccel and with TVM alone, compares the logits of both and of torch (on the
GPU), and times the three (medians of interleaved calls, each followed by a device sync:
tvm_integration/tools/model_bench.py `timed`). A step that fails (the export, TVM alone's
build) is recorded with its error and the case goes on where it can. Writes OUT_DIR/llama.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

CONFIG = dict(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=8,
              num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=False)


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:400]}"


def one_case(attention: str, dtype_name: str, seq: int, repeat: int) -> dict:
    import torch
    import tvm
    from transformers import LlamaConfig, LlamaForCausalLM
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from simaccel.compare import array_difference
    from simaccel.tvm_integration import build, build_tvm_only, default_target, partition_report
    from simaccel.tvm_integration.tools.deploy import outputs_as_list
    from simaccel.tvm_integration.tools.model_bench import timed

    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG, attn_implementation=attention)).eval().to(dtype)

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids, use_cache=False).logits

    entry: dict = {"attention": attention, "dtype": dtype_name, "seq": seq}
    ids = torch.randint(0, CONFIG["vocab_size"], (1, seq))
    try:
        with torch.no_grad():
            exported = torch.export.export(Logits(), (ids,))
        mod = from_exported_program(exported, keep_params_as_input=False)
    except Exception as e:  # noqa: BLE001 - recorded: the export is what this case is about
        entry["export_error"] = _error(e)
        return entry
    _, partition = partition_report(mod)
    entry["regions"] = len(partition.regions)
    entry["offloaded_ops"] = sum(len(ops) for ops in partition.regions.values())
    entry["kept_on_tvm"] = [f"{op}: {reason}" for _, op, reason in partition.kept]
    entry["rewritten"] = partition.rewritten
    target, dev = default_target("cuda"), tvm.cuda(0)
    start = time.perf_counter()
    ours = relax.VirtualMachine(build(mod, target), dev)
    entry["simaccel_build_s"] = time.perf_counter() - start
    data = tvm.runtime.tensor(ids.numpy(), dev)
    got = outputs_as_list(ours["main"](data))[0].numpy()
    model_gpu, ids_gpu = Logits().cuda(), ids.cuda()
    with torch.no_grad():
        want_torch = model_gpu(ids_gpu).float().cpu().numpy()
    found = array_difference(got.astype(np.float32), want_torch, scaled=True, dtype=dtype_name)
    entry["simaccel_vs_torch"] = {"ok": found.ok, "max_error": float(found.max_error), "reason": found.reason}
    calls = {"simaccel_native": lambda: ours["main"](data)}
    try:
        theirs = relax.VirtualMachine(build_tvm_only(mod, target), dev)
        want = outputs_as_list(theirs["main"](data))[0].numpy()
        found = array_difference(got.astype(np.float32), want.astype(np.float32), scaled=True, dtype=dtype_name)
        entry["simaccel_vs_tvm_only"] = {"ok": found.ok, "max_error": float(found.max_error), "reason": found.reason}
        found = array_difference(want.astype(np.float32), want_torch, scaled=True, dtype=dtype_name)
        entry["tvm_only_vs_torch"] = {"ok": found.ok, "max_error": float(found.max_error), "reason": found.reason}
        calls["tvm_only"] = lambda: theirs["main"](data)
    except Exception as e:  # noqa: BLE001 - TVM alone failing is a finding, not the script's failure
        entry["tvm_only_error"] = _error(e)

    def torch_call():
        with torch.no_grad():
            model_gpu(ids_gpu)

    calls["torch"] = torch_call
    medians = timed(calls, lambda: (dev.sync(), torch.cuda.synchronize()), repeat)
    entry["median_us"] = medians
    if "tvm_only" in medians:
        entry["ratio_vs_tvm_only"] = {k: v / medians["tvm_only"] for k, v in medians.items()}
    return entry


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seq", type=int, default=32)
    args = parser.parse_args(argv)
    import torch
    import transformers

    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": torch.cuda.get_device_name(0),
              "transformers": transformers.__version__, "torch": torch.__version__, "config": CONFIG,
              "method": f"median of {args.repeat} interleaved calls after warm-up, each followed by a device sync",
              "cases": []}
    for attention in ("sdpa", "eager"):
        for dtype_name in ("float32", "float16", "bfloat16"):
            try:
                entry = one_case(attention, dtype_name, args.seq, args.repeat)
            except Exception as e:  # noqa: BLE001 - recorded, and the other cases still run
                entry = {"attention": attention, "dtype": dtype_name, "error": _error(e),
                         "traceback": traceback.format_exc()[-2000:]}
            report["cases"].append(entry)
            print(json.dumps({k: v for k, v in entry.items() if k != "traceback"}), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "llama.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
