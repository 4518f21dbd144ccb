"""Partitioning: what is offloaded, what stays on TVM, and why (no execution)."""

import pytest
import tvm
from tvm import relax

from harness import offloaded_ops
from model_zoo import single_op
from simaccel.ops import list_ops
from simaccel.profile import DeviceProfile
from simaccel.tvm_integration import partition_for_simaccel, partition_report
from simaccel.tvm_integration.backend.patterns import registered_patterns

op = relax.op


def test_one_name_per_op_across_layers():
    """Op keys, registered pattern names (= composite names), references and kernels agree."""
    from simaccel.ops import get_op

    from simaccel.tvm_integration.backend.patterns import op_name

    patterns = [op_name(p.name) for p in registered_patterns()]
    assert sorted(patterns) == list_ops()
    for name in list_ops():
        definition = get_op(name)
        assert callable(definition.reference) and callable(definition.kernel) and callable(definition.infer)


def dense(x, w):
    return op.matmul(x, op.permute_dims(w))


F32 = "float32"
CASES = [
    # (id, make, input (shape, dtype) list, expected offloaded ops)
    ("matmul", lambda x, w: op.matmul(x, w), [((4, 8), F32), ((8, 6), F32)], ["simaccel.matmul"]),
    ("matmul_batched_data", lambda x, w: op.matmul(x, w), [((2, 3, 8), F32), ((8, 6), F32)], ["simaccel.matmul"]),
    ("dense", dense, [((4, 8), F32), ((6, 8), F32)], ["simaccel.dense"]),
    ("matmul_bias_relu", lambda x, w, b: op.nn.relu(op.add(op.matmul(x, w), b)),
     [((4, 8), F32), ((8, 6), F32), ((6,), F32)], ["simaccel.matmul_bias_relu"]),
    ("dense_bias_gelu", lambda x, w, b: op.nn.gelu(op.add(dense(x, w), b)),
     [((4, 8), F32), ((6, 8), F32), ((1, 6), F32)], ["simaccel.dense_bias_gelu"]),
    ("dense_float16", dense, [((4, 8), "float16"), ((6, 8), "float16")], ["simaccel.dense"]),
    ("matmul_full_bias_splits", lambda x, w, b: op.add(op.matmul(x, w), b),
     [((4, 8), F32), ((8, 6), F32), ((4, 6), F32)], ["simaccel.matmul", "simaccel.add"]),
    ("matmul_float64", lambda x, w: op.matmul(x, w), [((4, 8), "float64"), ((8, 6), "float64")], []),
    ("matmul_int32", lambda x, w: op.matmul(x, w), [((4, 8), "int32"), ((8, 6), "int32")], []),
    ("matmul_batched_weight", lambda x, w: op.matmul(x, w), [((2, 4, 8), F32), ((2, 8, 6), F32)], ["simaccel.matmul"]),
    ("matmul_broadcast_batches", lambda x, w: op.matmul(x, w), [((2, 1, 4, 8), F32), ((3, 8, 6), F32)], ["simaccel.matmul"]),
    ("matmul_rank5", lambda x, w: op.matmul(x, w), [((1, 2, 2, 4, 8), F32), ((8, 6), F32)], []),
    ("matmul_vector", lambda x, w: op.matmul(x, w), [((8,), F32), ((8, 6), F32)], []),
    ("conv2d_bias_relu", lambda x, w, b: op.nn.relu(op.add(op.nn.conv2d(x, w, padding=1), b)),
     [((1, 3, 8, 8), F32), ((4, 3, 3, 3), F32), ((1, 4, 1, 1), F32)], ["simaccel.conv2d_bias_relu"]),
    ("conv2d_strided_dilated", lambda x, w: op.nn.conv2d(x, w, strides=2, padding=(1, 0, 2, 1), dilation=2),
     [((1, 3, 9, 9), F32), ((4, 3, 3, 3), F32)], ["simaccel.conv2d"]),
    ("conv2d_groups", lambda x, w: op.nn.conv2d(x, w, groups=2), [((1, 4, 8, 8), F32), ((4, 2, 3, 3), F32)], ["simaccel.conv2d"]),
    ("conv2d_depthwise", lambda x, w: op.nn.conv2d(x, w, groups=4, padding=1), [((1, 4, 8, 8), F32), ((4, 1, 3, 3), F32)],
     ["simaccel.conv2d"]),
    ("conv2d_nhwc", lambda x, w: op.nn.conv2d(x, w, data_layout="NHWC", kernel_layout="OHWI"),
     [((1, 8, 8, 3), F32), ((4, 3, 3, 3), F32)], []),
    ("max_pool2d", lambda x: op.nn.max_pool2d(x, 3, strides=2, padding=1), [((1, 2, 7, 7), F32)], ["simaccel.max_pool2d"]),
    ("avg_pool2d", lambda x: op.nn.avg_pool2d(x, 2, count_include_pad=True), [((1, 2, 6, 6), F32)], ["simaccel.avg_pool2d"]),
    ("pool_ceil_mode", lambda x: op.nn.max_pool2d(x, 2, strides=2, ceil_mode=True), [((1, 2, 7, 7), F32)],
     ["simaccel.max_pool2d"]),
    ("avg_pool_ceil_mode", lambda x: op.nn.avg_pool2d(x, 2, strides=2, ceil_mode=True), [((1, 2, 7, 7), F32)], []),
    ("softmax_last", lambda x: op.nn.softmax(x, axis=-1), [((3, 5), F32)], ["simaccel.softmax"]),
    ("softmax_axis0", lambda x: op.nn.softmax(x, axis=0), [((3, 5), F32)], []),
    ("layer_norm", lambda x, g, b: op.nn.layer_norm(x, g, b, axes=[-1]), [((2, 3, 8), F32), ((8,), F32), ((8,), F32)],
     ["simaccel.layer_norm"]),
    ("layer_norm_two_axes", lambda x, g, b: op.nn.layer_norm(x, g, b, axes=[-2, -1]),
     [((2, 3, 8), F32), ((3, 8), F32), ((3, 8), F32)], []),
    ("add_broadcast", lambda x, y: op.add(x, y), [((2, 3, 4), F32), ((4,), F32)], ["simaccel.add"]),
    ("multiply_float16", lambda x, y: op.multiply(x, y), [((2, 3), "float16"), ((2, 3), "float16")], ["simaccel.multiply"]),
    ("add_rank5", lambda x, y: op.add(x, y), [((1, 2, 1, 2, 3), F32), ((3,), F32)], ["simaccel.add"]),
    ("add_five_broadcast_dims", lambda x, y: op.add(x, y), [((2, 1, 2, 1, 2), F32), ((1, 2, 1, 2, 1), F32)], []),
    ("add_rank7", lambda x, y: op.add(x, y), [((1, 2, 1, 2, 1, 2, 3), F32), ((3,), F32)], []),
    ("add_int32", lambda x, y: op.add(x, y), [((4,), "int32"), ((4,), "int32")], ["simaccel.integer_add"]),
    ("add_float64", lambda x, y: op.add(x, y), [((4,), "float64"), ((4,), "float64")], []),
    ("gelu", lambda x: op.nn.gelu(x), [((3, 5), F32)], ["simaccel.gelu"]),
    ("tanh", lambda x: op.tanh(x), [((3, 5), F32)], ["simaccel.tanh"]),
    ("leakyrelu", lambda x: op.nn.leakyrelu(x, 0.1), [((3, 5), F32)], []),
    ("clip", lambda x: op.clip(x, 0.0, 6.0), [((3, 5), F32)], ["simaccel.clip"]),
    ("reshape_alone", lambda x: op.reshape(x, (5, 3)), [((3, 5), F32)], ["simaccel.reshape"]),
    ("permute_rank6", lambda x: op.permute_dims(x, [5, 4, 3, 2, 1, 0]), [((1, 2, 1, 2, 1, 2), F32)], ["simaccel.permute_dims"]),
    ("strided_slice", lambda x: op.strided_slice(x, [0], [1], [3]), [((4, 5), F32)], ["simaccel.strided_slice"]),
    ("strided_slice_backwards", lambda x: op.strided_slice(x, [0], [3], [0], [-1]), [((4, 5), F32)], []),
    ("mean_spatial", lambda x: op.mean(x, axis=[2, 3], keepdims=True), [((1, 2, 3, 4), F32)], ["simaccel.mean"]),
    ("sum_apart_axes", lambda x: op.sum(x, axis=[0, 2]), [((2, 3, 4), F32)], []),
    ("broadcast_to", lambda x: op.broadcast_to(x, (2, 3, 5)), [((3, 1), F32)], ["simaccel.broadcast_to"]),
    ("concat_three", lambda x, y: op.concat([x, y, x], axis=0), [((2, 3), F32), ((4, 3), F32)], ["simaccel.concat"]),
    ("concat_int32", lambda x, y: op.concat([x, y], axis=1), [((2, 3), "int32"), ((2, 1), "int32")], ["simaccel.concat"]),
    ("concat_float64", lambda x, y: op.concat([x, y], axis=1), [((2, 3), "float64"), ((2, 1), "float64")], []),
]


@pytest.mark.parametrize("make, inputs, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_partition(make, inputs, expected):
    mod = single_op(make, inputs)
    assert offloaded_ops(mod) == expected


@pytest.mark.parametrize("make, inputs, reason", [
    (lambda x, w: op.nn.conv2d(x, w, data_layout="NHWC", kernel_layout="OHWI"), [((1, 8, 8, 3), F32), ((4, 3, 3, 3), F32)],
     "conv2d layouts ('NHWC', 'OHWI', 'NHWC')"),
    (lambda x: op.strided_slice(x, [0], [3], [0], [-1]), [((4, 5), F32)], "strided_slice steps [-1] (only steps >= 1)"),
    (lambda x: op.sum(x, axis=[0, 2]), [((2, 3, 4), F32)], "axes [0, 2] are not neighbours"),
    (lambda x: op.squeeze(x, [0]), [((2, 3), F32)], "squeeze of axes [0] of (2, 3), not all of size 1"),
])
def test_rejections_say_why(make, inputs, reason):
    _, report = partition_report(single_op(make, inputs))
    assert report.regions == {}
    [(var, relax_op, why)] = report.kept
    assert reason in why, why


@pytest.mark.parametrize(
    "inputs, reason",
    [
        ([((4, 8), "float64"), ((8, 6), "float64")], "dtype float64 is not supported"),
        ([((1, 2, 2, 4, 8), F32), ((8, 6), F32)], "data must have rank 2..4"),
    ],
)
def test_matmul_rejection_reasons(inputs, reason):
    _, report = partition_report(single_op(lambda x, w: op.matmul(x, w), inputs))
    assert any(reason in r for _, _, r in report.kept), report.format()


def test_a_concat_of_a_tuple_variable_stays_on_tvm_with_the_reason():
    # A tuple bound to a variable would reach the region as one tuple parameter; only a tuple
    # written in the call has its fields become the region's tensors.
    x, y = relax.Var("x", relax.TensorType((2, 3), F32)), relax.Var("y", relax.TensorType((2, 4), F32))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            pair = bb.emit(relax.Tuple([x, y]))
            out = bb.emit_output(op.concat(pair, axis=1))
        bb.emit_func_output(out)
    _, report = partition_report(bb.get())
    assert report.regions == {}
    [(_, relax_op, why)] = report.kept
    assert relax_op == "relax.concat" and "data is the variable" in why and "not a tuple of tensors written in the call" in why


def test_ops_without_a_pattern_are_reported():
    _, report = partition_report(single_op(lambda x: op.nn.leakyrelu(x, 0.1), [((3,), F32)]))
    assert report.kept[0][1:] == ("relax.nn.leakyrelu", "simaccel has no pattern for relax.nn.leakyrelu")


def _matmul_of(x_type):
    x = relax.Var("x", x_type)
    w = relax.Var("w", relax.TensorType((8, 6), F32))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(op.matmul(x, w))
        bb.emit_func_output(out)
    return partition_report(bb.get())[1]


def test_symbolic_dims_offload_and_dims_simaccel_cannot_represent_stay_on_tvm():
    """(n, 8) @ (8, 6) is offloaded (docs/symbolic-shapes.md); a tensor of unknown dims, or a dim
    that is no polynomial of size vars (max(n, 1)), stays on TVM, saying so."""
    n = tvm.tirx.Var("n", "int64")
    assert list(_matmul_of(relax.TensorType((n, 8), F32)).regions.values()) == [["simaccel.matmul"]]
    unknown = _matmul_of(relax.TensorType(dtype=F32, ndim=2))
    assert unknown.regions == {} and "unknown shape" in unknown.kept[0][2]
    unrepresentable = _matmul_of(relax.TensorType((tvm.tirx.max(n, 1), 8), F32))
    assert unrepresentable.regions == {} and "cannot represent" in unrepresentable.kept[0][2]


def test_adjacent_ops_merge_into_one_region_and_tvm_ops_split_regions():
    make = lambda x, w, g, b: op.nn.layer_norm(op.nn.leakyrelu(op.nn.softmax(op.matmul(x, w)), 0.1), g, b, axes=[-1])  # noqa: E731
    mod = single_op(make, [((4, 8), F32), ((8, 6), F32), ((6,), F32), ((6,), F32)])
    _, report = partition_report(mod)
    assert list(report.regions.values()) == [["simaccel.matmul", "simaccel.softmax"], ["simaccel.layer_norm"]]
    assert [k[1] for k in report.kept] == ["relax.nn.leakyrelu"]


def test_profile_is_read_by_the_checks():
    mod = single_op(lambda x, w: op.matmul(x, w), [((4, 8), F32), ((8, 6), F32)])
    fp16_only = DeviceProfile(name="fp16-only", dtypes=("float16",))
    assert offloaded_ops(mod) == ["simaccel.matmul"]
    _, report = partition_report(mod, fp16_only)
    assert report.regions == {} and "profile fp16-only" in report.kept[0][2]
    small = DeviceProfile(name="small", max_elements=16)
    assert partition_for_simaccel(mod, small).functions.keys() == mod.functions.keys()
    no_matmul = DeviceProfile(name="no-matmul", ops=frozenset({"simaccel.softmax"}))
    _, report = partition_report(mod, no_matmul)
    assert "not enabled in profile no-matmul" in report.kept[0][2]


def test_the_report_says_when_an_op_was_offloaded_without_the_larger_pattern_tried_first():
    """A scratchpad too small for dense + bias + relu together (1312 bytes) but not for each op
    alone: the three are offloaded apart, and the report names the var and the refused pattern
    with its reason (once per var: the most fused one), not only the split."""
    from tvm import relax

    from simaccel import DeviceProfile
    from simaccel.tvm_integration import partition_report

    bb = relax.BlockBuilder()
    x, w, b = (relax.Var(n, relax.TensorType(s, "float32")) for n, s in (("x", (16, 8)), ("w", (8, 8)), ("b", (8,))))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            h = bb.emit(relax.op.add(relax.op.matmul(x, relax.op.permute_dims(w)), b))
            out = bb.emit_output(relax.op.nn.relu(h))
        bb.emit_func_output(out)
    mod = bb.get()
    _, whole = partition_report(mod, DeviceProfile(name="roomy", max_region_bytes=1312))
    assert whole.apart == [] and list(whole.regions.values()) == [["simaccel.dense_bias_relu"]]
    _, report = partition_report(mod, DeviceProfile(name="tight", max_region_bytes=1311))
    assert sorted(op for ops in report.regions.values() for op in ops) == ["simaccel.add", "simaccel.dense", "simaccel.relu"]
    assert [(pattern, reason) for _, pattern, reason in report.apart] == [
        ("simaccel.dense_bias_relu", "simaccel.dense_bias_relu alone needs 1312 bytes, more than profile tight's "
                                     "1311-byte scratchpad"),
        ("simaccel.dense_bias", "simaccel.dense_bias alone needs 1312 bytes, more than profile tight's 1311-byte scratchpad")]
    assert "offloaded without simaccel.dense_bias_relu, which was rejected" in report.format()


def test_a_match_cast_between_offloaded_ops_partitions_and_matches_tvm_alone():
    """TVM's MergeCompositeFunctions refuses MatchCast bindings ("Invalid type:
    relax.expr.MatchCast"): they pass through it as placeholder calls and come back after, so a
    model that names a size with R.match_cast (a grown cache's m + s as t, which TVM alone's
    attention needs) partitions, the cast staying on TVM between its regions."""
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    from simaccel.testing import assert_matches_tvm

    s, m, t = (tvm.tirx.Var(n, "int64") for n in "smt")
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((1, s, 8), "float32"))
    cache = relax.Var("cache", R.Tensor((1, m, 8), "float32"))
    with bb.function("main", [x, cache]):
        with bb.dataflow():
            grown = bb.emit(relax.op.concat([cache, bb.emit(relax.op.nn.relu(x))], axis=1))
            named = bb.match_cast(grown, R.Tensor((1, t, 8), "float32"))
            out = bb.emit_output(relax.op.sum(bb.emit(relax.op.multiply(named, named)), axis=[1]))
        bb.emit_func_output(out)
    mod = bb.get()
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {"s": 8, "m": 16, "t": 24})
    partitioned, report = partition_report(mod)
    assert report.regions and not report.kept, report.format()
    assert "R.match_cast" in partitioned["main"].script()
    assert_matches_tvm(mod, sizes=[{"s": 3, "m": 0}, {"s": 1, "m": 5}, {"s": 8, "m": 16}], engines=["ref", "sim"])


@pytest.mark.parametrize("size_args", ["arange", "slice"])
def test_a_call_that_takes_a_size_var_itself_partitions_and_matches_tvm_alone(size_args):
    """R.arange(0, n, 1) (position ids over a symbolic length: transformers' models) and a
    strided_slice whose end is a size var take TVM 0.27's size var itself as an argument, and
    TVM's MergeCompositeFunctions, looking it up as a Relax var it has not seen, fails
    ("memo_.count"). Such calls pass through it as placeholder calls and come back after."""
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    from simaccel.testing import assert_matches_tvm

    n = tvm.tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((2, n), "int64"))
    with bb.function("main", [x]):
        with bb.dataflow():
            if size_args == "arange":
                made = bb.emit(relax.op.arange(0, n, 1, "int64"))  # stays on TVM: no pattern
            else:
                made = bb.emit(relax.op.strided_slice(x, [1], [0], [n]))
            shifted = bb.emit(relax.op.add(made, relax.const(1, "int64")))
            out = bb.emit_output(relax.op.multiply(bb.emit(relax.op.add(x, shifted)), x))
        bb.emit_func_output(out)
    mod = bb.get()
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {"n": 16})
    _, report = partition_report(mod)
    assert report.regions, report.format()
    assert_matches_tvm(mod, sizes=[{"n": 1}, {"n": 7}, {"n": 16}], engines=["ref"])


def test_a_conv2d_transpose_whose_out_dtype_is_not_its_datas_stays_on_tvm_with_its_reason():
    """simaccel.conv2d_transpose gives the data's dtype: Relax's out_dtype float32 of float16 data
    is refused by partitioning's comparison of the op's result with Relax's, as any op's."""
    x, w = relax.Var("x", relax.TensorType((1, 4, 5, 5), "float16")), relax.Var("w", relax.TensorType((4, 3, 3, 3), "float16"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv2d_transpose(x, w, strides=2, out_dtype="float32"))
        bb.emit_func_output(out)
    _, report = partition_report(bb.get())
    assert not report.regions
    assert [reason for _, _, reason in report.kept] == [
        "simaccel.conv2d_transpose rejected: simaccel.conv2d_transpose would give (1, 3, 11, 11) float16 where "
        "Relax gives (1, 3, 11, 11) float32"]
