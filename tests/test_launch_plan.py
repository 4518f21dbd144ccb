"""Launch plans (simaccel.launch_plan): each op's launches recorded once from its own launcher,
then replayed by the kernel engines. Checked against the launchers run directly."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from simaccel import EngineError
from simaccel.kernels import KernelTarget
from simaccel.kernels.matmul import _SHARED_TILE_KERNELS as SHARED_TILE_KERNELS
from simaccel.launch_plan import View, plan_launches, replay
from simaccel.ops import OpFamily, declare, get_op, relax_op
from simaccel.program import OpNode, Program, TensorSpec
from gpu_cases import one_op_program
from kernel_cases import RecordingTarget
from test_runtime import mlp_program


WINDOW = {"strides": [2, 1], "padding": [1, 0, 1, 2], "dilation": [1, 2]}
CASES = [
    ("simaccel.dense_bias_gelu", [(2, 3, 5), (7, 5), (7,)], {}),
    ("simaccel.matmul_relu", [(3, 70), (70, 66)], {}),
    ("simaccel.conv2d_bias_relu", [(1, 2, 6, 5), (3, 2, 3, 2), (1, 3, 1, 1)], {"groups": 1, **WINDOW}),
    ("simaccel.max_pool2d", [(1, 2, 5, 6)], {"pool_size": [2, 3], **WINDOW}),
    ("simaccel.avg_pool2d", [(1, 2, 5, 6)], {"pool_size": [2, 3], "count_include_pad": False, **WINDOW}),
    ("simaccel.softmax", [(3, 33)], {}),
    ("simaccel.layer_norm", [(2, 9), (9,), (9,)], {"epsilon": 1e-5}),
    ("simaccel.add", [(2, 1, 4), (3, 1)], {}),
    ("simaccel.multiply", [(5,), (5,)], {}),
    ("simaccel.gelu", [(4, 3)], {}),
    ("simaccel.concat", [(2, 3), (2, 1), (2, 4)], {"axis": 1}),  # one launch per input
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name, shapes, attrs", CASES, ids=[c[0] for c in CASES])
def test_replaying_the_plan_launches_what_the_launcher_launches(name, shapes, attrs, dtype):
    """Same kernels, grids, blocks and arguments (arrays as views of the same tensors), same result."""
    program = one_op_program(name, shapes, dtype, attrs)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    op = get_op(name)

    direct, direct_out = RecordingTarget(), np.full(program.tensors[-1].shape, np.nan, dtype)
    op.kernel(direct, FakeCUDAArray(direct_out), *map(FakeCUDAArray, arrays), **op.all_attrs(attrs))
    replayed, replayed_out = RecordingTarget(), np.full(program.tensors[-1].shape, np.nan, dtype)
    slots = {i: FakeCUDAArray(a) for i, a in enumerate(arrays)} | {len(arrays): FakeCUDAArray(replayed_out)}
    plan = plan_launches(program)
    replay(plan, replayed, slots)

    def tensor(view, out):  # which of the op's tensors an array argument views
        [index] = [i for i, t in enumerate([*arrays, out]) if np.shares_memory(view._ary, t)]
        return index

    assert len(plan) == len(direct.launches) == len(replayed.launches) >= 1
    for (fn, grid, block, args), (fn2, grid2, block2, args2) in zip(direct.launches, replayed.launches):
        assert (fn, grid, block) == (fn2, grid2, block2)
        for a, b in zip(args, args2, strict=True):
            if isinstance(a, FakeCUDAArray):
                assert a.shape == b.shape and tensor(a, direct_out) == tensor(b, replayed_out)
            else:
                assert a == b and type(a) is type(b)
    np.testing.assert_array_equal(replayed_out, direct_out)
    assert not np.isnan(replayed_out).any()


def test_a_plan_names_tensors_and_views():
    plan = plan_launches(mlp_program())
    assert [launch.op for launch in plan] == [0, 1]
    matmul = plan[0]
    assert matmul.kernel is SHARED_TILE_KERNELS["gemv", True, "float32"]  # the dense form; a 4x6 result: one GEMV tile of 4 rows
    views = [a for a in matmul.args if isinstance(a, View)]
    # out (4, 6) and data (4, 8) as 2-D views, the weight as it is, the bias flattened; then the
    # epilogue's three tensors (kernels/epilogue.py), here none: out flat, never read
    assert views == [View(3, (4, 6)), View(0, (4, 8)), View(1, (6, 8)), View(2, (6,))] + [View(3, (24,))] * 3
    assert all(isinstance(a, (View, int, float)) for a in matmul.args)


def test_an_empty_tensor_plans_no_launch():
    assert plan_launches(one_op_program("simaccel.softmax", [(0, 5)], "float32")) == ()


def test_a_launcher_passing_other_objects_is_refused(isolated_isa):
    def launch(target, out, data):
        target.launch(lambda o, x, extra: None, 1, 1, out, data, [1, 2])
        return 1

    declare(OpFamily(name="testaccel.bad_launcher", inputs=("data",), pattern=relax_op("relax.tanh", "data"),
                     infer=lambda shapes: shapes[0], reference=lambda data: data, kernel=launch))
    with pytest.raises(EngineError, match="op 0 \\(testaccel.bad_launcher\\): kernel <lambda> argument 2 is a list"):
        plan_launches(one_op_program("testaccel.bad_launcher", [(3,)], "float32"))


def test_a_launcher_miscounting_its_launches_is_refused(isolated_isa):
    declare(OpFamily(name="testaccel.miscount", inputs=("data",), pattern=relax_op("relax.tanh", "data"),
                     infer=lambda shapes: shapes[0], reference=lambda data: data, kernel=lambda target, out, data: 2))
    with pytest.raises(EngineError, match="says it launched 2 kernels but launched 0"):
        plan_launches(one_op_program("testaccel.miscount", [(3,)], "float32"))


def test_the_kernel_target_runs_a_replayed_plan_in_place():
    """End to end on the simulator: replay writes the output array in place."""
    program = mlp_program()
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((4, 8), (6, 8), (6,)))
    h, y = np.empty((4, 6), "float32"), np.empty((4, 6), "float32")
    replay(plan_launches(program), KernelTarget("sim"), dict(enumerate(map(FakeCUDAArray, (x, w, b, h, y)))))
    want = np.maximum(x @ w.T + b, 0)
    want = np.exp(want - want.max(-1, keepdims=True))
    np.testing.assert_allclose(y, want / want.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


# -- the workspace: scratch memory a launcher asks for (target.workspace) -------------------------
def _scratch_launcher(size):
    """A launcher that computes out = 2 * data through a float32 scratch of `size(data)` elements
    (doubled into it, copied out): what a split op does with its partial results."""
    def launch(target, out, data):
        scratch = target.workspace((size(data),), np.float32)
        n = data.shape[0]
        target.launch(_double_into, n, 1, scratch, data)
        target.launch(_copy_out, n, 1, out, scratch)
        return 2
    return launch


def _double_into(scratch, data):
    i = cuda.blockIdx.x
    scratch[i] = data[i] * 2


def _copy_out(out, scratch):
    i = cuda.blockIdx.x
    out[i] = scratch[i]


def _declare_scratch_op(name, size):
    declare(OpFamily(name=name, inputs=("data",), pattern=relax_op("relax.tanh", "data"),
                     infer=lambda shapes: shapes[0], reference=lambda data: data * 2, kernel=_scratch_launcher(size)))


def test_ops_share_one_workspace_sized_for_the_largest_view(isolated_isa):
    """Two ops that ask for scratch (8 and 40 floats) view one workspace of 160 bytes: recorded as
    Views of tensor WORKSPACE, the plan's `workspace` their largest; the runtime allocates it once
    per plan and both ops compute through it on the simulator."""
    import simaccel
    from simaccel.launch_plan import WORKSPACE, LaunchPlan

    _declare_scratch_op("testaccel.scratchy", lambda data: 5 * data.shape[0])
    _declare_scratch_op("testaccel.scratchy_small", lambda data: data.shape[0])
    tensors = (TensorSpec("x", (8,), "float32"), TensorSpec("h", (8,), "float32"), TensorSpec("y", (8,), "float32"))
    program = Program("scratchy", tensors, (0,), (2,), (OpNode("testaccel.scratchy_small", (0,), 1, {}),
                                                       OpNode("testaccel.scratchy", (1,), 2, {}))).validate()
    plan = LaunchPlan.of(program)
    scratch = [a for launch in plan.launches for a in launch.args if isinstance(a, View) and a.tensor == WORKSPACE]
    assert scratch == [View(WORKSPACE, (8,), "float32")] * 2 + [View(WORKSPACE, (40,), "float32")] * 2
    assert plan.workspace == 160
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    with simaccel.get_runtime().use_engine("sim"):
        simaccel.get_runtime().run(program, x, y)
    np.testing.assert_array_equal(y, 4 * x)


def test_a_workspace_sized_by_a_size_var_is_refused(isolated_isa):
    """A symbolic region's workspace is allocated before a call's sizes are known: a launcher
    asking for one of n elements gets an error naming the size (and the region no size plans)."""
    from simaccel.program import SizeVar
    from simaccel.shapes import Dim
    from simaccel.size_plans import SizePlanError, size_plans

    _declare_scratch_op("testaccel.scratch_by_size", lambda data: data.shape[0])
    n = Dim.var("n")
    tensors = (TensorSpec("x", (n,), "float32"), TensorSpec("y", (n,), "float32"))
    program = Program("by_size", tensors, (0,), (1,), (OpNode("testaccel.scratch_by_size", (0,), 1, {}),),
                      vars=(SizeVar("n", 1, 64),)).validate()
    with pytest.raises(SizePlanError, match="asks for a workspace of the size n; a workspace's shape is plain numbers"):
        size_plans(program)


def test_an_empty_workspace_is_refused(isolated_isa):
    _declare_scratch_op("testaccel.scratch_empty", lambda data: 0)
    tensors = (TensorSpec("x", (8,), "float32"), TensorSpec("y", (8,), "float32"))
    program = Program("empty", tensors, (0,), (1,), (OpNode("testaccel.scratch_empty", (0,), 1, {}),)).validate()
    with pytest.raises(EngineError, match=r"asks for an empty workspace \(0,\); ask for one only where a launch uses it"):
        plan_launches(program)


def test_two_workspace_requests_of_a_direct_launcher_share_memory_as_in_a_region():
    """KernelTarget.workspace behaves as a region's: one buffer, each request a view of its first bytes."""
    target = KernelTarget("sim")
    small, large = target.workspace((4,), np.float32), target.workspace((10,), np.float64)
    again = target.workspace((4,), np.float32)
    large[:] = 1.5
    assert np.shares_memory(again._ary, large._ary) and (again._ary != 0).any()
    assert small.shape == (4,) and large.shape == (10,) and large.dtype == np.float64


@pytest.mark.parametrize("shape, dtype, new_shape, new_dtype", [
    ((), np.float32, (), np.int32),  # a scalar constant: numba-cuda 0.30's own view fails on it
    ((4, 6), np.float32, (6, 4), np.uint16),
    ((3, 8), np.uint16, (3, 8), np.float16),
    ((64,), np.uint8, (2, 4), np.float32),  # the workspace's first bytes as a float32 view
])
def test_reinterpret_reads_the_same_bytes_as_another_shape_and_dtype(shape, dtype, new_shape, new_dtype):
    """`reinterpret` views the bytes of a numpy array, the simulator's device array and a Numba
    device array (built without memory: no GPU here) with a new shape and dtype, never a copy.
    numba-cuda's own DeviceNDArray.view raises on a 0-d array (TypeError: unhashable type:
    'list'), so the cuda engine's scalar constants went through it and failed on the GPU."""
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    from simaccel.kernels.target import reinterpret

    host = np.arange(max(1, int(np.prod(shape)))).astype(dtype).reshape(shape)
    got = reinterpret(host, new_shape, new_dtype)
    want = host.reshape(-1).view(np.uint8)[:got.nbytes].view(new_dtype).reshape(new_shape)
    assert np.shares_memory(got, host) and got.tobytes() == want.tobytes() and got.shape == want.shape
    fake = reinterpret(FakeCUDAArray(host), new_shape, new_dtype)
    assert np.shares_memory(fake._ary, host) and fake._ary.tobytes() == want.tobytes()

    memory = object()
    device = DeviceNDArray(shape=shape, strides=host.strides, dtype=dtype, gpu_data=memory)
    if shape == ():
        with pytest.raises(TypeError, match="unhashable"):
            device.view(dtype)
    viewed = reinterpret(device, new_shape, new_dtype)
    assert viewed.gpu_data is memory and (viewed.shape, viewed.strides, viewed.dtype) == (want.shape, want.strides, want.dtype)
    with pytest.raises(ValueError, match="do not fit"):
        reinterpret(host, (host.size + 1,), dtype)
