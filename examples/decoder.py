"""A LLaMA-style decoder in Relax with a KV cache, partitioned by simaccel and run against TVM alone.

    python examples/decoder.py [--dtype float32|float16|bfloat16] [--engine ref|sim]

The model is `simaccel.tvm_integration.tools.decoder`'s (its docstring says what each layer
holds): token embedding, 2 layers of RMSNorm, q/k/v projections, rotary embeddings, KV caches
grown by concat and returned, grouped-query attention with TVM's BottomRight causal mask, and a
SwiGLU MLP, then the logits; random weights. The sequence length s and the cache length m are
symbolic: one build runs the prefill of a 7-token prompt (m = 0) and then decode steps of 1
token, each feeding back the caches the step before returned. Prints the partition report,
then each step's largest difference from TVM alone's build of the same module (logits and
caches); exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse

import numpy as np
import tvm

from simaccel.compare import array_difference
from simaccel.tvm_integration import build, build_tvm_only, partition_report
# The model itself is simaccel's (the conformance run checks it too); the names below are what
# the tests and scripts read of this example.
from simaccel.tvm_integration.tools.decoder import (GPU, SMALL, Config, decoder, empty_caches, generate,  # noqa: F401
                                                    greedy, lockstep, random_weights, rotary_tables, torch_twin,
                                                    weight_shapes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--engine", default="ref", choices=["ref", "sim"])
    args = parser.parse_args()
    import simaccel

    mod = decoder(args.dtype)
    _, report = partition_report(mod)
    print(report.format())
    ours, theirs = build(mod, "llvm"), build_tvm_only(mod, "llvm")
    rng = np.random.default_rng(0)
    weights, prompt = random_weights(args.dtype, rng), rng.integers(0, SMALL.vocab, 7)
    with simaccel.get_runtime().use_engine(args.engine):  # TVM alone picks the tokens, simaccel gets the same
        for step, (want, got) in enumerate(lockstep(theirs, ours, args.dtype, prompt, 2, weights, tvm.cpu())):
            length = want[1].shape[1]
            for name, g, w in zip(["logits"] + [f"cache {i}" for i in range(len(want) - 1)], got, want):
                found = array_difference(g.numpy(), w.numpy(), dtype=args.dtype, scaled=True)
                if not found.ok:
                    print(f"step {step} (cache {length}): {name} MISMATCH: {found.reason}")
                    return 1
            found = array_difference(got[0].numpy(), want[0].numpy(), dtype=args.dtype, scaled=True)
            print(f"step {step}: {'prefill' if step == 0 else 'decode'} of {got[0].shape[1]} token(s), cache now "
                  f"{length}: logits' max error {found.scaled_error:.2g} of their scale against TVM alone ({args.dtype} "
                  f"on {args.engine}), caches match")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
