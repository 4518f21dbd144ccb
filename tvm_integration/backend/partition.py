"""Partitioning: which parts of a Relax module run on simaccel.

`partition_for_simaccel` fuses every accepted pattern match into a composite function and
merges adjacent composites into one region (a function with ``Codegen="simaccel"``), the
unit the codegen turns into a Program. Every Relax function of the module is partitioned,
whatever its name: TVM's MergeCompositeFunctions reads only a function called "main" and
fails on calls to other functions, so each function is merged in a module of its own
(`merge_regions`). Scalar (0-d) constants go back into their composite functions first
(`bind_scalar_constants`): one a pattern reads as a value (`relax_value`), and one an op takes as
a tensor, which the region then holds itself. `partition_report` says, for every op of every
function, whether it was offloaded and, if not, why.

Symbolic shapes (docs/symbolic-shapes.md): the check functions read the size vars' bounds of
the module (`module_bounds`); fused calls that TVM typed by rank only get their shapes back and
are matched again (`retype_composite_calls`); composites that use size vars their parameters
do not define are passed them as a shape (`define_size_vars`); each region carries its caller's
`tir_var_*_bound` attributes for the codegen.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import tvm
from tvm import relax

from ..rewrites import tensor_info
from ..rewrites.types import size_bounds
from .sizes import dim_of, plain_vars, prim_of, tensor_dims, value_dims
from ...shapes import SymbolicError, evaluate, shape_vars, var_name

from ...errors import SimAccelError
from ...profile import DEFAULT_PROFILE, DeviceProfile, active_profile
from .patterns import Rejection, checking, op_name, registered_patterns, sync_patterns
from ..rewrites import prepare_for_inference
from .split import split_regions


@dataclass
class PartitionReport:
    """What went where: offloaded regions and the ops that stayed on TVM, with reasons."""

    regions: dict[str, list[str]] = field(default_factory=dict)  # region symbol -> composite op names
    kept: list[tuple[str, str, str]] = field(default_factory=list)  # (var, relax op, reason)
    # ops offloaded, but not in the larger pattern that was tried first: (var, pattern, reason)
    apart: list[tuple[str, str, str]] = field(default_factory=list)
    profile: str = DEFAULT_PROFILE.name
    splits: list[str] = field(default_factory=list)  # regions cut to fit the profile's scratchpad
    rewritten: list[str] = field(default_factory=list)  # inference rewrites made before matching (prepare.py)
    backend: str = "simaccel"  # or the partition function of another BYOC backend (tools/backends.py)

    def format(self) -> str:
        lines = [f"offloaded to {self.backend}: {len(self.regions)} region(s)"
                 + (f" (profile {self.profile})" if self.backend == "simaccel" else "")]
        for note in self.rewritten:
            lines.append(f"  rewritten first: {note}")
        for name, ops in self.regions.items():
            short = name if len(name) <= 64 else f"{name[:40]}...{name[-20:]}"  # TVM names a region after all its ops
            lines.append(f"  {short}: {' -> '.join(ops)}")
        for note in self.splits:
            lines.append(f"  split: {note}")
        for var, pattern, reason in self.apart:
            lines.append(f"  {var}: offloaded without {pattern}, which was rejected: {reason}")
        lines.append(f"kept on TVM: {len(self.kept)} op(s)")
        for var, op, reason in self.kept:
            lines.append(f"  {var} = {op}: {reason}")
        return "\n".join(lines)


def partition_for_simaccel(mod: tvm.IRModule, profile: DeviceProfile | None = None) -> tvm.IRModule:
    """Partition `mod` into simaccel regions (functions with ``Codegen="simaccel"``) and TVM code.

    Parameters
    ----------
    mod:
        A Relax module, its shapes static or symbolic (docs/symbolic-shapes.md).
    profile:
        The device profile the check functions read; default: `simaccel.profile.active_profile()`
        ($SIMACCEL_PROFILE, else the default profile), which is also the runtime's default.

    Returns
    -------
    The partitioned module. Run `relax.transform.RunCodegen()` (or use
    `simaccel.tvm_integration.build`) to turn the regions into simaccel Programs.
    """
    return _partition(mod, profile or active_profile(), [])


def partition_report(mod: tvm.IRModule, profile: DeviceProfile | None = None) -> tuple[tvm.IRModule, PartitionReport]:
    """Partition like `partition_for_simaccel` and also say where each op went, and why."""
    rejections: list[Rejection] = []
    splits: list[str] = []
    rewritten: list[str] = []
    profile = profile or active_profile()
    partitioned = _partition(mod, profile, rejections, splits, rewritten)
    report = region_report(partitioned, rejections)
    report.profile, report.splits, report.rewritten = profile.name, splits, rewritten
    return partitioned, report


def _takes_attention(profile: DeviceProfile, probe: tvm.IRModule) -> bool:
    """Whether `profile` offloads everything `probe` computes: the relax.nn.attention the
    inference rewrites would make of an attention chain (rewrites/attention.py), alone in a
    module. Partitioning it applies the very checks a real match meets; a chain whose op would
    stay on TVM stays a chain (never TVM's own legalization of the op instead of it)."""
    _, report = partition_report(probe, profile)
    return bool(report.regions) and not report.kept


def _partition(mod, profile, rejections, splits=None, rewritten=None):
    if not isinstance(mod, tvm.IRModule):
        raise SimAccelError(f"partitioning takes a Relax IRModule, got {type(mod).__name__}")
    if not isinstance(profile, DeviceProfile):
        raise SimAccelError(f"profile must be a simaccel.DeviceProfile, got {type(profile).__name__}")
    profile.check_ops()
    mod, notes = prepare_for_inference(mod, functools.partial(_takes_attention, profile))
    if rewritten is not None:
        rewritten += notes
    with checking(profile, rejections, module_bounds(mod)):
        fuse = relax.transform.FuseOpsByPattern(registered_patterns(), bind_constants=False, annotate_codegen=False)
        fused = fuse(mod)
        for _ in range(RETYPE_PASSES):
            # Calls that TVM typed by rank only while matching get their shapes back, and what
            # read them is matched again (the rejections of the pass before are replaced).
            sized = define_size_vars(fused)
            typed = retype_composite_calls(sized)
            if sized is fused and typed is None:
                break
            del rejections[:]
            fused = fuse(typed or sized)
    bound = bind_scalar_constants(fused)
    merged = merge_regions(bound, mod)
    if _has_broken_region(merged):
        # TVM's MergeCompositeFunctions can drop the binding of a composite that takes a shape
        # argument (a symbolic broadcast_to before an op kept on TVM, grouped with ops after
        # it): the region then reads a var it never defines. Such composites stay on TVM.
        merged = merge_regions(_unfuse_shape_composites(bound, rejections), mod)
    merged, notes = split_regions(merged, profile.max_region_bytes)
    if splits is not None:
        splits += notes
    return merged


BOUND_ATTRS = ("tir_var_lower_bound", "tir_var_upper_bound")
RETYPE_PASSES = 4  # matching passes after the first, at most, while fused calls are retyped


def module_bounds(mod: tvm.IRModule) -> dict:
    """name -> (lower, upper or None) of the size vars the module's Relax functions bound; a
    name bounded in two functions gets the wider bounds of the two."""
    found: dict = {}
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            for name, (lower, upper) in size_bounds(func).items():
                old_lower, old_upper = found.get(name, (lower, upper))
                wider = None if upper is None or old_upper is None else max(upper, old_upper)
                found[name] = (min(lower, old_lower), wider)
    return found


def _with_bounds(region: relax.Function, caller: relax.Function) -> relax.Function:
    """The region with its caller's `tir_var_*_bound` attributes, which the codegen reads for
    the Program's size vars."""
    for name in BOUND_ATTRS:
        value = _attr(caller, name)
        if value is not None:
            region = region.with_attr(name, value)
    return region


def bind_scalar_constants(mod: tvm.IRModule) -> tvm.IRModule:
    """Scalar (0-d) constants of composite calls, bound back into their composite functions.

    FuseOpsByPattern(bind_constants=False) turns every constant of a match into a parameter of its
    composite, so weights reach the region as arguments, as TVM's tensors. Two kinds of scalar
    constant are bound instead:

    * a value the pattern reads (`relax_value`: ``clip``'s bounds, ``x * R.const(2.0)``'s 2.0 in a
      user op): no input of the op; the codegen reads it from the composite's body, as the
      check did (a value that is no constant stays a parameter, and the codegen says so);
    * a 0-d constant the op takes as a tensor (``x * 0.5``): the region's Program holds it
      (`TensorSpec.value`). As an argument it would be a tensor constant of TVM's VM, which TVM
      alone inlines into its kernel; the VM keeps a memory scope for each tensor constant and
      logs them on export and load.
    """
    mod = define_size_vars(mod)
    specs = sync_patterns()
    bound: dict = {}  # composite GlobalVar -> (indices of value parameters, of 0-d parameters)
    for gvar, func in mod.functions.items():
        if not isinstance(func, relax.Function) or not _attr(func, "Composite"):
            continue
        spec = specs.get(str(_attr(func, "Composite")))
        names = spec.op.family.pattern.values() if spec is not None else []
        values = set()
        if names:
            var2val = relax.analysis.get_var2val(func)
            body = func.body.body
            matched = spec.pattern.extract_matched_expr(var2val.get(body, body), var2val)
            if matched is not None:  # else the codegen says so, naming the region
                values = {matched[spec.annotations[name]] for name in names}
        value_indices = [i for i, param in enumerate(func.params) if param in values]
        scalar_indices = [i for i, param in enumerate(func.params) if param not in values and _is_scalar(param)]
        if value_indices or scalar_indices:
            bound[gvar] = (value_indices, scalar_indices)
    if not bound:
        return mod
    binder = _BindScalars(mod, bound)
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and not _attr(func, "Composite"):
            binder.builder_.update_func(gvar, binder.visit_expr(func))
    result = binder.builder_.get()
    for gvar in binder.replaced - binder.still_called:
        del result[gvar]
    return result


def define_size_vars(mod: tvm.IRModule) -> tvm.IRModule:
    """Composites whose parameters do not define every size var they use get one more parameter,
    a shape of those vars (as TVM's own `tir_vars`), and their calls pass it.

    FuseOpsByPattern keeps a symbolic shape value inside the composite (``reshape(x, R.shape([b,
    s, 32]))`` of an x of shape (b * s, 32)); its vars b and s are then defined nowhere in the
    composite, and its call's result loses its shape (``R.Tensor(ndim=3)``). With the vars passed
    in, the call's result is typed (b, s, 32) again, and the region gets them as a shape argument.
    """
    missing = {}
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function) and _attr(func, "Composite"):
            free = list(relax.analysis.free_symbolic_vars(func))
            if free:
                missing[gvar] = free
    if not missing:
        return mod
    updated = {}
    for gvar, free in missing.items():
        func = mod[gvar]
        sizes = relax.Var("sizes", relax.ShapeType(free))
        updated[gvar] = relax.Function(list(func.params) + [sizes], func.body, func.ret_ty, func.is_pure, func.attrs)
    mod = tvm.IRModule({gv: updated.get(gv, f) for gv, f in mod.functions.items()}, attrs=mod.attrs,
                       global_infos=mod.global_infos)
    adder = _PassSizes(mod, missing, updated)
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and not _attr(func, "Composite"):
            adder.builder_.update_func(gvar, adder.visit_expr(func))
    return adder.builder_.get()


def retype_composite_calls(mod: tvm.IRModule) -> tvm.IRModule | None:
    """The module with the results of composite calls that TVM typed by rank only
    (``R.Tensor(ndim=3)``, where the composite's inputs show a size var only inside a product)
    typed by their shapes again, from the composite's own result type and its arguments; None
    where there is none to retype. Ops reading such results can then be matched."""
    composites = {gv: f for gv, f in mod.functions.items() if isinstance(f, relax.Function) and _attr(f, "Composite")}
    updated = {gv: typed for gv, typed in ((gv, _typed_result(f)) for gv, f in composites.items()) if typed is not None}
    changed = bool(updated)
    composites.update(updated)
    for gvar, func in mod.functions.items():
        size_vars = relax.analysis.defined_symbolic_vars(func) if isinstance(func, relax.Function) else ()
        if size_vars and gvar not in composites:  # a function with no size vars has nothing to retype
            retyper = _Retype(mod, composites, {v.name: v for v in size_vars})
            updated[gvar] = retyper.visit_expr(func)
            changed |= retyper.changed
    if not changed:
        return None
    return tvm.IRModule({gv: updated.get(gv, f) for gv, f in mod.functions.items()}, attrs=mod.attrs,
                        global_infos=mod.global_infos)


def _typed_result(composite: relax.Function) -> relax.Function | None:
    """The composite with its result typed by the shape its body gives (``R.Tensor(param_0)``,
    param_0 a shape parameter ``R.Shape([b, s])``: full's and broadcast_to's) where its own result
    type has none, so that TVM types every call of it (in the caller and in the region it ends up
    in) by its arguments; None where there is nothing to add or the dims read vars that its
    parameters do not define."""
    ret = composite.ret_ty
    if not isinstance(ret, relax.TensorType) or _shape_values(ret) is not None:
        return None
    values = _shape_values(composite.body.body.ty)
    dims = value_dims(relax.ShapeExpr(values)) if values is not None else None
    defined = set().union(*(plain_vars(p) for p in composite.params))
    if dims is None or not shape_vars(dims) <= defined:
        return None
    return relax.Function(composite.params, composite.body, relax.TensorType(values, ret.dtype), composite.is_pure,
                          composite.attrs)


@relax.expr_functor.mutator
class _Retype(relax.PyExprMutator):
    """Bindings of composite calls whose result has no shape get a var and a call typed with the
    shape the composite's result type gives for the call's arguments (in the caller's size vars);
    bindings of other calls that read them get the var of the shape TVM now infers."""

    def __init__(self, mod, composites: dict, size_vars: dict):
        super().__init__(mod)
        self.composites, self.size_vars, self.changed = composites, size_vars, False

    def visit_var_binding_(self, binding):
        value = self.visit_expr(binding.value)
        ty = None
        if isinstance(binding.var.ty, relax.TensorType) and tensor_dims(binding.var)[0] is None:
            ty = self._shape_of(value)
            if ty is not None:  # the call is typed too: the matcher reads a var's bound value
                value = relax.Call(value.op, value.args, value.attrs, value.ty_args, value.span, ret_ty=ty)
            elif tensor_dims(value)[0] is not None:  # an op whose inputs were retyped above
                ty = value.ty
        if ty is None:
            self.builder_.emit_normalized(relax.VarBinding(binding.var, value))
            return
        kind = relax.DataflowVar if isinstance(binding.var, relax.DataflowVar) else relax.Var
        typed = kind(binding.var.name, ty)
        self.builder_.emit_normalized(relax.VarBinding(typed, value))
        self.set_var_remap(binding.var, typed)
        self.changed = True

    def _shape_of(self, value):
        if not isinstance(value, relax.Call) or value.op not in self.composites:
            return None
        composite = self.composites[value.op]
        ret = composite.ret_ty
        values = _shape_values(ret)  # given by `_typed_result` where the body states it
        if not isinstance(ret, relax.TensorType) or values is None:
            return None
        names = {}  # the composite's size var -> the dim the call gives it
        for param, arg in zip(composite.params, value.args):
            wanted = value_dims(param) if isinstance(param.ty, relax.ShapeType) else tensor_dims(param)[0]
            given = value_dims(arg) if isinstance(param.ty, relax.ShapeType) else tensor_dims(arg)[0]
            for want, give in zip(wanted or (), given or ()):
                if var_name(want) is not None:
                    names.setdefault(var_name(want), give)
        try:
            dims = [evaluate(dim_of(d), names) for d in values]
            return relax.TensorType([prim_of(d, self.size_vars) for d in dims], ret.dtype)
        except (ValueError, KeyError, SymbolicError):
            return None


def _shape_values(ty):
    """The dims (TIR expressions) of a tensor type's shape: given in it, or the type of the shape
    var it names (``R.Tensor(param_0)`` where param_0: ``R.Shape([b, s, 32])``); None if unknown."""
    shape = ty.shape if isinstance(ty, relax.TensorType) else None
    if isinstance(shape, relax.Var) and isinstance(shape.ty, relax.ShapeType):
        return shape.ty.values
    return getattr(shape, "values", None)


@relax.expr_functor.mutator
class _PassSizes(relax.PyExprMutator):
    """Calls of the composites in `missing` pass a shape of the size vars they lack."""

    def __init__(self, mod: tvm.IRModule, missing: dict, updated: dict):
        super().__init__(mod)
        self.missing, self.updated = missing, updated

    def visit_call_(self, call):
        call = super().visit_call_(call)
        free = self.missing.get(call.op) if isinstance(call.op, tvm.ir.GlobalVar) else None
        if free is None:
            return call
        return relax.Call(call.op, list(call.args) + [relax.ShapeExpr(free)], call.attrs)


def _bound_value(arg, param: relax.Var, func: relax.Function):
    """What a value parameter of a composite is bound to: the constant its call passes, or, for a
    shape (``reshape``'s new shape) whose dims are symbolic, the shape its type states, written
    in the composite's own size vars, where its other parameters' shapes define each of those
    vars (else the shape stays a parameter, a shape argument of the region); None where it is
    neither."""
    if isinstance(arg, tvm.ir.GenericConst):
        return arg
    dims = value_dims(param) if isinstance(param.ty, relax.ShapeType) else None
    if dims is None:
        return None
    defined = {name for p in func.params if not p.same_as(param) for name in plain_vars(p)}
    return relax.ShapeExpr(param.ty.values) if shape_vars(dims) <= defined else None


def _is_shape(param: relax.Var) -> bool:
    return isinstance(param.ty, relax.ShapeType)


def _is_scalar(param: relax.Var) -> bool:
    return tensor_info(param)[0] == ()


@relax.expr_functor.mutator
class _BindScalars(relax.PyExprMutator):
    """Calls of the composites in `bound` lose their scalar constant arguments and call a copy
    of the function with them bound (added to the builder's module; the originals are
    `replaced`). FuseOpsByPattern makes one function of equal matches, whatever their
    constants, so each call gets its own copy (equal constants share one)."""

    def __init__(self, mod: tvm.IRModule, bound: dict):
        super().__init__(mod)
        self.bound, self.replaced, self.still_called = bound, set(), set()

    def visit_call_(self, call):
        call = super().visit_call_(call)
        found = self.bound.get(call.op) if isinstance(call.op, tvm.ir.GlobalVar) else None
        if found is None:
            return call
        value_indices, scalar_indices = found
        func = self.builder_.get()[call.op]
        values = {i: _bound_value(call.args[i], func.params[i], func) for i in value_indices}
        values = {i: v for i, v in values.items() if v is not None or not _is_shape(func.params[i])}
        if any(v is None for v in values.values()):
            self.still_called.add(call.op)  # a value that is no constant: the codegen says so, naming it
            return call
        values.update({i: call.args[i] for i in scalar_indices if isinstance(call.args[i], tvm.ir.GenericConst)})
        indices = sorted(values)
        if not indices:
            self.still_called.add(call.op)
            return call
        self.replaced.add(call.op)
        bound = self.builder_.add_func(func.bind_params({func.params[i]: values[i] for i in indices}),
                                       call.op.name_hint)
        return relax.Call(bound, [a for i, a in enumerate(call.args) if i not in indices], call.attrs)


SHAPE_ARGUMENT_MERGE = ("it takes a shape argument, and TVM's MergeCompositeFunctions dropped such a call from "
                        "a region it made of this function (a var the region never defines)")


def _has_broken_region(mod: tvm.IRModule) -> bool:
    """Whether a region reads a var that it does not define."""
    return any(_attr(f, "Codegen") and relax.analysis.free_vars(f) for f in mod.functions.values()
               if isinstance(f, relax.Function))


def _unfuse_shape_composites(mod: tvm.IRModule, rejections: list) -> tvm.IRModule:
    """`mod` with each call of a one-op composite that takes a shape argument replaced by the op
    itself (each such op kept on TVM, with a Rejection saying why)."""
    shaped = {gv for gv, f in mod.functions.items()
              if isinstance(f, relax.Function) and _attr(f, "Composite") and any(_is_shape(p) for p in f.params)
              and len(f.body.blocks) == 1 and len(f.body.blocks[0].bindings) == 1
              and not relax.analysis.free_symbolic_vars(f)}
    if not shaped:
        return mod
    unfuse = _Unfuse(mod, shaped, rejections)
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and not _attr(func, "Composite"):
            unfuse.builder_.update_func(gvar, unfuse.visit_expr(func))
    return unfuse.builder_.get()


@relax.expr_functor.mutator
class _Unfuse(relax.PyExprMutator):
    """Calls of the composites in `shaped` become their one op, on the call's arguments."""

    def __init__(self, mod, shaped, rejections):
        super().__init__(mod)
        self.mod, self.shaped, self.rejections = mod, shaped, rejections

    def visit_var_binding_(self, binding):
        value = self.visit_expr(binding.value)
        if isinstance(value, relax.Call) and value.op in self.shaped:
            composite = self.mod[value.op]
            inner = composite.body.blocks[0].bindings[0].value
            args = {p: a for p, a in zip(composite.params, value.args)}
            value = relax.Call(inner.op, [args.get(a, a) for a in inner.args], inner.attrs, inner.ty_args)
            self.rejections.append(Rejection(binding.var.name, _attr(composite, "Composite"), SHAPE_ARGUMENT_MERGE))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(value)))


def merge_regions(mod: tvm.IRModule, original: tvm.IRModule) -> tvm.IRModule:
    """MergeCompositeFunctions for every public Relax function of `mod` that calls composites.

    Private functions get their `original` bodies back: TVM's RunCodegen rewrites region
    calls only in public functions, so a region in a private one would never be compiled.
    """
    composites = {gv for gv, f in mod.functions.items() if _attr(f, "Composite")}
    rest = {gv: f for gv, f in mod.functions.items() if gv not in composites}
    for gvar, func in rest.items():
        if _private(func):
            rest[gvar] = original[gvar.name_hint]
    builder = relax.BlockBuilder(tvm.IRModule(rest, attrs=mod.attrs, global_infos=mod.global_infos))
    for gvar, func in rest.items():
        if not isinstance(func, relax.Function) or _private(func) or _attr(func, "Codegen"):
            continue
        if not _calls(func, composites):
            continue
        # Calls of other functions, which MergeCompositeFunctions cannot group, go behind
        # placeholder extern calls while it runs, and come back after.
        others = [gv for gv in relax.analysis.all_global_vars(func) if gv not in composites and gv in rest]
        hidden = {gv.name_hint: relax.ExternFunc(f"simaccel.hidden.{gv.name_hint}") for gv in others}
        alone = {gv: f for gv, f in mod.functions.items() if gv in composites or not isinstance(f, relax.Function)}
        entry = tvm.ir.GlobalVar("main")
        casts = _HideFromMerge(func)
        alone[entry] = casts.visit_expr(_SwapCallees(hidden).visit_expr(func))
        grouped = relax.transform.MergeCompositeFunctions()(tvm.IRModule(alone))
        grouped[entry] = _RestoreHidden(casts.hidden, casts.relax_vars).visit_expr(grouped[entry])
        called = set(relax.analysis.all_global_vars(grouped[entry]))  # dead code may leave regions behind
        restore = {placeholder.global_symbol: gv for gv, placeholder in zip(others, hidden.values())}
        for region_gvar, region in grouped.functions.items():
            if _attr(region, "Codegen") and region_gvar in called:
                region = _with_bounds(region, func)
                new_gvar = builder.add_func(region, region_gvar.name_hint)  # a unique name
                builder.update_func(new_gvar, region.with_attr("global_symbol", new_gvar.name_hint))
                restore[region_gvar.name_hint] = new_gvar
        builder.update_func(gvar, _SwapCallees(restore).visit_expr(grouped[entry]))
    merged = builder.get()
    if any(_attr(f, "Codegen") for f in merged.functions.values()) and HOST_ANCHOR not in merged.global_var_map_:
        merged[HOST_ANCHOR] = _host_anchor()
    return merged


HOST_ANCHOR = "simaccel_host_anchor"


def _host_anchor():
    """An empty public TIR function, so that TVM links the executable's host code with LLVM.

    A module whose every op went to simaccel has no TIR of its own; TVM then makes its host
    library an empty C source module, which `VirtualMachine` compiles with the C++ compiler
    on first use (`Executable.jit`, with no lock: threads creating their first VMs at once
    crash in it). One TIR function keeps the host library an LLVM module, like TVM's own.
    """
    from tvm import tirx

    anchor = tirx.PrimFunc([], tirx.Evaluate(0))
    return anchor.with_attrs({"global_symbol": HOST_ANCHOR, "tirx.is_scheduled": True})


@relax.expr_functor.mutator
class _SwapCallees(relax.PyExprMutator):
    """Replaces the callee of every call whose callee is named in `callees` (name -> callee)."""

    def __init__(self, callees: dict):
        super().__init__()
        self.callees = callees

    def visit_call_(self, call):
        call = super().visit_call_(call)
        callee = call.op
        name = callee.global_symbol if isinstance(callee, relax.ExternFunc) else getattr(callee, "name_hint", None)
        replacement = self.callees.get(name)
        if replacement is None:
            return call
        if isinstance(replacement, relax.ExternFunc):  # an extern call says what it returns
            return relax.Call(replacement, call.args, call.attrs, [call.ty])
        return relax.Call(replacement, call.args, call.attrs)


MATCH_CAST = "simaccel.hidden_cast"  # not simaccel.hidden.*, the hidden callees' (a function may be named anything)
HIDDEN_CALL = "simaccel.hidden_call"


@relax.expr_functor.mutator
class _HideFromMerge(relax.PyExprMutator):
    """What MergeCompositeFunctions cannot take, each as a placeholder extern call of the same
    struct info, which it treats as an op it cannot group:
    * a MatchCast binding (`t = R.match_cast(x, R.Tensor((1, n)))`, which names a new size
      var): it refuses those ("Invalid type: relax.expr.MatchCast");
    * a call that takes a size var itself as an argument (`R.arange(0, n, 1)`: TVM 0.27's
      Relax and TIR vars are one type, and the pass looks `n` up as a Relax var it has not
      seen: "memo_.count" fails). The placeholder keeps the call's Relax arguments, so what it
      reads still comes first.
    `hidden`: placeholder name -> the struct info cast to, or the call hidden."""

    def __init__(self, func: relax.Function):
        super().__init__()
        self.hidden: dict[str, object] = {}
        bound = [b.var for block in getattr(func.body, "blocks", []) for b in block.bindings]
        self.relax_vars = _VarSet([*func.params, *bound])

    def visit_match_cast_(self, binding):
        name = f"{MATCH_CAST}.{len(self.hidden)}"
        self.hidden[name] = binding.ty
        value = relax.Call(relax.ExternFunc(name), [self.visit_expr(binding.value)], None, [binding.ty])
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(value)))

    def visit_var_binding_(self, binding):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and \
                any(not self.relax_vars.holds(v) for v in _arg_vars(value.args)):
            name = f"{HIDDEN_CALL}.{len(self.hidden)}"
            self.hidden[name] = value
            kept = [self.visit_expr(a) for a in value.args if self.relax_vars.holds(a)]
            placeholder = relax.Call(relax.ExternFunc(name), kept, None, [binding.var.ty])
            self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(placeholder)))
            return
        super().visit_var_binding_(binding)


@relax.expr_functor.mutator
class _RestoreHidden(relax.PyExprMutator):
    """`_HideFromMerge` undone: each placeholder call is its MatchCast binding or its call again."""

    def __init__(self, hidden: dict, relax_vars: set):
        super().__init__()
        self.hidden = hidden
        self.relax_vars = relax_vars  # the hidden calls' arguments that are Relax vars, not size vars

    def visit_var_binding_(self, binding):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, relax.ExternFunc) and value.op.global_symbol in self.hidden:
            hidden = self.hidden[value.op.global_symbol]
            if isinstance(hidden, relax.Call):  # its Relax arguments are the placeholder's, in order
                given = iter(self.visit_expr(a) for a in value.args)
                args = [next(given) if self.relax_vars.holds(a) else a for a in hidden.args]
                call = relax.Call(hidden.op, args, hidden.attrs, hidden.ty_args)
                self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(call)))
                return
            self.builder_.emit_normalized(relax.MatchCast(binding.var, self.visit_expr(value.args[0]), hidden))
            return
        super().visit_var_binding_(binding)


class _VarSet:
    """Vars by identity (`in` on a set would compare them with `==`, which builds an expression
    for a size var)."""

    def __init__(self, variables):
        self.by_hash = {hash(v): v for v in variables}

    def holds(self, expr) -> bool:
        found = self.by_hash.get(hash(expr)) if isinstance(expr, relax.Var) else None
        return found is not None and found.same_as(expr)


def _arg_vars(args) -> list:
    """The vars among call arguments, inside tuples too."""
    found = []
    for arg in args:
        if isinstance(arg, relax.Var):
            found.append(arg)
        elif isinstance(arg, relax.Tuple):
            found += _arg_vars(arg.fields)
    return found


def _private(func) -> bool:
    """A Relax function without a global symbol (not a composite or a region)."""
    return isinstance(func, relax.Function) and not _attr(func, "global_symbol")


def _attr(func, name: str):
    return func.attrs.get(name) if getattr(func, "attrs", None) else None


def _calls(func, gvars) -> bool:
    return any(isinstance(e, tvm.ir.GlobalVar) and e in gvars for e in relax.analysis.all_global_vars(func))


def region_report(mod, rejections, codegen: str | None = "simaccel",
            unmatched: str = "simaccel has no pattern for {op}") -> PartitionReport:
    """The report on a partitioned module: its regions (functions whose Codegen is `codegen`;
    None: any) and every op left out, with the reason its rejection gave, else `unmatched`."""
    report = PartitionReport()
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function) and _attr(func, "Codegen") and codegen in (None, _attr(func, "Codegen")):
            report.regions[gvar.name_hint] = _composites(func)
    reasons: dict[str, str] = {}
    # The most fused pattern is checked first: keep its reason; an op's own patterns' reasons
    # before those of a larger pattern it is an inner call of.
    for r in sorted(rejections, key=lambda r: r.inner):
        reasons.setdefault(r.var, f"{r.pattern} rejected: {r.reason}")
    entries = [(gv, f) for gv, f in mod.functions.items() if isinstance(f, relax.Function) and not _attr(f, "Codegen")]
    for gvar, func in sorted(entries, key=lambda e: e[0].name_hint != "main"):
        prefix = "" if len(entries) == 1 else f"{gvar.name_hint}."
        for block in func.body.blocks:
            for binding in block.bindings:
                value = binding.value
                if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                    name = binding.var.name
                    if _private(func):
                        reason = f"in private function {gvar.name_hint} (TVM's RunCodegen compiles regions of public functions only)"
                    elif not isinstance(block, relax.DataflowBlock):
                        reason = "outside a dataflow block (TVM fuses patterns only inside R.dataflow())"
                    else:
                        reason = reasons.get(name, unmatched.format(op=value.op.name))
                    report.kept.append((prefix + name, value.op.name, reason))
    # A larger pattern refused where a smaller one then took the op: say so, once per var (the
    # first rejection, the most fused pattern). `named`: vars kept on TVM or already said.
    named = {var.rsplit(".", 1)[-1] for var, _, _ in report.kept}
    for r in rejections:
        if r.var not in named and not r.inner:
            named.add(r.var)
            report.apart.append((r.var, r.pattern, r.reason))
    return report


def _composites(region: relax.Function) -> list[str]:
    names = []
    for block in region.body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.Function) and binding.value.attrs and "Composite" in binding.value.attrs:
                names.append(op_name(str(binding.value.attrs["Composite"])))
    return names
