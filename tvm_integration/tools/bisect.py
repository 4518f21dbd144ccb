"""`simaccel bisect` and `simaccel.debug.bisect`: the first region and op whose result is wrong.

Where it sits: on top of the backend, like `simaccel fuzz`. The model is built with simaccel
(`build`) and with TVM alone (`build_tvm_only`), and run once with simaccel under a
`simaccel.debug.capture.Capture`, which keeps host copies of every region call's inputs, of
every op's output and of the region's outputs (native regions forward to the Python runtime
meanwhile). Then, region call by region call in call order and op by op:

1. the op's numpy reference (`get_op(name).reference`) on the op's captured inputs, against
   its captured output (does the engine compute what the ISA declares?);
2. TVM alone on the same subgraph: the op's composite function in the partitioned module
   (the composite is named after the op, docs/design.md "One name per op") as a one-op Relax
   module, built without simaccel and run on the captured inputs, against the captured output
   (is what the ISA declares what Relax computes?).

The culprit is the first op whose output leaves tolerance against TVM alone; the report says
what its numpy reference gives too. After a region's ops, its outputs are checked against
TVM alone running the whole region (every composite called in turn) on the region's captured
inputs, and at the end the model's outputs against the model built by TVM alone, so a wrong
result the op checks miss (a region's outputs bound wrongly, an error outside regions) is
still reported, at region or at model level.

Results are judged by simaccel.compare's rule for whole outputs, as every tool judges them:
the dtype's tolerance (rtol, and atol times 1 + max |TVM alone|) unless given. For a culprit
a reproducer is written (default a fresh folder `simaccel-bisect-<region>-<op>/` in the
current directory): `module.py` (the one-op module as TVMScript), `inputs.npz` (its
captured inputs), `bisect.json` (what was found, the engine, the device profile, the modules
that declare the users' ops) and `repro.py`, which builds the module with simaccel and with
TVM alone, runs both on the inputs and exits 1 while they differ (0 once they match),
printing the max error. Like a fuzz reproduction it loads the users' ops from the modules
they were declared in (`common.settings.saved_settings`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...compare import Difference as ArrayDifference
from ...shapes import bind_vars, evaluate, shape_text, sizes_text
from ...compare import array_difference, tolerance
from ...engines import ENGINE_NAMES
from ...errors import DtypeError, EngineError, ShapeError, SimAccelError
from ...profile import PROFILE_ENV, DeviceProfile, active_profile
from .build_library import module_source
from .common.runs import run_vm
from .common.settings import saved_settings, user_op_modules

REPORT_FILE = "bisect.json"
REPRO = '''"""Check a simaccel bisect culprit again: python repro.py (exit 1 while simaccel and TVM alone differ)."""
import pathlib
import sys

from simaccel.tvm_integration.tools.bisect import replay

sys.exit(replay(pathlib.Path(__file__).resolve().parent))
'''


# -- what is found ------------------------------------------------------------------------------
class Difference(ArrayDifference):
    """How one result differs from another (simaccel.compare's), its line naming simaccel and TVM alone."""

    def line(self, got: str = "simaccel", want: str = "TVM alone") -> str:
        return super().line(got, want)


@dataclass
class Culprit:
    """The first result that leaves tolerance against TVM alone."""

    level: str  # "op" (one op of a region), "region" (a region's outputs) or "model" (the model's outputs)
    region: str | None  # the region's symbol (None at model level)
    op: str | None  # the op's name (None at region and model level)
    op_index: int | None  # its place in the region's Program
    tensor: str  # the output tensor's name (model level: "output K")
    shape: tuple
    dtype: str
    max_error: float
    where: tuple
    tolerance: tuple  # (rtol, atol); atol is relative to 1 + max |TVM alone|
    got: float | None = None  # simaccel's value at `where`
    want: float | None = None  # TVM alone's value there
    call: int | None = None  # the region call's place among the captured calls
    explanation: str = ""  # op level: what the op's numpy reference says; else what the checks found
    user_op_module: str | None = None  # where the op is declared, for a user's op

    def describe(self) -> str:
        call = "?" if self.call is None else self.call + 1
        where = {"op": f"region {self.region} (call {call}), op {self.op_index} {self.op}, output",
                 "region": f"region {self.region} (call {call}), its output",
                 "model": "the model's"}[self.level]
        return f"{where} {self.tensor}: {self.shape} {self.dtype}"


@dataclass
class BisectReport:
    culprit: Culprit | None
    checked: dict  # {"regions": region calls checked, "ops": ops checked, "calls": region calls captured}
    engine: str
    target: str
    model: list = field(default_factory=list)  # per model output: Difference against TVM alone
    notes: list = field(default_factory=list)  # findings that are not the culprit
    repro_dir: Path | None = None

    def format(self) -> str:
        lines = [f"simaccel bisect: engine {self.engine}, target {self.target}: {self.checked['regions']} of "
                 f"{self.checked.get('calls', self.checked['regions'])} region call(s), {self.checked['ops']} op(s) "
                 f"checked against TVM alone and their numpy references"]
        for i, diff in enumerate(self.model):
            state = "matches TVM alone" if diff.ok else "differs from TVM alone"
            lines.append(f"  model output {i}: {state} ({diff.line()})")
        for note in self.notes:
            lines.append(f"  note: {note}")
        c = self.culprit
        if c is None:
            lines.append("RESULT: every region and op matches TVM alone")
            return "\n".join(lines)
        rtol, atol = c.tolerance
        lines.append(f"culprit: {c.describe()}")
        diff = Difference(False, c.max_error, c.where, c.got, c.want)
        lines.append(f"  {diff.line()} (tolerance rtol {rtol:g}, atol {atol:g} x (1 + max |TVM alone|))")
        if c.explanation:
            lines.append(f"  {'numpy reference: ' if c.level == 'op' else ''}{c.explanation}")
        if c.user_op_module:
            lines.append(f"  user op declared in {c.user_op_module}")
        if self.repro_dir is not None:
            lines.append(f"  reproducer: {self.repro_dir} (python {self.repro_dir / 'repro.py'}: exits 1 while it differs)")
        lines.append("RESULT: MISMATCH")
        return "\n".join(lines)


def difference(got, want, rtol: float, atol: float) -> Difference:
    """`got` against `want` by simaccel.compare's rule for a whole output, and the largest difference."""
    return Difference(**vars(array_difference(got, want, rtol, atol, scaled=True)))


# -- the bisection ------------------------------------------------------------------------------
def bisect(mod, inputs, *, target="llvm", engine=None, rtol=None, atol=None, profile=None, out_dir=None,
           max_bytes=None, log=None) -> BisectReport:
    """Find the first region and op of `mod` (a Relax IRModule whose `main` takes `inputs`) that
    simaccel computes differently from TVM alone (see the module docstring).

    target: "llvm" (the default) or "cuda" (or a tvm.target.Target); engine: the simaccel
    engine to run on (None: the runtime's choice, $SIMACCEL_ENGINE or auto); rtol / atol:
    tolerances (None: simaccel.compare's for each output's dtype); profile: the DeviceProfile to
    partition for (None: the active one); out_dir: where the reproducer goes (None: a fresh
    folder in the current directory); max_bytes: the most host memory the capture may hold
    (simaccel.debug.capture); log: a function given progress lines (None: quiet).
    """
    import tvm

    from ...debug import Capture, watching
    from ...runtime import get_runtime
    from ..backend.partition import partition_report
    from ..backend.pipeline import build, build_tvm_only

    say = log or (lambda line: None)
    if profile is not None and not isinstance(profile, DeviceProfile):
        raise SimAccelError(f"bisect: profile must be a simaccel.DeviceProfile, got {type(profile).__name__}")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (isinstance(value, (int, float)) and np.isfinite(value) and value >= 0):
            raise SimAccelError(f"bisect: {name} {value!r} must be a finite number >= 0")
    if engine is not None and engine not in ("auto", *ENGINE_NAMES):
        raise EngineError(f"bisect: unknown engine {engine!r}; choose one of auto, {', '.join(ENGINE_NAMES)}")
    target = _target(target)
    dev = tvm.device("cuda" if target.kind.name == "cuda" else "cpu", 0)
    arrays = check_inputs(mod, inputs)
    partitioned, partition = partition_report(mod, profile)
    if not partition.regions:
        raise NothingOffloaded(partition)
    say(f"bisect: {len(partition.regions)} region(s) offloaded; building with simaccel and with TVM alone ({target.kind.name})")
    executable = build(mod, target, profile=profile)
    want = run_vm(build_tvm_only(mod, target), arrays, dev)
    runtime = get_runtime()
    capture = Capture(max_bytes)
    with (runtime.use_engine(engine) if engine and engine != "auto" else contextlib.nullcontext()), watching(capture):
        got = run_vm(executable, arrays, dev)
    calls = capture.calls
    engine_name = calls[0].engine if calls else (engine or runtime.engine_name(dev_type(dev)))
    say(f"bisect: ran once on engine {engine_name}: {len(calls)} region call(s) captured ({capture.nbytes} bytes); checking")
    report = BisectReport(None, {"regions": 0, "ops": 0, "calls": len(calls)}, engine_name, str(target.kind.name))
    report.model = [difference(g, w, *tolerance(w.dtype, rtol, atol)) for g, w in zip(got, want)]
    if len(got) != len(want):
        report.notes.append(f"simaccel's build returns {len(got)} outputs, TVM alone's {len(want)}")

    checker = _Checker(partitioned, target, dev, rtol, atol, report, say)
    for capture_call in calls:
        culprit = checker.region(capture_call, len(calls))
        if culprit is not None:
            report.culprit = culprit
            break
    if report.culprit is None:
        bad = [i for i, d in enumerate(report.model) if not d.ok]
        if bad or len(got) != len(want):
            k = bad[0] if bad else 0
            d = report.model[k] if bad else Difference(False, float("inf"), ())
            w = want[k] if k < len(want) else np.zeros(0)
            report.culprit = Culprit("model", None, None, None, f"output {k}", tuple(w.shape), str(w.dtype), d.max_error,
                                     d.where, tolerance(w.dtype, rtol, atol), d.got, d.want,
                                     explanation="every region matches TVM alone on its own inputs; the difference "
                                     "comes from outside them (what TVM computes between regions, or how region "
                                     "outputs are passed on)")
            checker.repro = (mod, arrays, _user_families(partition.regions.values()))
    if report.culprit is not None:
        module, repro_inputs, families = checker.repro or (mod, arrays, _user_families(partition.regions.values()))
        report.repro_dir = write_reproducer(module, repro_inputs, report, families, out_dir, engine, target, profile)
        say(f"bisect: culprit {report.culprit.describe()}; reproducer in {report.repro_dir}")
    return report


def dev_type(dev) -> str:
    return "cuda" if dev.dlpack_device_type() == 2 else "cpu"  # DLPack's kDLCUDA


class NothingOffloaded(SimAccelError):
    """A model of which simaccel runs nothing: every op stays on TVM, so there is nothing to bisect."""

    def __init__(self, partition):
        self.partition = partition
        kept = "; ".join(f"{op}: {reason}" for _, op, reason in partition.kept[:5])
        more = f" (and {len(partition.kept) - 5} more)" if len(partition.kept) > 5 else ""
        super().__init__(f"bisect: nothing was offloaded to simaccel (profile {partition.profile}), so there is "
                         f"nothing to bisect: the whole model runs on TVM alone. Kept on TVM: {kept or 'no op'}{more}")


class _Checker:
    """Checks captured region calls against their numpy references and TVM alone (one per bisection)."""

    def __init__(self, partitioned, target, dev, rtol, atol, report: BisectReport, say):
        self.partitioned, self.target, self.dev = partitioned, target, dev
        self.rtol, self.atol, self.report, self.say = rtol, atol, report, say
        self.built: dict = {}  # module's TVMScript -> its executable built by TVM alone
        self.repro = None  # (module, inputs, user families) of the culprit

    def region(self, capture, total: int) -> Culprit | None:
        from tvm import relax

        name = capture.region
        func = self.partitioned.functions.get(self.partitioned.get_global_var(name)) \
            if name in {gv.name_hint for gv in self.partitioned.get_global_vars()} else None
        if not isinstance(func, relax.Function):
            raise SimAccelError(f"bisect: region {name} ran, but partitioning the model again gives no such region "
                                f"(partitioning is not deterministic here?)")
        program = capture.program
        ops = region_ops(func, program)
        if [op_name_of(c) for c, _, _ in ops] != [node.op for node in program.ops] or \
                [out for _, _, out in ops] != [node.output for node in program.ops]:
            self.report.notes.append(f"region {name}: its Program's ops {[n.op for n in program.ops]} differ from "
                                     f"the partitioned module's composites {[op_name_of(c) for c, _, _ in ops]}")
            ops = None
        self.report.checked["regions"] += 1
        label = f"region {capture.call + 1}/{total} {name}"
        if capture.ops_done < len(program.ops):
            raise SimAccelError(f"bisect: {label}: only {capture.ops_done} of its {len(program.ops)} ops ran")
        for index, node in enumerate(program.ops):
            if ops is None:
                break
            composite, arg_ids, _ = ops[index]
            culprit = self.op(capture, index, composite, arg_ids)
            self.report.checked["ops"] += 1
            if culprit is not None:
                self.say(f"bisect: {label}: op {index} {node.op} differs from TVM alone")
                return culprit
        culprit = self.region_outputs(capture, func)
        self.say(f"bisect: {label}: {len(program.ops)} op(s) " + ("ok" if culprit is None else "ok, but its outputs differ"))
        return culprit

    def op(self, capture, index: int, composite, arg_ids) -> Culprit | None:
        from ...ops import get_op

        node = capture.ops[index]
        spec = capture.spec(node.output)
        got = capture.op_output(index)
        rtol, atol = tolerance(spec.dtype, self.rtol, self.atol)
        op = get_op(node.op)
        try:
            with np.errstate(all="ignore"):
                reference = np.asarray(op.reference(*capture.op_inputs(index), **op.all_attrs(node.attrs))).astype(spec.dtype)
            ref_diff = difference(got, reference, rtol, atol)
        except Exception as e:  # noqa: BLE001 - a user's reference that fails: say so, judge by TVM alone
            reference, ref_diff = None, None
            self.report.notes.append(f"region {capture.region} op {index} {node.op}: its numpy reference failed "
                                     f"({type(e).__name__}: {e})")
        module = one_op_module(composite)
        arrays = [i.value(capture.sizes) if isinstance(i, ShapeArgument) else capture.tensors[i] for i in arg_ids]
        try:
            tvm_out = self.run_tvm(module, arrays)[0]
        except Exception as e:  # noqa: BLE001 - TVM cannot build or run it alone: the reference decides
            self.report.notes.append(f"region {capture.region} op {index} {node.op}: TVM alone cannot run it "
                                     f"({_line(e)}); judged by its numpy reference only")
            if ref_diff is None or ref_diff.ok:
                return None
            tvm_out, diff = reference, ref_diff
            said = "differs from simaccel, and TVM alone cannot run the op"
        else:
            diff = difference(got, tvm_out, rtol, atol)
            if diff.ok:
                if ref_diff is not None and not ref_diff.ok:
                    self.report.notes.append(
                        f"region {capture.region} op {index} {node.op}: simaccel matches TVM alone but not the op's numpy "
                        f"reference ({ref_diff.line('simaccel', 'reference')})")
                return None
            if ref_diff is None:
                said = "failed (see the notes)"
            elif ref_diff.ok:
                said = ("agrees with simaccel: the op's declaration (reference and kernel) computes this, the Relax "
                        "it replaces does not")
            else:
                ref_tvm = difference(reference, tvm_out, rtol, atol)
                said = ("agrees with TVM alone: the engine's kernel differs from its own reference"
                        if ref_tvm.ok else f"differs from both ({ref_diff.line('simaccel', 'reference')})")
        family = op.family
        # An op that takes the region's sizes (a shape argument) is reproduced by the whole model:
        # a reproducer's inputs are arrays only.
        shaped = any(isinstance(i, ShapeArgument) for i in arg_ids)
        self.repro = None if shaped else (module, arrays, [family] if family.namespace != "simaccel" else [])
        return Culprit("op", capture.region, node.op, index, spec.name, tuple(spec.shape), spec.dtype, diff.max_error,
                       diff.where, (rtol, atol), diff.got, diff.want, capture.call, said,
                       declaring_module(family) if family.namespace != "simaccel" else None)

    def region_outputs(self, capture, func) -> Culprit | None:
        from tvm import relax

        from ..backend.sizes import value_dims

        module = region_module(func)
        inputs = iter(capture.inputs())  # the region's parameters: its inputs, and its sizes where it takes them
        arrays = [ShapeArgument(tuple(value_dims(p) or ())).value(capture.sizes) if isinstance(p.ty, relax.ShapeType)
                  else next(inputs) for p in func.params]
        shaped = len(arrays) > len(capture.inputs())
        try:
            wants = self.run_tvm(module, arrays)
        except Exception as e:  # noqa: BLE001
            self.report.notes.append(f"region {capture.region}: TVM alone cannot run the whole region ({_line(e)})")
            return None
        for k, (tensor, got, want) in enumerate(zip(capture.program.outputs, capture.region_outputs(), wants)):
            spec = capture.spec(tensor)
            rtol, atol = tolerance(spec.dtype, self.rtol, self.atol)
            diff = difference(got, want, rtol, atol)
            if not diff.ok:
                self.repro = None if shaped else (module, arrays, _user_families([[n.op for n in capture.ops]]))
                return Culprit("region", capture.region, None, None, spec.name, tuple(spec.shape), spec.dtype,
                               diff.max_error, diff.where, (rtol, atol), diff.got, diff.want, capture.call,
                               f"every op of the region matches TVM alone on its own inputs; its output {k} "
                               f"({spec.name}) as the caller got it does not")
        return None

    def run_tvm(self, module, arrays) -> list[np.ndarray]:
        from ..backend.pipeline import build_tvm_only

        key = module.script()  # equal ops (same shapes, same attributes) build once
        if key not in self.built:
            self.built[key] = build_tvm_only(module, self.target)
        return run_vm(self.built[key], arrays, self.dev)


# -- modules of one op or one region ------------------------------------------------------------
@dataclass(frozen=True)
class ShapeArgument:
    """An argument of a composite call that is the region's shape parameter: its dims, which
    the captured call's size var values make a shape (`RegionCapture.sizes`)."""

    dims: tuple

    def value(self, sizes: dict):
        import tvm

        return tvm.runtime.ShapeTuple([int(evaluate(d, sizes)) for d in self.dims])


def region_ops(func, program) -> list[tuple]:
    """(composite function, tensor ids of its call's arguments, output tensor id) for each composite
    call of a region function, with `program`'s tensor ids (the codegen's): parameters are the
    first tensors, each call's result is its op's output (the Program's own constants sit
    between them and are inside the composites)."""
    from tvm import relax

    from ..backend.codegen import composite_calls
    from ..backend.sizes import value_dims

    # The codegen's tensor ids: tensor parameters first; a shape parameter (the sizes TVM passes a
    # symbolic region) is no tensor, and an argument of it is kept as its dims (`ShapeArgument`).
    tensor_params = [p for p in func.params if not isinstance(p.ty, relax.ShapeType)]
    ids = {param: k for k, param in enumerate(tensor_params)}
    ids.update({p: ShapeArgument(tuple(value_dims(p) or ())) for p in func.params if isinstance(p.ty, relax.ShapeType)})
    outputs = iter(node.output for node in program.ops)
    ops = []
    for binding, composite in composite_calls(func):
        value = binding.value
        if composite is not None:
            args = [ids[a] for a in value.args]
            ids[binding.var] = next(outputs, -1)
            ops.append((composite, args, ids[binding.var]))
        elif isinstance(value, relax.Var) and value in ids:
            ids[binding.var] = ids[value]
    return ops


def op_name_of(composite) -> str:
    from ..backend.patterns import op_name

    return op_name(str(composite.attrs["Composite"]))


def _plain(func, symbol: str | None):
    """`func` with no attributes (a composite's, a region's), public as `symbol` when given."""
    from tvm import relax

    plain = relax.Function(func.params, func.body, func.ret_ty, func.is_pure)
    return plain.with_attr("global_symbol", symbol) if symbol else plain


def one_op_module(composite):
    """The composite function of one op as the `main` of a module of its own."""
    import tvm
    from tvm import relax

    fresh = relax.utils.copy_with_new_vars(composite)
    return tvm.IRModule({"main": _plain(fresh, "main")})


def region_module(func):
    """A region function as `main`, each of its composites a private function it calls."""
    import tvm
    from tvm import relax

    builder = relax.BlockBuilder()
    callees = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.Function):
                name = re.sub(r"\W", "_", op_name_of(binding.value))
                callees[binding.var] = builder.add_func(_plain(relax.utils.copy_with_new_vars(binding.value), None), name)
    params = [relax.Var(p.name, p.ty) for p in func.params]
    values = dict(zip(func.params, params))
    with builder.function("main", params):
        with builder.dataflow():
            for block in func.body.blocks:
                for binding in block.bindings:
                    value = binding.value
                    if isinstance(value, relax.Call) and value.op in callees:
                        values[binding.var] = builder.emit(relax.Call(callees[value.op], [values[a] for a in value.args]),
                                                           binding.var.name)
                    elif isinstance(value, relax.Var) and value in values:
                        values[binding.var] = values[value]
            result = func.body.body
            fields = result.fields if isinstance(result, relax.Tuple) else [result]
            out = [builder.emit_output(values[f]) for f in fields]
        builder.emit_func_output(relax.Tuple(out) if isinstance(result, relax.Tuple) else out[0])
    return tvm.IRModule({gv: f for gv, f in builder.get().functions.items()})


# -- inputs, targets --------------------------------------------------------------------------------
def check_inputs(mod, inputs) -> list[np.ndarray]:
    """`inputs` as numpy arrays, checked against `main`'s parameters (count, shape, dtype)."""
    import tvm
    from tvm import relax

    from ..backend.sizes import tensor_dims

    if not isinstance(mod, tvm.IRModule):
        raise SimAccelError(f"bisect takes a Relax IRModule, got {type(mod).__name__}")
    if "main" not in {gv.name_hint for gv in mod.get_global_vars()} or not isinstance(mod["main"], relax.Function):
        raise SimAccelError("bisect: the module has no Relax function `main`")
    params = list(mod["main"].params)
    if isinstance(inputs, np.ndarray) or not isinstance(inputs, (list, tuple)):
        raise SimAccelError(f"bisect: inputs must be a list of arrays (one per parameter of main), got {type(inputs).__name__}")
    if len(inputs) != len(params):
        raise SimAccelError(f"bisect: main takes {len(params)} inputs ({', '.join(p.name for p in params)}), "
                            f"got {len(inputs)}")
    arrays, dims = [], []
    for param, value in zip(params, inputs):
        shape = tensor_dims(param)[0] if isinstance(param.ty, relax.TensorType) else None
        if shape is None:
            raise SimAccelError(f"bisect: main's parameter {param.name} is {param.ty}; bisect takes tensors of known "
                                "shapes (static, or symbolic: the inputs give the sizes)")
        try:
            array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
        except Exception as e:  # noqa: BLE001
            raise SimAccelError(f"bisect: input {param.name} is not an array ({type(value).__name__}: {e})") from e
        arrays.append(np.ascontiguousarray(array))
        dims.append(shape)
    sizes, _ = bind_vars(((f"input {p.name}", shape, a.shape) for p, shape, a in zip(params, dims, arrays)), "bisect")
    for param, shape, array in zip(params, dims, arrays):
        want_shape, want_dtype = tuple(evaluate(d, sizes) for d in shape), str(param.ty.dtype)
        if array.shape != want_shape:
            raise ShapeError(f"bisect: input {param.name} has shape {array.shape}; main takes {want_shape} {want_dtype}"
                             + (f" ({shape_text(shape)} at {sizes_text(sizes)})" if sizes else ""))
        if str(array.dtype) != want_dtype:
            raise DtypeError(f"bisect: input {param.name} has dtype {array.dtype}; main takes {want_shape} {want_dtype}")
    return arrays


def _target(target):
    import tvm

    from ..backend.pipeline import default_target

    if target in (None, "llvm", "cpu"):
        return default_target("cpu")
    if target == "cuda":
        return default_target("cuda")
    try:
        return target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    except Exception as e:  # noqa: BLE001
        raise SimAccelError(f"bisect: target {target!r}: {_line(e)}") from e


def _line(e: BaseException) -> str:
    from .common.error_line import error_line

    return error_line(e)


# -- reproducers --------------------------------------------------------------------------------
def declaring_module(family) -> str | None:
    """The .py file a user's op family was declared in (its reference's module), or None."""
    module = sys.modules.get(getattr(family.reference, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    return os.path.abspath(path) if path and path.endswith(".py") else None


def _user_families(region_op_lists) -> list:
    """The users' op families of the ops named, once each."""
    from ...ops import get_op

    families = {}
    for ops in region_op_lists:
        for name in ops:
            family = get_op(name).family
            if family.namespace != "simaccel":
                families.setdefault(family.name, family)
    return list(families.values())


def write_reproducer(module, inputs, report: BisectReport, families, out_dir, engine, target, profile) -> Path:
    """module.py, inputs.npz, bisect.json and repro.py for `report`'s culprit; returns the folder."""
    from ... import __version__
    from .common.arrays import write_arrays

    culprit = report.culprit
    if out_dir is None:
        stem = "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", part)[:48] for part in (culprit.region or "model", culprit.op) if part)
        out_dir = Path.cwd() / f"simaccel-bisect-{stem}"
        base, k = out_dir, 2
        while out_dir.exists():
            out_dir, k = Path(f"{base}-{k}"), k + 1
    folder = Path(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SimAccelError(f"bisect: cannot make the reproducer's folder {folder}: {e.strerror or e}") from e
    modules = list(dict.fromkeys([*user_op_modules(), *filter(None, (declaring_module(f) for f in families))]))
    unlocated = [f.name for f in families if declaring_module(f) is None]
    if profile is not None:
        saved_profile = profile.to_dict()
    else:
        saved_profile = active_profile().to_dict() if os.environ.get(PROFILE_ENV) else None
    header = [f"# simaccel bisect: {culprit.describe()}",
              f"# {Difference(False, culprit.max_error, culprit.where, culprit.got, culprit.want).line()}",
              f"# users' ops declared in: {', '.join(modules)} (repro.py loads them)" if modules else ""]
    (folder / "module.py").write_text("\n".join(h for h in header if h) + "\n" + module_source(module))
    write_arrays(folder / "inputs.npz", inputs, "reproducer inputs")
    info = {"culprit": {k: (list(v) if isinstance(v, tuple) else v) for k, v in culprit.__dict__.items()},
            "engine": engine or report.engine, "target": target.kind.name, "simaccel": __version__,
            "tolerance": list(culprit.tolerance), "user_op_modules": modules, "undeclared_user_ops": unlocated,
            "profile": saved_profile}
    (folder / REPORT_FILE).write_text(json.dumps(info, indent=1, default=str))
    (folder / "repro.py").write_text(REPRO)
    return folder


def replay(folder, log=print) -> int:
    """Build a reproducer's module.py with simaccel and with TVM alone, run both on inputs.npz:
    1 while they differ (printing the max error), 0 once they match."""
    import tvm

    from ...runtime import get_runtime
    from ..backend.pipeline import build, build_tvm_only
    from .build_library import load_model
    from .common.arrays import read_arrays

    folder = Path(folder)
    try:
        info = json.loads((folder / REPORT_FILE).read_text())
        modules, engine, target = list(info.get("user_op_modules") or []), info.get("engine"), info["target"]
        rtol, atol = info["tolerance"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SimAccelError(f"{folder}: not a simaccel bisect reproducer ({REPORT_FILE}: {e})") from e
    with saved_settings(modules, info.get("profile"), "bisect repro", log):
        mod = load_model(str(folder / "module.py"))
        arrays = read_arrays(folder / "inputs.npz", "inputs")
        target = _target(target)
        dev = tvm.device("cuda" if target.kind.name == "cuda" else "cpu", 0)
        want = run_vm(build_tvm_only(mod, target), arrays, dev)
        runtime = get_runtime()
        runtime.ledger.reset()
        with runtime.use_engine(engine) if engine and engine != "auto" else contextlib.nullcontext():
            got = run_vm(build(mod, target), arrays, dev)
        ran = sum(runtime.ledger.snapshot()["ops"].values())
    if not ran:
        log("bisect repro: simaccel ran no op: the module no longer offloads here")
    same = len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        diff = difference(g, w, rtol, atol)
        log(f"output {i}: {g.shape} {g.dtype}: {diff.line()} (rtol {rtol:g}, atol {atol:g})")
        same = same and diff.ok
    log("RESULT: match" if same else "RESULT: MISMATCH (simaccel differs from TVM alone)")
    return 0 if same else 1
