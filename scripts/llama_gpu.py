"""The transformers library's LLaMA on a GPU: simaccel (native regions) against TVM alone and torch.

    python3 scripts/llama_gpu.py OUT_DIR [--repeat 20] [--seq 32] [--case sdpa:float32]

On a machine with the full TVM, torch and transformers (docs/gpu.md): a LlamaForCausalLM from a
small config (random weights: 2 layers, hidden 256, 8 query heads over 2 key/value heads,
vocabulary 1024), with transformers' "sdpa" and "eager" attention, in float32, float16 and
bfloat16; its forward over one prompt of --seq tokens (logits only, no cache), exported with
torch.export at that static length and imported with TVM's `from_exported_program`. Each case
records where every op went (regions, and each op kept on TVM with its reason), then builds
for CUDA with simaccel and with TVM alone, compares the logits of both and of torch (on the
GPU), and times them (medians of interleaved calls, each followed by a device sync:
tvm_integration/tools/model_bench.py `timed`). Writes OUT_DIR/llama.json.

A fault on the GPU poisons the process's CUDA context, so each case runs in a process of its
own (`--case ATTENTION:DTYPE` runs one in this process), and within a case the steps run in an
order that names the one that faulted: simaccel's build and call, torch's, then simaccel and
torch timed; only then TVM alone's build and call (and, where it ran, the three timed again,
interleaved). Each step syncs the device before the next starts and is logged to stderr as it
begins; a step that fails is recorded with its error (`failed_at`), a case whose process dies
after writing its entry keeps it (with `exit_status`), and one that dies before, its exit
status and the last lines it wrote.
"""

from __future__ import annotations

import argparse
import json
import subprocess
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
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from simaccel.compare import array_difference
    from simaccel.tvm_integration import build, build_tvm_only, default_target, partition_report
    from simaccel.tvm_integration.tools.deploy import outputs_as_list
    from simaccel.tvm_integration.tools.model_bench import timed
    from simaccel.tvm_integration.tools.torch_models import llama_logits

    logits = llama_logits(CONFIG, attention, dtype_name)
    entry: dict = {"attention": attention, "dtype": dtype_name, "seq": seq}

    def step(name: str) -> None:
        entry["step"] = name
        print(f"[{attention}:{dtype_name}] {name}", file=sys.stderr, flush=True)

    step("export")
    ids = torch.randint(0, CONFIG["vocab_size"], (1, seq))
    try:
        with torch.no_grad():
            exported = torch.export.export(logits, (ids,))
        mod = from_exported_program(exported, keep_params_as_input=False)
    except Exception as e:  # noqa: BLE001 - recorded: the export is what this case is about
        entry["export_error"] = _error(e)
        return entry
    step("partition")
    _, partition = partition_report(mod)
    entry["regions"] = len(partition.regions)
    entry["offloaded_ops"] = sum(len(ops) for ops in partition.regions.values())
    entry["kept_on_tvm"] = [f"{op}: {reason}" for _, op, reason in partition.kept]
    entry["rewritten"] = partition.rewritten
    target, dev = default_target("cuda"), tvm.cuda(0)

    def sync():
        dev.sync()
        torch.cuda.synchronize()

    step("simaccel build")
    start = time.perf_counter()
    ours = relax.VirtualMachine(build(mod, target), dev)
    entry["simaccel_build_s"] = time.perf_counter() - start
    step("simaccel call")
    data = tvm.runtime.tensor(ids.numpy(), dev)
    got = outputs_as_list(ours["main"](data))[0].numpy()
    step("torch call")
    model_gpu, ids_gpu = logits.cuda(), ids.cuda()
    with torch.no_grad():
        want_torch = model_gpu(ids_gpu).float().cpu().numpy()
    found = array_difference(got.astype(np.float32), want_torch, scaled=True, dtype=dtype_name)
    entry["simaccel_vs_torch"] = {"ok": found.ok, "max_error": float(found.max_error), "reason": found.reason}

    def torch_call():
        with torch.no_grad():
            model_gpu(ids_gpu)

    calls = {"simaccel_native": lambda: ours["main"](data), "torch": torch_call}
    step("simaccel and torch timed")
    entry["median_us"] = timed(calls, sync, repeat)
    step("TVM alone build")
    try:
        theirs = relax.VirtualMachine(build_tvm_only(mod, target), dev)
    except Exception as e:  # noqa: BLE001 - TVM alone failing is a finding, not the script's failure
        entry["tvm_only_error"] = _error(e)
        return entry
    step("TVM alone call")
    try:
        want = outputs_as_list(theirs["main"](data))[0].numpy()
        sync()
    except Exception as e:  # noqa: BLE001 - a fault in TVM alone's kernels is a finding
        entry["tvm_only_error"] = _error(e)
        return entry
    found = array_difference(got.astype(np.float32), want.astype(np.float32), scaled=True, dtype=dtype_name)
    entry["simaccel_vs_tvm_only"] = {"ok": found.ok, "max_error": float(found.max_error), "reason": found.reason}
    found = array_difference(want.astype(np.float32), want_torch, scaled=True, dtype=dtype_name)
    entry["tvm_only_vs_torch"] = {"ok": found.ok, "max_error": float(found.max_error), "reason": found.reason}
    step("all three timed")
    calls["tvm_only"] = lambda: theirs["main"](data)
    medians = entry["median_us"] = timed(calls, sync, repeat)
    entry["ratio_vs_tvm_only"] = {k: v / medians["tvm_only"] for k, v in medians.items()}
    step("done")
    return entry


CASES = [f"{attention}:{dtype}" for attention in ("sdpa", "eager") for dtype in ("float32", "float16", "bfloat16")]


def run_case(case: str, seq: int, repeat: int) -> dict:
    """One case in this process: its entry, or where it failed (the step, the error)."""
    attention, dtype_name = case.split(":")
    entry: dict = {"attention": attention, "dtype": dtype_name, "seq": seq}
    try:
        entry = one_case(attention, dtype_name, seq, repeat)
    except Exception as e:  # noqa: BLE001 - recorded, with the step it failed at
        entry.update(error=_error(e), traceback=traceback.format_exc()[-2000:])
    if entry.get("step") != "done" and "error" in entry:
        entry["failed_at"] = entry.get("step")
    return entry


def case_in_own_process(case: str, seq: int, repeat: int) -> dict:
    """`run_case` in a child process (a fault there cannot poison the next case's context)."""
    attention, dtype_name = case.split(":")
    done = subprocess.run([sys.executable, __file__, "-", "--case", case, "--seq", str(seq), "--repeat", str(repeat)],
                          capture_output=True, text=True)
    sys.stderr.write(done.stderr[-4000:])
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if lines:  # its entry, even where the process then died (a fault aborts TVM's teardown)
        entry = json.loads(lines[-1])
        if done.returncode:
            entry["exit_status"] = done.returncode
        return entry
    return {"attention": attention, "dtype": dtype_name, "seq": seq,
            "error": f"the case's process exited with status {done.returncode}",
            "last_output": (done.stdout + done.stderr)[-2000:]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--case", choices=CASES, help="run this one case in this process and print its entry")
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(args.case, args.seq, args.repeat)), flush=True)
        return 0
    import torch
    import transformers

    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": torch.cuda.get_device_name(0),
              "transformers": transformers.__version__, "torch": torch.__version__, "config": CONFIG,
              "method": f"median of {args.repeat} interleaved calls after warm-up, each followed by a device sync; "
                        "each case in its own process",
              "cases": []}
    for case in CASES:
        entry = case_in_own_process(case, args.seq, args.repeat)
        report["cases"].append(entry)
        print(json.dumps({k: v for k, v in entry.items() if k not in ("traceback", "last_output")}), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "llama.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
