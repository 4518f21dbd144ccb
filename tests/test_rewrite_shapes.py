"""Rewrites before partitioning (tvm_integration/rewrites/) under every shape they meet.

Each rewrite is the same function only under a condition on shapes or values: a broadcast
into a matmul may be dropped only where it widens batch dims, a take reads the element of its
mode, a scale folds only where it is finite. Each sweep builds every case with simaccel and
with TVM alone and compares (a case TVM alone cannot build is skipped), and checks that the
rewrite was applied exactly where its condition holds.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.script import relax as R

from harness import compare_with_tvm
from model_zoo import single_op
from simaccel.tvm_integration import build, build_tvm_only
from simaccel.tvm_integration.backend.partition import partition_report
from simaccel.tvm_integration.rewrites.inference import prepare_for_inference

op = relax.op


def rewritten(mod, kind: str) -> int:
    """How many rewrites of `kind` (a word of its note: "broadcast_to", "take", ...) `mod` got."""
    _, notes = prepare_for_inference(mod)
    return sum(int(note.split()[0]) for note in notes if kind in note)


def compare_or_skip(mod, engine="ref", arrays=None):
    try:
        build_tvm_only(mod)
    except (tvm.error.TVMError, ValueError) as e:  # TVM alone cannot build it either: nothing to compare with
        pytest.skip(f"TVM alone cannot build this model: {type(e).__name__}: {str(e)[:200]}")
    compare_with_tvm(mod, engine, arrays=arrays)


# -- broadcast_to into a matmul ----------------------------------------------------------------
# (lhs, rhs) as the matmul sees them after the broadcast: batch dims, then (M, K) and (K, N).
# Every dim > 1, then K and M or N of size 1 and batch dims of 1.
TARGETS = {"wide": ((2, 3, 4, 5), (2, 3, 5, 6)), "ones": ((2, 1, 1, 1), (1, 3, 1, 2))}
DIM_NAMES = (("batch0", "batch1", "M", "K"), ("batch0", "batch1", "K", "N"))


def sources(target, names):
    """(name, shape) of every tensor that broadcast_to widens to `target`: each dim made 1,
    leading dims left out, and all dims 1."""
    out = [("same", target)]
    for i in range(len(target)):
        out.append((f"{names[i]}=1", target[:i] + (1,) + target[i + 1:]))
    for drop in (1, 2):
        out.append((f"rank-{drop}", target[drop:]))
    out.append(("all-1", (1,) * len(target)))
    return out


def others(shape):
    """The other operand: as given, with batch dims of 1, without batch dims."""
    return {"full": shape, "batch-1": (1, 1) + shape[2:], "2d": shape[2:]}


def must_drop(side, source, target, other) -> bool:
    """The condition for dropping: the matrix dims unchanged and the result's batch dims too."""
    if source == target:
        return True
    if len(source) < 2 or source[-2:] != target[-2:]:
        return False
    return np.broadcast_shapes(source[:-2], other[:-2]) == np.broadcast_shapes(target[:-2], other[:-2])


CASES = [(t, side, name, src, oname)
         for t, pair in TARGETS.items() for side in (0, 1)
         for name, src in sources(pair[side], DIM_NAMES[side]) for oname in others(pair[1 - side])]


@pytest.mark.parametrize("target, side, source_name, source, other_name", CASES,
                         ids=[f"{t}-{'lhs' if s == 0 else 'rhs'}-{n}-other-{o}" for t, s, n, _, o in CASES])
def test_a_broadcast_into_a_matmul_is_dropped_only_over_batch_dims(target, side, source_name, source, other_name):
    pair = TARGETS[target]
    wide, other = pair[side], others(pair[1 - side])[other_name]

    def make(x, y):
        widened = op.broadcast_to(x, wide)
        return op.matmul(widened, y) if side == 0 else op.matmul(y, widened)

    mod = single_op(make, [(source, None), (other, None)])
    assert rewritten(mod, "broadcast_to") == must_drop(side, source, wide, other)
    compare_or_skip(mod)


# Both operands broadcast, each of a batch dim or a matrix dim; and the issue's own example.
BOTH = [
    ((2, 1, 4, 5), (2, 3, 4, 5), (1, 3, 5, 6), (2, 3, 5, 6)),  # batch, batch: both dropped
    ((2, 3, 4, 1), (2, 3, 4, 5), (1, 3, 5, 6), (2, 3, 5, 6)),  # K of the lhs, batch of the rhs
    ((2, 3, 4, 5), (2, 3, 4, 5), (2, 3, 1, 6), (2, 3, 5, 6)),  # identity, K of the rhs
    ((2, 3, 1, 5), (2, 3, 4, 5), (2, 3, 5, 1), (2, 3, 5, 6)),  # M and N
    ((8, 7, 3, 1), (8, 7, 3, 2), (8, 1, 2, 64), None),  # issue 19: K widened from 1 to 2
]


@pytest.mark.parametrize("lhs, lhs_to, rhs, rhs_to", BOTH, ids=str)
def test_broadcasts_of_both_operands(lhs, lhs_to, rhs, rhs_to):
    def make(x, y):
        return op.matmul(op.broadcast_to(x, lhs_to), y if rhs_to is None else op.broadcast_to(y, rhs_to))

    mod = single_op(make, [(lhs, None), (rhs, None)])
    dropped = must_drop(0, lhs, lhs_to, rhs_to or rhs) + (rhs_to is not None and must_drop(1, rhs, rhs_to, lhs))
    assert rewritten(mod, "broadcast_to") == dropped
    compare_or_skip(mod)


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_a_widened_reduction_on_every_engine(engine):
    mod = single_op(lambda x, y: op.matmul(op.broadcast_to(x, (2, 3, 2)), y), [((2, 3, 1), None), ((2, 2, 4), None)])
    assert rewritten(mod, "broadcast_to") == 0
    compare_or_skip(mod, engine)


# -- take of one constant index ------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["fast", "clip", "wrap"])
@pytest.mark.parametrize("index", [-5, -4, -1, 0, 2, 3, 4, 7])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_take_of_a_constant_index_reads_what_tvm_reads(mode, index, axis):
    shape = (4, 4, 3)
    length = shape[axis]
    if mode == "fast" and not 0 <= index < length:
        pytest.skip("TVM's fast take reads out of bounds for an index outside [0, length)")
    mod = single_op(lambda x: op.nn.relu(op.take(x, relax.const(index, "int64"), axis=axis, mode=mode)),
                    [(shape, None)])
    in_range = -length <= index < length
    assert rewritten(mod, "take") == (mode != "fast" or in_range)
    compare_or_skip(mod)


@pytest.mark.parametrize("mode", ["fast", "clip", "wrap"])
@pytest.mark.parametrize("index", [-2, -1, 0, 2])
def test_take_of_a_constant_index_on_a_symbolic_axis(mode, index):
    """x (n, 4) with n in [3, 8], one build run at n = 3, 5 and 8: an index whose element does not
    depend on the length's value (fast mode; wrap's -1) becomes a slice from the length, the
    element torch's x[index] reads; clip's and wrap's others stay TVM's take. TVM alone's fast
    take of a negative index reads out of bounds, so the peer is numpy."""
    from simaccel.tvm_integration.backend.pipeline import build

    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType((n, 4), "float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x], attrs={"tir_var_lower_bound": {"n": 3}, "tir_var_upper_bound": {"n": 8}}):
        with builder.dataflow():
            out = builder.emit_output(builder.emit(op.nn.relu(op.take(x, relax.const(index, "int64"), axis=0, mode=mode))))
        builder.emit_func_output(out)
    mod = builder.get()
    assert rewritten(mod, "take") == (mode == "fast" or (mode == "wrap" and index == -1))
    ours, theirs = build(mod, "llvm"), build_tvm_only(mod, "llvm")
    for length in (3, 5, 8):
        data = np.linspace(-1, 1, length * 4, dtype=np.float32).reshape(length, 4)
        row = min(max(index, 0), length - 1) if mode == "clip" else index % length
        want = np.maximum(data[row], 0)
        for executable in (ours, theirs) if not (mode == "fast" and index < 0) else (ours,):
            got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"n = {length}")


@pytest.mark.parametrize("sections", [3, [2, 7], [5, 20]], ids=str)
@pytest.mark.parametrize("axis", [1, 0])
def test_a_split_of_a_tensor_with_symbolic_dims(sections, axis):
    """x (n, 12), n in [1, 8], split along its static axis 1: slices, one build giving numpy's
    pieces at n = 1, 5 and 8 (TVM alone's, where it runs them: its split of split points past the
    axis asks for 2**61 bytes); split along the symbolic axis 0, whose pieces depend on n: left
    to TVM (whose own build of it fails the same way at run time)."""
    from simaccel.tvm_integration.backend.pipeline import build

    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType((n, 12), "float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x], attrs={"tir_var_lower_bound": {"n": 1}, "tir_var_upper_bound": {"n": 8}}):
        with builder.dataflow():
            pieces = builder.emit(op.split(x, sections, axis=axis))
            count = sections if isinstance(sections, int) else len(sections) + 1
            outs = [builder.emit(op.nn.relu(relax.TupleGetItem(pieces, k))) for k in range(count)]
            out = builder.emit_output(relax.Tuple(outs))
        builder.emit_func_output(out)
    mod = builder.get()
    assert rewritten(mod, "split") == (count if axis == 1 else 0)
    if axis == 0:
        return
    ours = build(mod, "llvm")
    for length in (1, 5, 8):
        data = np.linspace(-1, 1, length * 12, dtype=np.float32).reshape(length, 12)
        got = [o.numpy() for o in relax.VirtualMachine(ours, tvm.cpu())["main"](tvm.runtime.tensor(data))]
        want = [np.maximum(p, 0) for p in np.split(data, sections, axis=1)]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w, err_msg=f"n = {length}")
    if sections != [5, 20]:
        compare_or_skip(mod, arrays=[np.linspace(-1, 1, 60, dtype=np.float32).reshape(5, 12)])


# -- scales folded into batch_norm's affine and a conv's weights: only finite ones -------------------
def batch_norm_model(var, epsilon, dtype="float32"):
    channels = len(var)
    consts = [relax.const(np.asarray(v, dtype)) for v in
              (np.linspace(0.5, 2, channels), np.linspace(-1, 1, channels), np.linspace(-0.5, 0.5, channels), var)]
    return single_op(lambda x: op.nn.relu(relax.TupleGetItem(op.nn.batch_norm(x, *consts, axis=1, epsilon=epsilon, training=False), 0)),
                     [((2, channels, 3, 3), None)], dtype)


@pytest.mark.parametrize("var, epsilon, folds", [
    ([1.0, 0.5, 2.0], 1e-5, True),
    ([1.0, 0.0, 2.0], 0.0, False),  # var + eps == 0: (x - mean) / 0 is +-inf, x * inf - mean * inf NaN
    ([1.0, np.inf, 2.0], 1e-5, True),  # a scale of 0: finite
    ([1.0, np.nan, 2.0], 1e-5, False),
])
def test_batch_norm_becomes_affine_only_with_a_finite_scale(var, epsilon, folds):
    mod = batch_norm_model(var, epsilon)
    assert rewritten(mod, "batch_norm") == folds
    x = np.random.default_rng(0).standard_normal((2, 3, 3, 3)).astype(np.float32)
    x[0, 1, 0, 0] = np.linspace(-0.5, 0.5, 3)[1]  # x == mean: 0 / 0
    compare_or_skip(mod, arrays=[x])


def test_a_float16_batch_norm_whose_scale_overflows_stays_on_tvm():
    mod = batch_norm_model([1.0, 1e-12, 2.0], 1e-12, "float16")  # 1 / sqrt(2e-12) > float16's max
    assert rewritten(mod, "batch_norm") == 0


CONV_SCALES = [
    ((1, 3, 1, 1), [0.5, 2.0, -1.0], True),
    ((3, 1, 1), [0.5, 2.0, -1.0], True),
    ((1, 3, 1, 1), [0.5, np.inf, -1.0], False),  # inf * a zero weight is NaN where conv * inf is +-inf
    ((1, 3, 1, 1), [0.5, np.nan, -1.0], False),
    ((3,), [0.5, 2.0, -1.0], False),  # broadcasts along W: not per channel
    ((1, 1, 1, 3), [0.5, 2.0, -1.0], False),
    ((1, 1, 1, 1), [2.0], False),
]


@pytest.mark.parametrize("shape, values, folds", CONV_SCALES, ids=str)
def test_a_conv_scale_folds_only_when_per_channel_and_finite(shape, values, folds):
    weight = np.random.default_rng(1).standard_normal((3, 2, 3, 3)).astype(np.float32)
    weight[1, 0, 0, 0] = 0.0
    scale = np.asarray(values, np.float32).reshape(shape)
    mod = single_op(lambda x: op.multiply(op.nn.conv2d(x, relax.const(weight), padding=1), relax.const(scale)),
                    [((1, 2, 3, 3), None)])
    assert rewritten(mod, "conv2d") == folds
    compare_or_skip(mod)


ALIASED = {  # each rewrite's pattern where the rewrite declines, its result bound to a var and that var to the output
    "take of an index array": (lambda x: relax.op.take(x, relax.const(np.array([1], "int64")), axis=0), (3, 4)),
    "split along a symbolic axis": (lambda x: relax.TupleGetItem(relax.op.split(x, 2, axis=0), 1),
                                    (tvm.tirx.Var("n", "int64"), 4)),
    "a broadcast that shapes the result": (lambda x: relax.op.broadcast_to(x, (2, 3, 4)), (3, 4)),
    "a broadcast of a matrix dim into a matmul": (lambda x: relax.op.matmul(relax.op.broadcast_to(x, (3, 4)),
                                                                            relax.const(np.ones((4, 5), "float32"))), (1, 4)),
    "batch_norm in training": (lambda x: relax.TupleGetItem(relax.op.nn.batch_norm(
        x, *(relax.const(np.full((4,), v, "float32")) for v in (2.0, 0.5, 0.1, 1.5)), axis=1), 0), (3, 4)),
}


@pytest.mark.parametrize("name", sorted(ALIASED))
def test_a_declined_rewrite_of_a_result_bound_to_another_var_leaves_the_model_as_it_is(name):
    """Where a rewriter declines a call (returns it), TVM's rewrite_call tries the binding that
    forwards it (gv = lv, as BlockBuilder's emit_output writes) and hands the rewriter the var
    lv: every rewriter reads the call from its matches (the fuzzer found take's reading
    `expr.attrs` of such a var: an AttributeError that failed the build)."""
    make, shape = ALIASED[name]
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            lv = bb.emit(make(x))
            gv = bb.emit_output(lv)
        bb.emit_func_output(gv)
    mod = bb.get()
    prepare_for_inference(mod)
    if all(isinstance(d, int) for d in shape):
        compare_with_tvm(mod, "ref", expect_offload=False)


# -- conv1d as conv2d of height 1 ----------------------------------------------------------
def conv1d_model(x_shape, w_shape, dtype="float32", bias=True, **attrs):
    """conv1d (+ a bias as torch writes it, (1, O, 1)) -> gelu: a wav2vec-style feature extractor's layer."""
    bb = relax.BlockBuilder()
    x, w = relax.Var("x", R.Tensor(x_shape, dtype)), relax.Var("w", R.Tensor(w_shape, dtype))
    params = [x, w] + ([relax.Var("b", R.Tensor((1, w_shape[0], 1), dtype))] if bias else [])
    with bb.function("main", params):
        with bb.dataflow():
            y = bb.emit(op.nn.conv1d(x, w, **attrs))
            if bias:
                y = bb.emit(op.add(y, params[2]))
            y = bb.emit_output(op.nn.gelu(y))
        bb.emit_func_output(y)
    return bb.get()


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((2, 4, 33), (8, 4, 3), {}),
    ((1, 4, 40), (8, 2, 5), {"strides": 2, "padding": (1, 2), "groups": 2}),
    ((2, 3, 29), (6, 3, 4), {"strides": 3, "dilation": 2, "padding": 3}),
    ((1, 8, 16), (8, 1, 3), {"padding": 1, "groups": 8}),  # depthwise
    ((1, 5, 10), (7, 5, 10), {}),  # one output position: the window spans the input
], ids=str)
def test_conv1d_offloads_as_conv2d_and_matches_tvm_alone(x_shape, w_shape, attrs, engine):
    mod = conv1d_model(x_shape, w_shape, **attrs)
    assert rewritten(mod, "conv1d") == 1
    _, report = partition_report(mod)
    assert not report.kept and len(report.regions) == 1, report.format()
    assert "simaccel.conv2d" in " ".join(" ".join(ops) for ops in report.regions.values()), report.format()
    compare_or_skip(mod, engine)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_16_bit_conv1d_offloads_and_matches_tvm_alone(dtype):
    mod = conv1d_model((2, 4, 21), (8, 2, 3), dtype, strides=2, padding=1, groups=2)
    assert rewritten(mod, "conv1d") == 1
    for engine in ("ref", "sim"):
        compare_or_skip(mod, engine)


def test_a_conv1d_over_symbolic_batch_and_length_is_one_build():
    from simaccel.testing import assert_matches_tvm

    n, w = tvm.tirx.Var("n", "int64"), tvm.tirx.Var("w", "int64")
    mod = conv1d_model((n, 4, w), (8, 4, 3), strides=2, padding=1)
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {"n": 4, "w": 64})
    assert rewritten(mod, "conv1d") == 1
    assert_matches_tvm(mod, sizes=[{"n": 1, "w": 3}, {"n": 3, "w": 64}, {"n": 2, "w": 17}], engines=["ref", "sim"])


@pytest.mark.parametrize("layout, why", [({"data_layout": "NWC"}, "data layout NWC"),
                                         ({"kernel_layout": "WIO"}, "kernel layout WIO")])
def test_a_conv1d_in_another_layout_is_left_to_tvm(layout, why):
    mod = conv1d_model((1, 16, 4) if "data_layout" in layout else (1, 4, 16), (3, 4, 8) if "kernel_layout" in layout else (8, 4, 3),
                       bias=False, **layout)
    assert rewritten(mod, "conv1d") == 0, why
    compare_or_skip(mod, "ref")


# -- group_norm as layer_norm per group ----------------------------------------------------
def group_norm_model(shape, groups, dtype="float32", channel_axis=1, axes=None, center=True, epsilon=1e-5):
    bb = relax.BlockBuilder()
    c = shape[channel_axis]
    x, g, b = (relax.Var(n, R.Tensor(s, dtype)) for n, s in (("x", shape), ("g", (c,)), ("b", (c,))))
    axes = axes if axes is not None else [a for a in range(1, len(shape)) if a != channel_axis]
    with bb.function("main", [x, g, b]):
        with bb.dataflow():
            y = bb.emit(op.nn.group_norm(x, g, b, num_groups=groups, channel_axis=channel_axis, axes=axes,
                                         center=center, epsilon=epsilon))
            y = bb.emit_output(op.nn.gelu(y))
        bb.emit_func_output(y)
    return bb.get()


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("shape, groups, dtype", [
    ((2, 8, 5, 5), 4, "float32"), ((1, 6, 40), 6, "float32"), ((2, 8, 5, 5), 1, "float16"),
    ((1, 64, 100), 32, "float16"), ((3, 16, 4, 6), 8, "float32"), ((1, 4, 1), 2, "float32"),
], ids=str)
def test_group_norm_offloads_as_layer_norm_per_group_and_matches_tvm_alone(shape, groups, dtype, engine):
    """wav2vec's first feature layer (64 groups of one channel over time), image group norms,
    groups of one element. (Relax itself refuses a bfloat16 group_norm.)"""
    mod = group_norm_model(shape, groups, dtype)
    assert rewritten(mod, "group_norm") == 1
    _, report = partition_report(mod)
    assert not report.kept and len(report.regions) == 1, report.format()
    compare_or_skip(mod, engine)


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_a_group_norm_keeps_its_epsilon(engine):
    """Inputs of variance about 1e-6 with epsilon 1e-2: the epsilon dominates the denominator,
    so a rewrite that dropped or changed it would be far off."""
    mod = group_norm_model((2, 8, 12), 4, epsilon=1e-2)
    assert rewritten(mod, "group_norm") == 1
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal((2, 8, 12)).astype("float32") * 1e-3, *(rng.standard_normal((8,)).astype("float32")
                                                                          for _ in range(2))]
    compare_or_skip(mod, engine, arrays=arrays)


def test_a_group_norm_over_a_symbolic_batch_is_one_build():
    from simaccel.testing import assert_matches_tvm

    n = tvm.tirx.Var("n", "int64")
    mod = group_norm_model((n, 8, 12), 4)
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {"n": 5})
    assert rewritten(mod, "group_norm") == 1
    assert_matches_tvm(mod, sizes=[{"n": 1}, {"n": 5}], engines=["ref", "sim"])


@pytest.mark.parametrize("case", ["channels last", "symbolic length", "no center", "some axes"])
def test_a_group_norm_the_rewrite_does_not_cover_is_left_to_tvm(case):
    t = tvm.tirx.Var("t", "int64")
    mod = {"channels last": lambda: group_norm_model((2, 5, 5, 8), 4, channel_axis=3),
           "symbolic length": lambda: group_norm_model((1, 8, t), 4),
           "no center": lambda: group_norm_model((2, 8, 6), 4, center=False),
           "some axes": lambda: group_norm_model((2, 8, 3, 4), 4, axes=[2])}[case]()
    assert rewritten(mod, "group_norm") == 0
    if case != "symbolic length":
        compare_or_skip(mod, "ref")


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_a_wav2vec_style_feature_extractor_is_one_region(engine):
    """conv1d (stride 5) -> group_norm (a group per channel) -> gelu, then two strided conv1d ->
    gelu: one region with nothing kept on TVM (it was five regions around the conv1d and
    group_norm TVM kept), matching TVM alone."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((1, 1, 400), "float32"))
    ws = [relax.Var(f"w{i}", R.Tensor(s, "float32")) for i, s in enumerate([(32, 1, 10), (32, 32, 3), (32, 32, 2)])]
    g, b = relax.Var("g", R.Tensor((32,), "float32")), relax.Var("b", R.Tensor((32,), "float32"))
    with bb.function("main", [x, *ws, g, b]):
        with bb.dataflow():
            h = bb.emit(op.nn.conv1d(x, ws[0], strides=5))
            h = bb.emit(op.nn.gelu(bb.emit(op.nn.group_norm(h, g, b, num_groups=32, channel_axis=1, axes=[2]))))
            h = bb.emit(op.nn.gelu(bb.emit(op.nn.conv1d(h, ws[1], strides=2))))
            h = bb.emit_output(op.nn.gelu(bb.emit(op.nn.conv1d(h, ws[2], strides=2))))
        bb.emit_func_output(h)
    mod = bb.get()
    _, report = partition_report(mod)
    assert not report.kept and len(report.regions) == 1, report.format()
    compare_or_skip(mod, engine)


# -- adaptive_avg_pool2d as avg_pool2d -------------------------------------------------------
def adaptive_pool_model(shape, size, dtype="float32"):
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor(shape, dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(op.nn.relu(bb.emit(op.nn.adaptive_avg_pool2d(x, output_size=size))))
        bb.emit_func_output(y)
    return bb.get()


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("shape, size, dtype, rewrites", [
    ((2, 8, 7, 7), 1, "float32", 1),  # a global pool (torch.export writes mean for this; Relax models write the op)
    ((1, 4, 6, 9), (3, 3), "float32", 1),
    ((1, 4, 6, 9), (2, 9), "float16", 1),
    ((1, 4, 6, 9), None, "bfloat16", 1),  # the input's own size: windows of one element
    ((1, 4, 7, 9), (3, 3), "float32", 0),  # 3 does not divide 7: TVM's overlapping bins, left to TVM
], ids=str)
def test_adaptive_average_pooling_whose_size_divides_is_avg_pool2d(shape, size, dtype, rewrites, engine):
    mod = adaptive_pool_model(shape, size, dtype)
    assert rewritten(mod, "adaptive_avg_pool2d") == rewrites
    _, report = partition_report(mod)
    assert [op_name for _, op_name, _ in report.kept] == ([] if rewrites else ["relax.nn.adaptive_avg_pool2d"]), \
        report.format()
    compare_or_skip(mod, engine)


def index_tensor_model(x_shape, index_shapes, index_dtypes, dtype="float32"):
    """data[i0, i1, ...] as Relax writes it (relax.index_tensor of a tuple of index tensors)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor(x_shape, dtype))
    indices = [relax.Var(f"i{j}", R.Tensor(s, d)) for j, (s, d) in enumerate(zip(index_shapes, index_dtypes))]
    with bb.function("main", [x, *indices]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.index_tensor(x, relax.Tuple(indices)))
        bb.emit_func_output(out)
    return bb.get()


INDEX_CASES = [  # (data shape, index shapes, index dtypes): broadcast indices, dims left over, one to three
    ((5, 7, 3), [(4, 1), (1, 6)], ["int64", "int32"]),
    ((4, 9), [(4,), (4,)], ["int64", "int64"]),  # the last token's logits: x[arange(B), last]
    ((2, 3, 4, 5), [(6,), (6,), (1,)], ["int32", "int32", "int64"]),
    ((6, 2), [(2, 3)], ["int64"]),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("x_shape, index_shapes, index_dtypes", INDEX_CASES, ids=str)
def test_index_tensor_offloads_as_a_take_and_matches_tvm_alone_and_numpy(x_shape, index_shapes, index_dtypes, dtype):
    from simaccel.data import random_arrays
    from simaccel.testing import assert_matches_tvm

    mod = index_tensor_model(x_shape, index_shapes, index_dtypes, dtype)
    assert rewritten(mod, "index_tensor") == 1
    _, report = partition_report(mod)
    assert not report.kept and len(report.regions) == 1, report.format()
    assert next(iter(report.regions.values()))[-1] == "simaccel.take"
    rng = np.random.default_rng(len(index_shapes))
    [x] = random_arrays([("x", x_shape, dtype)], seed=3)
    indices = [rng.integers(0, x_shape[j], s).astype(d) for j, (s, d) in enumerate(zip(index_shapes, index_dtypes))]
    for run in assert_matches_tvm(mod, [x, *indices], engines=["ref", "sim"]):
        np.testing.assert_array_equal(run.outputs[0], x[tuple(indices)])


def test_negative_indices_read_as_torch_reads_them():
    """i in [-d, 0) reads element i + d (torch's and numpy's x[i]); TVM alone's index_tensor reads
    outside the tensor there, so this is checked against numpy."""
    mod = index_tensor_model((5, 7), [(6,), (6,)], ["int64", "int64"])
    x = np.arange(35, dtype=np.float32).reshape(5, 7)
    rows, cols = np.array([-5, -1, 0, 4, -2, 3]), np.array([-7, -1, 6, 0, 2, -3])
    vm = relax.VirtualMachine(build(mod, "llvm"), tvm.cpu())
    got = vm["main"](*(tvm.runtime.tensor(a) for a in (x, rows, cols))).numpy()
    np.testing.assert_array_equal(got, x[rows, cols])


def test_an_index_tensor_over_a_symbolic_indexed_dim_stays_on_tvm():
    n = tvm.tirx.Var("n", "int64")
    mod = index_tensor_model((n, 7), [(3,), (3,)], ["int64", "int64"])
    assert rewritten(mod, "index_tensor") == 0
    _, report = partition_report(mod)
    assert [op for _, op, _ in report.kept] == ["relax.index_tensor"]
