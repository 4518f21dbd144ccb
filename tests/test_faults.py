"""The fault catalogue: one section per class of defect that once gave a wrong answer or a crash.

Each test sweeps the class (shapes, dtypes, engines, special values), not only the example
that revealed it, and every end-to-end result is compared with the same model built by TVM
alone. CLI mistakes have their own catalogue in test_cli.py.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import textwrap
import threading
import tracemalloc
import weakref

import numpy as np
import pytest
import tvm
from tvm import relax, te

import forks
import simaccel
from conftest import HAS_GPU
from harness import assert_same, compare_with_tvm, offloaded_ops, run_vm, tvm_alone
from model_zoo import single_op
from simaccel import LayoutError, ProgramError, SimAccelError
from simaccel.program import OpNode, Program, TensorSpec
from simaccel.runtime import Runtime
from simaccel.tvm_integration import build, partition_report

op = relax.op
F32, F16 = "float32", "float16"


def dense(x, w):
    return op.matmul(x, op.permute_dims(w))


def broadcastable(shape, max_rank):
    """Every shape of rank 1..max_rank that numpy-broadcasts against `shape` without growing it
    (each axis: 1 or the dim), plus a few that grow it (a new leading axis, a 1 made wider)."""
    shapes = []
    for rank in range(1, max_rank + 1):
        tail = shape[len(shape) - rank:] if rank <= len(shape) else None
        if tail is None:
            continue
        for keep in itertools.product((False, True), repeat=rank):
            shapes.append(tuple(d if k else 1 for d, k in zip(tail, keep)))
    return shapes


# -- 1. fusion must not change the math ----------------------------------------------------------
CONV_OUT = (1, 3, 5, 3)  # W == O: a (3,) bias broadcasts along W, not along the channels
CONV_BIASES = broadcastable(CONV_OUT, 4) + [(2, 1, 1, 1), (1, 1, 3, 1, 1)]


@pytest.mark.parametrize("bias_first", [False, True], ids=["conv+b", "b+conv"])
@pytest.mark.parametrize("bias", CONV_BIASES, ids=str)
def test_conv_bias_fusion_equals_relax_broadcasting(bias, bias_first):
    def make(x, w, b):
        y = op.nn.conv2d(x, w, padding=1)
        return op.nn.relu(op.add(b, y) if bias_first else op.add(y, b))

    dtype = F16 if bias in ((3,), (1, 3, 1, 1)) else F32  # the classic cases in float16 too
    for dt in {F32, dtype}:
        mod = single_op(make, [((1, 2, 5, 3), None), ((3, 2, 3, 3), None), (bias, None)], dt)
        ops = offloaded_ops(mod)
        fused = any(name.startswith("simaccel.conv2d_bias") for name in ops)
        assert fused == (len(bias) <= 4 and (1,) * (4 - len(bias)) + bias == (1, 3, 1, 1)), ops
        compare_with_tvm(mod, "ref")


@pytest.mark.parametrize("bias", [(3,), (1, 3, 1, 1), (3, 1, 1), (2, 3, 1, 1)], ids=str)
def test_conv_bias_that_widens_the_result_stays_unfused(bias):
    """Output (1, 3, 5, 1): a (3,) bias makes it (1, 3, 5, 3); nothing may be fused into the conv."""
    mod = single_op(lambda x, w, b: op.add(op.nn.conv2d(x, w, padding=1), b),
                    [((1, 2, 5, 1), None), ((3, 2, 3, 3), None), (bias, None)])
    ops = offloaded_ops(mod)
    assert ("simaccel.conv2d_bias" in ops) == (bias in ((1, 3, 1, 1), (3, 1, 1))), ops
    compare_with_tvm(mod, "ref")


MATMUL_OUT = (2, 3, 4)


@pytest.mark.parametrize("form", ["matmul", "dense"])
@pytest.mark.parametrize("bias", broadcastable(MATMUL_OUT, 3) + [(2, 1, 1, 4)], ids=str)
def test_matmul_bias_fusion_equals_relax_broadcasting(bias, form):
    weight = (5, 4) if form == "matmul" else (4, 5)
    mm = (lambda x, w: op.matmul(x, w)) if form == "matmul" else dense
    mod = single_op(lambda x, w, b: op.nn.gelu(op.add(b, mm(x, w))), [((2, 3, 5), None), (weight, None), (bias, None)])
    ops = offloaded_ops(mod)
    fused = any("_bias" in name for name in ops)
    assert fused == (len(bias) <= 3 and all(d == 1 for d in bias[:-1]) and bias[-1] == 4), ops
    compare_with_tvm(mod, "ref")


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_fused_and_unfused_biases_on_the_kernels(engine):
    """The same decisions hold where the kernels run (sim): fused channel bias, unfused W-axis bias."""
    for bias in [(3,), (3, 1, 1)]:
        mod = single_op(lambda x, w, b: op.nn.relu(op.add(op.nn.conv2d(x, w, padding=1), b)),
                        [((1, 2, 5, 3), None), ((3, 2, 3, 3), None), (bias, None)])
        compare_with_tvm(mod, engine)


# -- 2. aliasing: an output that is also an input ------------------------------------------------
def program(name, tensors, inputs, outputs, ops):
    return Program(name, tuple(TensorSpec(*t) for t in tensors), inputs, outputs, tuple(OpNode(*o) for o in ops))


MATMUL = program("mm", [("x", (4, 4), F32), ("w", (4, 4), F32), ("y", (4, 4), F32)], (0, 1), (2,),
                 [("simaccel.matmul", (0, 1), 2)])
TWO_OUT = program("two", [("x", (3, 5), F32), ("r", (3, 5), F32), ("s", (3, 5), F32)], (0,), (1, 2),
                  [("simaccel.relu", (0,), 1), ("simaccel.softmax", (0,), 2)])


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_output_that_is_an_input_is_computed_as_if_separate(clean_runtime, engine):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 4, 4)).astype(F32)
    want = x @ w
    with clean_runtime.use_engine(engine):
        clean_runtime.run(MATMUL, x, w, x)  # y is x's own memory
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-5)
    assert clean_runtime.ledger.snapshot()["bytes"]["device_to_device"] == 64

    # partial overlap: y starts half-way into x
    buffer = rng.standard_normal(24).astype(F32)
    x, y = buffer[:16].reshape(4, 4), buffer[8:24].reshape(4, 4)
    want = x @ w
    with clean_runtime.use_engine(engine):
        clean_runtime.run(MATMUL, x, w, y)
    np.testing.assert_allclose(buffer[8:24].reshape(4, 4), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("aliased", ["r", "s"])
def test_first_output_overwriting_an_input_does_not_feed_the_second_op(clean_runtime, engine, aliased):
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(F32)
    original = x.copy()
    r = x if aliased == "r" else np.empty_like(x)
    s = x if aliased == "s" else np.empty_like(x)
    with clean_runtime.use_engine(engine):
        clean_runtime.run(TWO_OUT, x, r, s)
    np.testing.assert_allclose(r, np.maximum(original, 0), rtol=1e-6)
    np.testing.assert_allclose(s, softmax(original), rtol=1e-5, atol=1e-6)


def test_two_outputs_in_one_buffer_are_refused(clean_runtime):
    x = np.ones((3, 5), F32)
    out = np.empty((3, 5), F32)
    with pytest.raises(LayoutError, match="outputs 'r' and 's' share memory"):
        clean_runtime.run(TWO_OUT, x, out, out)


def test_inputs_may_share_memory(clean_runtime):
    x = np.random.default_rng(2).standard_normal((4, 4)).astype(F32)
    y = np.empty_like(x)
    clean_runtime.run(MATMUL, x, x, y)
    np.testing.assert_allclose(y, x @ x, rtol=1e-5, atol=1e-5)
    assert clean_runtime.ledger.snapshot()["bytes"]["device_to_device"] == 0


# -- 3. numeric semantics equal to TVM's, on every engine ----------------------------------------
def specials(shape, dtype, seed, fraction=0.25):
    """Seeded normal values with NaN, +inf and -inf at a `fraction` of the positions."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    mask = rng.random(shape) < fraction
    x[mask] = rng.choice(np.array([np.nan, np.inf, -np.inf], np.float32), size=int(mask.sum()))
    return x.astype(dtype)


SPECIAL_OPS = [
    ("relu", lambda x: op.nn.relu(x), [(4, 6)]),
    ("gelu", lambda x: op.nn.gelu(x), [(4, 6)]),
    ("add", lambda x, y: op.add(x, y), [(3, 4, 5), (4, 1)]),
    ("multiply", lambda x, y: op.multiply(x, y), [(3, 5), (3, 5)]),
    ("softmax", lambda x: op.nn.softmax(x), [(6, 7)]),
    ("layer_norm", lambda x, g, b: op.nn.layer_norm(x, g, b, axes=[-1]), [(5, 6), (6,), (6,)]),
    ("rms_norm", lambda x, w: op.nn.rms_norm(x, w, axes=[-1]), [(5, 6), (6,)]),
    ("negative_sin_cos", lambda x: op.add(op.sin(op.negative(x)), op.cos(x)), [(4, 6)]),
    ("max_pool2d", lambda x: op.nn.max_pool2d(x, 3, strides=1, padding=1), [(1, 2, 6, 6)]),
    ("max_pool2d_dilated", lambda x: op.nn.max_pool2d(x, 2, strides=2, padding=(1, 0, 0, 1), dilation=2), [(1, 2, 7, 6)]),
    ("max_pool2d_all_padding", lambda x: op.nn.max_pool2d(x, 1, strides=2, padding=1), [(1, 2, 3, 3)]),
    ("avg_pool2d", lambda x: op.nn.avg_pool2d(x, 3, strides=1, padding=1), [(1, 2, 6, 6)]),
    ("avg_pool2d_all_padding", lambda x: op.nn.avg_pool2d(x, 1, strides=2, padding=1), [(1, 2, 3, 3)]),
    ("avg_pool2d_include_pad", lambda x: op.nn.avg_pool2d(x, 1, strides=2, padding=1, count_include_pad=True),
     [(1, 2, 3, 3)]),
    ("matmul", lambda x, w: op.matmul(x, w), [(4, 5), (5, 3)]),
    ("dense_bias_relu", lambda x, w, b: op.nn.relu(op.add(dense(x, w), b)), [(4, 5), (3, 5), (3,)]),
    ("matmul_bias_gelu", lambda x, w, b: op.nn.gelu(op.add(op.matmul(x, w), b)), [(2, 4, 5), (5, 3), (1, 3)]),
    ("conv2d_bias_relu", lambda x, w, b: op.nn.relu(op.add(op.nn.conv2d(x, w, padding=1), b)),
     [(1, 2, 5, 5), (3, 2, 3, 3), (1, 3, 1, 1)]),
]


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("make, shapes", [c[1:] for c in SPECIAL_OPS], ids=[c[0] for c in SPECIAL_OPS])
def test_nan_and_inf_give_what_tvm_gives(make, shapes, dtype, engine):
    mod = single_op(make, [(s, None) for s in shapes], dtype)
    for seed in range(2):
        arrays = [specials(s, dtype, seed * 10 + i) for i, s in enumerate(shapes)]
        compare_with_tvm(mod, engine, arrays=arrays)


ZERO_SIZE = [
    ("relu", lambda x: op.nn.relu(x), [(0,)]),
    ("gelu", lambda x: op.nn.gelu(x), [(0, 3)]),
    ("add", lambda x, y: op.add(x, y), [(0, 3), (1, 3)]),
    ("softmax_empty_rows", lambda x: op.nn.softmax(x), [(2, 0)]),
    ("softmax_no_rows", lambda x: op.nn.softmax(x), [(0, 3)]),
    ("layer_norm_no_rows", lambda x, g, b: op.nn.layer_norm(x, g, b, axes=[-1]), [(0, 3), (3,), (3,)]),
    # (rms_norm of rows of no elements: TVM 0.27 cannot build it, a constant division by 0)
    ("matmul_no_rows", lambda x, w: op.matmul(x, w), [(0, 2), (2, 3)]),
    ("matmul_empty_reduction", lambda x, w, b: op.add(op.matmul(x, w), b), [(2, 0), (0, 3), (3,)]),
    ("conv2d_empty_batch", lambda x, w: op.nn.conv2d(x, w), [(0, 2, 3, 3), (2, 2, 1, 1)]),
    ("max_pool2d_empty_batch", lambda x: op.nn.max_pool2d(x, 2), [(0, 2, 4, 4)]),
]


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("make, shapes", [c[1:] for c in ZERO_SIZE], ids=[c[0] for c in ZERO_SIZE])
def test_zero_size_tensors_give_what_tvm_gives(make, shapes, engine):
    mod = single_op(make, [(s, None) for s in shapes])
    compare_with_tvm(mod, engine)


def test_engines_agree_exactly_on_special_values(clean_runtime):
    """ref and sim: the same NaN/inf pattern and the same finite values (to rounding)."""
    for name, make, shapes in SPECIAL_OPS:
        mod = single_op(make, [(s, None) for s in shapes])
        arrays = [specials(s, F32, 7 + i) for i, s in enumerate(shapes)]
        executable = build(mod)
        results = {}
        for engine in ("ref", "sim"):
            with clean_runtime.use_engine(engine):
                results[engine] = run_vm(executable, arrays)
        assert_same(results["sim"], results["ref"], F32)


# -- 4. every Relax function of a module, whatever its name --------------------------------------
def module_with_many_functions():
    bb = relax.BlockBuilder()
    h = relax.Var("h", relax.TensorType((2, 3), F32))
    with bb.function("helper", [h], private=True):
        with bb.dataflow():
            y = bb.emit_output(op.nn.softmax(op.nn.relu(h)))
        bb.emit_func_output(y)
    helper = bb.get().get_global_var("helper")
    x, w = relax.Var("x", relax.TensorType((2, 4), F32)), relax.Var("w", relax.TensorType((4, 3), F32))
    with bb.function("forward", [x, w]):
        with bb.dataflow():
            a = bb.emit(op.matmul(x, w))
            b = bb.emit_te(lambda t: te.compute(t.shape, lambda i, j: t[i, j] * 2.0), a)  # call_tir
            c = bb.emit(relax.Call(helper, [b]))
            d = bb.emit(op.nn.gelu(c))
            out = bb.emit_output(relax.Tuple([d, bb.emit(relax.Call(helper, [d]))]))
        bb.emit_func_output(out)
    forward = bb.get().get_global_var("forward")
    x2, w2 = relax.Var("x", relax.TensorType((2, 4), F32)), relax.Var("w", relax.TensorType((4, 3), F32))
    with bb.function("second", [x2, w2]):
        with bb.dataflow():
            y = bb.emit(op.nn.relu(x2))
            pair = bb.emit(relax.Call(forward, [y, w2]))
            z = bb.emit_output(op.add(relax.TupleGetItem(pair, 0), relax.TupleGetItem(pair, 1)))
        bb.emit_func_output(z)
    return bb.get()


def test_every_public_function_is_partitioned_and_matches_tvm():
    mod = module_with_many_functions()
    _, report = partition_report(mod)
    assert len(report.regions) >= 3, report.format()
    kept = {(var, name): reason for var, name, reason in report.kept}
    assert any("private function helper" in r for r in kept.values()), report.format()
    for func in ("forward", "second"):
        compare_with_tvm(mod, "ref", func=func)


@pytest.mark.parametrize("entry", ["forward", "main_model", "infer"])
def test_an_entry_not_called_main(entry):
    bb = relax.BlockBuilder()
    x, w = relax.Var("x", relax.TensorType((3, 4), F32)), relax.Var("w", relax.TensorType((5, 4), F32))
    with bb.function(entry, [x, w]):
        with bb.dataflow():
            out = bb.emit_output(op.nn.softmax(op.nn.relu(dense(x, w))))
        bb.emit_func_output(out)
    mod = bb.get()
    assert offloaded_ops(mod) == ["simaccel.dense_relu", "simaccel.softmax"]
    compare_with_tvm(mod, "ref", func=entry)


def test_two_models_in_one_module_each_offloaded():
    bb = relax.BlockBuilder()
    for name, shape in (("encoder", (2, 8)), ("decoder", (3, 8))):
        x = relax.Var("x", relax.TensorType(shape, F32))
        g, b = relax.Var("g", relax.TensorType((8,), F32)), relax.Var("b", relax.TensorType((8,), F32))
        with bb.function(name, [x, g, b]):
            with bb.dataflow():
                out = bb.emit_output(op.nn.gelu(op.nn.layer_norm(x, g, b, axes=[-1])))
            bb.emit_func_output(out)
    mod = bb.get()
    _, report = partition_report(mod)
    assert len(report.regions) == 2 and not report.kept, report.format()
    for name in ("encoder", "decoder"):
        compare_with_tvm(mod, "ref", func=name)


# -- 5. threads ----------------------------------------------------------------------------------
THREADED_VMS = textwrap.dedent(
    """
    import sys, threading
    import numpy as np, tvm
    from tvm import relax
    import simaccel
    from simaccel.tvm_integration import build, build_tvm_only
    from simaccel.tvm_integration.tools.models import demo_cnn, random_inputs

    threads, calls, engine, model = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if model == "demo":  # regions and TVM kernels
        mod = demo_cnn(batch=1)
    else:  # one small region and no TVM kernel at all (the simulator interprets every CUDA thread in Python)
        x, w = relax.Var("x", relax.TensorType((2, 8), "float32")), relax.Var("w", relax.TensorType((8, 5), "float32"))
        bb = relax.BlockBuilder()
        with bb.function("main", [x, w]):
            with bb.dataflow():
                out = bb.emit_output(relax.op.nn.softmax(relax.op.nn.relu(relax.op.matmul(x, w))))
            bb.emit_func_output(out)
        mod = bb.get()
    arrays = random_inputs(mod)
    want = relax.VirtualMachine(build_tvm_only(mod), tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()
    ok = []
    for round in range(2):  # a fresh executable each round: its first VMs are made concurrently
        executable = build(mod)
        start = threading.Barrier(threads)

        def work():
            tensors = [tvm.runtime.tensor(a) for a in arrays]
            start.wait()
            vm = relax.VirtualMachine(executable, tvm.cpu())
            with simaccel.get_runtime().use_engine(engine):
                for _ in range(calls):
                    got = vm["main"](*tensors).numpy()
                    ok.append(bool(np.allclose(got, want, rtol=1e-4, atol=1e-5)))

        pool = [threading.Thread(target=work) for _ in range(threads)]
        [t.start() for t in pool]
        [t.join() for t in pool]
    print(f"{sum(ok)} of {len(ok)} calls matched")
    """
)


@pytest.mark.parametrize("engine, threads, calls, model", [
    ("ref", 8, 200, "demo"), ("ref", 8, 200, "all-offloaded"), ("sim", 4, 10, "all-offloaded"),
])
def test_threads_creating_their_own_vms_and_calling(tmp_path, engine, threads, calls, model):
    script = tmp_path / "threads.py"
    script.write_text(THREADED_VMS)
    result = forks.run([sys.executable, str(script), str(threads), str(calls), engine, model], timeout=900, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    total = 2 * threads * calls
    assert f"{total} of {total} calls matched" in result.stdout


NOT_RUNNABLE = ("c", "static_library")  # module kinds that make Executable.jit() compile and reload


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("model", ["all-offloaded", "mixed", "many-functions"])
def test_executables_need_no_jit_when_a_vm_is_made(device, model):
    """Creating a VM must compile nothing (TVM's compile-and-reload on first use has no lock)."""
    from simaccel.tvm_integration import default_target
    from simaccel.tvm_integration.tools.models import demo_cnn

    mods = {
        "all-offloaded": lambda: single_op(lambda x, w: op.nn.softmax(op.nn.relu(op.matmul(x, w))), [((2, 8), None), ((8, 5), None)]),
        "mixed": lambda: demo_cnn(batch=1),
        "many-functions": module_with_many_functions,
    }
    executable = build(mods[model](), default_target(device))
    not_runnable = [m.kind for m in executable.mod._collect_from_import_tree(lambda m: m.kind in NOT_RUNNABLE)]
    if device == "cpu":
        assert not_runnable == []
    else:
        # A CUDA build's native regions are an object that TVM must link: `build` links it at
        # once where the executable can run (a GPU is present), so a VM still compiles nothing.
        assert not_runnable == ["static_library"]
        assert (executable._jitted_mod is not None) == HAS_GPU


def test_sim_engine_serialises_threads_instead_of_failing(clean_runtime):
    x = np.random.default_rng(3).standard_normal((3, 5)).astype(F32)
    errors, results = [], []

    def work():
        try:
            r, s = np.empty_like(x), np.empty_like(x)
            with clean_runtime.use_engine("sim"):
                for _ in range(5):
                    clean_runtime.run(TWO_OUT, x, r, s)
                    results.append(np.allclose(s, softmax(x), rtol=1e-5, atol=1e-6))
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    pool = [threading.Thread(target=work) for _ in range(4)]
    [t.start() for t in pool]
    [t.join() for t in pool]
    assert errors == [] and results == [True] * 20


# -- 7. Program validation: nothing is reinterpreted, every error is a SimAccelError -------------
def mlp_dict():
    return program("mlp", [("x", (4, 8), F32), ("w", (6, 8), F32), ("b", (6,), F32), ("h", (4, 6), F32), ("y", (4, 6), F32)],
                   (0, 1, 2), (4,), [("simaccel.dense_bias_relu", (0, 1, 2), 3), ("simaccel.softmax", (3,), 4)]).to_dict()


def pool_dict(**attrs):
    base = {"pool_size": [2, 2], "strides": [2, 2], "padding": [0, 0, 0, 0], "dilation": [1, 1], "count_include_pad": False}
    base.update(attrs)
    return program("pool", [("x", (1, 1, 4, 4), F32), ("y", (1, 1, 2, 2), F32)], (0,), (1,),
                   [("simaccel.avg_pool2d", (0,), 1, base)]).to_dict()


def set_path(data, path, value):
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


BAD_PROGRAMS = [
    ("string shape", mlp_dict, ("tensors", 0, "shape"), "48", "must be a list"),
    ("string dim", mlp_dict, ("tensors", 0, "shape"), ["4", 8], "must be an integer"),
    ("float dim", mlp_dict, ("tensors", 0, "shape"), [4.0, 8], "must be an integer"),
    ("bool dim", mlp_dict, ("tensors", 0, "shape"), [True, 8], "must be an integer"),
    ("negative dim", mlp_dict, ("tensors", 0, "shape"), [-4, 8], "between 0 and 2\\*\\*63-1"),
    ("overflowing dim", mlp_dict, ("tensors", 0, "shape"), [2**70, 8], "between 0 and 2\\*\\*63-1"),
    ("unknown dtype", mlp_dict, ("tensors", 0, "dtype"), "float33", "not a dtype"),
    ("string version", mlp_dict, ("version",), "1", "version must be an integer"),
    ("string tensor id", mlp_dict, ("inputs",), ["0", 1, 2], "must be an integer"),
    ("float output id", mlp_dict, ("ops", 0, "output"), 3.0, "must be an integer"),
    ("empty name", mlp_dict, ("name",), "", "non-empty string"),
    ("unknown field", mlp_dict, ("extra",), 1, "unknown fields \\['extra'\\]"),
    ("attrs not a mapping", mlp_dict, ("ops", 0, "attrs"), [1], "must be an object"),
    ("float stride", pool_dict, ("ops", 0, "attrs", "strides"), [1.5, 2], "strides must be a list of 2 integers"),
    ("string stride", pool_dict, ("ops", 0, "attrs", "strides"), ["2", 2], "strides must be a list of 2 integers"),
    ("scalar stride", pool_dict, ("ops", 0, "attrs", "strides"), 2, "strides must be a list of 2 integers"),
    ("zero stride", pool_dict, ("ops", 0, "attrs", "strides"), [0, 2], "strides must be a list of 2 integers >= 1"),
    ("short padding", pool_dict, ("ops", 0, "attrs", "padding"), [0, 0], "padding must be a list of 4"),
    ("negative padding", pool_dict, ("ops", 0, "attrs", "padding"), [0, -1, 0, 0], "padding must be a list of 4"),
    ("int flag", pool_dict, ("ops", 0, "attrs", "count_include_pad"), 1, "must be true or false"),
    ("unknown attribute", pool_dict, ("ops", 0, "attrs", "ceil_mode"), True, "unknown attributes \\['ceil_mode'\\]"),
]


@pytest.mark.parametrize("make, path, value, message", [c[1:] for c in BAD_PROGRAMS], ids=[c[0] for c in BAD_PROGRAMS])
def test_malformed_programs_are_refused_by_name(clean_runtime, make, path, value, message):
    text = json.dumps(set_path(make(), path, value))
    with pytest.raises(ProgramError, match=message):
        Program.from_json(text).validate()
    with pytest.raises(ProgramError, match=message):  # the runtime's entry refuses it the same way
        clean_runtime.invoke("bad", text, np.zeros(1, F32))


@pytest.mark.parametrize("epsilon", ["1e-5", 0, -1.0, float("nan"), True, None])
def test_layer_norm_epsilon_must_be_a_positive_number(epsilon):
    data = program("ln", [("x", (2, 4), F32), ("g", (4,), F32), ("b", (4,), F32), ("y", (2, 4), F32)], (0, 1, 2), (3,),
                   [("simaccel.layer_norm", (0, 1, 2), 3, {"epsilon": 1e-5})]).to_dict()
    data["ops"][0]["attrs"]["epsilon"] = epsilon
    with pytest.raises(ProgramError, match="epsilon must be a finite number > 0"):
        Program.from_dict(data).validate()


class BadDevice:
    def __dlpack_device__(self):
        return ("gpu", "first")


@pytest.mark.parametrize(
    "call",
    [
        lambda rt: rt.invoke("k", 42, np.zeros(1, F32)),
        lambda rt: rt.invoke("k", "{not json", np.zeros(1, F32)),
        lambda rt: rt.invoke("k", "[1, 2]"),
        lambda rt: rt.run("not a program"),
        lambda rt: rt.run(MATMUL, np.zeros((4, 4), F32), object(), np.zeros((4, 4), F32)),
        lambda rt: rt.run(MATMUL, np.zeros((4, 4), F32), np.zeros((4, 4), F32)),
        lambda rt: rt.run(MATMUL, np.zeros((4, 4), F32), np.zeros((4, 4), F32), np.zeros((4, 4), np.float64)),
        lambda rt: rt.run(MATMUL, np.zeros((4, 4), F32), np.zeros((4, 4), F32), np.zeros((4, 4), F32)[:, ::2]),
        lambda rt: rt.run(MATMUL, *np.broadcast_arrays(np.zeros((4, 4), F32), np.zeros(4, F32)), np.zeros((4, 4), F32)),
        lambda rt: rt.run(MATMUL, np.zeros((4, 4), F32), BadDevice(), np.zeros((4, 4), F32)),
        lambda rt: rt.run(MATMUL, np.zeros((4, 4), np.int32), np.zeros((4, 4), np.int32), np.zeros((4, 4), np.int32)),
        lambda rt: rt.run(MATMUL, np.zeros((4, 5), F32), np.zeros((4, 4), F32), np.zeros((4, 4), F32)),
    ],
    ids=["json not text", "broken json", "json list", "not a Program", "not a tensor", "too few tensors",
         "wrong dtype", "strided output", "broadcast input", "bad dlpack device", "int32", "wrong shape"],
)
def test_bad_runtime_calls_raise_simaccel_errors(clean_runtime, call):
    with pytest.raises(SimAccelError):
        call(clean_runtime)


def test_same_key_with_another_program_is_not_confused(clean_runtime):
    relu = program("p", [("x", (3,), F32), ("y", (3,), F32)], (0,), (1,), [("simaccel.relu", (0,), 1)])
    gelu = program("p", [("x", (3,), F32), ("y", (3,), F32)], (0,), (1,), [("simaccel.gelu", (0,), 1)])
    x = np.array([-1.0, 0.5, 2.0], F32)
    y = np.empty_like(x)
    clean_runtime.invoke("p", relu.to_json(), x, y)
    np.testing.assert_array_equal(y, [0, 0.5, 2])
    clean_runtime.invoke("p", gelu.to_json(), x, y)
    assert y[0] < 0  # gelu, not the cached relu


@pytest.mark.parametrize("value, staged", [("1", True), ("true", True), ("Yes", True), ("on", True),
                                           ("0", False), ("false", False), ("NO", False), ("off", False), ("", False)])
def test_staged_environment_variable_reads_booleans(monkeypatch, value, staged):
    monkeypatch.setenv("SIMACCEL_STAGED", value)
    assert Runtime().staged is staged


def test_staged_environment_variable_refuses_other_words(monkeypatch):
    monkeypatch.setenv("SIMACCEL_STAGED", "maybe")
    with pytest.raises(simaccel.EngineError, match="SIMACCEL_STAGED='maybe' is not a boolean"):
        Runtime().staged


# -- 8. bounded caches, flat memory ---------------------------------------------------------------
def relu_program(width):
    return program(f"relu{width}", [("x", (1, width), F32), ("h", (1, width), F32), ("y", (1, width), F32)],
                   (0,), (2,), [("simaccel.relu", (0,), 1), ("simaccel.gelu", (1,), 2)])


def test_plan_cache_is_bounded_and_frees_evicted_plans():
    runtime = Runtime(max_plans=8)
    first = relu_program(1)
    x, y = np.ones((1, 1), F32), np.empty((1, 1), F32)
    runtime.run(first, x, y)
    intermediate = weakref.ref(next(iter(runtime._plans.values())).slots[1])
    tracemalloc.start()
    try:
        runtime.run(relu_program(2), np.ones((1, 2), F32), np.empty((1, 2), F32))
        before = tracemalloc.get_traced_memory()[0]
        for width in range(3, 1003):
            runtime.run(relu_program(width), np.ones((1, width), F32), np.empty((1, width), F32))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(runtime._plans) == 8 and len(runtime._programs) == 8
    assert intermediate() is None  # the first plan's intermediate was freed on eviction
    assert grown < 1_000_000, f"{grown} bytes kept after 1,000 distinct Programs"


def test_max_plans_from_the_environment(monkeypatch):
    monkeypatch.setenv("SIMACCEL_MAX_PLANS", "3")
    assert Runtime().max_plans == 3
    monkeypatch.setenv("SIMACCEL_MAX_PLANS", "lots")
    with pytest.raises(simaccel.EngineError, match="SIMACCEL_MAX_PLANS='lots'"):
        Runtime()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_soak_10000_calls_with_flat_memory(clean_runtime):
    mod = single_op(lambda x, w, b: op.nn.softmax(op.nn.relu(op.add(dense(x, w), b))),
                    [((4, 16), None), ((8, 16), None), ((8,), None)])
    arrays = [np.random.default_rng(5).standard_normal(s).astype(F32) for s in ((4, 16), (8, 16), (8,))]
    vm = relax.VirtualMachine(build(mod), tvm.cpu())
    tensors = [tvm.runtime.tensor(a) for a in arrays]
    want = tvm_alone(mod, arrays)
    for _ in range(500):
        out = vm["main"](*tensors)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)  # its first call allocates caches
    tracemalloc.start()
    try:
        traced, rss = tracemalloc.get_traced_memory()[0], rss_bytes()
        for i in range(10_000):
            out = vm["main"](*tensors)
            if i % 2_500 == 0:
                np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)
        traced, rss = tracemalloc.get_traced_memory()[0] - traced, rss_bytes() - rss
    finally:
        tracemalloc.stop()
    assert clean_runtime.ledger.snapshot()["offloaded_calls"] == 10_500
    assert traced < 200_000, f"Python heap grew {traced} bytes over 10,000 calls"
    assert rss < 8_000_000, f"resident memory grew {rss} bytes over 10,000 calls"


def test_calls_racing_with_evictions_stay_correct():
    """Threads share a runtime whose cache holds fewer plans than they use: a plan evicted (and
    freed) by one thread is never run by another."""
    runtime = Runtime(max_plans=2)
    programs = [relu_program(w) for w in range(3, 9)]
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for i in range(150):
                program = programs[(seed + i) % len(programs)]
                width = program.tensors[0].shape[1]
                x = rng.standard_normal((1, width)).astype(F32)
                y = np.empty_like(x)
                runtime.run(program, x, y)
                h = np.maximum(x, 0).astype(np.float64)
                np.testing.assert_allclose(y, 0.5 * h * (1 + np.vectorize(__import__("math").erf)(h / np.sqrt(2))),
                                           rtol=1e-5, atol=1e-6)
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    pool = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    [t.start() for t in pool]
    [t.join() for t in pool]
    assert errors == [], errors[:1]
    assert len(runtime._plans) <= 2


@pytest.mark.parametrize("call", [
    lambda: partition_report("not a module"),
    lambda: build(relax.op.nn.relu(relax.Var("x", relax.TensorType((2,), F32)))),
    lambda: partition_report(single_op(lambda x: op.nn.relu(x), [((2,), None)]), profile="fp16-only"),
], ids=["string", "expression", "profile name"])
def test_wrong_arguments_to_the_python_api_are_simaccel_errors(call):
    with pytest.raises(SimAccelError, match="takes a Relax IRModule|must be a simaccel.DeviceProfile"):
        call()
