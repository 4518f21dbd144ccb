"""The imports of simaccel's source files, read from their syntax trees (tests/test_isa.py's layer tests).

An import is counted wherever it is written: at the top of a module, inside a function, under
`if TYPE_CHECKING`, or as a string: the first argument of `importlib.import_module`,
`__import__` or `importlib.util.find_spec`, and any string that names a simaccel module
("simaccel.debug.capture", or "module:attribute" as op declarations name their kernels) or
anything under `simaccel.tvm_integration`.

`CORE_LAYERS` is the floor plan of the core (`simaccel/`, docs/design.md "Floor plan of the
core"): each module sits in one layer and imports only its own layer and the ones below it,
and the modules' imports form no cycle.
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
FOLDERS = {"simaccel": "simaccel", "kernels": "simaccel.kernels", "tvm_integration": "simaccel.tvm_integration"}
TVM_LAYER = "simaccel.tvm_integration"
_IMPORTERS = {"import_module", "__import__", "find_spec"}
_MODULE_STRING = re.compile(r"simaccel(\.\w+)+(:\w+)?")

# The core's floor plan, bottom first: layer name -> its modules (a package stands for its
# __init__ and, with ".*", every module under it). simaccel.kernels sits below every layer.
CORE_LAYERS = (
    ("base", ("simaccel.errors", "simaccel.names", "simaccel.events", "simaccel.provided", "simaccel.shapes",
              "simaccel.requirements")),
    ("ops", ("simaccel.ops", "simaccel.ops.*")),
    ("model", ("simaccel.timing", "simaccel.profile", "simaccel.program", "simaccel.ledger")),
    ("plan", ("simaccel.tensors", "simaccel.fusion", "simaccel.traced", "simaccel.launch_plan", "simaccel.size_plans")),
    ("engines", ("simaccel.engines", "simaccel.engines.*")),
    ("switches", ("simaccel.switches",)),
    ("runtime", ("simaccel.runtime",)),
    ("tools", ("simaccel.debug", "simaccel.debug.*", "simaccel.compare", "simaccel.data", "simaccel.json_file", "simaccel.testing")),
    ("build", ("simaccel.aot", "simaccel.native", "simaccel.native.*")),
    ("facade", ("simaccel",)),
)


def module_files() -> dict[str, pathlib.Path]:
    """Every module of the three installed packages: dotted name -> file."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def imported_names(source: str, module: str, is_package: bool, known: set[str]) -> list[tuple[str, int, str]]:
    """(absolute name, line, kind) of every simaccel name `source` (module `module`) imports;
    kind is "statement", "function" (a statement inside a function) or "string"."""
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    in_function = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function.update(id(inner) for inner in ast.walk(node) if inner is not node)
    found = []
    for node in ast.walk(tree):
        kind = "function" if id(node) in in_function else "statement"
        if isinstance(node, ast.ImportFrom):
            base = _absolute(node.module or "", node.level, package)
            found += [(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base, node.lineno, kind)
                      for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno, kind) for alias in node.names]
        elif isinstance(node, ast.Call) and _called(node.func) in _IMPORTERS and node.args:
            name = _constant(node.args[0])
            if name is not None:
                level = len(name) - len(name.lstrip("."))
                found.append((_absolute(name.lstrip("."), level, package) if level else name, node.lineno, "string"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_STRING.fullmatch(node.value):
            name = node.value.partition(":")[0]
            if name in known or name.startswith(TVM_LAYER):
                found.append((name, node.lineno, "string"))
    return [(name, line, kind) for name, line, kind in found if name == "simaccel" or name.startswith("simaccel.")]


def _absolute(name: str, level: int, package: str) -> str:
    if not level:
        return name
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - level + 1])
    return f"{base}.{name}" if name else base


def _called(func) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _constant(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def module_of(name: str, known: set[str]) -> str:
    """The module an imported name belongs to (`simaccel.ops.get_op` -> `simaccel.ops`)."""
    while name not in known and "." in name:
        name = name.rpartition(".")[0]
    return name


def core_layer(module: str) -> int | None:
    """The index in CORE_LAYERS of a core module; -1 for simaccel.kernels; None for others."""
    if module == "simaccel.kernels" or module.startswith("simaccel.kernels."):
        return -1
    for index, (_, members) in enumerate(CORE_LAYERS):
        for member in members:
            if module == member or (member.endswith(".*") and module.startswith(member[:-1])):
                return index
    return None


def core_graph(sources: dict[str, tuple[str, bool]], known: set[str]) -> dict[str, list[tuple[str, int, str]]]:
    """module -> (imported core module, line, kind) for every core module of `sources`
    (module -> (source text, is a package))."""
    graph = {}
    for module, (source, is_package) in sources.items():
        edges = []
        for name, line, kind in imported_names(source, module, is_package, known):
            target = module_of(name, known)
            if target != module:
                edges.append((target, line, kind))
        graph[module] = edges
    return graph


def floor_plan_violations(sources: dict[str, tuple[str, bool]], known: set[str]) -> list[str]:
    """What breaks the floor plan in `sources`: a core module outside it, an import of a layer
    above the importer's or of the TVM layer, and any cycle of imports among core modules."""
    graph = core_graph(sources, known)
    problems = []
    for module, edges in sorted(graph.items()):
        own = core_layer(module)
        if own is None:
            problems.append(f"{module} is in no layer of the floor plan (tests/import_graph.py CORE_LAYERS)")
            continue
        for target, line, kind in edges:
            layer = core_layer(target)
            if target.startswith(TVM_LAYER):
                problems.append(f"{module}:{line} imports the TVM layer ({target}, {kind})")
            elif layer is not None and layer > own:
                problems.append(f"{module}:{line} imports {target} ({kind}), layer {CORE_LAYERS[layer][0]} above "
                                f"its own, {CORE_LAYERS[own][0]}")
    problems += [f"import cycle: {' -> '.join(cycle)}" for cycle in _cycles(graph)]
    return problems


def _cycles(graph: dict[str, list]) -> list[list[str]]:
    """One cycle through each group of modules that import each other (depth-first search)."""
    done: set[str] = set()
    cycles = []

    def visit(module, path, on_path):
        for target, _, _ in graph.get(module, ()):
            if target in on_path:
                cycles.append(path[path.index(target):] + [target])
            elif target not in done and target in graph:
                on_path.add(target)
                visit(target, path + [target], on_path)
                on_path.discard(target)
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module, [module], {module})
    return cycles


def core_sources() -> tuple[dict[str, tuple[str, bool]], set[str]]:
    """The core's modules (module -> (source, is a package)) and every known module name."""
    files = module_files()
    core = {m: (p.read_text(), p.name == "__init__.py") for m, p in files.items()
            if core_layer(m) != -1 and not m.startswith(TVM_LAYER)}
    return core, set(files)
