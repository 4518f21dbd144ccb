"""Native symbolic regions against the stand-in CUDA driver: one library, every size.

A symbolic region's library holds its size plans (simaccel.size_plans) as expressions, which
region.h's sizes.h evaluates per call. So these tests call each region at several sizes,
including 1 (or 0) and the upper bounds, and check that what it hands the driver (kernels,
grids, blocks, shared memory, every parameter word) is exactly what the launchers record for
the static Program of those sizes; and that bad sizes are errors naming the var and values.
"""

from __future__ import annotations


import numpy as np
import pytest

import tvm  # noqa: F401  (registers simaccel's errors and runtime functions with tvm-ffi)
import tvm_ffi

from simaccel import EngineError, ShapeError
from simaccel.aot import abi_params, compile_kernel, signature
from simaccel.native.source import NativeRegion
from simaccel.program import Program, SizeVar
from simaccel.shapes import Dim, evaluate
from simaccel.size_plans import SizePlanError, recorded, sample_points, size_plans
from native_cases import dims3
from native_support import cuda_tensor, stand_in_library
from test_native_regions import expected_words
from test_requirements import pinned_matmul, viewed, windowed
from test_symbolic_program import (broadcast_chain_model, concat_model, conv_model, double_concat_model, layer_norm_model,
                                   make, matmul_model, softmax_model, unary_chain_model)

SM90 = (9, 0)
STREAM = 0x5EED
b, s = Dim.var("b"), Dim.var("s")


def with_shape_arg():
    """x (b*s, 16) -> gelu -> y (b*s, 16): b and s only inside a product, so TVM passes them
    as a shape (argument 1, between the input and the output)."""
    base = make("sym_shape_arg", [("x", (b * s, 16), "float32"), ("y", (b * s, 16), "float32")], (0,), (1,),
                [("simaccel.gelu", (0,), 1, {})], [SizeVar("b", 1, 4), SizeVar("s", 1, 300)])
    return Program(base.name, base.tensors, base.inputs, base.outputs, base.ops, vars=base.vars,
                   shape_args=((1, (b, s)),))


def with_redundant_shape_arg():
    """relu of x (n, 16), with n also passed as a shape (argument 1): the shape must agree with x."""
    n_ = Dim.var("n")
    base = make("sym_redundant", [("x", (n_, 16), "float32"), ("y", (n_, 16), "float32")], (0,), (1,),
                [("simaccel.relu", (0,), 1, {})], [SizeVar("n", 1, 64)])
    return Program(base.name, base.tensors, base.inputs, base.outputs, base.ops, vars=base.vars, shape_args=((1, (n_,)),))


MODELS = {
    "r_matmul": (matmul_model(n_upper=8, s_upper=100).validate(), [{"n": 1, "s": 1}, {"n": 3, "s": 37}, {"n": 8, "s": 100}]),
    "r_chain": (unary_chain_model(upper=5000).validate(), [{"n": 1}, {"n": 17}, {"n": 1000}, {"n": 5000}]),
    "r_bias": (broadcast_chain_model(upper=300).validate(), [{"n": 1}, {"n": 2}, {"n": 255}, {"n": 300}]),
    "r_softmax": (softmax_model(upper=64).validate(), [{"n": 1}, {"n": 33}, {"n": 64}]),
    "r_layer_norm": (layer_norm_model(upper=64).validate(), [{"n": 1}, {"n": 9}, {"n": 64}]),
    "r_conv": (conv_model(upper=16).validate(), [{"n": 1}, {"n": 5}, {"n": 16}]),
    "r_concat": (concat_model(upper=40, lower=0).validate(), [{"n": 0}, {"n": 1}, {"n": 23}, {"n": 40}]),
    "r_concat2": (double_concat_model().validate(), [{"n": 1}, {"n": 5}, {"n": 8}]),
    "r_shape_arg": (with_shape_arg().validate(), [{"b": 1, "s": 1}, {"b": 3, "s": 77}, {"b": 4, "s": 300}]),
    "r_redundant": (with_redundant_shape_arg().validate(), [{"n": 1}, {"n": 33}, {"n": 64}]),
    "r_pinned": (pinned_matmul().requiring(), [{"n": 5}]),
    "r_viewed": (viewed().requiring(), [{"p": 1, "q": 1}, {"p": 33, "q": 33}, {"p": 64, "q": 64}]),
    "r_windowed": (windowed().requiring(), [{"h": 2}, {"h": 3}, {"h": 9}, {"h": 16}]),
}


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    regions = [NativeRegion(k, p) for k, (p, _) in MODELS.items()]
    with stand_in_library(regions, tmp_path_factory.mktemp("native_sizes")) as both:
        yield both


@pytest.fixture
def fake(native, clean_runtime):
    library, driver = native
    driver.reset()
    yield library, driver
    driver.reset()


def call_arrays(program, point, seed=0):
    rng = np.random.default_rng(seed)
    bound = program.bind(point)
    return [rng.standard_normal(bound.tensors[i].shape).astype(bound.tensors[i].dtype)
            for i in program.inputs + program.outputs]


def call(library, symbol, program, arrays, point):
    args = [cuda_tensor(a) for a in arrays]
    for position, dims in sorted(program.shape_args):
        args.insert(position, tvm_ffi.Shape([evaluate(d, point) for d in dims]))
    with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", 0), STREAM):
        library[symbol](*args)


@pytest.mark.parametrize("symbol", sorted(MODELS))
def test_a_symbolic_region_launches_what_its_launchers_record_at_every_size(fake, symbol):
    library, driver = fake
    program, points = MODELS[symbol]
    bound_intermediates = {}
    for point in points:
        driver.reset()
        arrays = call_arrays(program, point)
        call(library, symbol, program, arrays, point)
        bound = program.bind(point)
        want = recorded(program, point)
        got = driver.launches()
        assert len(got) == len(want), point
        addresses = {i: a.ctypes.data for i, a in zip(program.inputs + program.outputs, arrays)}
        for g, launch in zip(got, want):
            kernel = compile_kernel(launch.kernel, signature(launch, bound), SM90)
            assert g["entry"] == kernel.entry and g["stream"] == STREAM
            assert g["grid"] == dims3(launch.grid) and g["block"] == dims3(launch.block), point
            assert g["shared"] == launch.shared_bytes + kernel.ptx_shared_bytes
            assert len(g["words"]) == abi_params(launch)
            for k, (word, expect) in enumerate(zip(g["words"], expected_words(bound, launch, addresses), strict=True)):
                if expect is None:  # an intermediate: the region's own memory, sized for the upper bounds once
                    bound_intermediates.setdefault(k, set()).add(word)
                else:
                    assert word == expect, (point, k)
    # one allocation per intermediate, shared by every size
    assert all(len(words) == 1 for words in bound_intermediates.values())


def test_intermediates_are_allocated_once_for_the_upper_bounds(fake):
    library, driver = fake
    program, points = MODELS["r_chain"]
    for point in points:
        call(library, "r_chain", program, call_arrays(program, point), point)
    intermediates = len(program.intermediates)
    assert intermediates and driver.counter("allocations") <= intermediates


def test_a_size_outside_its_bounds_is_a_shape_error_naming_the_var(fake):
    library, _ = fake
    program, _ = MODELS["r_chain"]
    x = np.zeros((5001, 16), np.float32)
    with pytest.raises(ShapeError, match=r"region r_chain: size var n = 5001 .* outside its bounds \[1, 5000\]"):
        call(library, "r_chain", program, [x, np.zeros_like(x)], {"n": 5001})


def test_tensors_that_disagree_on_a_var_are_a_shape_error_naming_the_values(fake):
    library, _ = fake
    program, _ = MODELS["r_chain"]
    with pytest.raises(ShapeError, match=r"output 'y' has shape \(6, 16\), but \(n, 16\) is \(5, 16\) where n = 5"):
        call(library, "r_chain", program, [np.zeros((5, 16), np.float32), np.zeros((6, 16), np.float32)], {"n": 5})


def test_a_shape_argument_that_disagrees_with_the_tensors_is_a_shape_error(fake):
    library, _ = fake
    program, _ = MODELS["r_shape_arg"]
    x = np.zeros((6, 16), np.float32)
    args = [cuda_tensor(x), tvm_ffi.Shape([2, 4]), cuda_tensor(np.zeros_like(x))]
    with pytest.raises(ShapeError, match=r"input 'x' has shape \(6, 16\), but \(b\*s, 16\) is \(8, 16\) where b = 2, s = 4"):
        library["r_shape_arg"](*args)


def test_a_shape_argument_that_disagrees_with_a_tensor_it_repeats_is_a_shape_error(fake):
    """n is read from x; the shape argument repeating it must agree, even where every tensor does."""
    library, driver = fake
    x = np.zeros((5, 16), np.float32)
    with pytest.raises(ShapeError, match=r"region r_redundant: shape argument 1 is \(6,\), but it should be \(5,\) where n = 5"):
        library["r_redundant"](cuda_tensor(x), tvm_ffi.Shape([6]), cuda_tensor(np.zeros_like(x)))
    assert driver.launches() == []
    library["r_redundant"](cuda_tensor(x), tvm_ffi.Shape([5]), cuda_tensor(np.zeros_like(x)))
    assert len(driver.launches()) == 1


@pytest.mark.parametrize("symbol, arrays, broken", [
    ("r_pinned", [(31, 6), (5, 8), (31, 8)], r"n = 6 .* breaks n == 5"),
    ("r_viewed", [(7, 4), (8, 4)], r"p = 7 .* q = 8 .* breaks q == p"),
    # h = 1 breaks h - 2 >= 0: no output tensor can have its height, -1, and the message says so
    ("r_windowed", [(1, 3, 1, 8), (4, 3, 3, 3), (1, 4, 0, 6)], r"\(1, 4, h - 2, 6\) is \(1, 4, -1, 6\) where h = 1"),
])
def test_sizes_that_break_a_requirement_launch_nothing_and_are_a_shape_error(fake, symbol, arrays, broken):
    """No size plan holds where a requirement breaks: the call goes to the Python runtime, which
    names the requirement, the var and the tensor."""
    library, driver = fake
    with pytest.raises(ShapeError, match=broken):
        library[symbol](*[cuda_tensor(np.zeros(shape, np.float32)) for shape in arrays])
    assert driver.launches() == []


def test_size_plans_cover_every_sample_point_with_few_plans():
    """A plan per choice the launchers make: the tiling of a GEMM by its rows, a power-of-two
    block for concat's copies (one plan per octave of its 8 * n elements up to 40 rows)."""
    for program, _ in MODELS.values():
        plans = size_plans(program)
        assert 1 <= len(plans) <= (9 if program.name == "sym_concat" else 4), (program.name, len(plans))
        for point in sample_points(program):
            assert any(p.covers(point) for p in plans)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_a_decoders_plans_cover_every_decode_step_and_random_sizes(dtype):
    """examples/decoder.py at its GPU size (s <= 512 tokens onto a cache of m <= 1024), in
    float16 (attention on tiles) and float32 (on the one-warp kernel): a few
    size plans cover every decode step (s = 1, any m; a long cache's keys split over blocks)
    and 3000 random (s, m). Sizes no plan covers run on the Python runtime, 30x slower on an H100: the copy's
    lanes were a power of two found by a loop run to the row's length, so each octave of the
    cache's elements was a plan of its own (64, the cap) and decode steps onto caches of 65 to
    512 tokens, which no sample point reached, had none."""
    import random

    from harness import decoder_example
    from simaccel.tvm_integration import partition_report
    from simaccel.tvm_integration.backend.codegen import region_program
    from simaccel.tvm_integration.backend.patterns import sync_patterns

    example = decoder_example()
    partitioned, _ = partition_report(example.decoder(dtype, example.GPU))
    [(symbol, region)] = [(gv.name_hint, f) for gv, f in partitioned.functions.items()
                          if getattr(f, "attrs", None) and "Codegen" in f.attrs]
    program = region_program(symbol, region, sync_patterns())
    plans = size_plans(program)
    assert len(plans) <= (24 if dtype == "float16" else 28), len(plans)  # float32: the one-warp kernel's splits ask of s too
    rng = random.Random(0)
    points = [{"s": 1, "m": m} for m in range(1025)] + [{"s": rng.randint(0, 512), "m": rng.randint(0, 1024)}
                                                         for _ in range(3000)]
    missed = [p for p in points if not any(plan.covers(p) for plan in plans)]
    assert not missed, missed[:5]
    decode_plans = {next(i for i, plan in enumerate(plans) if plan.covers(p)) for p in points[:1025]}
    # an empty cache, one row, caches whose keys attention splits over blocks (512 keys and
    # more: kernels/attention.py's SPLIT_MIN_KEYS), the rest
    assert len(decode_plans) <= 4, decode_plans
    long_step = next(plan for plan in plans if plan.covers({"s": 1, "m": 1000}))
    assert any(launch.kernel.__name__.startswith("_attention_split") for launch in long_step.launches)


def test_a_var_without_an_upper_bound_has_no_size_plans():
    with pytest.raises(SizePlanError, match="size var n has no upper bound"):
        size_plans(make("open", [("x", (Dim.var("n"), 4), "float32"), ("y", (Dim.var("n"), 4), "float32")], (0,), (1,),
                        [("simaccel.relu", (0,), 1, {})], [SizeVar("n", 1)]).validate())


def test_sample_points_of_many_vars_stay_inside_the_bounds_and_reach_each_end():
    """Three vars: more combinations than MAX_POINTS, so each var walks its axis with the others
    at their ends and middles, plus random points; every point inside the bounds."""
    from simaccel.size_plans import MAX_POINTS

    a, c = Dim.var("a"), Dim.var("c")
    program = make("three", [("x", (a, b, c), "float32"), ("y", (a, b, c), "float32")], (0,), (1,),
                   [("simaccel.relu", (0,), 1, {})], [SizeVar("a", 1, 7), SizeVar("b", 2, 300), SizeVar("c", 0, 4096)])
    points = sample_points(program)
    assert len(points) >= MAX_POINTS
    assert all(1 <= p["a"] <= 7 and 2 <= p["b"] <= 300 and 0 <= p["c"] <= 4096 for p in points)
    for name, ends in (("a", (1, 7)), ("b", (2, 300)), ("c", (0, 4096))):
        assert {p[name] for p in points} >= set(ends)
    assert {"a": 7, "b": 300, "c": 4096} in points and {"a": 1, "b": 2, "c": 0} in points


def test_the_generator_writes_the_size_ops_tables_h_defines():
    """source.py's opcode names and tables.h's kSize constants: the same numbers, one by one."""
    import re
    from pathlib import Path

    from simaccel.native import source

    text = (Path(source.__file__).parent / "tables.h").read_text()
    defined = {name: int(value) for name, value in re.findall(r"constexpr int64_t (kSize\w+) = (\d+);", text)}
    spelled = {"const": "Const", "var": "Var", "+": "Add", "*": "Mul", "//": "FloorDiv", "%": "Mod", "neg": "Neg",
               "==": "Eq0", "!=": "Ne0", "<": "Lt0", "<=": "Le0", ">": "Gt0", ">=": "Ge0", "float": "Float",
               "to_float": "ToFloat", "f+": "FAdd", "f-": "FSub", "f*": "FMul", "f/": "FDiv", "fneg": "FNeg"}
    assert {f"kSize{spelled[op]}": code for op, code in source._OPS.items()} == defined


def _symbolic_case(name, shapes, attrs, axis):
    """One op of tests/test_launch_plan.py's CASES with dim `axis` of its first input (and every
    other input's dim of that size) a size var n in [1, 300], or in [16, 300] where its rule
    needs n large enough (a convolution's window); None where its shape rule needs a value."""
    from simaccel.ops import get_op
    from simaccel.program import OpNode, TensorSpec
    from simaccel.requirements import assuming

    n_ = Dim.var("n")
    old = shapes[0][axis]
    shapes = [[n_ if (i == 0 and j == axis) or (i and d == old != 1) else d for j, d in enumerate(s)]
              for i, s in enumerate(shapes)]
    op = get_op(name)
    for lower in (1, 16):
        try:
            with assuming({"n": (lower, 300)}) as assumed:
                out, _ = op.infer([tuple(s) for s in shapes], ["float32"] * len(shapes), **op.all_attrs(attrs))
        except Exception:  # noqa: BLE001 - a shape rule that needs the size's value: the op stays on TVM
            continue
        if assumed.made:  # holds only at some sizes: not a case of following a size
            return None
        k = len(shapes)
        tensors = tuple(TensorSpec(f"t{i}", tuple(s), "float32") for i, s in enumerate(shapes)) + (TensorSpec("out", out, "float32"),)
        return Program(name, tensors, tuple(range(k)), (k,), (OpNode(name, tuple(range(k)), k, dict(attrs)),),
                       vars=(SizeVar("n", lower, 300),)).validate()
    return None


def test_no_launcher_bakes_a_size_into_its_launches():
    """Every op family's launches follow a symbolic size along each axis its shape rule accepts:
    a few plans (the kernel variants the launchers choose by size), never one per size, which a
    size pinned to its value (an int() of it, a dict keyed by it) would need at each of the
    sample points."""
    from test_launch_plan import CASES

    tried, spatial = 0, 0
    for name, shapes, attrs in CASES:
        for axis in range(len(shapes[0])):
            program = _symbolic_case(name, shapes, attrs, axis)
            if program is None:
                continue
            plans = size_plans(program)
            tried += 1
            spatial += ("conv" in name or "pool" in name) and axis >= 2
            assert len(plans) <= 10 < len(sample_points(program)), (name, axis, len(plans))
    assert tried >= 20 and spatial >= 4, (tried, spatial)


def test_the_ledger_counts_the_launches_of_the_plan_each_call_ran(tmp_path, clean_runtime):
    """concat's plan at n = 0 launches one copy (a is empty), its others two: the ledger counts,
    per op, what each call's plan launched, not one plan's count for every call."""
    from collections import Counter

    program = concat_model(upper=40, lower=0).validate()
    points = [{"n": 0}, {"n": 1}, {"n": 23}, {"n": 40}, {"n": 0}]
    want = Counter()
    for point in points:
        want.update(program.ops[launch.op].op for launch in recorded(program, point))
    assert len({len(recorded(program, p)) for p in points}) == 2  # the plans differ
    with stand_in_library([NativeRegion("r_counted", program)], tmp_path) as (library, driver):
        clean_runtime.ledger.reset()
        for point in points:
            call(library, "r_counted", program, call_arrays(program, point), point)
    ledger = clean_runtime.ledger.snapshot()
    assert ledger["kernel_launches"] == dict(want) and ledger["ops"] == {"simaccel.concat": len(points)}
    assert ledger["regions"][program.name]["calls"] == len(points)


def test_sizes_no_plan_covers_go_to_the_python_runtime(tmp_path, monkeypatch, clean_runtime):
    """A library whose region kept only its first size plan (concat's n = 0): a call at other
    sizes forwards its tensors to simaccel's Python runtime (whose "cuda" engine then finds no
    GPU here: proof the call went there) and launches nothing natively; a call the plan covers
    runs natively."""
    from simaccel.native import source

    program = concat_model(upper=40, lower=0).validate()
    monkeypatch.setattr(source, "size_plans", lambda p: size_plans(p)[:1])
    with stand_in_library([NativeRegion("r_first_plan_only", program)], tmp_path) as (library, driver):
        driver.reset()
        covered = [np.zeros((0, 8), np.float32), np.ones((1, 8), np.float32), np.zeros((1, 8), np.float32)]
        library["r_first_plan_only"](*[cuda_tensor(a) for a in covered])
        assert len(driver.launches()) == 1  # the one copy of b: a's is empty
        driver.reset()
        arrays = [np.zeros((5, 8), np.float32), np.ones((1, 8), np.float32), np.zeros((6, 8), np.float32)]
        with pytest.raises(EngineError, match="engine 'cuda' cannot run here"):
            library["r_first_plan_only"](*[cuda_tensor(a) for a in arrays])
        assert driver.launches() == []
