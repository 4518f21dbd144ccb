"""A LLaMA-style decoder in Relax with KV caches: the model of examples/decoder.py and of the
conformance run's `decoder_*` models, with its random weights, rotary tables, a generation loop
and its twin in torch.

Where it sits: a tool beside models.py (the zoo's Relax models) and dynamic_models.py. Token
embedding (take), then `Config.layers` layers of: RMSNorm; q/k/v projections; rotary position
embeddings (the cos and sin of each position given as inputs, rotate_half as slices, negative
and concat); the layer's KV cache grown by this call's keys and values (concat: the call
returns the grown cache, a TVM tensor the next call takes); grouped-query attention
(`Config.heads` query heads over `Config.kv_heads` key/value heads, the keys and values
repeated per group) with TVM's BottomRight causal mask over cache + new tokens; the output
projection and its residual; RMSNorm and a SwiGLU MLP (down(silu(gate(x)) * up(x))) and its
residual. Then a final RMSNorm and the vocabulary projection: logits. The sequence length s
and the cache length m are symbolic: one build runs a prefill (m = 0) and decode steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.script import relax as R


@dataclass(frozen=True)
class Config:
    vocab: int = 256
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 192
    layers: int = 2
    max_seq: int = 64  # upper bounds of s and m (tir_var_upper_bound)
    max_cache: int = 128

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


SMALL = Config()
# Head dims of 64 in float16 and bfloat16 take the tensor-core attention tiles on a GPU.
GPU = Config(vocab=1024, hidden=512, heads=8, kv_heads=2, ffn=1024, layers=2, max_seq=512, max_cache=1024)


def weight_shapes(c: Config) -> dict[str, tuple[int, ...]]:
    """Every weight of the model by name, in the order `decoder`'s function takes them."""
    kv = c.kv_heads * c.head_dim
    shapes = {"embed": (c.vocab, c.hidden)}
    for i in range(c.layers):
        shapes.update({f"norm1.{i}": (c.hidden,), f"wq.{i}": (c.hidden, c.hidden), f"wk.{i}": (kv, c.hidden),
                       f"wv.{i}": (kv, c.hidden), f"wo.{i}": (c.hidden, c.hidden), f"norm2.{i}": (c.hidden,),
                       f"gate.{i}": (c.ffn, c.hidden), f"up.{i}": (c.ffn, c.hidden), f"down.{i}": (c.hidden, c.ffn)})
    shapes.update({"norm": (c.hidden,), "lm_head": (c.vocab, c.hidden)})
    return shapes


def decoder(dtype: str, c: Config = SMALL) -> tvm.IRModule:
    """main(tokens (1, s) int64, cos (1, s, 1, D), sin (1, s, 1, D), k_0, v_0, ... (1, m, KV_HEADS, D)
    per layer, weights...) -> (logits (1, s, vocab), k_0', v_0', ... (1, m + s, KV_HEADS, D))."""
    s, m, t = (tvm.tirx.Var(n, "int64") for n in "smt")
    d, group = c.head_dim, c.heads // c.kv_heads
    bb = relax.BlockBuilder()
    op = relax.op
    tokens = relax.Var("tokens", R.Tensor((1, s), "int64"))
    cos, sin = (relax.Var(n, R.Tensor((1, s, 1, d), dtype)) for n in ("cos", "sin"))
    caches = [relax.Var(f"{kind}_{i}", R.Tensor((1, m, c.kv_heads, d), dtype)) for i in range(c.layers) for kind in "kv"]
    weights = {n: relax.Var(n.replace(".", "_"), R.Tensor(shape, dtype)) for n, shape in weight_shapes(c).items()}

    def linear(h, w):  # torch's Linear: h @ w^T
        return bb.emit(op.matmul(h, bb.emit(op.permute_dims(w))))

    def rotary(t):  # t * cos + rotate_half(t) * sin, rotate_half(t) = concat(-t[..., D/2:], t[..., :D/2])
        lo, hi = (bb.emit(op.strided_slice(t, axes=[3], begin=[b], end=[e])) for b, e in ((0, d // 2), (d // 2, d)))
        half = bb.emit(op.concat([bb.emit(op.negative(hi)), lo], axis=3))
        return bb.emit(op.add(bb.emit(op.multiply(t, cos)), bb.emit(op.multiply(half, sin))))

    with bb.function("main", [tokens, cos, sin, *caches, *weights.values()]):
        with bb.dataflow():
            x = bb.emit(op.take(weights["embed"], tokens, axis=0))
            grown = []
            for i in range(c.layers):
                w = {n.split(".")[0]: v for n, v in weights.items() if n.endswith(f".{i}")}
                h = bb.emit(op.nn.rms_norm(x, w["norm1"], axes=[-1]))
                q, k, v = (bb.emit(op.reshape(linear(h, w[n]), (1, s, heads, d)))
                           for n, heads in (("wq", c.heads), ("wk", c.kv_heads), ("wv", c.kv_heads)))
                q, k = rotary(q), rotary(k)
                k_all, v_all = (bb.emit(op.concat([cache, new], axis=1)) for cache, new in zip(caches[2 * i:2 * i + 2], (k, v)))
                grown += [k_all, v_all]
                # The grown length m + s named t: TVM alone's attention legalization takes a key
                # length that is a var, not an expression ("shapes of x and y are inconsistent").
                keys, values = (bb.emit(op.repeat(bb.match_cast(a, R.Tensor((1, t, c.kv_heads, d), dtype)), group, axis=2))
                                for a in (k_all, v_all))
                a = bb.emit(op.nn.attention(q, keys, values, causal_mask="BottomRight"))
                x = bb.emit(op.add(x, linear(bb.emit(op.reshape(a, (1, s, c.hidden))), w["wo"])))
                h = bb.emit(op.nn.rms_norm(x, w["norm2"], axes=[-1]))
                mlp = bb.emit(op.multiply(bb.emit(op.nn.silu(linear(h, w["gate"]))), linear(h, w["up"])))
                x = bb.emit(op.add(x, linear(mlp, w["down"])))
            logits = linear(bb.emit(op.nn.rms_norm(x, weights["norm"], axes=[-1])), weights["lm_head"])
            out = bb.emit_output(relax.Tuple([logits, *grown]))
        bb.emit_func_output(out)
    mod = bb.get()
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {"s": c.max_seq, "m": c.max_cache,
                                                                "t": c.max_seq + c.max_cache})
    return mod


def random_weights(dtype: str, rng, c: Config = SMALL) -> list[np.ndarray]:
    arrays = []
    for name, shape in weight_shapes(c).items():
        if name.startswith("norm"):
            arrays.append(1.0 + 0.1 * rng.standard_normal(shape))
        else:
            arrays.append(rng.standard_normal(shape) * (1.0 if name == "embed" else shape[-1] ** -0.5))
    return [a.astype(dtype) for a in arrays]


def rotary_tables(start: int, count: int, dtype: str, c: Config = SMALL) -> list[np.ndarray]:
    """cos and sin of positions start .. start + count - 1, (1, count, 1, D) each (LLaMA's base 10000)."""
    d = c.head_dim
    angles = np.arange(start, start + count)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)[None, :]
    angles = np.concatenate([angles, angles], axis=1)[None, :, None, :]
    return [np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)]


def empty_caches(dtype: str, c: Config = SMALL) -> list[np.ndarray]:
    return [np.zeros((1, 0, c.kv_heads, c.head_dim), dtype) for _ in range(2 * c.layers)]


def greedy(last) -> int:
    """The next token: the argmax of the last position's logits."""
    return int(np.argmax(np.asarray(last, np.float32)))


def generate(executable, dtype: str, prompt, steps: int, weights, device, c: Config = SMALL, next_token=greedy):
    """Prefill `prompt` then `steps` decode steps on `device`, each step's caches the ones the
    step before returned (TVM tensors, never copied to the host). Yields each step's outputs
    (logits and caches, TVM tensors); a step's token is `next_token(last position's logits)`."""
    vm = relax.VirtualMachine(executable, device)
    put = lambda a: tvm.runtime.tensor(a, device)  # noqa: E731
    params = [put(w) for w in weights]
    caches = [put(a) for a in empty_caches(dtype, c)]
    tokens, position = np.asarray(prompt, "int64")[None, :], 0
    for _ in range(steps + 1):
        outputs = vm["main"](put(tokens), *map(put, rotary_tables(position, tokens.shape[1], dtype, c)), *caches, *params)
        logits, caches = outputs[0], list(outputs[1:])
        yield outputs
        position += tokens.shape[1]
        last = logits.numpy()[0, -1]
        tokens = np.asarray([[next_token(last)]], "int64")


def lockstep(reference, executable, dtype: str, prompt, steps: int, weights, device, c: Config = SMALL):
    """`generate` on two builds step by step, the `reference` build picking each next token
    (greedy) and `executable` fed the same ones: yields (reference's outputs, executable's)."""
    picks = []
    replay = iter(picks)  # a list iterator sees what is appended later
    return zip(generate(reference, dtype, prompt, steps, weights, device, c,
                        next_token=lambda last: picks.append(greedy(last)) or picks[-1]),
               generate(executable, dtype, prompt, steps, weights, device, c, next_token=lambda last: next(replay)))


def torch_twin(weights, dtype: str, c: Config = SMALL, device: str = "cpu"):
    """The same model in torch with the same weights (BSNH tensors, SDPA with enable_gqa):
    step(tokens, cos, sin, caches) -> [logits, k_0', v_0', ...], torch tensors in and out."""
    import torch
    import torch.nn.functional as F

    w = {n: torch.from_numpy(np.asarray(a, np.float32)).to(device, getattr(torch, dtype))
         for n, a in zip(weight_shapes(c), weights)}
    d = c.head_dim

    def rms(x, weight):
        return F.rms_norm(x, (x.shape[-1],), weight, eps=1e-5)

    def rotary(t, cos, sin):
        return t * cos + torch.cat([-t[..., d // 2:], t[..., :d // 2]], dim=-1) * sin

    @torch.no_grad()
    def step(tokens, cos, sin, caches):
        x = w["embed"][tokens]
        s, grown = tokens.shape[1], []
        for i in range(c.layers):
            h = rms(x, w[f"norm1.{i}"])
            q, k, v = ((h @ w[f"{n}.{i}"].T).view(1, s, heads, d)
                       for n, heads in (("wq", c.heads), ("wk", c.kv_heads), ("wv", c.kv_heads)))
            q, k = rotary(q, cos, sin), rotary(k, cos, sin)
            k, v = torch.cat([caches[2 * i], k], dim=1), torch.cat([caches[2 * i + 1], v], dim=1)
            grown += [k, v]
            m = k.shape[1] - s  # BottomRight: query i sees keys up to i + m
            mask = torch.ones(s, m + s, dtype=torch.bool, device=device).tril(m)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                                               enable_gqa=True)
            x = x + a.transpose(1, 2).reshape(1, s, c.hidden) @ w[f"wo.{i}"].T
            h = rms(x, w[f"norm2.{i}"])
            x = x + (F.silu(h @ w[f"gate.{i}"].T) * (h @ w[f"up.{i}"].T)) @ w[f"down.{i}"].T
        return [rms(x, w["norm"]) @ w["lm_head"].T, *grown]

    return step
