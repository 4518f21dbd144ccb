"""Fused epilogues: elementwise ops run in the kernel that produces their input.

Called by the launchers of ops whose family has `epilogue=True` (matmul, dense, conv2d) and by
`launch_group` for chains with no producer, when the launch plan (simaccel/launch_plan.py) fuses
a group of elementwise ops (simaccel/fusion.py) into them. The code for a group is generated
from the ops' declarations (`OpFamily.elementwise`, a scalar function of float32 values), not
written per combination: `device_function(epilogue)` writes one Python function that evaluates
the group's steps in order and compiles it as a Numba device function (cached by the group's
structure), which the producer's kernel calls at its one store point:

    out[i] = epilogue(value, i, e0, e1, e2, d1, d2, d3, inv1, inv2, inv3, s00, ..., s23)

`value` is what the producer would have stored (float32), `i` the flat index of the output
element, e0..e2 the group's other tensors (a per-channel multiplier, a residual), each read
at the element's rank-4 index dotted with its broadcast strides (as the binary kernels do,
kernels/elementwise.py). Scalar constants of the Program are literals of the generated code.
Each step's result is rounded to its op's output dtype before the next reads it, so a fused
group computes exactly what its ops compute one by one. A kernel compiled without a group
gets `IDENTITY`, which returns `value`, and dummy arguments (`args(target, None, out)`).
"""

from __future__ import annotations

import importlib
import inspect
import math
import threading
from dataclasses import dataclass

from numba import types
from numba import cuda, float32
from numba.cuda.extending import overload, register_jitable

from .activation import scalar_function
from .dtypes import ROUNDING, round_bfloat16

from .elementwise import divmod_fast, per_thread
from .grid import RANK, broadcast_strides, dims_of, launch_grid, padded, size

MAX_EXTRAS = 3  # tensors a group reads besides its producer's value
PARAMS = 21  # what `args` gives: 3 arrays, 3 dims, 3 reciprocals, 3 x 4 strides


@register_jitable
def IDENTITY(v, i, e0, e1, e2, d1, d2, d3, inv1, inv2, inv3,
             s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23):
    return v


@register_jitable
def element_index(i, d1, d2, d3, inv1, inv2, inv3):
    """The rank-4 index (i0, i1, i2, i3) of flat index `i` in an output of dims (., d1, d2, d3)."""
    t, i3 = divmod_fast(i, d3, inv3)
    t, i2 = divmod_fast(t, d2, inv2)
    i0, i1 = divmod_fast(t, d1, inv1)
    return i0, i1, i2, i3


_FUNCTIONS: dict = {}
_LOCK = threading.Lock()


def device_function(epilogue):
    """The device function of `epilogue` (a simaccel.fusion.Epilogue), IDENTITY for None;
    one per distinct group structure (`epilogue.key`)."""
    if epilogue is None:
        return IDENTITY
    with _LOCK:
        fn = _FUNCTIONS.get(epilogue.key)
        if fn is None:
            fn = _FUNCTIONS[epilogue.key] = _generate(epilogue)
    return fn


def _scalar_function(spec):
    if callable(spec):
        return spec
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _literal(value) -> str:
    value = float(value)
    if math.isnan(value):
        return "float32(math.nan)"
    if math.isinf(value):
        return f"float32({'-' if value < 0 else ''}math.inf)"
    return f"float32({value!r})"


@overload(round_bfloat16, target="cuda")
def _round_bfloat16_cuda(x):
    """round_bfloat16 in a CUDA kernel: numba-cuda's __nv_bfloat16 from a float32 and back."""
    from numba.cuda.bf16 import bfloat16

    def impl(x):
        return float32(bfloat16(float32(x)))

    return impl


def _generate(epilogue):
    """Write and compile the Python source of `epilogue`'s device function."""
    # `__name__` names the module the generated code's warnings come from (the simulator's
    # float math warns; simaccel.engines.sim silences this module's warnings).
    namespace = {"__name__": __name__, "float32": float32, "float16": types.float16, "math": math,
                 "round_bfloat16": round_bfloat16, "element_index": element_index}
    lines = ["def epilogue(v, i, e0, e1, e2, d1, d2, d3, inv1, inv2, inv3,",
             "             s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23):"]
    if epilogue.extras:
        lines.append("    i0, i1, i2, i3 = element_index(i, d1, d2, d3, inv1, inv2, inv3)")
    for j in range(len(epilogue.extras)):
        lines.append(f"    x{j} = float32(e{j}[i0 * s{j}0 + i1 * s{j}1 + i2 * s{j}2 + i3 * s{j}3])")
    # The producer's value, rounded as its store would round it (not at all where a step of
    # the producer's own, a bias, comes first: `with_bias`).
    lines.append(f"    r0 = {ROUNDING.get(epilogue.producer_dtype, '{}').format('float32(v)')}")
    names = {0: "r0"}
    for k, step in enumerate(epilogue.steps, start=1):
        fn_name = f"f{k}"
        fn = _scalar_function(step.function)
        namespace[fn_name] = register_jitable(fn)
        operands = []
        for kind, what in step.operands:
            if kind == "value":
                operands.append(names[what])
            elif kind == "extra":
                operands.append(f"x{what}")
            else:
                operands.append(_literal(what))
        accepted = inspect.signature(fn).parameters
        keywords = [f"{name}={_literal(value) if isinstance(value, float) else repr(value)}"
                    for name, value in step.attrs if name in accepted]
        call = f"{fn_name}({', '.join(operands + keywords)})"
        lines.append(f"    r{k} = {ROUNDING[step.dtype].format(f'float32({call})')}")
        names[k] = f"r{k}"
    lines.append(f"    return r{len(epilogue.steps)}")
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<simaccel epilogue {epilogue.name}>", "exec"), namespace)
    fn = namespace["epilogue"]
    fn.source = source
    return register_jitable(fn)


_FUSED_KERNELS: dict = {}


def fused_kernel(kind: tuple, epilogue, make):
    """The kernel `make(device_function(epilogue))` for producer kernel `kind`, made once per
    (kind, group structure), and named after both (a kernel's name is its PTX entry)."""
    key = (kind, epilogue.key)
    kernel = _FUSED_KERNELS.get(key)
    if kernel is None:
        fn = device_function(epilogue)
        with _LOCK:
            kernel = _FUSED_KERNELS.get(key)
            if kernel is None:
                kernel = make(fn)
                # The modules whose code the kernel runs besides its own: the steps' functions.
                kernel.step_modules = tuple(sorted({_scalar_function(step.function).__module__
                                                    for step in epilogue.steps}))
                name = f"{kernel.__name__}_fused_{len(_FUSED_KERNELS)}"
                kernel.__name__ = kernel.__qualname__ = name
                twin = getattr(kernel, "simulated_by", None)
                if twin is not None:
                    twin.__name__ = twin.__qualname__ = name
                _FUSED_KERNELS[key] = kernel
    return kernel


@dataclass(frozen=True)
class _Step:  # a step of the kernels' own, with simaccel.fusion.Step's fields
    function: object
    operands: tuple
    attrs: tuple
    dtype: str


@dataclass(frozen=True)
class _Epilogue:  # simaccel.fusion.Epilogue's fields, for `with_bias`
    name: str
    steps: tuple
    extras: tuple
    producer_dtype: object

    @property
    def key(self) -> tuple:
        return (self.steps, self.producer_dtype, len(self.extras))


def _add(lhs, rhs):
    return lhs + rhs


def with_bias(epilogue, bias, act: int, dtype: str):
    """An epilogue that first adds `bias` (an extra tensor, broadcast: e.g. one value per
    output channel as (O, 1, 1)) and applies activation code `act` to the kernel's raw float32
    value, rounds to `dtype` (the producer op's output dtype) and then runs `epilogue`'s
    steps (None: none): for kernels whose own bias runs along the other axis (a pointwise
    convolution on the matmul kernels, whose bias is per column)."""
    head = []
    extras = [bias] if bias is not None else []
    if bias is not None:
        head.append(_Step(_add, (("value", 0), ("extra", 0)), (), "float32"))
    head.append(_Step(scalar_function(act), (("value", len(head)),), (), dtype))
    shift = len(head)
    steps = list(head)
    name = "bias" if bias is not None else "act"
    if epilogue is not None:
        name += "+" + epilogue.name
        offset = len(extras)
        for step in epilogue.steps:
            operands = tuple((kind, what + shift) if kind == "value" and what > 0 else
                             (kind, shift) if kind == "value" else
                             (kind, what + offset) if kind == "extra" else (kind, what)
                             for kind, what in step.operands)
            steps.append(_Step(step.function, operands, step.attrs, step.dtype))
        extras += list(epilogue.extras)
    if len(extras) > MAX_EXTRAS:
        return None
    return _Epilogue(name, tuple(steps), tuple(extras), None)


def args(target, epilogue, out) -> tuple:
    """The PARAMS epilogue arguments a kernel takes after its own, for output `out`: the
    group's extra tensors as 1-D views (a view of `out`, never read, where there are fewer),
    the output's rank-4 dims (., d1, d2, d3) with their reciprocals, and each extra's element
    strides over them (0 on broadcast dims)."""
    shape = dims_of(out.shape)
    flat_out = target.reshape(out, (size(shape),))
    extras = list(epilogue.extras) if epilogue is not None else []
    o4 = padded(shape)
    arrays, strides = [], []
    for e in extras:
        eshape = dims_of(e.shape)
        arrays.append(target.reshape(e, (size(eshape),)))
        strides += broadcast_strides(eshape, o4)
    while len(arrays) < MAX_EXTRAS:
        arrays.append(flat_out)
        strides += [0] * RANK
    d1, d2, d3 = (max(d, 1) for d in o4[1:])
    return (*arrays, d1, d2, d3, 1.0 / d1, 1.0 / d2, 1.0 / d3, *strides)


def _group_kernel(epilogue_fn):
    def kernel(out, total, ilp, e0, e1, e2, d1, d2, d3, inv1, inv2, inv3,
               s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23):
        block = cuda.blockDim.x
        start = cuda.blockIdx.x * block * ilp + cuda.threadIdx.x
        step = cuda.gridDim.x * block * ilp
        while start < total:
            for k in range(ilp):
                i = start + k * block
                if i < total:
                    out[i] = epilogue_fn(float32(0.0), i, e0, e1, e2, d1, d2, d3, inv1, inv2, inv3,
                                         s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23)
            start += step

    kernel.__name__ = "_group_kernel"
    return kernel


def launch_group(target, out, *, epilogue) -> int:
    """out = a group of elementwise ops with no producer (every operand a tensor of the
    region or a constant), one generated kernel; returns the launch count."""
    total = size(out.shape)
    if total == 0:
        return 0
    kernel = fused_kernel(("group",), epilogue, _group_kernel)
    ilp = per_thread(total)
    grid, block = launch_grid(total, ilp)
    target.launch(kernel, grid, block, target.reshape(out, (total,)), total, ilp, *args(target, epilogue, out))
    return 1
