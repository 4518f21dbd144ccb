"""Random Relax models for `simaccel fuzz`, each with its own float64 numpy reference.

A model (`Case`) is a list of values in creation order: parameters (inputs, weights, biases;
a weight may be bound as a constant) and op nodes reading earlier values. Drawing picks an
existing value (so values are used more than once and inputs are shared), an op that fits its
rank, and new parameters where the op needs them: a DAG, not a chain, that ends in one output
or a tuple of several. The ops mix what simaccel offloads (matmul/dense, batched too, with
bias and activation, conv2d with groups, pooling, softmax, layer_norm, elementwise ops, clip,
reductions, reshape, permute_dims, strided_slice, take of a constant index, broadcast_to, concat)
with what it must leave to TVM (softmax and layer_norm over other axes, reductions over axes
apart, backward slices, ceil-mode pooling, leaky_relu, ...), with edge shapes: 1, primes,
sizes off the kernels' tiles, broadcast batch dims, and now and then a zero-size dim.

Users' ops are drawn too: every declared family outside the ``simaccel`` namespace that has
a `fuzz` hook (simaccel.ops.OpFamily.fuzz; $SIMACCEL_OPS names their modules) may become a
node, named after the family (``myaccel.rms_norm``), when its hook takes the chosen value's
shape. Its Relax call is built from the family's pattern with the values and keyword
arguments the hook gives, its output shape comes from Relax's own shape inference, and its
reference is the family's numpy reference. A family the fuzzer cannot draw is an error that
names it (`drawable_user_families`), never a silent redraw. Without user
families nothing changes: the same seed draws the same models.

Every choice goes through a `Draw`, which records it: a failing model is shrunk by shrinking
its choices (fuzz/shrink.py). `Case.reference()` evaluates the model
in float64 with numpy (rounding each result to the model's dtype, as TVM and simaccel store
them); for built-in ops it is written independently of simaccel's own op references. For a
user op it is that op's own reference (what simaccel's `ref` engine runs too), so it cannot
settle a disagreement with TVM (`Case.independent_reference`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

DIMS = (1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 31, 64, 65)  # tile sizes and their neighbours, primes
TINY_DIMS = (1, 2, 3, 4, 5, 7)  # for the simulator: every CUDA thread interpreted in Python


class Draw:
    """The random choices of one model: `integer(lo, hi)` gives an int in [lo, hi].

    Every choice with more than one answer is recorded in `choices`, as its offset from `lo`:
    `Draw.replay(choices)` makes the same model again, and a shorter or smaller sequence makes a
    simpler one (what the campaign's shrinker, fuzz/shrink.py, searches). `spans` records where
    the choices of each drawn item (an op node) are, with the index of the choice that counted
    the items: the shrinker drops an item by deleting its span and lowering that count."""

    def __init__(self, integer: Callable[[int, int], int]):
        self.integer = integer
        self.choices: list[int] = []
        self.spans: list[tuple[int, int, int | None]] = []  # (start, end, index of the count choice)

    def count(self, lo: int, hi: int) -> tuple[int, int | None]:
        """A number of items to draw, and the index of its choice (None where there was no choice)."""
        at = len(self.choices)
        n = self.int(lo, hi)
        return n, at if len(self.choices) > at else None

    @contextlib.contextmanager
    def item(self, counter: int | None):
        """The choices made in the block are one item of the count at `counter`."""
        start = len(self.choices)
        yield
        self.spans.append((start, len(self.choices), counter))

    def int(self, lo: int, hi: int) -> int:
        if hi <= lo:
            return lo
        value = self.integer(lo, hi)
        self.choices.append(value - lo)
        return value

    def choice(self, options):
        return options[self.int(0, len(options) - 1)]

    def chance(self, percent: int) -> bool:
        """True `percent` times in 100; a draw of 0 (where shrinking leads) is False."""
        return self.int(0, 99) >= 100 - percent

    @classmethod
    def seeded(cls, seed) -> "Draw":
        """Choices from numpy's generator seeded with `seed` (an int or a sequence of ints)."""
        rng = np.random.default_rng(seed)
        return cls(lambda lo, hi: int(rng.integers(lo, hi + 1)))

    @classmethod
    def replay(cls, choices) -> "Draw":
        """The recorded `choices` again, each capped at its range; past their end, every choice
        is its range's low end."""
        it = iter(choices)
        return cls(lambda lo, hi: lo + min(max(next(it, 0), 0), hi - lo))


@dataclass
class Value:
    """A parameter (`op` None) or the result of op `op` on earlier values `args`."""

    shape: tuple[int, ...]
    op: str | None = None
    args: tuple[int, ...] = ()
    attrs: dict = field(default_factory=dict)
    name: str = ""
    constant: bool = False  # parameters only: bound as a Relax constant


@dataclass
class Config:
    """What the drawn models may hold."""

    dtypes: tuple[str, ...] = ("float32", "float16")
    max_ops: int = 8
    tiny: bool = False  # small dims only (the simulator)
    specials_percent: int = 10  # float32 models whose first input holds NaN and inf
    zero_dim_percent: int = 2  # dims drawn as 0 (TVM's CUDA build refuses most zero-size tensors)
    user_ops: bool = True  # draw users' declared ops too (those with a fuzz hook), where there are any


@dataclass
class Case:
    dtype: str
    values: list[Value]
    outputs: list[int]
    data_seed: int
    specials: bool = False

    @property
    def params(self) -> list[Value]:
        return [v for v in self.values if v.op is None]

    @property
    def ops(self) -> list[str]:
        return [v.op for v in self.values if v.op is not None]

    @property
    def user_ops(self) -> list[str]:
        """The distinct users' ops in the model (names with a namespace), in order."""
        return list(dict.fromkeys(op for op in self.ops if is_user_op(op)))

    def describe(self) -> str:
        kinds = ", ".join(self.ops)
        return f"{self.dtype}, {len(self.params)} params, {len(self.ops)} ops ({kinds}), {len(self.outputs)} output(s)"

    # -- Relax --------------------------------------------------------------------------------
    def module(self):
        """The model as a Relax module: every parameter is a function parameter (see `constants`)."""
        import tvm
        from tvm import relax

        params = {i: relax.Var(v.name, relax.TensorType(v.shape, self.dtype)) for i, v in enumerate(self.values) if v.op is None}
        builder = relax.BlockBuilder()
        with builder.function("main", list(params.values())):
            with builder.dataflow():
                exprs = dict(params)
                for i, v in enumerate(self.values):
                    if v.op is not None:
                        exprs[i] = builder.emit(fuzz_op(v.op).relax([exprs[a] for a in v.args], v.attrs, self.dtype))
                outs = [exprs[i] for i in self.outputs]
                out = builder.emit_output(outs[0] if len(outs) == 1 else relax.Tuple(outs))
            builder.emit_func_output(out)
        mod = builder.get()
        assert isinstance(mod, tvm.IRModule)
        return mod

    def constants(self) -> dict[str, np.ndarray]:
        """Parameters to bind as Relax constants: name -> value."""
        arrays = self.arrays()
        return {v.name: arrays[i] for i, v in enumerate(self.params) if v.constant}

    def arrays(self) -> list[np.ndarray]:
        """Seeded values for every parameter, in order (NaN/inf in the first if `specials`)."""
        rng = np.random.default_rng(self.data_seed)
        arrays = []
        for i, v in enumerate(self.params):
            a = rng.standard_normal(v.shape).astype(np.float32)
            if i == 0 and self.specials and a.size:
                mask = rng.random(v.shape) < 0.1
                a[mask] = rng.choice(np.array([np.nan, np.inf, -np.inf], np.float32), size=int(mask.sum()))
            arrays.append(a.astype(self.dtype))
        return arrays

    def runtime_arrays(self) -> list[np.ndarray]:
        """Values for the parameters that stay parameters once constants are bound."""
        return [a for v, a in zip(self.params, self.arrays()) if not v.constant]

    def bound_module(self):
        """`module()` with the constant parameters bound (what the fuzzer builds)."""
        from tvm import relax

        mod = self.module()
        constants = self.constants()
        return relax.transform.BindParams("main", constants)(mod) if constants else mod

    # -- float64 reference --------------------------------------------------------------------
    @property
    def exact_reference(self) -> bool:
        """Whether `reference()` knows the semantics of every op the outputs depend on
        (ceil-mode pooling it does not; an op no output reads does not count)."""
        return all(self._exact(self.values[i]) for i in self.read_by_outputs() if self.values[i].op is not None)

    def read_by_outputs(self) -> list[int]:
        """The values the outputs depend on (themselves included), in creation order."""
        needed, stack = set(), list(self.outputs)
        while stack:
            i = stack.pop()
            if i not in needed:
                needed.add(i)
                stack.extend(self.values[i].args)
        return sorted(needed)

    @property
    def independent_reference(self) -> bool:
        """Whether `reference()` is written independently of simaccel: not where a user op's own
        reference computes that node (simaccel's `ref` engine runs the same function)."""
        return not self.user_ops

    def _exact(self, v: Value) -> bool:
        op = fuzz_op(v.op)
        if isinstance(op, UserFuzzOp):
            return op.exact_for([self.values[a].shape for a in v.args], v.attrs, self.dtype)
        return op.exact(v.attrs)

    def reference(self) -> list[np.ndarray]:
        """The outputs computed in float64, each op's result rounded to the model's dtype."""
        results = {}
        arrays = iter(self.arrays())
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # means of empty rows: NaN is the answer
            for i, v in enumerate(self.values):
                if v.op is None:
                    results[i] = next(arrays).astype(np.float64)
                else:
                    y = fuzz_op(v.op).numpy([results[a] for a in v.args], v.attrs, self.dtype)
                    results[i] = np.asarray(y, np.float64).astype(self.dtype).astype(np.float64)
        return [results[i] for i in self.outputs]


# -- drawing ------------------------------------------------------------------------------------
def draw_case(draw: Draw, config: Config = Config()) -> Case:
    dtype = draw.choice(config.dtypes)
    builder = _Builder(draw, config, dtype)
    first = builder.param(builder.input_shape(), "x")
    if draw.chance(30):
        builder.param(builder.values[first].shape, "y")  # a second input of the same shape
    count, counter = draw.count(1, config.max_ops)
    for _ in range(count):
        with draw.item(counter):
            builder.node()
    nodes = [i for i, v in enumerate(builder.values) if v.op is not None]
    outputs = [nodes[-1]]
    if not draw.chance(30):  # mostly, every result nothing else reads is an output too (up to 3)
        read = {a for v in builder.values for a in v.args}
        outputs += [i for i in nodes[:-1] if i not in read][-3:]
    for _ in range(draw.int(0, 2) if len(nodes) > 1 and draw.chance(30) else 0):
        extra = draw.choice(nodes[:-1])  # a value also read by later ops
        if extra not in outputs:
            outputs.append(extra)
    specials = dtype == "float32" and draw.chance(config.specials_percent)
    return Case(dtype, builder.values, outputs, draw.int(0, 2**31 - 1), specials)


class _Builder:
    def __init__(self, draw: Draw, config: Config, dtype: str = "float32"):
        self.draw = draw
        self.config = config
        self.dtype = dtype
        self.values: list[Value] = []
        # users' families that can be drawn in this dtype (none: the draws are those of before)
        self.user = [f for f in user_families() if dtype in f.dtypes] if config.user_ops else []

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
            kinds += ["conv", "conv", "conv", "pool", "pool"]
        if self.user:  # only where there are users' ops: the draws without them stay the same
            kinds += ["user"] * 3
        getattr(self, f"_{self.draw.choice(kinds)}")(x, shape)

    def _user(self, x, shape):
        """A user op applied to `x`, with new weights of the shapes its fuzz hook asks for (an
        elementwise op instead where the hook does not take this shape). A hook that fails, or
        gives a call Relax refuses, is an OpDeclarationError naming the family: the op would
        never be drawn otherwise."""
        from ....errors import OpDeclarationError, SimAccelError

        family = self.draw.choice(self.user)
        try:
            answer = family.fuzz(tuple(shape), self.draw)
        except SimAccelError:
            raise
        except Exception as e:
            raise OpDeclarationError(f"op family {family.name!r}: its fuzz hook failed on shape {tuple(shape)}: "
                                     f"{type(e).__name__}: {e}") from e
        if answer is None:
            return self._unary(x, shape)
        shapes, kwargs = _hook_answer(family, answer)
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

    def _unary(self, x, shape):
        name = self.draw.choice(("relu", "gelu", "tanh", "sigmoid", "exp", "relu", "silu", "sqrt", "rsqrt", "clip",
                                 "leakyrelu"))
        if name == "clip":
            low = self.draw.choice((0.0, -1.0, -0.5))
            self.add("clip", [x], {"min": low, "max": low + self.draw.choice((0.0, 0.25, 6.0))})
        else:
            self.add(name, [x], {"alpha": 0.1} if name == "leakyrelu" else None)

    def _reduce(self, x, shape):
        """sum / mean / max over one run of axes (simaccel's), or over axes apart (TVM's)."""
        rank = len(shape)
        first = self.draw.int(0, rank - 1)
        axes = list(range(first, self.draw.int(first, rank - 1) + 1))
        if rank >= 3 and self.draw.chance(15):
            axes = [0, rank - 1]
        self.add(self.draw.choice(("sum", "mean", "max")), [x], {"axis": axes, "keepdims": self.draw.chance(50)})

    def _slice(self, x, shape):
        """A strided_slice of one axis (steps 1 or 2; now and then -1, TVM's), or x[i] (take)."""
        axis = self.draw.int(0, len(shape) - 1)
        size = shape[axis]
        if size and self.draw.chance(25):
            self.add("take", [x], {"index": self.draw.int(0, size - 1), "axis": axis})
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

    def _concat(self, x, shape):
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

    def _broadcast(self, x, shape):
        grown = (self.small(),) + tuple(d if d != 1 or self.draw.chance(50) else self.small() for d in shape)
        self.add("broadcast_to", [x], {"shape": grown})

    def _binary(self, x, shape):
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

    def _softmax(self, x, shape):
        axis = -1 if self.draw.chance(75) or not shape else self.draw.int(-len(shape), len(shape) - 1)
        self.add("softmax", [x], {"axis": axis})

    def _layer_norm(self, x, shape):
        if not shape or shape[-1] == 0:
            return self._unary(x, shape)
        axes = [-1] if self.draw.chance(80) or len(shape) < 2 else [-2, -1]
        norm = tuple(shape[a] for a in axes)
        gamma, beta = self.param(norm, "g", weight=True), self.param(norm, "b", weight=True)
        self.add("layer_norm", [x, gamma, beta], {"axes": axes, "epsilon": self.draw.choice((1e-5, 1e-3))})

    def _linear(self, x, shape):
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

    def _reshape(self, x, shape):
        if 0 in shape:  # Relax reads a 0 in the new shape as "keep this dim"
            return self._unary(x, shape)
        flat = shape[:-2] + (shape[-2] * shape[-1],)
        self.add("reshape", [x], {"shape": flat if len(flat) >= 1 else (1,)})

    def _permute(self, x, shape):
        axes = list(range(len(shape)))
        axes[-1], axes[-2] = axes[-2], axes[-1]
        self.add("permute_dims", [x], {"axes": axes})

    def _conv(self, x, shape):
        n, c, h, w = shape
        kh, kw = self.draw.int(1, 3), self.draw.int(1, 3)
        attrs = {
            "strides": (self.draw.int(1, 2), self.draw.int(1, 2)),
            "padding": tuple(self.draw.int(0, 2) for _ in range(4)),
            "dilation": (self.draw.int(1, 2), self.draw.int(1, 2)),
            "groups": c if c > 1 and self.draw.chance(20) else 1,  # depthwise: TVM's
        }
        if min(_window_out((h, w), (kh, kw), attrs)) < 1:  # the window does not fit: a 1x1 one does
            kh, kw, attrs["dilation"] = 1, 1, (1, 1)
        o = c if attrs["groups"] > 1 else self.small()
        y = self.add("conv2d", [x, self.param((o, c // attrs["groups"], kh, kw), "w", weight=True)], attrs)
        if self.draw.chance(60):
            out = self.values[y].shape
            bias = self.draw.choice(((1, o, 1, 1), (o, 1, 1), self.broadcast_shape(out)))
            y = self.add("add", [y, self.param(bias, "bias", weight=True)])
        if self.draw.chance(50):
            self.add("relu", [y])

    def _pool(self, x, shape):
        attrs = {
            "pool_size": (self.draw.int(1, 3), self.draw.int(1, 3)),
            "strides": (self.draw.int(1, 2), self.draw.int(1, 2)),
            "padding": tuple(self.draw.int(0, 1) for _ in range(4)),
            "dilation": (self.draw.int(1, 2), self.draw.int(1, 2)) if self.draw.chance(20) else (1, 1),
            "ceil_mode": self.draw.chance(10),
            "count_include_pad": self.draw.chance(50),
        }
        if min(_window_out(shape[2:], attrs["pool_size"], attrs)) < 1:  # the window does not fit: a 1x1 one does
            attrs["pool_size"], attrs["dilation"] = (1, 1), (1, 1)
        self.add(self.draw.choice(("max_pool2d", "avg_pool2d")), [x], attrs)


def _broadcasts(shape, target) -> bool:
    """Whether `shape` broadcasts against `target` without changing it."""
    if len(shape) > len(target):
        return False
    return all(d in (1, t) for d, t in zip(shape[::-1], target[::-1]))


def _window_out(hw, window, attrs) -> tuple[int, int]:
    (h, w), (kh, kw) = hw, window
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = attrs["strides"], attrs["padding"], attrs["dilation"]
    ceil = attrs.get("ceil_mode", False)

    def extent(size, k, s, lo, hi, d):
        span = size + lo + hi - d * (k - 1) - 1
        if span < 0:
            return 0
        if not ceil:
            return span // s + 1
        out = -(-span // s) + 1
        return out - 1 if (out - 1) * s >= size + lo else out  # no window may start in the end padding

    return extent(h, kh, sh, pt, pb, dh), extent(w, kw, sw, pl, pr, dw)


# -- the ops: Relax builder, shape, float64 semantics ---------------------------------------------
@dataclass(frozen=True)
class FuzzOp:
    relax: Callable  # (exprs, attrs, dtype) -> Relax expression
    shape: Callable  # (input shapes, attrs) -> output shape
    numpy: Callable  # (float64 arrays, attrs, dtype) -> float64 array
    exact: Callable = lambda attrs: True  # whether `numpy` is known to be TVM's semantics


def _same_shape(shapes, attrs):
    return shapes[0]


def _broadcast_shape(shapes, attrs):
    return tuple(np.broadcast_shapes(*shapes))


def _unary(relax_name: str, fn) -> FuzzOp:
    def make(exprs, attrs, dtype):
        from tvm import relax

        return _resolve(relax.op, relax_name)(exprs[0])

    return FuzzOp(make, _same_shape, lambda xs, attrs, dtype: fn(xs[0]))


def _binary(relax_name: str, fn) -> FuzzOp:
    def make(exprs, attrs, dtype):
        from tvm import relax

        return getattr(relax.op, relax_name)(exprs[0], exprs[1])

    return FuzzOp(make, _broadcast_shape, lambda xs, attrs, dtype: fn(xs[0], xs[1]))


def _resolve(module, dotted: str):
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _softmax(xs, attrs, dtype):
    x, axis = xs[0], attrs["axis"]
    if x.size == 0:
        return x
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _layer_norm(xs, attrs, dtype):
    x, gamma, beta = xs
    axes = tuple(attrs["axes"])
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + attrs["epsilon"]) * gamma + beta


def _conv2d(xs, attrs, dtype):
    x, w = xs
    (sh, sw), (pt, pl, pb, pr), (dh, dw), groups = attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"]
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = _window_out((h, wd), (kh, kw), attrs)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    out = np.zeros((n, o, oh, ow))
    og = o // groups if groups else 0
    for g in range(groups):
        xs_g = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                tap = xs_g[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", tap, w[g * og:(g + 1) * og, :, i, j])
    return out


def _pool_taps(x, attrs, pad_value):
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = attrs["pool_size"], attrs["strides"], attrs["padding"], attrs["dilation"]
    oh, ow = _window_out(x.shape[2:], (kh, kw), attrs)
    # ceil mode: the last windows may reach past the padding; they read more padding
    extra_h = max(0, (kh - 1) * dh + sh * (oh - 1) + 1 - (x.shape[2] + pt + pb))
    extra_w = max(0, (kw - 1) * dw + sw * (ow - 1) + 1 - (x.shape[3] + pl + pr))
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb + extra_h), (pl, pr + extra_w)), constant_values=pad_value)
    for i in range(kh):
        for j in range(kw):
            yield xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]


def _max_pool(xs, attrs, dtype):
    """TVM starts (and pads) the max from the dtype's lowest finite value."""
    taps = list(_pool_taps(xs[0], attrs, -np.inf))
    return np.maximum(np.max(taps, axis=0), np.finfo(dtype).min) if taps[0].size else taps[0]


def _avg_pool(xs, attrs, dtype):
    x = xs[0]
    total = sum(_pool_taps(x, attrs, 0.0))
    if attrs["count_include_pad"]:
        return total / (attrs["pool_size"][0] * attrs["pool_size"][1])
    count = sum(_pool_taps(np.ones((1, 1) + x.shape[2:]), attrs, 0.0))
    return np.where(count > 0, total / np.maximum(count, 1), 0.0)


def _conv_make(exprs, attrs, dtype):
    from tvm import relax

    return relax.op.nn.conv2d(exprs[0], exprs[1], strides=attrs["strides"], padding=attrs["padding"],
                              dilation=attrs["dilation"], groups=attrs["groups"])


def _conv_shape(shapes, attrs):
    (n, c, h, w), (o, _, kh, kw) = shapes
    return (n, o) + _window_out((h, w), (kh, kw), attrs)


def _pool_make(name):
    def make(exprs, attrs, dtype):
        from tvm import relax

        kwargs = {k: attrs[k] for k in ("pool_size", "strides", "padding", "dilation", "ceil_mode")}
        if name == "avg_pool2d":
            kwargs["count_include_pad"] = attrs["count_include_pad"]
        return getattr(relax.op.nn, name)(exprs[0], **kwargs)

    return make


def _pool_shape(shapes, attrs):
    return shapes[0][:2] + _window_out(shapes[0][2:], attrs["pool_size"], attrs)


def _matmul_shape(shapes, attrs):
    a, b = shapes
    return tuple(np.broadcast_shapes(a[:-2], b[:-2])) + a[-2:-1] + b[-1:] if len(b) > 1 else a[:-1]


def _permute_shape(shapes, attrs):
    axes = attrs["axes"] if attrs["axes"] is not None else list(range(len(shapes[0])))[::-1]
    return tuple(shapes[0][a] for a in axes)


def _relax_op(name, *arg_names):
    def make(exprs, attrs, dtype):
        from tvm import relax

        return _resolve(relax.op, name)(*exprs, **{k: attrs[k] for k in arg_names})

    return make


def _clip(x, attrs):
    """TVM's clip: max(min(x, hi), lo) as selects (NaN gives hi)."""
    x = np.where(x < attrs["max"], x, attrs["max"])
    return np.where(x > attrs["min"], x, attrs["min"])


def _reduced_shape(shape, attrs):
    axes = {a % len(shape) for a in attrs["axis"]}
    if attrs["keepdims"]:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _running_max(xs, attrs, dtype):
    """TVM's max: `acc if acc > v else v` in index order from the dtype's lowest finite value."""
    x = xs[0]
    axes = sorted(a % x.ndim for a in attrs["axis"])
    moved = np.moveaxis(x, axes, list(range(x.ndim - len(axes), x.ndim)))
    rows = moved.reshape(moved.shape[: x.ndim - len(axes)] + (-1,))
    acc = np.full(rows.shape[:-1], float(np.finfo(dtype).min))
    for r in range(rows.shape[-1]):
        acc = np.where(acc > rows[..., r], acc, rows[..., r])
    return acc.reshape(_reduced_shape(x.shape, attrs))


def _sliced(x, attrs):
    index = [slice(None)] * x.ndim
    for a, b, e, step in zip(attrs["axes"], attrs["begin"], attrs["end"], attrs["strides"]):
        index[a] = slice(b, e, step)
    return x[tuple(index)]


def _concat_make(exprs, attrs, dtype):
    from tvm import relax

    return relax.op.concat(list(exprs), axis=attrs["axis"])


def _take_make(exprs, attrs, dtype):
    from tvm import relax

    return relax.op.take(exprs[0], relax.const(attrs["index"], "int64"), axis=attrs["axis"])


OPS: dict[str, FuzzOp] = {
    "relu": _unary("nn.relu", lambda x: np.where(x > 0, x, 0.0)),
    "gelu": _unary("nn.gelu", lambda x: 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0)))),
    "tanh": _unary("tanh", np.tanh),
    "sigmoid": _unary("sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x))),
    "exp": _unary("exp", np.exp),
    "silu": _unary("nn.silu", lambda x: x / (1.0 + np.exp(-x))),
    "sqrt": _unary("sqrt", np.sqrt),
    "rsqrt": _unary("rsqrt", lambda x: 1.0 / np.sqrt(x)),
    "clip": FuzzOp(_relax_op("clip", "min", "max"), _same_shape, lambda xs, attrs, dtype: _clip(xs[0], attrs)),
    "leakyrelu": FuzzOp(_relax_op("nn.leakyrelu", "alpha"), _same_shape,
                        lambda xs, attrs, dtype: np.where(xs[0] > 0, xs[0], xs[0] * attrs["alpha"])),
    "divide": _binary("divide", np.divide),
    "sum": FuzzOp(_relax_op("sum", "axis", "keepdims"), lambda s, a: _reduced_shape(s[0], a),
                  lambda xs, attrs, dtype: np.sum(xs[0], axis=tuple(attrs["axis"]), keepdims=attrs["keepdims"])),
    "mean": FuzzOp(_relax_op("mean", "axis", "keepdims"), lambda s, a: _reduced_shape(s[0], a),
                   lambda xs, attrs, dtype: np.mean(xs[0], axis=tuple(attrs["axis"]), keepdims=attrs["keepdims"])),
    "max": FuzzOp(_relax_op("max", "axis", "keepdims"), lambda s, a: _reduced_shape(s[0], a), _running_max),
    "strided_slice": FuzzOp(_relax_op("strided_slice", "axes", "begin", "end", "strides"), lambda s, a: _sliced(np.empty(s[0], np.int8), a).shape,
                            lambda xs, attrs, dtype: _sliced(xs[0], attrs)),
    "take": FuzzOp(_take_make, lambda s, a: s[0][:a["axis"]] + s[0][a["axis"] + 1:],
                   lambda xs, attrs, dtype: np.take(xs[0], attrs["index"], axis=attrs["axis"])),
    "concat": FuzzOp(_concat_make, lambda s, a: np.concatenate([np.empty(x, np.int8) for x in s], a["axis"]).shape,
                     lambda xs, attrs, dtype: np.concatenate(xs, axis=attrs["axis"])),
    "broadcast_to": FuzzOp(_relax_op("broadcast_to", "shape"), lambda s, a: tuple(a["shape"]),
                           lambda xs, attrs, dtype: np.broadcast_to(xs[0], attrs["shape"])),
    "add": _binary("add", np.add),
    "multiply": _binary("multiply", np.multiply),
    "subtract": _binary("subtract", np.subtract),
    "softmax": FuzzOp(_relax_op("nn.softmax", "axis"), _same_shape, _softmax),
    "layer_norm": FuzzOp(_relax_op("nn.layer_norm", "axes", "epsilon"), _same_shape, _layer_norm),
    "matmul": FuzzOp(_relax_op("matmul"), _matmul_shape, lambda xs, attrs, dtype: np.matmul(xs[0], xs[1])),
    "permute_dims": FuzzOp(_relax_op("permute_dims", "axes"), _permute_shape,
                           lambda xs, attrs, dtype: np.transpose(xs[0], attrs["axes"])),
    "reshape": FuzzOp(_relax_op("reshape", "shape"), lambda shapes, attrs: tuple(attrs["shape"]),
                      lambda xs, attrs, dtype: xs[0].reshape(attrs["shape"])),
    "conv2d": FuzzOp(_conv_make, _conv_shape, _conv2d),
    "max_pool2d": FuzzOp(_pool_make("max_pool2d"), _pool_shape, _max_pool, lambda attrs: not attrs["ceil_mode"]),
    "avg_pool2d": FuzzOp(_pool_make("avg_pool2d"), _pool_shape, _avg_pool, lambda attrs: not attrs["ceil_mode"]),
}


# -- users' ops: declared families with a fuzz hook ------------------------------------------------
def is_user_op(name: str) -> bool:
    """Whether a node's op is a user's family (``namespace.op``) rather than a built-in FuzzOp."""
    return "." in name


def user_families() -> list:
    """Declared families outside the ``simaccel`` namespace that have a fuzz hook (the
    modules named in $SIMACCEL_OPS are imported first)."""
    from ....ops import families

    return [f for f in families() if f.namespace != "simaccel" and f.fuzz is not None]


PROBES = 20  # input shapes `drawable_user_families` tries each user family's fuzz hook on


def drawable_user_families(config: Config = Config()) -> list:
    """`user_families()`, each checked to be one `simaccel fuzz` can draw and simaccel offloads:
    in one of the run's dtypes, its hook applies to some of the fuzzer's input shapes (tried on
    `PROBES` seeded draws), Relax takes the call it gives, and simaccel offloads some of those
    calls (its `from_relax` takes them). Otherwise an OpDeclarationError naming the family and why."""
    from ....errors import OpDeclarationError, SimAccelError
    from ....ops import Reject

    found = user_families()
    for family in found:
        dtype = next((d for d in config.dtypes if d in family.dtypes), None)
        if dtype is None:
            raise OpDeclarationError(f"op family {family.name!r}: simaccel fuzz cannot draw it: it takes dtypes "
                                     f"{', '.join(family.dtypes)}, the run draws models in {', '.join(config.dtypes)}")
        kept = []
        for seed in range(PROBES):
            builder = _Builder(Draw.seeded(seed), dataclasses.replace(config, user_ops=False), dtype)
            shape = builder.input_shape()
            builder.param(shape, "x")
            builder.user = [family]
            builder._user(0, shape)  # OpDeclarationError where the hook fails or Relax refuses its call
            node = builder.values[-1]
            if node.op != family.name:
                continue  # the hook does not take this shape
            try:
                UserFuzzOp(family.name).program_attrs([builder.values[a].shape for a in node.args], node.attrs, dtype)
                break
            except OpDeclarationError:
                raise
            except (Reject, SimAccelError) as e:
                kept.append(f"{str(e)} (shape {shape})")
        else:
            why = (f"simaccel keeps every call its fuzz hook gave on TVM, e.g. {kept[0]}" if kept else
                   f"its fuzz hook returned None for each of the {PROBES} input shapes tried")
            raise OpDeclarationError(f"op family {family.name!r}: simaccel fuzz cannot draw it: {why}")
    return found


def fuzz_op(name: str) -> "FuzzOp | UserFuzzOp":
    """The op a node names: a built-in FuzzOp, or a user family (UnsupportedOpError, naming
    $SIMACCEL_OPS, where no family of that name is declared)."""
    op = OPS.get(name)
    if op is not None:
        return op
    if not is_user_op(name):
        raise KeyError(f"unknown fuzz op {name!r}")
    return UserFuzzOp(name)


def _hook_answer(family, answer) -> tuple[dict, dict]:
    """The fuzz hook's (shapes by role, values and Relax kwargs), checked: every other input role
    has a shape, every `relax_value` a value, and a named inner call's kwargs are a dict. A
    value given as a 0-d numpy array (a scalar ``R.const``) is kept as ``{"const": number}``."""
    from ....errors import OpDeclarationError

    def bad(problem):
        return OpDeclarationError(f"op family {family.name!r}: its fuzz hook {problem}")

    try:
        shapes, kwargs = answer
        shapes = {str(r): tuple(int(d) for d in s) for r, s in dict(shapes).items()}
        kwargs = dict(kwargs or {})
    except (TypeError, ValueError) as e:
        raise bad(f"must return (shapes by role, Relax kwargs) or None, got {answer!r}") from e
    missing = [r for r in family.inputs[1:] if r not in shapes]
    if missing:
        raise bad(f"gave no shape for input(s) {missing}")
    values = family.pattern.values()
    missing = [v for v in values if v not in kwargs]
    if missing:
        raise bad(f"gave no value for relax_value(s) {missing} (give each by its name, with the Relax kwargs)")
    for name in values:
        value = kwargs[name]
        if isinstance(value, np.ndarray):
            if value.ndim != 0:
                raise bad(f"gave relax_value {name!r} an array of shape {value.shape}; a constant value is 0-d")
            kwargs[name] = {"const": value.item()}
    for name in _node_names(family):
        if name in kwargs and not isinstance(kwargs[name], dict):
            raise bad(f"gave {kwargs[name]!r} for the inner call {name!r}; its Relax kwargs are a dict")
    return shapes, kwargs


def _node_names(family) -> list[str]:
    """The names of the pattern's named inner calls (whose Relax kwargs a fuzz hook may give)."""
    return [n.name for n in family.pattern.nodes()[1:] if n.name]


def _relax_function(op: str):
    """The Relax builder a pattern node names: ``relax.nn.rms_norm`` -> tvm.relax.op.nn.rms_norm."""
    from tvm import relax

    from ....errors import OpDeclarationError

    if not op.startswith("relax."):
        raise OpDeclarationError(f"pattern op {op!r}: the fuzzer builds only Relax ops (relax.*)")
    try:
        return _resolve(relax.op, op[len("relax."):])
    except AttributeError:
        raise OpDeclarationError(f"pattern op {op!r}: tvm.relax.op has no {op[len('relax.'):]}") from None


def _call(family, node, args, kwargs, dtype, root: bool):
    """The Relax call of pattern node `node` on `args` (its built tensor arguments, `None` where
    the pattern has a value): values from `kwargs` (a ``{"const": number}`` as ``R.const`` of
    `dtype`, anything else as it stands), and the node's Relax kwargs (the root's: every other
    key of `kwargs`; an inner named call's: ``kwargs[name]``)."""
    from tvm import relax

    from ....ops import RelaxValue

    values = family.pattern.values()
    args = [args[i] if not isinstance(a, RelaxValue) else
            relax.const(kwargs[a.name]["const"], dtype) if isinstance(kwargs[a.name], dict) else kwargs[a.name]
            for i, a in enumerate(node.args)]
    if root:
        own = {k: v for k, v in kwargs.items() if k not in values and k not in _node_names(family)}
    else:
        own = kwargs.get(node.name, {}) if node.name else {}
    return _relax_function(node.op)(*args, **own)


def relax_call(family, exprs, kwargs, dtype) -> tuple:
    """The family's pattern applied to `exprs` (one per input role, in order), with the values
    and Relax kwargs a fuzz hook gave (`_hook_answer`). Returns (root call, annotations): the
    named nodes' calls ("root" the outermost) and each value's Relax expression, by name."""
    from ....ops import RelaxPattern, RelaxValue

    by_role = dict(zip(family.inputs, exprs))
    nodes = {}

    def build(node, root: bool):
        args = [build(a, False) if isinstance(a, RelaxPattern) else None if isinstance(a, RelaxValue) else by_role[a]
                for a in node.args]
        call = _call(family, node, args, kwargs, dtype, root)
        for a, expr in zip(node.args, call.args):
            if isinstance(a, RelaxValue):
                nodes[a.name] = expr  # as the Relax call holds it (a number becomes a PrimValue)
        if root or node.name:
            nodes["root" if root else node.name] = call
        return call

    return build(family.pattern, True), nodes


def _placeholders(family, shapes, dtype) -> list:
    from tvm import relax

    return [relax.Var(role, relax.TensorType(tuple(shape), dtype)) for role, shape in zip(family.inputs, shapes)]


def relax_shape(family, shapes, kwargs, dtype) -> tuple[int, ...]:
    """The output shape of the family's Relax call on inputs of `shapes`, by Relax's own shape
    inference; an exception where Relax refuses them or the result is no static-shape tensor."""
    from tvm import relax

    from ....ops import RelaxPattern, RelaxValue

    builder = relax.BlockBuilder()
    by_role = dict(zip(family.inputs, _placeholders(family, shapes, dtype)))

    def infer(node, root: bool):  # node by node, each on variables: no scope to leave open on a refusal
        args = [infer(a, False) if isinstance(a, RelaxPattern) else None if isinstance(a, RelaxValue) else by_role[a]
                for a in node.args]
        ty = builder.normalize(_call(family, node, args, kwargs, dtype, root)).ty
        return ty if root else relax.Var("t", ty)

    ty = infer(family.pattern, True)
    if not isinstance(ty, relax.TensorType) or ty.shape is None or not hasattr(ty.shape, "values"):
        raise ValueError(f"{family.name}: Relax gives {ty}, not a tensor of static shape")
    return tuple(int(d.value) for d in ty.shape.values)


class UserFuzzOp:
    """A user family as a node: `relax`, `shape` and `numpy` like a FuzzOp; the numpy side is the
    family's own reference on the Program attributes its `from_relax` reads from the call."""

    def __init__(self, name: str):
        from ....ops import get_op

        self.name = name
        self.family = get_op(name).family  # UnsupportedOpError (naming $SIMACCEL_OPS) if undeclared

    def relax(self, exprs, attrs, dtype):
        return relax_call(self.family, exprs, attrs, dtype)[0]

    def shape(self, shapes, attrs, dtype: str = "float32"):
        return relax_shape(self.family, shapes, attrs, dtype)

    def program_attrs(self, shapes, attrs, dtype) -> dict:
        """What simaccel's op gets from this call: what partitioning reads from it (the family's
        `from_relax`, through the backend's `program_attrs`); Reject where it stays on TVM."""
        from ...backend.patterns import composite_name, program_attrs, sync_patterns

        params = _placeholders(self.family, shapes, dtype)
        _, nodes = relax_call(self.family, params, attrs, dtype)
        roles = dict(zip(self.family.inputs, shapes))
        spec = sync_patterns()[composite_name(self.name)]
        return program_attrs(spec, nodes, roles, {r: dtype for r in roles})

    def exact_for(self, shapes, attrs, dtype) -> bool:
        """Whether the family's reference states this call's semantics: its `from_relax` takes it."""
        from ....errors import OpDeclarationError, SimAccelError
        from ....ops import Reject

        try:
            self.program_attrs(shapes, attrs, dtype)
        except OpDeclarationError:
            raise  # a from_relax that cannot read this call: the declaration's bug, not a rejection
        except (Reject, SimAccelError):  # the call stays on TVM, as partitioning would say
            return False
        return True

    def numpy(self, xs, attrs, dtype):
        from ....ops import get_op

        op = get_op(self.name)  # looked up each time: a test may plant a fault in the reference
        program = self.program_attrs([x.shape for x in xs], attrs, dtype)
        return op.reference(*xs, **op.all_attrs(program))


# -- cases as JSON (reproductions, Dask tasks) -----------------------------------------------
def case_to_json(case: Case) -> dict:
    return {**dataclasses.asdict(case), "values": [dataclasses.asdict(v) for v in case.values]}


def case_from_json(data: dict) -> Case:
    """The case saved by `case_to_json`; UnsupportedOpError (naming $SIMACCEL_OPS) for a user op
    this process has not declared."""
    values = [Value(**{**v, "shape": tuple(v["shape"]), "args": tuple(v["args"])}) for v in data["values"]]
    case = Case(data["dtype"], values, list(data["outputs"]), int(data["data_seed"]), bool(data["specials"]))
    for op in case.user_ops:
        fuzz_op(op)
    return case

