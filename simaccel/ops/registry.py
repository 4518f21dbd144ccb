"""The op registry: the accelerator's ISA, filled by `declare`.

Every layer reads ops from here under one name (op key = Relax pattern name = composite
name = Program op). Ops declared outside the package are loaded from the modules named in
$SIMACCEL_OPS (module names or .py paths, comma-separated) the first time the registry is
read, so a fresh process that runs an exported library, `simaccel ops` and the fuzzer's
workers know them too.

`declared(...)` is a with-block in which ops are declared and after which they are forgotten
(tests declare their own ops that way: `simaccel.testing`). Forgetting ops bumps `generation()`,
which the runtime reads: what it resolved before (Programs, plans, launch plans) may name ops
that are gone or declared anew, so it drops them.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import threading

from ..errors import OpDeclarationError, UnsupportedOpError
from .declare import OpDef, OpFamily

USER_OPS_ENV = "SIMACCEL_OPS"

_OPS: dict[str, OpDef] = {}
_FAMILIES: dict[str, OpFamily] = {}
_LOCK = threading.RLock()
_loaded_env: str | None = None
_generation = 0  # bumped whenever ops are forgotten
_DECLARERS: set[str] = set()  # names of the modules that declared ops (`_forget_modules` drops them)


def generation() -> int:
    """A number that changes whenever declared ops are forgotten (a `declared` block ends)."""
    return _generation


def declare(family: OpFamily) -> OpFamily:
    """Add `family` and its variants to the ISA; returns it. OpDeclarationError if it is
    malformed or a name is taken. Declaring the very same family again is a no-op (a module
    imported twice)."""
    if not isinstance(family, OpFamily):
        raise OpDeclarationError(f"declare takes a simaccel.ops.OpFamily, got {type(family).__name__}")
    family.check()
    with _LOCK:
        if _FAMILIES.get(family.name) is family:
            return family
        variants = family.variants()
        taken = [op.name for op in variants if op.name in _OPS or op.name in _FAMILIES]
        if taken or family.name in _FAMILIES:
            raise OpDeclarationError(f"op family {family.name!r}: the names {taken or [family.name]} are already declared")
        _FAMILIES[family.name] = family
        for op in variants:
            _OPS[op.name] = op
        _DECLARERS.add(_declaring_module())
    return family


def _declaring_module() -> str:
    """The name of the module whose code called `declare` (the first frame outside the ISA's package)."""
    package = __name__.rpartition(".")[0] + "."  # the ISA's own modules
    frame = sys._getframe(2)
    while frame is not None and (frame.f_globals.get("__name__", "") + ".").startswith(package):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "") if frame is not None else ""


@contextlib.contextmanager
def declared(*families: OpFamily):
    """Declare `families` for the duration of a with-block; yields them (the one family when one).

    Every op declared inside the block, by these or any other declaration (a module imported
    meanwhile, $SIMACCEL_OPS read anew), is forgotten after it: the ISA is as it was before,
    the runtime's plans (which hold resolved ops) are dropped at its next call (`generation`),
    and users' modules imported inside the block leave `sys.modules`, so importing one again
    declares its ops again. The ISA is process-wide: do not declare from other threads while a
    block is open.
    """
    global _OPS, _FAMILIES, _loaded_env, _generation
    with _LOCK:
        saved = _OPS, _FAMILIES, _loaded_env
        _OPS, _FAMILIES = dict(_OPS), dict(_FAMILIES)
    modules = set(sys.modules)
    try:
        for family in families:
            declare(family)
        yield families[0] if len(families) == 1 else families
    finally:
        with _LOCK:
            _OPS, _FAMILIES, _loaded_env = saved
            _generation += 1
        _forget_modules(set(sys.modules) - modules)


def _forget_modules(names: set[str]) -> None:
    """Drop from sys.modules the modules among `names` (imported inside a `declared` block) that
    declared ops: importing one again declares its ops again. Nothing else is dropped: a module
    that is imported again runs again, and numba-cuda's own modules, run twice, register their
    typing twice ("cannot augment class(float32)", seen where packages live outside
    site-packages, on $PYTHONPATH)."""
    for name in names & _DECLARERS:
        if not (name + ".").startswith("simaccel."):
            sys.modules.pop(name, None)
            _DECLARERS.discard(name)


def get_op(name: str) -> OpDef:
    """The op registered under `name`; UnsupportedOpError (listing the ISA) if there is none."""
    op = _OPS.get(name)
    if op is None:
        load_user_ops()
        op = _OPS.get(name)
    if op is None:
        hint = "" if "." not in name or name.startswith("simaccel.") else (
            f"; if {name.split('.')[0]} ops are declared in your own module, name it in ${USER_OPS_ENV}")
        raise UnsupportedOpError(f"op {name!r} is not in the simaccel ISA{hint}; known ops: {', '.join(sorted(_OPS))}")
    return op


def list_ops() -> list[str]:
    load_user_ops()
    return sorted(_OPS)


def families() -> list[OpFamily]:
    """Every declared family, in declaration order (built-in ones first)."""
    load_user_ops()
    return list(_FAMILIES.values())


def user_op_entries(value: str | None = None) -> list[str]:
    """The entries of $SIMACCEL_OPS (or of `value`): module names or .py paths, comma- or
    os.pathsep-separated."""
    value = os.environ.get(USER_OPS_ENV, "") if value is None else value
    return [e.strip() for e in value.replace(os.pathsep, ",").split(",") if e.strip()]


def load_user_ops() -> None:
    """Import the modules named in $SIMACCEL_OPS (once per value of the variable)."""
    global _loaded_env
    value = os.environ.get(USER_OPS_ENV, "")
    if value == _loaded_env:
        return
    with _LOCK:
        if value == _loaded_env:
            return
        for entry in user_op_entries(value):
            _import(entry)  # a failure raises now and again on the next read, never silently
        _loaded_env = value


def _import(entry: str) -> None:
    try:
        import_entry(entry)
    except OpDeclarationError:
        raise
    except Exception as e:
        raise OpDeclarationError(f"${USER_OPS_ENV}: cannot load {entry!r}: {type(e).__name__}: {e}") from e


def import_entry(entry: str):
    """The module `entry` names: a module name, or a .py file's path (also the form
    `--partition` takes before its ':function')."""
    return _import_file(os.path.abspath(entry)) if entry.endswith(".py") else importlib.import_module(entry)


def _import_file(path: str):
    """Import a .py file as the module its name says (as `import name` beside it would), so
    that a script importing it too does not declare its ops a second time."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {path}")
    name = os.path.splitext(os.path.basename(path))[0]
    loaded = sys.modules.get(name)
    if loaded is not None:
        if os.path.abspath(getattr(loaded, "__file__", "") or "") == path:
            return loaded
        name = "simaccel_user_ops_" + "".join(c if c.isalnum() else "_" for c in path)  # another module's name
        if name in sys.modules:
            return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
