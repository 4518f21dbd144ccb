"""The README and docs/ say what the repository holds, so they cannot drift from it.

Every repository path they name exists (and every file name they mention is one of the
repository's); the repository tree (docs/repository.md) lists every source file of the three
packages; code blocks that quote an example are that example's text; the example outputs they
show are what the examples print; the op table (docs/isa.md) is the ISA `simaccel ops` lists;
the attribute kinds and activations they list are the ones the code has; the README stays a
newcomer's first page, under 200 lines.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import forks

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TREE = ROOT / "docs" / "repository.md"  # the repository tree, a file per line
ISA = ROOT / "docs" / "isa.md"  # the op table
PACKAGES = ("simaccel", "kernels", "tvm_integration")
# Names of files a tool writes (fuzz and bisect reproductions, bench results), not files of the repository.
WRITTEN_FILES = {"model.py", "module.py", "repro.py"}


def text(doc: Path) -> str:
    return doc.read_text(encoding="utf-8")


def name(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


def fenced_blocks(doc: Path) -> list[tuple[str, list[str]]]:
    """(info string, lines) of every fenced code block."""
    return [(info, body.split("\n")) for info, body in re.findall(r"^```(\w*)\n(.*?)\n```$", text(doc), re.M | re.S)]


def repo_files() -> set[str]:
    """The files a fresh clone has, and new ones not yet committed (git's view: not what a local
    venv, build or cache folder holds, which a fresh clone lacks)."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True)
    if listed.returncode != 0:  # not a git checkout (an sdist): every file there
        return {str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()}
    return {line for line in listed.stdout.splitlines() if (ROOT / line).is_file()}


# -- paths -------------------------------------------------------------------------------------


def named_paths(doc: Path) -> set[str]:
    """Repository paths the document names: `backticked` paths starting at a top-level entry of
    the repository, and link targets (relative to the document)."""
    top = {p.name for p in ROOT.iterdir()}
    found = set()
    for token in re.findall(r"`([^`\s]+)`", text(doc)):
        token = token.rstrip(".,:;")
        if "/" in token and token.split("/")[0] in top and not re.search(r"[<>{}*$]", token):
            found.add(token.rstrip("/"))
    for target in re.findall(r"\]\(([\w./-]+)(?:#[\w-]*)?\)", text(doc)):
        if "://" not in target:
            found.add(str((doc.parent / target).resolve().relative_to(ROOT)))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=name)
def test_every_path_the_docs_name_exists(doc):
    missing = sorted(p for p in named_paths(doc) if not (ROOT / p).exists())
    assert not missing, f"{name(doc)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=name)
def test_every_source_file_name_the_docs_mention_is_one_of_the_repository_s(doc):
    """A bare name such as prepare.py, after the file moved, is caught here."""
    basenames = {Path(p).name for p in repo_files()} | WRITTEN_FILES
    mentioned = set(re.findall(r"(?<![\w/.-])([A-Za-z_][\w-]*\.(?:py|cu|h|c|sh))\b", text(doc)))
    mentioned = {m for m in mentioned if not Path(m).stem.isupper()}  # placeholders: MODEL.py
    unknown = sorted(mentioned - basenames)
    assert not unknown, f"{name(doc)} mentions files the repository does not have: {unknown}"


def tree_paths() -> set[str]:
    """The paths of the repository tree (docs/repository.md), read from its indentation."""
    section = text(TREE)
    entries = [line for line in section.split("\n") if re.match(r"^    \S", line) or re.match(r"^     +\S", line)]
    paths, parents = set(), []  # parents: (indent, folder path)
    for line in entries:
        indent = len(line) - len(line.lstrip())
        entry = re.split(r"\s{2,}", line.strip())[0]
        while parents and parents[-1][0] >= indent:
            parents.pop()
        base = parents[-1][1] if parents else ""
        first, *more = [part.strip() for part in entry.split(",")]
        names = [first] + [Path(first).stem + part if part.startswith(".") else part for part in more]
        for item in names:
            path = base + item
            paths.add(path.rstrip("/"))
            if item.endswith("/"):
                parents.append((indent, path))
    return paths


def test_the_tree_names_only_files_that_exist():
    missing = sorted(p for p in tree_paths() if not (ROOT / p).exists())
    assert not missing, f"the repository tree (docs/repository.md) lists paths that do not exist: {missing}"


def test_the_tree_lists_every_source_file_of_the_packages():
    listed = tree_paths()
    sources = sorted(p for p in repo_files() if p.split("/")[0] in PACKAGES and p.endswith((".py", ".cu", ".cuh", ".h"))
                     and not p.endswith("__init__.py") and "__pycache__" not in p)
    missing = [p for p in sources if p not in listed]
    assert not missing, f"the repository tree (docs/repository.md) does not list: {missing}"


# -- code and output quoted from the examples -------------------------------------------------


def quoted_example(lines: list[str]) -> Path | None:
    """The example a python block quotes: the one with a line that starts as the block's
    first line does, where that line defines something or is part of a call (def, class,
    declare(, keyword=)."""
    first = lines[0].strip()
    head = re.match(r"^(def \w+\(|class \w+|declare\(|\w+=)", first)
    if not head:
        return None
    for example in sorted((ROOT / "examples").glob("*.py")):
        if any(line.strip().startswith(head.group(1)) for line in example.read_text().split("\n")):
            return example
    return None


def quote_errors(lines: list[str], source: list[str]) -> list[str]:
    """Each run of lines between `...` must be consecutive lines of `source`, runs in order.
    Lines are compared without indentation and without the closing brackets that end a call
    (a quoted keyword argument of a call)."""
    def bare(line):
        return line.strip().rstrip("),")

    stripped = [bare(line) for line in source]
    chunks, chunk = [], []
    for line in lines:
        if line.strip() == "...":
            chunks.append(chunk)
            chunk = []
        else:
            chunk.append(bare(line))
    chunks.append(chunk)
    errors, start = [], 0
    for chunk in filter(None, chunks):
        at = next((i for i in range(start, len(stripped)) if stripped[i:i + len(chunk)] == chunk), None)
        if at is None:
            first_bad = next((line for line in chunk if line not in stripped), chunk[0])
            errors.append(first_bad)
        else:
            start = at + len(chunk)
    return errors


QUOTES = [(doc, lines) for doc in DOCS for info, lines in fenced_blocks(doc) if info == "python" and quoted_example(lines)]


def test_the_docs_quote_the_examples():
    assert len(QUOTES) >= 6  # adding-an-op.md's walk-through quotes rms_norm_op.py part by part


@pytest.mark.parametrize("doc, lines", QUOTES, ids=[f"{name(d)}:{l[0].strip()[:30]}" for d, l in QUOTES])
def test_a_code_block_quoting_an_example_is_its_text(doc, lines):
    example = quoted_example(lines)
    errors = quote_errors(lines, example.read_text().split("\n"))
    assert not errors, f"{name(doc)} quotes {example.relative_to(ROOT)} with lines it does not have: {errors}"


def shown_outputs(script: str) -> list[tuple[Path, list[str]]]:
    """Output blocks the docs show for `python examples/<script> ...`."""
    return [(doc, lines) for doc in DOCS for info, lines in fenced_blocks(doc)
            if info == "" and lines[0].startswith(f"$ python examples/{script}")]


def report_lines(lines) -> list[str]:
    """What a partition report says, without TVM's long region names (shortened with ...)."""
    keep = []
    for line in lines:
        line = line.strip()
        if re.match(r"^fused_\S+: ", line):
            keep.append("region: " + line.split(": ", 1)[1])
        elif re.match(r"^(offloaded to simaccel|kept on TVM|\w+ = relax\.)", line):
            keep.append(line)
    return keep


@pytest.mark.parametrize("script, args", [("user_op.py", ["--engine", "ref"]), ("two_profiles.py", []),
                                          ("decoder.py", ["--dtype", "bfloat16", "--engine", "ref"]),
                                          ("transformers_llama.py", [])])
def test_the_example_output_the_docs_show_is_what_the_example_prints(script, args):
    shown = shown_outputs(script)
    assert shown, f"no doc shows the output of examples/{script}"
    result = forks.run([sys.executable, str(ROOT / "examples" / script), *args], timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    printed = report_lines(result.stdout.split("\n"))
    for doc, lines in shown:
        wrong = [line for line in report_lines(lines[1:]) if line not in printed]
        assert not wrong, f"{name(doc)} shows lines examples/{script} does not print: {wrong}\nit prints: {printed}"


def test_the_docs_name_the_user_op_model_as_the_example_builds_it():
    source = (ROOT / "examples" / "user_op.py").read_text()
    for doc in DOCS:
        for last in re.findall(r"rms_norm -> dense \+ bias \+ relu ->\s+(\w+)", text(doc)):
            assert f"op.nn.{last}(" in source or f"op.{last}(" in source, f"{name(doc)}: the model does not end in {last}"


# -- the ISA, attribute kinds and activations --------------------------------------------------


def expand(pattern: str) -> set[str]:
    """simaccel.matmul[_bias][_relu|_gelu] -> every name it stands for."""
    names = {""}
    for literal, group in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", pattern.replace("\\|", "|")):
        names = {n + literal for n in names}
        if group:
            names = {n + option for n in names for option in ["", *group.split("|")]}
    return names


def isa_table() -> set[str]:
    section = text(ISA)
    names = set()
    for row in re.findall(r"^\| (`simaccel\..*?) \| ", section, re.M):
        for cell in re.findall(r"`([^`]+)`", row):
            names |= expand(cell if cell.startswith("simaccel.") else "simaccel." + cell)
    return names


def built_in_ops():
    from simaccel.ops import families, list_ops

    return ({op for op in list_ops() if op.startswith("simaccel.")},
            [f for f in families() if f.namespace == "simaccel"])


def test_the_op_table_is_the_isa():
    ops, _ = built_in_ops()
    table = isa_table()
    assert table == ops, f"in the docs' table only: {sorted(table - ops)}; in the ISA only: {sorted(ops - table)}"


def test_the_docs_count_the_isa():
    ops, families = built_in_ops()
    assert f"{len(ops)} ops in {len(families)} families" in text(ISA)
    assert f"op registry (`simaccel/ops/`), {len(ops)} ops" in text(ROOT / "README.md")


def test_simaccel_ops_lists_the_op_table():
    """The table against the command itself, built-in ops only ($SIMACCEL_OPS unset)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "SIMACCEL_OPS"}
    result = forks.run([sys.executable, "-m", forks.CLI, "ops"], timeout=300, cwd="/", env=env)
    assert result.returncode == 0, result.stderr
    listed = set(re.findall(r"^  (simaccel\.\w+)\(", result.stdout, re.M))
    assert listed == isa_table()


def test_the_attribute_kinds_table_is_simaccel_ops_attrs():
    import inspect

    from simaccel.ops import attrs

    kinds = {n for n, f in vars(attrs).items() if inspect.isfunction(f) and not n.startswith("_") and f.__module__ == attrs.__name__}
    table = set(re.findall(r"^\| `attrs\.(\w+)` \|", text(ROOT / "docs" / "adding-an-op.md"), re.M))
    assert table == kinds, f"table only: {sorted(table - kinds)}; simaccel.ops.attrs only: {sorted(kinds - table)}"


def test_the_tree_lists_the_isa_s_activations():
    from simaccel.ops.activation import ACTIVATIONS

    line = next(line for line in text(TREE).split("\n") if line.strip().startswith("ops/activation.py"))
    listed = re.search(r"\(([^)]*)\)", line).group(1).split(", ")
    assert listed == list(ACTIVATIONS)


def test_the_readme_stays_short():
    assert len(text(ROOT / "README.md").splitlines()) < 200


def test_the_built_in_families_modules_are_the_ones_the_docs_list():
    modules = sorted(p.name for p in (ROOT / "simaccel" / "ops" / "builtin").glob("*.py") if p.name != "__init__.py")
    doc = text(ROOT / "docs" / "adding-an-op.md")
    listed = re.search(r"\(`simaccel/ops/builtin/`: ([^)]*)\)", doc).group(1)
    assert sorted(re.findall(r"`(\w+\.py)`", listed)) == modules
