"""A fuzz case: a drawn Relax model (`Case`) as a list of values, with its float64 reference.

Where it sits: what fuzz/draw.py draws and every other part of `simaccel fuzz` reads. A model
is a list of values in creation order: parameters (inputs, weights, biases; a weight may be
bound as a constant) and op nodes reading earlier values, a DAG that ends in one output or a
tuple of several. A node names a built-in op (fuzz/vocabulary.py) or a user family
(``myaccel.rms_norm``, fuzz/user_ops.py): `fuzz_op` gives either. `Case.module()` is the model
in Relax; `Case.reference()` evaluates it in float64 with numpy (rounding each result to the
model's dtype, as TVM and simaccel store them): for built-in ops written independently of
simaccel's own op references; for a user op that op's own reference (what simaccel's `ref`
engine runs too), so it cannot settle a disagreement with TVM (`Case.independent_reference`).
Cases travel as JSON (`case_to_json`, `case_from_json`): reproductions, Dask tasks.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field

import numpy as np

from .user_ops import UserFuzzOp, is_user_op
from .vocabulary import OPS, FuzzOp


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
class Case:
    """A drawn model: its dtype, its values, which of them are its outputs, the seed of its
    inputs' data, and whether its first input holds NaN and inf (`specials`).

    `batch_upper` > 0 makes it symbolic: the first input's leading dim, and every other
    runtime parameter's leading dim of the same size, is a size var `n` in [1, batch_upper]
    (`module()`). `seq_upper` > 0 does the same for axis 1 (a sequence), var `s` in
    [1, seq_upper]. A symbolic case is built once and run at each of `size_points()` (`at`)."""

    dtype: str
    values: list[Value]
    outputs: list[int]
    data_seed: int
    specials: bool = False
    batch_upper: int = 0
    seq_upper: int = 0

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
        sizes = "".join(f", symbolic {what} {var} in [1, {upper}]" for var, (what, _, upper) in self.size_vars().items())
        return f"{self.dtype}, {len(self.params)} params, {len(self.ops)} ops ({kinds}), {len(self.outputs)} output(s){sizes}"

    # -- symbolic sizes -------------------------------------------------------------------------
    def size_vars(self) -> dict[str, tuple[str, int, int]]:
        """The size vars of a symbolic case: name -> (what it is, the first input's axis, upper bound)."""
        found = {"n": ("batch", 0, self.batch_upper), "s": ("sequence", 1, self.seq_upper)}
        return {name: entry for name, entry in found.items() if entry[2]}

    def _var_axes(self, v: Value) -> dict[int, str]:
        """Axis -> size var of parameter `v`'s dims that are a symbolic case's vars: the runtime
        parameters' dims at a var's axis that have the first input's size there."""
        first = self.params[0].shape
        if v.constant:
            return {}
        return {axis: name for name, (_, axis, _) in self.size_vars().items()
                if len(v.shape) > axis and v.shape[axis] == first[axis]}

    def size_points(self) -> list[dict[str, int]]:
        """The sizes a symbolic case runs at: each var at 1, its drawn size, the middle and its
        upper bound, together; and with two vars, each at 1 while the other is at its bound."""
        drawn = {name: self.params[0].shape[axis] for name, (_, axis, _) in self.size_vars().items()}
        uppers = {name: upper for name, (_, _, upper) in self.size_vars().items()}
        points = [{k: 1 for k in drawn}, drawn, {k: (1 + u) // 2 for k, u in uppers.items()}, uppers]
        if len(drawn) == 2:
            points += [{"n": 1, "s": uppers["s"]}, {"n": uppers["n"], "s": 1}]
        unique = {tuple(sorted(p.items())): p for p in points}
        return [unique[k] for k in sorted(unique)]

    def sizes_consistent(self) -> bool:
        """Whether the model means something at each of its size points: its float64 reference
        runs at each. A drawn size that a weight's dim matched by chance (a (5, 8) weight
        contracted with a batch of 5) would change the model's meaning at other sizes."""
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for point in self.size_points():
                    self.at(point).reference()
        except Exception:  # noqa: BLE001 - numpy refuses the shapes: the case stays static
            return False
        return True

    def at(self, point: dict[str, int]) -> "Case":
        """The static case a symbolic one is at `point` (var -> size): the parameters' dims that
        are those vars at those sizes."""
        def sized(v: Value) -> Value:
            axes = self._var_axes(v)
            return dataclasses.replace(v, shape=tuple(point[axes[a]] if a in axes else d for a, d in enumerate(v.shape)))

        values = [sized(v) if v.op is None else v for v in self.values]
        return dataclasses.replace(self, values=values, batch_upper=0, seq_upper=0)

    # -- Relax --------------------------------------------------------------------------------
    def module(self):
        """The model as a Relax module: every parameter is a function parameter (see `constants`)."""
        import tvm
        from tvm import relax

        size_vars = {name: tvm.tirx.Var(name, "int64") for name in self.size_vars()}

        def dims(v: Value) -> tuple:
            axes = self._var_axes(v)
            return tuple(size_vars[axes[a]] if a in axes else d for a, d in enumerate(v.shape))

        params = {i: relax.Var(v.name, relax.TensorType(dims(v), self.dtype))
                  for i, v in enumerate(self.values) if v.op is None}
        attrs = {"tir_var_lower_bound": {name: 1 for name in size_vars},
                 "tir_var_upper_bound": {name: upper for name, (_, _, upper) in self.size_vars().items()}} \
            if size_vars else None
        builder = relax.BlockBuilder()
        with builder.function("main", list(params.values()), attrs=attrs):
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

    def free_of_specials(self) -> list[bool]:
        """Per output, whether its float64 reference is the same with the first input's NaN and
        inf made 0: an output that never reads them (a max over an empty slice of it), which the
        reference settles even in a case with `specials`."""
        arrays = self.arrays()
        plain = [np.where(np.isfinite(a), a, 0).astype(a.dtype) if i == 0 else a for i, a in enumerate(arrays)]
        return [np.array_equal(x, y, equal_nan=True) for x, y in zip(self.reference(arrays), self.reference(plain))]

    def constants(self) -> dict[str, np.ndarray]:
        """Parameters to bind as Relax constants: name -> value."""
        arrays = self.arrays()
        return {v.name: arrays[i] for i, v in enumerate(self.params) if v.constant}

    def arrays(self) -> list[np.ndarray]:
        """Seeded values for every parameter, in order (NaN/inf in the first if `specials`). Each
        parameter has a generator of its own, so its values do not depend on the others' sizes:
        a constant bound once into a symbolic case's build is the same at every size point."""
        arrays = []
        for i, v in enumerate(self.params):
            rng = np.random.default_rng([self.data_seed, i])
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

    def reference(self, arrays: list | None = None) -> list[np.ndarray]:
        """The outputs computed in float64, each op's result rounded to the model's dtype; from
        `arrays` (one per parameter) where given, else from `arrays()`."""
        results = {}
        arrays = iter(self.arrays() if arrays is None else arrays)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # means of empty rows: NaN is the answer
            for i, v in enumerate(self.values):
                if v.op is None:
                    results[i] = next(arrays).astype(np.float64)
                else:
                    y = fuzz_op(v.op).numpy([results[a] for a in v.args], v.attrs, self.dtype)
                    results[i] = np.asarray(y, np.float64).astype(self.dtype).astype(np.float64)
        return [results[i] for i in self.outputs]



# Ops whose attributes hold sizes or indices along the batch: a symbolic batch would change what they mean.
# Attention's keys and values are parameters of their own sizes, which a symbolic query's would not follow.
_NOT_BATCHABLE = {"reshape", "broadcast_to", "take", "strided_slice", "attention"}


def batchable(case: Case) -> bool:
    """Whether `case` can take symbolic sizes (`Case.batch_upper`, `seq_upper`): its first input
    has a leading dim, and no op reads sizes from its attributes."""
    params = case.params
    return bool(params) and len(params[0].shape) > 0 and not params[0].constant and params[0].shape[0] > 0 \
        and not _NOT_BATCHABLE & set(case.ops) and not case.user_ops


def symbolic_twin(case: Case) -> Case:
    """`case` with symbolic sizes, each var's upper bound 2 * its drawn size + 3: a batch and a
    sequence (axis 1, where the first input has rank 3 or more), or a batch alone, whichever
    first means something at every size point (`sizes_consistent`); else `case` as it is."""
    if not batchable(case):
        return case
    shape = case.params[0].shape
    tries = [dataclasses.replace(case, batch_upper=2 * shape[0] + 3)]
    if len(shape) >= 3 and shape[1] > 0:
        tries.insert(0, dataclasses.replace(tries[0], seq_upper=2 * shape[1] + 3))
    return next((twin for twin in tries if twin.sizes_consistent()), case)


def fuzz_op(name: str) -> FuzzOp | UserFuzzOp:
    """The op a node names: a built-in FuzzOp, or a user family (UnsupportedOpError, naming
    $SIMACCEL_OPS, where no family of that name is declared)."""
    op = OPS.get(name)
    if op is not None:
        return op
    if not is_user_op(name):
        raise KeyError(f"unknown fuzz op {name!r}")
    return UserFuzzOp(name)


# -- cases as JSON (reproductions, Dask tasks) -----------------------------------------------
def case_to_json(case: Case) -> dict:
    """The case as JSON; `batch_upper` and `seq_upper` only where set, so a static case's JSON is
    what it was before cases could be symbolic."""
    data = {**dataclasses.asdict(case), "values": [dataclasses.asdict(v) for v in case.values]}
    for key in ("batch_upper", "seq_upper"):
        if not data[key]:
            del data[key]
    return data


def case_from_json(data: dict) -> Case:
    """The case saved by `case_to_json`; UnsupportedOpError (naming $SIMACCEL_OPS) for a user op
    this process has not declared."""
    values = [Value(**{**v, "shape": tuple(v["shape"]), "args": tuple(v["args"])}) for v in data["values"]]
    case = Case(data["dtype"], values, list(data["outputs"]), int(data["data_seed"]), bool(data["specials"]),
                int(data.get("batch_upper", 0)), int(data.get("seq_upper", 0)))
    for op in case.user_ops:
        fuzz_op(op)
    return case

