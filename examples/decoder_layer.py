"""A LLaMA-style decoder layer in Relax, partitioned by simaccel and run against TVM alone.

    python examples/decoder_layer.py [--dtype float32|float16|bfloat16] [--engine ref|sim]

RMSNorm, the q/k/v projections, causal attention over the sequence (relax.nn.attention), the
output projection and its residual, RMSNorm again and a SwiGLU MLP (down(silu(gate(x)) *
up(x))), random weights. The sequence length is symbolic: one build runs a prefill of 7 tokens
and a step of 1. Prints the partition report, then each length's largest difference from TVM
alone's build of the same module; exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse

import numpy as np
import tvm
from tvm import relax
from tvm.script import relax as R

from simaccel.compare import array_difference
from simaccel.tvm_integration import build, build_tvm_only, partition_report

HIDDEN, HEADS, FFN = 64, 4, 96


def decoder_layer(dtype: str) -> tvm.IRModule:
    s = tvm.tirx.Var("s", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((1, s, HIDDEN), dtype))
    names = {"norm1": (HIDDEN,), "wq": (HIDDEN, HIDDEN), "wk": (HIDDEN, HIDDEN), "wv": (HIDDEN, HIDDEN),
             "wo": (HIDDEN, HIDDEN), "norm2": (HIDDEN,), "gate": (FFN, HIDDEN), "up": (FFN, HIDDEN),
             "down": (HIDDEN, FFN)}
    weights = {n: relax.Var(n, R.Tensor(shape, dtype)) for n, shape in names.items()}
    op = relax.op

    def linear(h, w):  # torch's Linear: h @ w^T
        return bb.emit(op.matmul(h, bb.emit(op.permute_dims(w))))

    with bb.function("main", [x, *weights.values()]):
        with bb.dataflow():
            h = bb.emit(op.nn.rms_norm(x, weights["norm1"], axes=[-1]))
            heads = lambda t: bb.emit(op.reshape(t, (1, s, HEADS, HIDDEN // HEADS)))  # noqa: E731
            q, k, v = (heads(linear(h, weights[n])) for n in ("wq", "wk", "wv"))
            a = bb.emit(op.nn.attention(q, k, v, causal_mask="TopLeft"))
            x2 = bb.emit(op.add(x, linear(bb.emit(op.reshape(a, (1, s, HIDDEN))), weights["wo"])))
            h2 = bb.emit(op.nn.rms_norm(x2, weights["norm2"], axes=[-1]))
            mlp = bb.emit(op.multiply(bb.emit(op.nn.silu(linear(h2, weights["gate"]))), linear(h2, weights["up"])))
            out = bb.emit_output(op.add(x2, linear(mlp, weights["down"])))
        bb.emit_func_output(out)
    mod = bb.get()
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {"s": 64})
    return mod


def inputs(seq: int, dtype: str, rng) -> list[np.ndarray]:
    shapes = [(1, seq, HIDDEN), (HIDDEN,), *[(HIDDEN, HIDDEN)] * 4, (HIDDEN,), (FFN, HIDDEN), (FFN, HIDDEN), (HIDDEN, FFN)]
    arrays = [rng.standard_normal(s) * (1.0 if len(s) == 1 else s[-1] ** -0.5) for s in shapes]
    arrays[1] = arrays[6] = np.ones(HIDDEN)  # the norms' weights
    return [a.astype(dtype) for a in arrays]


def run(executable, arrays) -> np.ndarray:
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](*map(tvm.runtime.tensor, arrays)).numpy()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--engine", default="ref", choices=["ref", "sim"])
    args = parser.parse_args()
    import simaccel

    mod = decoder_layer(args.dtype)
    _, report = partition_report(mod)
    print(report.format())
    ours, theirs = build(mod, "llvm"), build_tvm_only(mod, "llvm")
    rng = np.random.default_rng(0)
    for seq in (7, 1):
        arrays = inputs(seq, args.dtype, rng)
        with simaccel.get_runtime().use_engine(args.engine):
            got = run(ours, arrays)
        found = array_difference(got, run(theirs, arrays), dtype=args.dtype, scaled=True)
        print(f"s = {seq}: {args.dtype} on {args.engine}, max error {found.scaled_error:.2g} of the output's scale "
              f"against TVM alone: {'match' if found.ok else 'MISMATCH: ' + found.reason}")
        if not found.ok:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
