"""Building a fuzz model op group by op group: the `Builder` and its table of op kinds (`KINDS`).

Where it sits: between the choices (fuzz/choices.py) and a whole model's drawing
(fuzz/draw.py). `Builder.node()` picks an existing value (mostly a recent one, so models are
chains with branches; sometimes any, so values are read more than once), draws a kind of op
group that fits its rank and builds it: the op (a built-in of fuzz/vocabulary.py or a user
family of fuzz/user_ops.py), its attributes, and new parameters where the op needs them
(weights, biases, other operands), sometimes followed by a bias and an activation. The ops mix
what simaccel offloads (matmul/dense, batched too, with bias and activation, conv2d with
groups, pooling, attention (causal masks, grouped-query heads as repeated keys and values, an
additive bias), softmax,
layer_norm, rms_norm, elementwise ops (negative, sin and cos too), clip,
reductions, reshape, permute_dims, strided_slice, take of a constant index or index array,
broadcast_to, concat) with what it must
leave to TVM (softmax, layer_norm and rms_norm over other axes, reductions over axes apart, backward
slices, ceil-mode pooling, leaky_relu, ...), with edge shapes: 1, primes, sizes off the
kernels' tiles, broadcast batch dims, and now and then a zero-size dim.
"""

from __future__ import annotations

from typing import Callable

from .case import Value, fuzz_op
from .choices import Config, Draw
from .user_ops import hook_answer, relax_shape, user_families
from .vocabulary import window_out

DIMS = (1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 31, 64, 65)  # tile sizes and their neighbours, primes
TINY_DIMS = (1, 2, 3, 4, 5, 7)  # for the simulator: every CUDA thread interpreted in Python


class Builder:
    """A model under construction: `values` so far, each new choice through `draw`. `node()`
    draws the kind of the next op group among those that fit a chosen value, and builds it with
    that kind's method (`KINDS`); each kind's method draws the op's attributes and any new
    parameters (weights, biases, other operands) it needs."""

    def __init__(self, draw: Draw, config: Config, dtype: str = "float32"):
        self.draw = draw
        self.config = config
        self.dtype = dtype
        self.values: list[Value] = []
        # users' families that can be drawn in this dtype (none: the draws are those of before)
        self.families = [f for f in user_families() if dtype in f.dtypes] if config.user_ops else []

    def dim(self) -> int:
        if self.draw.chance(self.config.zero_dim_percent):
            return 0
        return self.draw.choice(TINY_DIMS if self.config.tiny else DIMS)

    def small(self) -> int:
        """A dim for channels, batch and window sizes: kept small so models stay quick."""
        return self.draw.choice((1, 2, 3, 4, 5) if self.config.tiny else (1, 2, 3, 4, 5, 8, 13))

    def input_shape(self) -> tuple[int, ...]:
        rank = self.draw.choice((2, 4, 4, 3, 1))
        if rank == 4:
            return (self.small(), self.small(), self.spatial(), self.spatial())
        return tuple(self.small() for _ in range(rank - 2)) + tuple(self.dim() for _ in range(min(rank, 2)))

    def spatial(self) -> int:
        return self.draw.choice((1, 2, 3, 5, 6, 7) if self.config.tiny else (1, 2, 3, 5, 7, 8, 13, 17))

    def param(self, shape, prefix: str, weight: bool = False) -> int:
        constant = weight and self.draw.chance(30)
        self.values.append(Value(tuple(shape), name=f"{prefix}{len(self.values)}", constant=constant))
        return len(self.values) - 1

    def add(self, op: str, args, attrs=None) -> int:
        attrs = attrs or {}
        shape = fuzz_op(op).shape([self.values[a].shape for a in args], attrs)
        self.values.append(Value(shape, op, tuple(args), attrs))
        return len(self.values) - 1

    def node(self) -> None:
        """Append one op (sometimes with its bias and activation) reading an existing value."""
        recent = len(self.values) - 1 - self.draw.int(0, min(3, len(self.values) - 1))  # mostly chains
        x = recent if self.draw.chance(80) else self.draw.int(0, len(self.values) - 1)
        shape = self.values[x].shape
        kinds = ["unary", "binary"] + (["softmax", "layer_norm", "reduce", "slice", "concat"] if shape else [])
        if 1 <= len(shape) <= 3:
            kinds.append("broadcast")
        if len(shape) >= 2:
            kinds += ["linear", "linear", "reshape", "permute"]
        if len(shape) == 4:
            kinds += ["conv", "conv", "conv", "pool", "pool", "attention"]
        if self.families:  # only where there are users' ops: the draws without them stay the same
            kinds += ["user"] * 3
        KINDS[self.draw.choice(kinds)](self, x, shape)

    def user(self, x, shape):
        """A user op applied to `x`, with new weights of the shapes its fuzz hook asks for (an
        elementwise op instead where the hook does not take this shape). A hook that fails, or
        gives a call Relax refuses, is an OpDeclarationError naming the family: the op would
        never be drawn otherwise."""
        from ....errors import OpDeclarationError, SimAccelError

        family = self.draw.choice(self.families)
        try:
            answer = family.fuzz(tuple(shape), self.draw)
        except SimAccelError:
            raise
        except Exception as e:
            raise OpDeclarationError(f"op family {family.name!r}: its fuzz hook failed on shape {tuple(shape)}: "
                                     f"{type(e).__name__}: {e}") from e
        if answer is None:
            return self.unary(x, shape)
        shapes, kwargs = hook_answer(family, answer)
        roles = list(family.inputs)
        in_shapes = [tuple(shape)] + [shapes[r] for r in roles[1:]]
        try:
            out = relax_shape(family, in_shapes, kwargs, self.dtype)
        except SimAccelError:
            raise
        except Exception as e:  # the hook said the op applies here: a call Relax refuses is its mistake
            reason = " ".join(str(e).split("\n")[0].split())
            raise OpDeclarationError(f"op family {family.name!r}: its fuzz hook gave inputs {in_shapes} {self.dtype} and "
                                     f"values {kwargs}, which Relax refuses: {type(e).__name__}: {reason}") from e
        args = [x] + [self.param(shapes[r], "w", weight=True) for r in roles[1:]]
        self.values.append(Value(out, family.name, tuple(args), kwargs))

    def unary(self, x, shape):
        name = self.draw.choice(("relu", "gelu", "tanh", "sigmoid", "exp", "relu", "silu", "sqrt", "rsqrt", "clip",
                                 "leakyrelu", "negative", "sin", "cos"))
        if name == "clip":
            low = self.draw.choice((0.0, -1.0, -0.5))
            self.add("clip", [x], {"min": low, "max": low + self.draw.choice((0.0, 0.25, 6.0))})
        else:
            self.add(name, [x], {"alpha": 0.1} if name == "leakyrelu" else None)

    def reduce(self, x, shape):
        """sum / mean / max over one run of axes (simaccel's), or over axes apart (TVM's)."""
        rank = len(shape)
        first = self.draw.int(0, rank - 1)
        axes = list(range(first, self.draw.int(first, rank - 1) + 1))
        if rank >= 3 and self.draw.chance(15):
            axes = [0, rank - 1]
        self.add(self.draw.choice(("sum", "mean", "max")), [x], {"axis": axes, "keepdims": self.draw.chance(50)})

    def slice(self, x, shape):
        """A strided_slice of one axis (steps 1 or 2; now and then -1, TVM's), or x[i] (take)."""
        axis = self.draw.int(0, len(shape) - 1)
        size = shape[axis]
        if size and self.draw.chance(25):  # one index (a slice once rewritten) or a list of them (simaccel.take)
            index = [self.draw.int(0, size - 1) for _ in range(self.draw.int(1, 3))] if self.draw.chance(50) else None
            self.add("take", [x], {"index": self.draw.int(0, size - 1) if index is None else index, "axis": axis})
            return
        step = self.draw.choice((1, 1, 2, -1))
        if step < 0 and size < 2 and not self.config.zero_dim_percent:
            step = 1
        if self.config.zero_dim_percent or not size:
            begin = self.draw.int(0, size)
            end = self.draw.int(begin, size)
            if step < 0:
                begin, end = end, begin
        elif step > 0:  # no empty results where zero-size tensors are off (TVM's CUDA build crashes on them)
            begin = self.draw.int(0, size - 1)
            end = self.draw.int(begin + 1, size)
        else:  # backward: from begin down to end + 1 (never to 0: an end of -1 would count from the back)
            begin = self.draw.int(1, size - 1)
            end = self.draw.int(0, begin - 1)
        self.add("strided_slice", [x], {"axes": [axis], "begin": [begin], "end": [end], "strides": [step]})

    def concat(self, x, shape):
        """x joined along one axis with 1-3 others: values of the model that fit, or new inputs."""
        axis = self.draw.int(0, len(shape) - 1)
        fits = [i for i, v in enumerate(self.values) if len(v.shape) == len(shape)
                and v.shape[:axis] + v.shape[axis + 1:] == shape[:axis] + shape[axis + 1:]]
        parts = [x]
        for _ in range(self.draw.int(1, 3)):
            if self.draw.chance(50):
                other = self.draw.choice(fits)  # x itself among them: a value read twice
            else:
                size = 0 if self.draw.chance(self.config.zero_dim_percent) else self.small()
                other = self.param(shape[:axis] + (size,) + shape[axis + 1:], "c", weight=True)
            parts.insert(self.draw.int(0, len(parts)), other)
        self.add("concat", parts, {"axis": axis - len(shape) if self.draw.chance(30) else axis})

    def broadcast(self, x, shape):
        grown = (self.small(),) + tuple(d if d != 1 or self.draw.chance(50) else self.small() for d in shape)
        self.add("broadcast_to", [x], {"shape": grown})

    def binary(self, x, shape):
        same = [i for i, v in enumerate(self.values) if i != x and _broadcasts(v.shape, shape)]
        if same and self.draw.chance(40):
            other = self.draw.choice(same)
        else:
            other = self.param(self.broadcast_shape(shape), "e", weight=True)
        args = [other, x] if self.draw.chance(30) else [x, other]
        name = self.draw.choice(("add", "multiply", "add", "subtract", "divide"))
        if name == "divide":  # by exp(.): never 0 or near it, so float16 results stay comparable
            args[1] = self.add("exp", [args[1]])
        self.add(name, args)

    def broadcast_shape(self, shape) -> tuple[int, ...]:
        """A shape that broadcasts with `shape`: mostly not growing it, sometimes growing it."""
        rank = self.draw.int(0, len(shape) + (1 if len(shape) < 4 else 0))
        tail = [1] * (rank - len(shape)) + list(shape[len(shape) - min(rank, len(shape)):])
        return tuple(d if self.draw.chance(60) else (self.small() if d == 1 and self.draw.chance(10) else 1) for d in tail)

    def softmax(self, x, shape):
        axis = -1 if self.draw.chance(75) or not shape else self.draw.int(-len(shape), len(shape) - 1)
        self.add("softmax", [x], {"axis": axis})

    def layer_norm(self, x, shape):
        if not shape or shape[-1] == 0:
            return self.unary(x, shape)
        axes = [-1] if self.draw.chance(80) or len(shape) < 2 else [-2, -1]
        norm = tuple(shape[a] for a in axes)
        if len(shape) >= 2 and 0 not in norm and self.draw.chance(35):  # TVM builds neither a 1-D nor an empty one
            self.add("rms_norm", [x, self.param(norm, "g", weight=True)], {"axes": axes, "epsilon": self.draw.choice((1e-5, 1e-3))})
            return
        gamma, beta = self.param(norm, "g", weight=True), self.param(norm, "b", weight=True)
        self.add("layer_norm", [x, gamma, beta], {"axes": axes, "epsilon": self.draw.choice((1e-5, 1e-3))})

    def linear(self, x, shape):
        k, n = shape[-1], self.dim()
        form = self.draw.choice(("matmul", "dense", "dense", "batched"))
        if form == "batched":  # a batched right operand: TVM's
            batch = tuple(d if self.draw.chance(70) else 1 for d in shape[:-2]) if len(shape) > 2 else (self.small(),)
            y = self.add("matmul", [x, self.param(batch + (k, n), "w", weight=True)])
        elif form == "dense":
            w = self.param((n, k), "w", weight=True)
            y = self.add("matmul", [x, self.add("permute_dims", [w], {"axes": None})])
        else:
            y = self.add("matmul", [x, self.param((k, n), "w", weight=True)])
        if self.draw.chance(60):
            out = self.values[y].shape
            bias = (out[-1],) if self.draw.chance(60) else self.broadcast_shape(out)
            y = self.add("add", [y, self.param(bias, "bias", weight=True)])
        if self.draw.chance(50):
            self.add(self.draw.choice(("relu", "gelu")), [y])

    def reshape(self, x, shape):
        if 0 in shape:  # Relax reads a 0 in the new shape as "keep this dim"
            return self.unary(x, shape)
        flat = shape[:-2] + (shape[-2] * shape[-1],)
        self.add("reshape", [x], {"shape": flat if len(flat) >= 1 else (1,)})

    def permute(self, x, shape):
        axes = list(range(len(shape)))
        axes[-1], axes[-2] = axes[-2], axes[-1]
        self.add("permute_dims", [x], {"axes": axes})

    def conv(self, x, shape):
        n, c, h, w = shape
        kh, kw = self.draw.int(1, 3), self.draw.int(1, 3)
        attrs = {
            "strides": (self.draw.int(1, 2), self.draw.int(1, 2)),
            "padding": tuple(self.draw.int(0, 2) for _ in range(4)),
            "dilation": (self.draw.int(1, 2), self.draw.int(1, 2)),
            "groups": c if c > 1 and self.draw.chance(20) else 1,  # depthwise: TVM's
        }
        if min(window_out((h, w), (kh, kw), attrs)) < 1:  # the window does not fit: a 1x1 one does
            kh, kw, attrs["dilation"] = 1, 1, (1, 1)
        o = c if attrs["groups"] > 1 else self.small()
        y = self.add("conv2d", [x, self.param((o, c // attrs["groups"], kh, kw), "w", weight=True)], attrs)
        if self.draw.chance(60):
            out = self.values[y].shape
            bias = self.draw.choice(((1, o, 1, 1), (o, 1, 1), self.broadcast_shape(out)))
            y = self.add("add", [y, self.param(bias, "bias", weight=True)])
        if self.draw.chance(50):
            self.add("relu", [y])

    def pool(self, x, shape):
        attrs = {
            "pool_size": (self.draw.int(1, 3), self.draw.int(1, 3)),
            "strides": (self.draw.int(1, 2), self.draw.int(1, 2)),
            "padding": tuple(self.draw.int(0, 1) for _ in range(4)),
            "dilation": (self.draw.int(1, 2), self.draw.int(1, 2)) if self.draw.chance(20) else (1, 1),
            "ceil_mode": self.draw.chance(10),
            "count_include_pad": self.draw.chance(50),
        }
        if min(window_out(shape[2:], attrs["pool_size"], attrs)) < 1:  # the window does not fit: a 1x1 one does
            attrs["pool_size"], attrs["dilation"] = (1, 1), (1, 1)
        self.add(self.draw.choice(("max_pool2d", "avg_pool2d")), [x], attrs)


    def attention(self, x, shape):
        """`x` (B, S, H, D) as the query of relax.nn.attention: keys and values of T rows, with as
        many heads or (grouped-query) fewer, repeated per group along the head axis; a causal
        mask or none, the default scale or one drawn."""
        b, s, h, d = shape
        if 0 in shape or d > 256:
            return self.unary(x, shape)
        t = self.spatial()
        kv = h // self.draw.choice([g for g in (2, 3, 4) if h % g == 0] or [1]) if self.draw.chance(40) else h
        dv = d if self.draw.chance(70) else self.small()
        k, v = self.param((b, t, kv, d), "k"), self.param((b, t, kv, dv), "v")
        if kv != h:
            k, v = (self.add("repeat", [a], {"repeats": h // kv, "axis": 2}) for a in (k, v))
        attrs = {"scale": None if self.draw.chance(60) else self.draw.choice((0.05, 0.3, 1.0)),
                 "causal_mask": self.draw.choice((None, "TopLeft", "BottomRight"))}
        given = [x, k, v]
        if self.draw.chance(30):  # an additive bias (relax.nn.attention_bias): per score, batch, row or head
            given.append(self.param(self.draw.choice(((b, h, s, t), (b, 1, 1, t), (1, 1, s, t), (1, h, 1, t))), "bias"))
        self.add("attention", given, attrs)


# The kinds of op group `Builder.node()` draws, each built by its method. The kinds that fit a
# value, and how often each is drawn, are `node()`'s list: its order is part of what a seed draws.
KINDS: dict[str, Callable[[Builder, int, tuple], None]] = {
    "unary": Builder.unary,
    "binary": Builder.binary,
    "softmax": Builder.softmax,
    "layer_norm": Builder.layer_norm,
    "reduce": Builder.reduce,
    "slice": Builder.slice,
    "concat": Builder.concat,
    "broadcast": Builder.broadcast,
    "linear": Builder.linear,
    "reshape": Builder.reshape,
    "permute": Builder.permute,
    "conv": Builder.conv,
    "pool": Builder.pool,
    "attention": Builder.attention,
    "user": Builder.user,
}


def _broadcasts(shape, target) -> bool:
    """Whether `shape` broadcasts against `target` without changing it."""
    if len(shape) > len(target):
        return False
    return all(d in (1, t) for d, t in zip(shape[::-1], target[::-1]))
