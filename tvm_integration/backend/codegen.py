"""The BYOC codegen ``relax.ext.simaccel``: regions -> Programs -> one forwarder module.

`relax.transform.RunCodegen` calls it with every function marked ``Codegen="simaccel"``.
Each region's composite calls become the ops of a Program: inputs are the region's
parameters, outputs its results (DPS outputs at run time), the scalar constants bound into
its composites (partition.bind_scalar_constants) constants of the Program, everything in
between an intermediate. The op's inputs and attributes are read by matching the composite's body
against the same pattern that created it.

For a CUDA target (codegen option `target`, else the current `with target:`), the regions
become native C++ functions that launch kernels compiled ahead of time
(simaccel.tvm_integration.backend.native). Otherwise, or with `native=False`, each region
function forwards its tensors to the Python runtime; that one is compiled by TVM's LLVM
backend (simaccel.tvm_integration.backend.forwarder).
"""

from __future__ import annotations

import json
import logging

import tvm
from tvm import relax

from ...errors import CodegenError, SimAccelError
from ...program import OpNode, Program, SizeVar, TensorSpec
from ...shapes import Dim, shape_vars
from ...native.source import NativeRegion
from ...size_plans import SizePlanError, size_plans
from ...ops import Reject
from ...profile import DeviceProfile, active_profile
from .forwarder import forwarder_module
from .native import gpu_hint, native_choice, native_module
from ..rewrites.types import size_bounds
from .sizes import tensor_dims, value_dims
from .patterns import match_infos, matched_inputs, op_name, program_attrs, sync_patterns

logger = logging.getLogger("simaccel.codegen")


def codegen(functions, options=None, constant_names=None) -> list:
    """Entry point registered as ``relax.ext.simaccel``: returns one runtime module.

    `options` (`RunCodegen({"simaccel": {...}})`): `target` (the build's target), `native`
    (True / False / "auto", default $SIMACCEL_NATIVE or "auto"), `cuda_archs` (the
    architectures native regions carry cubins for, e.g. ``["sm_80", "sm_90"]``; default
    $SIMACCEL_CUDA_ARCHS, else the target's), `profile` (a device profile as JSON text;
    default the active profile) and `sanitize` (True: every region's Program has `sanitize`
    set, so each call of it is sanitized, simaccel.debug.sanitize; default False).
    """
    specs = sync_patterns()  # once per call: every region's composites match against them
    sanitize = sanitize_choice(options)
    programs = [(str(f.attrs["global_symbol"]), f) for f in functions]
    programs = [(symbol, region_program(symbol, f, specs, sanitize)) for symbol, f in programs]
    if not programs:
        return []
    archs = native_choice(options)
    modules = []
    if archs is not None:
        # Native regions: every static region, and each symbolic one whose launches have size
        # plans (simaccel.size_plans); the rest run through the Python runtime (zero-copy, their
        # kernels on the caller's stream), each named in the build's log with its reason.
        native = [(s, p) for s, p in programs if not p.vars or _native_sizes(s, p)]
        if native:
            text = dict(options or {}).get("profile")
            profile = DeviceProfile.from_dict(json.loads(str(text))) if text else active_profile()
            modules.append(native_module([NativeRegion(s, p, profile.alignment) for s, p in native], archs))
        programs = [(s, p) for s, p in programs if (s, p) not in native]
        if not programs:
            return modules
    regions = []
    for symbol, program in programs:
        arity = len(program.inputs) + len(program.outputs) + len(program.shape_args)
        regions.append((symbol, f"{symbol}:{program.fingerprint()}", program.to_json(), arity))
    return modules + [forwarder_module(regions, gpu_hint=gpu_hint(options))]


def _native_sizes(symbol: str, program: Program) -> bool:
    """Whether symbolic region `symbol` can be native: it has size plans and is not built to be
    sanitized (a sanitized call binds its sizes on the Python runtime). Logged where not."""
    if program.sanitize:
        why = "it is built to be sanitized, which a symbolic region is on the Python runtime"
    else:
        try:
            size_plans(program)
            return True
        except SizePlanError as e:
            why = str(e)
    logger.info("region %s has symbolic shapes (%s): a Python region, not a native one: %s", symbol,
                ", ".join(str(v) for v in program.vars), why)
    return False


def sanitize_choice(options) -> bool:
    """The codegen option `sanitize` (True or False, default False)."""
    choice = dict(options or {}).get("sanitize", False)
    if choice not in (True, False):
        raise CodegenError(f"codegen option sanitize={choice!r}: use True or False")
    return bool(choice)


def region_program(symbol: str, func: relax.Function, specs: dict, sanitize: bool = False) -> Program:
    """The validated Program for one region function (`specs`: `sync_patterns()`); `sanitize`:
    its calls run under the sanitizer."""
    tensors: list[TensorSpec] = []
    ids: dict[relax.Var, int] = {}

    def add_tensor(var, role: str) -> int:
        shape, dtype, why = tensor_dims(var)
        if shape is None:
            raise CodegenError(f"region {symbol}: {role} {var.name} has {why} ({var.ty})")
        ids[var] = len(tensors)
        tensors.append(TensorSpec(var.name, shape, dtype))
        return ids[var]

    def add_constant(constant: tvm.ir.GenericConst) -> relax.Var:
        """A 0-d constant as a tensor of the Program (`TensorSpec.value`); a fresh Var stands for it."""
        array = constant.value.numpy()
        var = relax.Var(f"const{len(tensors)}", constant.ty)
        ids[var] = len(tensors)
        tensors.append(TensorSpec(var.name, (), str(array.dtype), array.item()))
        return var

    inputs, shape_args = [], []
    for position, param in enumerate(func.params):
        if isinstance(param.ty, relax.ShapeType):  # sizes TVM passes a symbolic region (`R.shape([s27, s77])`)
            dims = value_dims(param)
            if dims is None:
                raise CodegenError(f"region {symbol}: shape parameter {param.name} has dims simaccel cannot "
                                   f"represent ({param.ty})")
            shape_args.append((position, tuple(dims)))
        else:
            inputs.append(add_tensor(param, "parameter"))
    inputs = tuple(inputs)
    ops: list[OpNode] = []
    for binding, composite in composite_calls(func):
        value = binding.value
        if composite is not None:
            name, role_args, attrs = composite_call(symbol, composite, value.args, specs)
            role_args = [add_constant(a) if isinstance(a, tvm.ir.GenericConst) else a for a in role_args]
            missing = [a for a in role_args if a not in ids]
            if missing:
                raise CodegenError(f"region {symbol}: {name} reads {missing}, which the region does not define")
            output = add_tensor(binding.var, "result")
            ops.append(OpNode(name, tuple(ids[a] for a in role_args), output, attrs))
        elif isinstance(value, relax.Var) and value in ids:
            ids[binding.var] = ids[value]
        else:
            raise CodegenError(f"region {symbol}: cannot offload binding {binding.var.name} = {value}")
    results = func.body.body
    fields = results.fields if isinstance(results, relax.Tuple) else [results]
    try:
        outputs = tuple(ids[f] for f in fields)
    except (KeyError, TypeError):
        raise CodegenError(f"region {symbol}: its result {results} is not a tensor the region computes") from None
    program = Program(symbol, tuple(tensors), inputs, outputs, tuple(ops), sanitize=sanitize,
                      vars=size_vars(func, tensors, ops, shape_args), shape_args=tuple(shape_args))
    try:
        return program.requiring()  # validated, requiring the equalities of sizes its rules need
    except SimAccelError as e:
        raise CodegenError(f"region {symbol}: {e}") from e


def size_vars(func: relax.Function, tensors, ops, shape_args=()) -> tuple[SizeVar, ...]:
    """The size vars the region's dims read, in order of first use, with the bounds its
    `tir_var_*_bound` attributes give (partition copies its caller's)."""
    names = dict.fromkeys(name for t in tensors for d in t.shape if isinstance(d, Dim) for name in sorted(d.vars()))
    for _, dims in shape_args:
        names.update(dict.fromkeys(sorted(shape_vars(dims))))
    for node in ops:
        for value in node.attrs.values():
            if isinstance(value, (list, tuple)):
                names.update(dict.fromkeys(sorted(shape_vars(value))))
    bounds = size_bounds(func)
    return tuple(SizeVar(name, *bounds.get(name, (0, None))) for name in names)


def composite_calls(func: relax.Function):
    """A region function's bindings in order, each with the composite function it calls: (binding,
    composite) for a call of one of the region's composites, (binding, None) for any other
    binding. The bindings that define the composites are not yielded."""
    composites: dict[relax.Var, relax.Function] = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                composites[binding.var] = value
            else:
                called = value.op if isinstance(value, relax.Call) else None
                yield binding, composites.get(called) if isinstance(called, relax.Var) else None


def composite_call(symbol: str, composite: relax.Function, args, specs: dict) -> tuple[str, list, dict]:
    """(op name, region vars in the op's input order, attributes) for one composite call."""
    spec = specs.get(str(composite.attrs["Composite"]))
    name = op_name(str(composite.attrs["Composite"]))
    if spec is None:
        raise CodegenError(f"region {symbol}: composite {name} is not a simaccel op")
    var2val = relax.analysis.get_var2val(composite)
    body = composite.body.body
    matched = spec.pattern.extract_matched_expr(var2val.get(body, body), var2val)
    if matched is None:
        raise CodegenError(f"region {symbol}: composite {name} does not match its own pattern")
    ann = {role: matched[pattern] for role, pattern in spec.annotations.items()}
    param_to_arg = dict(zip(composite.params, args))
    try:
        inputs = matched_inputs(spec.op, ann)
        role_args = []
        for role, expr in inputs:
            if isinstance(expr, tvm.ir.GenericConst) and expr.value.numpy().ndim == 0:
                role_args.append(expr)  # bound by the partition (bind_scalar_constants): the Program holds it
            elif expr in param_to_arg:
                role_args.append(param_to_arg[expr])
            else:
                raise CodegenError(f"region {symbol}: {name} input {role} is not a parameter of its composite")
        attrs = program_attrs(spec, ann, *match_infos(spec.op, [tensor_dims(expr)[:2] for _, expr in inputs]))
    except Reject as e:
        raise CodegenError(f"region {symbol}: {name} cannot be offloaded: {e}") from None
    return name, role_args, attrs
