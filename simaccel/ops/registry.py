"""The op registry: the accelerator's ISA.

Each op has one name used in every layer (op key = Relax pattern name = composite name =
Program op), the names of its inputs, the attributes a Program must carry for it, a
shape/dtype rule, a numpy reference (the oracle for tests and the "ref" engine) and a Numba
CUDA kernel launcher (used by the "sim" and "cuda" engines).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import UnsupportedOpError


@dataclass(frozen=True)
class OpDef:
    """One op of the accelerator.

    Attributes
    ----------
    name:
        Namespaced key, e.g. ``"simaccel.dense_bias_relu"``.
    inputs:
        Input roles in call order, e.g. ``("data", "weight", "bias")``.
    attrs:
        The attributes a Program must give (beyond `fixed`): name -> kind, a checker from
        `simaccel.ops.attrs` that refuses a value of the wrong type or range.
    fixed:
        Attributes fixed by the op variant (e.g. ``{"activation": "relu"}``); passed to the
        reference, the rule and the kernel together with the Program's attributes.
    infer:
        ``infer(shapes, dtypes, **attrs) -> (shape, dtype)``; raises ShapeError / DtypeError.
    reference:
        ``reference(*arrays, **attrs) -> numpy.ndarray``.
    kernel:
        ``kernel(target, out, *arrays, **attrs) -> launches``: launches Numba CUDA kernels
        on a `simaccel.kernels.KernelTarget` and returns how many it launched.
    """

    name: str
    inputs: tuple[str, ...]
    infer: Callable[..., tuple[tuple[int, ...], str]]
    reference: Callable[..., Any]
    kernel: Callable[..., int]
    attrs: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)

    def all_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        return {**attrs, **self.fixed}


_OPS: dict[str, OpDef] = {}


def register_op(name: str, *, inputs, infer, kernel, attrs=None, fixed=None, reference=None):
    """Register an op. Works as a decorator on its numpy reference, or as a plain call.

    Examples
    --------
    ::

        @register_op("simaccel.relu", inputs=("data",), infer=same_shape,
                     kernel=kernel("elementwise", "launch_relu"))
        def relu(data):
            return np.maximum(data, 0)
    """

    def do_register(ref):
        if name in _OPS:
            raise ValueError(f"op {name} is already registered")
        _OPS[name] = OpDef(
            name=name,
            inputs=tuple(inputs),
            infer=infer,
            reference=ref,
            kernel=kernel,
            attrs=dict(attrs or {}),
            fixed=dict(fixed or {}),
        )
        return ref

    if reference is not None:
        return do_register(reference)
    return do_register


def get_op(name: str) -> OpDef:
    """The op registered under `name`; UnsupportedOpError (listing the ISA) if there is none."""
    try:
        return _OPS[name]
    except KeyError:
        raise UnsupportedOpError(
            f"op {name!r} is not in the simaccel ISA; known ops: {', '.join(sorted(_OPS))}"
        ) from None


def list_ops() -> list[str]:
    return sorted(_OPS)
