"""`simaccel ops`: the accelerator's ops, built-in families first, then users' ones ($SIMACCEL_OPS).

The ISA is the core's (simaccel/ops/): listing it needs no TVM.
"""

from __future__ import annotations

from . import OK

NAME = "ops"


def add_parser(subparsers) -> None:
    subparsers.add_parser(
        NAME,
        help="list the accelerator's ops: built-in ones and users' (from $SIMACCEL_OPS)",
        description="One line per op (every fused variant): its inputs, its attributes and the family it belongs "
        "to; built-in families first, then users' ones, declared in the modules or .py files named in "
        "$SIMACCEL_OPS (comma-separated).",
    )


def check(args) -> None:
    pass


def run(args) -> int:
    """Every family (built-in first) with where it comes from and what it computes, then its
    ops (the variants) with their inputs and attributes, indented."""
    from ....ops import families, get_op

    for family in families():
        if family.namespace == "simaccel":
            origin = "built-in"
        else:
            origin = f"user op, namespace {family.namespace}, " + ("drawn by simaccel fuzz" if family.fuzz else "no fuzz hook")
        print(f"{family.name} family ({origin})" + (f": {family.doc}" if family.doc else ""))
        for variant in family.variants():
            op = get_op(variant.name)
            attrs = f"  attrs: {', '.join(op.attrs)}" if op.attrs else ""
            inputs = f"{op.inputs[0]}..." if family.variadic else ", ".join(op.inputs)
            print(f"  {op.name}({inputs}){attrs}")
    return OK
