"""`simaccel build`: a model file (or the demo model) -> an exported library, ready for `simaccel run`.

    simaccel build MODEL.py -o model.so [--target llvm|cuda] [--profile FILE] [--seed N] [--sizes b=2,s=16]
    simaccel build --demo -o demo.so

MODEL.py is a Python file that defines, at module level, a Relax `tvm.IRModule` named `mod`
(or `Module`, the name a TVMScript `@I.ir_module class Module:` gives, as in a fuzz
reproduction's model.py) whose `main` takes tensors of static shapes, or of symbolic ones
whose size vars `--sizes b=2,s=16` gives values for (the library runs at any sizes inside
the bounds; the inputs are made at these); it runs as a script
would, with its folder on sys.path, so it may import a module of users' ops beside it (name
that module in $SIMACCEL_OPS where the library runs). The module is
partitioned for simaccel (the report is printed), built with `build` for the target and
exported to the library; beside it go seeded random inputs (`<lib>.inputs.npz`) and the
outputs of the same module built by TVM alone for the CPU (`<lib>.expect.npz`), so that

    simaccel run model.so --inputs model.inputs.npz --expect model.expect.npz

checks the library right away, here or on another machine (the command printed last adds
float16 tolerances where an output is float16). Every problem with what the
user gives (the file, what it defines, the output paths) is a SimAccelError naming it,
raised before anything is built.
"""

from __future__ import annotations

import os
import runpy
import sys

from ...errors import SimAccelError

MODEL_NAMES = ("mod", "Module")  # looked up in this order in a model file


def output_paths(library: str) -> tuple[str, str]:
    """The inputs and expected-outputs .npz written beside `library` (x.so -> x.inputs.npz, x.expect.npz)."""
    stem = library[: -len(".so")]
    return f"{stem}.inputs.npz", f"{stem}.expect.npz"


def load_model(path: str, sizes: dict | None = None):
    """The Relax IRModule a model file defines (see the module docstring); `sizes` (size var ->
    value) are what its symbolic dims are for the inputs `simaccel build` writes."""
    import tvm
    from tvm import relax

    if not os.path.isfile(path):
        raise SimAccelError(f"model file {path}: " + ("not a file" if os.path.exists(path) else "no such file"))
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:  # as `python MODEL.py` would: modules beside it (a user's ops) import
        sys.path.insert(0, folder)
    try:
        names = runpy.run_path(path, run_name="simaccel_model")
    except SystemExit as e:
        raise SimAccelError(f"model file {path}: exited (status {e.code}) while it was run") from e
    except Exception as e:  # the user's code: its error is the message, the traceback with SIMACCEL_DEBUG=1
        raise SimAccelError(f"model file {path}: running it raised {type(e).__name__}: {e}") from e
    found = [name for name in MODEL_NAMES if name in names]
    if not found:
        raise SimAccelError(f"model file {path} defines no `mod` (or `Module`): assign the Relax IRModule to "
                            f"`mod` at module level, e.g. mod = Module after an @I.ir_module class Module")
    mod = names[found[0]]
    if not isinstance(mod, tvm.IRModule):
        raise SimAccelError(f"model file {path}: `{found[0]}` is a {type(mod).__name__}, not a tvm.IRModule")
    if "main" not in {gv.name_hint for gv in mod.get_global_vars()} or not isinstance(mod["main"], relax.Function):
        raise SimAccelError(f"model file {path}: `{found[0]}` has no Relax function `main`")
    check_sizes(path, mod, sizes)
    return mod


def check_sizes(path: str, mod, sizes: dict | None) -> None:
    """Every dim of main's parameters is static or reads only vars `sizes` gives, each inside the
    bounds main states (`tir_var_*_bound`); SimAccelError naming the parameter or the var.
    `sizes` None: the command takes no --sizes, so every dim must be static."""
    from tvm import relax

    from ..backend.sizes import tensor_dims
    from ..rewrites.types import size_bounds
    from ...shapes import shape_vars

    for param in mod["main"].params:
        shape = tensor_dims(param)[0] if isinstance(param.ty, relax.TensorType) else None
        if shape is None:
            raise SimAccelError(f"model file {path}: main's parameter {param.name} is {param.ty}; simaccel build "
                                f"makes inputs for tensors of known shapes only")
        missing = sorted(shape_vars(shape) - set(sizes or {}))
        if missing and sizes is None:
            raise SimAccelError(f"model file {path}: main's parameter {param.name} is {param.ty}; this command makes "
                                f"inputs for tensors of static shapes only")
        if missing:
            raise SimAccelError(f"model file {path}: main's parameter {param.name} is {param.ty}; give its symbolic "
                                f"sizes with --sizes, e.g. --sizes {','.join(f'{v}=2' for v in missing)}")
    for name, (lower, upper) in size_bounds(mod["main"]).items() if sizes else ():
        if name in sizes and not lower <= sizes[name] <= (upper if upper is not None else sizes[name]):
            raise SimAccelError(f"--sizes {name}={sizes[name]}: outside the bounds [{lower}, {upper}] main gives {name}")


def parse_sizes(text: str | None) -> dict:
    """--sizes 'b=2,s=16' as {'b': 2, 's': 16}; SimAccelError naming the entry that is not NAME=N (N >= 0)."""
    sizes = {}
    for entry in (text or "").split(","):
        if not entry.strip():
            continue
        name, equals, value = (part.strip() for part in entry.partition("="))
        if not equals or not name.isidentifier() or not value.isdigit():
            raise SimAccelError(f"--sizes {text!r}: {entry.strip()!r} is not NAME=N (a size var and an integer >= 0)")
        sizes[name] = int(value)
    return sizes


def module_source(module) -> str:
    """`module` as a runnable Python file: its TVMScript (whose imports TVM prints as comments), then
    ``mod = Module``, as `simaccel build` and `load_model` read model files."""
    imports = ("# from tvm.script import ", "# from typing import ")  # TypeVar: a symbolic module's size vars
    lines = [line[2:] if line.startswith(imports) else line for line in module.script().splitlines()]
    return "\n".join(lines) + "\n\nmod = Module\n"


def build_library(model: str | None, output: str, target: str = "llvm", seed: int = 0, out=print,
                  sizes: dict | None = None) -> int:
    """`simaccel build`: `model` is a model file's path, or None for the demo model; `sizes`: the
    values of its size vars for the inputs written beside the library (one build runs at any)."""
    from .common.arrays import check_writable
    from .deploy import runtime_only

    if not output.endswith(".so"):
        raise SimAccelError(f"-o {output}: the library's name must end in .so (export_library writes a shared library)")
    if runtime_only():
        raise SimAccelError("simaccel build compiles a model, which needs the full TVM (with its compiler); this TVM "
                            "is runtime-only (TVM_USE_RUNTIME_LIB=1)")
    inputs_path, expect_path = output_paths(output)
    for path in (output, inputs_path, expect_path):
        check_writable(path, "-o" if path == output else "output")

    from ..backend.partition import partition_report
    from ..backend.pipeline import build, build_tvm_only, default_target
    from . import models
    from .common.arrays import write_arrays
    from .common.runs import outputs_as_list

    import tvm
    from tvm import relax

    mod = models.demo_cnn() if model is None else load_model(model, sizes)
    _, report = partition_report(mod)
    out(report.format())
    library = build(mod, default_target("cuda" if target == "cuda" else "cpu"))
    library.export_library(output)
    inputs = models.random_inputs(mod, seed, sizes=sizes)
    reference = relax.VirtualMachine(build_tvm_only(mod, default_target("cpu")), tvm.cpu())
    expected = [t.numpy() for t in outputs_as_list(reference["main"](*[tvm.runtime.tensor(a) for a in inputs]))]
    write_arrays(inputs_path, inputs, "output")
    write_arrays(expect_path, expected, "output")
    out(f"wrote {output} (target {target}), {inputs_path} ({len(inputs)} inputs, seed {seed}) and {expect_path} "
        f"({len(expected)} outputs of TVM alone on the CPU)")
    options = " --device cuda" if target == "cuda" else ""
    out(f"check it: simaccel run {output} --inputs {inputs_path} --expect {expect_path}{options}")
    return 0
