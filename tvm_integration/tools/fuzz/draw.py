"""Drawing random Relax models for `simaccel fuzz`: `draw_case`, and the check that every
user family the run would draw can be drawn (`drawable_user_families`).

Where it sits: the top of the fuzzer's models (the package's `models` module re-exports it with
the rest). `draw_case` turns a `Draw`'s choices (fuzz/choices.py) into a `Case`
(fuzz/case.py), op group by op group with a `Builder` (fuzz/build.py): a DAG, not a chain, that
ends in one output or a tuple of several. Users' ops are drawn too: every declared family
outside the ``simaccel`` namespace that has a `fuzz` hook (fuzz/user_ops.py) may become a node
when its hook takes the chosen value's shape. A family the fuzzer cannot draw is an error that
names it (`drawable_user_families`), never a silent redraw. Without user families nothing
changes: the same seed draws the same models.
"""

from __future__ import annotations

import dataclasses

from .build import Builder
from .case import Case
from .choices import Config, Draw
from .user_ops import UserFuzzOp, user_families


def draw_case(draw: Draw, config: Config = Config()) -> Case:
    """The model `draw`'s choices make: an input (sometimes two of one shape), 1 to
    `config.max_ops` op groups (`Builder.node`), and its outputs: the last node, mostly with the
    results nothing else reads, sometimes with values later ops read too."""
    dtype = draw.choice(config.dtypes)
    builder = Builder(draw, config, dtype)
    first = builder.param(builder.input_shape(), "x")
    if draw.chance(30):
        builder.param(builder.values[first].shape, "y")  # a second input of the same shape
    count, counter = draw.count(1, config.max_ops)
    for _ in range(count):
        with draw.item(counter):
            builder.node()
    nodes = [i for i, v in enumerate(builder.values) if v.op is not None]
    outputs = [nodes[-1]]
    if not draw.chance(30):  # mostly, every result nothing else reads is an output too (up to 3)
        read = {a for v in builder.values for a in v.args}
        outputs += [i for i in nodes[:-1] if i not in read][-3:]
    for _ in range(draw.int(0, 2) if len(nodes) > 1 and draw.chance(30) else 0):
        extra = draw.choice(nodes[:-1])  # a value also read by later ops
        if extra not in outputs:
            outputs.append(extra)
    specials = dtype == "float32" and draw.chance(config.specials_percent)
    return Case(dtype, builder.values, outputs, draw.int(0, 2**31 - 1), specials)


PROBES = 20  # input shapes `drawable_user_families` tries each user family's fuzz hook on


def drawable_user_families(config: Config = Config()) -> list:
    """`user_families()`, each checked to be one `simaccel fuzz` can draw and simaccel offloads:
    in one of the run's dtypes, its hook applies to some of the fuzzer's input shapes (tried on
    `PROBES` seeded draws), Relax takes the call it gives, and simaccel offloads some of those
    calls (its `from_relax` takes them). Otherwise an OpDeclarationError naming the family and why."""
    from ....errors import OpDeclarationError, SimAccelError
    from ....ops import Reject

    found = user_families()
    for family in found:
        dtype = next((d for d in config.dtypes if d in family.dtypes), None)
        if dtype is None:
            raise OpDeclarationError(f"op family {family.name!r}: simaccel fuzz cannot draw it: it takes dtypes "
                                     f"{', '.join(family.dtypes)}, the run draws models in {', '.join(config.dtypes)}")
        kept = []
        for seed in range(PROBES):
            builder = Builder(Draw.seeded(seed), dataclasses.replace(config, user_ops=False), dtype)
            shape = builder.input_shape()
            builder.param(shape, "x")
            builder.families = [family]
            builder.user(0, shape)  # OpDeclarationError where the hook fails or Relax refuses its call
            node = builder.values[-1]
            if node.op != family.name:
                continue  # the hook does not take this shape
            try:
                UserFuzzOp(family.name).program_attrs([builder.values[a].shape for a in node.args], node.attrs, dtype)
                break
            except OpDeclarationError:
                raise
            except (Reject, SimAccelError) as e:
                kept.append(f"{str(e)} (shape {shape})")
        else:
            why = (f"simaccel keeps every call its fuzz hook gave on TVM, e.g. {kept[0]}" if kept else
                   f"its fuzz hook returned None for each of the {PROBES} input shapes tried")
            raise OpDeclarationError(f"op family {family.name!r}: simaccel fuzz cannot draw it: {why}")
    return found
