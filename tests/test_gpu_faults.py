"""The fault classes on a real GPU: special values, empty windows, aliasing, mixed devices, bounded memory, threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from simaccel import DeviceError
from gpu_cases import ZERO, one_op_program

pytestmark = pytest.mark.gpu  # skipped, with the reason, where no GPU exists


def test_cpu_tensor_into_a_gpu_region_is_refused(clean_runtime):
    import tvm

    from simaccel.program import OpNode, Program, TensorSpec

    program = Program(
        "relu", (TensorSpec("x", (4,), "float32"), TensorSpec("y", (4,), "float32")), (0,), (1,),
        (OpNode("simaccel.relu", (0,), 1),),
    )
    x = tvm.runtime.tensor(np.ones(4, np.float32), tvm.cuda(0))
    with pytest.raises(DeviceError, match="mixed devices.*x@cuda:0.*y@cpu:0"):
        clean_runtime.run(program, x, np.zeros(4, np.float32))
    with clean_runtime.use_engine("cuda"), pytest.raises(DeviceError, match="engine 'cuda' runs on cuda memory"):
        clean_runtime.run(program, np.ones(4, np.float32), np.zeros(4, np.float32))


def specials(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    mask = rng.random(shape) < 0.25
    x[mask] = rng.choice(np.array([np.nan, np.inf, -np.inf], np.float32), size=int(mask.sum()))
    return x.astype(dtype)


POOL = {"pool_size": [3, 3], "strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1]}
EMPTY_WINDOWS = {"pool_size": [1, 1], "strides": [2, 2], "padding": [1, 1, 1, 1], "dilation": [1, 1]}
SPECIAL_PROGRAMS = [
    ("simaccel.relu", [(4, 33)], {}),
    ("simaccel.gelu", [(4, 33)], {}),
    ("simaccel.add", [(3, 4, 5), (4, 1)], {}),
    ("simaccel.multiply", [(3, 5), (3, 5)], {}),
    ("simaccel.softmax", [(6, 300)], {}),
    ("simaccel.layer_norm", [(5, 300), (300,), (300,)], {"epsilon": 1e-5}),
    ("simaccel.max_pool2d", [(1, 3, 9, 9)], POOL),
    ("simaccel.max_pool2d", [(1, 3, 3, 3)], EMPTY_WINDOWS),
    ("simaccel.avg_pool2d", [(1, 3, 3, 3)], {**EMPTY_WINDOWS, "count_include_pad": False}),
    ("simaccel.dense_bias_relu", [(70, 65), (66, 65), (66,)], {}),
    ("simaccel.conv2d_bias_relu", [(1, 3, 9, 9), (4, 3, 3, 3), (1, 4, 1, 1)],
     {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1}),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name, shapes, attrs", SPECIAL_PROGRAMS, ids=[f"{c[0]}-{i}" for i, c in enumerate(SPECIAL_PROGRAMS)])
def test_cuda_engine_equals_ref_on_nan_inf_and_empty_windows(clean_runtime, name, shapes, attrs, dtype):
    import tvm

    from compare import assert_same

    program = one_op_program(name, shapes, dtype, attrs)
    arrays = [specials(s, dtype, i) for i, s in enumerate(shapes)]
    out_spec = program.tensors[-1]
    want = np.empty(out_spec.shape, dtype)
    with clean_runtime.use_engine("ref"):
        clean_runtime.run(program, *arrays, want)
    tensors = [tvm.runtime.tensor(a, tvm.cuda(0)) for a in arrays]
    got = tvm.runtime.tensor(np.zeros(out_spec.shape, dtype), tvm.cuda(0))
    clean_runtime.run(program, *tensors, got)
    assert_same(got.numpy(), want, dtype)


def test_aliased_output_on_the_gpu(clean_runtime):
    import tvm

    program = one_op_program("simaccel.matmul", [(64, 64), (64, 64)], "float32")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 64, 64)).astype(np.float32)
    xt, wt = tvm.runtime.tensor(x, tvm.cuda(0)), tvm.runtime.tensor(w, tvm.cuda(0))
    clean_runtime.run(program, xt, wt, xt)  # the output is the input's own memory
    np.testing.assert_allclose(xt.numpy(), x @ w, rtol=1e-4, atol=1e-4)
    assert clean_runtime.ledger.snapshot()["bytes"] == {**ZERO, "device_to_device": x.nbytes}


@pytest.mark.device_alone
def test_evicted_plans_give_device_memory_back():
    import tvm
    from numba import cuda

    from simaccel.program import OpNode, Program, TensorSpec
    from simaccel.runtime import Runtime
    from simaccel.tvm_integration.tools.deploy import prepare_cuda

    prepare_cuda()  # a runtime-only TVM run on its own: TVM's CUDA device API
    shape = (1, 1 << 22)  # 16 MiB of float32
    runtime = Runtime(max_plans=2)
    x = tvm.runtime.tensor(np.ones(shape, np.float32), tvm.cuda(0))
    y = tvm.runtime.tensor(np.zeros(shape, np.float32), tvm.cuda(0))

    def chain(i):  # relu -> gelu: one 16 MiB intermediate per plan
        specs = tuple(TensorSpec(n, shape, "float32") for n in ("x", "h", "y"))
        return Program(f"chain{i}", specs, (0,), (2,), (OpNode("simaccel.relu", (0,), 1), OpNode("simaccel.gelu", (1,), 2)))

    def free_bytes():  # of GPU 0, whatever context an earlier test left current on this thread
        with cuda.gpus[0]:
            cuda.synchronize()
            return cuda.current_context().get_memory_info()[0]

    for i in range(12):
        runtime.run(chain(i), x, y)
        if i == 2:
            start = free_bytes()
    assert len(runtime._plans) == 2
    assert free_bytes() >= start - (32 << 20), "evicted plans kept their device memory"
    np.testing.assert_allclose(y.numpy()[0, :4], 0.8413447, rtol=1e-5)


def test_threads_creating_their_first_vms_at_once_on_the_gpu(clean_runtime):
    import tvm

    from simaccel.tvm_integration.tools.deploy import runtime_only

    if runtime_only():
        pytest.skip("builds in-process: needs the full TVM")
    from tvm import relax

    from simaccel.tvm_integration import build, build_tvm_only, default_target
    from simaccel.tvm_integration.tools.models import demo_cnn, random_inputs

    mod = demo_cnn(batch=2)
    arrays = random_inputs(mod)
    target = default_target("cuda")
    want = relax.VirtualMachine(build_tvm_only(mod, target), tvm.cuda(0))["main"](
        *[tvm.runtime.tensor(a, tvm.cuda(0)) for a in arrays]).numpy()
    executable = build(mod, target)
    start, errors = threading.Barrier(4), []

    def work():
        try:
            tensors = [tvm.runtime.tensor(a, tvm.cuda(0)) for a in arrays]
            start.wait()
            vm = relax.VirtualMachine(executable, tvm.cuda(0))
            for _ in range(25):
                np.testing.assert_allclose(vm["main"](*tensors).numpy(), want, rtol=1e-4, atol=1e-4)
        except BaseException as e:  # reported below
            errors.append(e)

    pool = [threading.Thread(target=work) for _ in range(4)]
    [t.start() for t in pool]
    [t.join() for t in pool]
    assert not errors, errors[:1]


def test_tvm_cuda_and_cpu_builds_differ_on_nan_in_max_pooling():
    """A fact about TVM that simaccel's docs rely on: its CUDA max pooling (fmaxf) drops NaN,
    its CPU build (a select on acc > v) keeps a NaN no later tap replaces; simaccel follows the CPU."""
    from simaccel.tvm_integration.tools.deploy import runtime_only

    if runtime_only():
        pytest.skip("builds in-process: needs the full TVM")
    import tvm
    from tvm import relax

    from simaccel.tvm_integration import build_tvm_only, default_target

    x = relax.Var("x", relax.TensorType((1, 1, 1, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.max_pool2d(x, (1, 2), strides=(1, 2)))
        bb.emit_func_output(out)
    data = np.array([[[[3.0, np.nan, np.nan, 3.0]]]], np.float32)
    results = {}
    for device in ("cpu", "cuda"):
        dev = tvm.device(device, 0)
        vm = relax.VirtualMachine(build_tvm_only(bb.get(), default_target(device)), dev)
        results[device] = vm["main"](tvm.runtime.tensor(data, dev)).numpy().ravel()
    assert np.isnan(results["cpu"][0]) and results["cpu"][1] == 3.0
    assert results["cuda"].tolist() == [3.0, 3.0]


# -- native regions: special values, aliasing ------------------------------------------------------
@pytest.fixture(scope="module")
def native_specials(tmp_path_factory):
    """One native library, compiled here, holding every special-value Program in both dtypes
    and a matmul whose output may alias its input."""
    from simaccel.aot import toolchain_missing
    from simaccel.native.source import NativeRegion

    from simaccel.tvm_integration.tools.deploy import prepare_cuda

    reason = toolchain_missing()
    if reason:
        pytest.skip(reason)
    from native_support import region_library

    prepare_cuda()  # a runtime-only TVM run on its own: TVM's CUDA device API
    programs = {f"s{i}_{dtype}": one_op_program(name, shapes, dtype, attrs)
                for i, (name, shapes, attrs) in enumerate(SPECIAL_PROGRAMS) for dtype in ("float32", "float16")}
    programs["alias"] = one_op_program("simaccel.matmul", [(64, 64), (64, 64)], "float32")
    library, _ = region_library([NativeRegion(s, p) for s, p in programs.items()], tmp_path_factory.mktemp("specials"))
    return library, programs


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_native_regions_equal_ref_on_nan_inf_and_empty_windows(clean_runtime, native_specials, dtype):
    import tvm

    from compare import assert_same

    library, programs = native_specials
    for i, (name, shapes, attrs) in enumerate(SPECIAL_PROGRAMS):
        program = programs[f"s{i}_{dtype}"]
        arrays = [specials(s, dtype, i) for i, s in enumerate(shapes)]
        want = np.empty(program.tensors[-1].shape, dtype)
        with clean_runtime.use_engine("ref"):
            clean_runtime.run(program, *arrays, want)
        tensors = [tvm.runtime.tensor(a, tvm.cuda(0)) for a in arrays]
        got = tvm.runtime.tensor(np.zeros(want.shape, dtype), tvm.cuda(0))
        library[f"s{i}_{dtype}"](*tensors, got)
        assert_same(got.numpy(), want, dtype)


def test_native_aliased_output_on_the_gpu(clean_runtime, native_specials):
    import tvm

    library, _ = native_specials
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 64, 64)).astype(np.float32)
    xt, wt = tvm.runtime.tensor(x, tvm.cuda(0)), tvm.runtime.tensor(w, tvm.cuda(0))
    library["alias"](xt, wt, xt)  # the output is the input's own memory
    np.testing.assert_allclose(xt.numpy(), x @ w, rtol=1e-4, atol=1e-4)
    assert clean_runtime.ledger.snapshot()["bytes"] == {**ZERO, "device_to_device": x.nbytes}
