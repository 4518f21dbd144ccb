"""Launch plans: the kernel launches of a Program, derived once, replayed on every call.

Each op's launcher (its family's `kernel`) is run once per Program against placeholders that
stand for the Program's tensors: they have the tensors' shapes and dtypes but no memory, and
`target.reshape` of one is another placeholder of the same tensor. The recording target keeps
what each launch would do: the kernel function, grid, block, shared memory and arguments,
where an array argument is a `View` (tensor id, shape) and every other argument a number. So
the plan of every op, built-in or a user's, comes from its own launcher, with no code per op.

Where it sits: above the Program, the ISA and epilogue fusion (simaccel.fusion), below the
engines. `LaunchPlan.of(program)` is a Program's one plan, fused where groups fuse, with its
unfused twin: the runtime replays it (the "sim" and "cuda" engines, `replay`: a warm call runs
no launcher logic), the native source generator writes it into C++ tables, AOT compiles its
distinct kernels and signatures.

A launcher that needs scratch memory beyond its op's output (a split's partial results, say)
asks its target for it: `target.workspace(shape, dtype)` is an array of the region's one
workspace, recorded as a `View` of tensor `WORKSPACE`. Its contents live only within the op's
own launches: the ops of a region run one after another on one stream, so they all share one
buffer, allocated once per plan at the largest size any launch views (`workspace_bytes`). Its
shape is plain numbers, never a symbolic region's sizes: the buffer is allocated before any
sizes are known.

So every launch of a region runs on the call's stream (TVM's current one): a launcher cannot
pick a stream through its target. One that launches some other way while it is recorded (on
a `KernelTarget` of its own, or through numba.cuda itself) is refused with a SanitizerError of
kind "stream", always, since such a launch would run outside the plan and off the call's stream.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from . import fusion
from .errors import EngineError, SanitizerError, SimAccelError
from .kernels.target import StrayLaunch, recording
from .ops import LaunchTarget, get_op
from .ops.registry import generation
from .program import OpNode, Program
from .traced import Traced, TracedFloat


WORKSPACE = -1  # the tensor id a View of the region's workspace carries (never a Program tensor's)
WORKSPACE_DTYPE = np.dtype("uint8")  # the workspace's own: bytes, viewed as what each launcher asks


@dataclass(frozen=True)
class View:
    """A kernel argument that is Program tensor `tensor`, viewed with `shape` (same elements),
    and read as `dtype` where that is given (the same item size: a copy kernel moving bfloat16
    as float16), else as the tensor's own dtype."""

    tensor: int
    shape: tuple[int, ...]
    dtype: str | None = None


@dataclass(frozen=True)
class Launch:
    """One kernel launch of op `op` (its index in the Program)."""

    op: int
    kernel: Callable
    grid: object
    block: object
    shared_bytes: int
    args: tuple  # View | int | float


class _Placeholder:
    """A Program tensor as a launcher sees it while the plan is recorded: shape and dtype only."""

    __slots__ = ("tensor", "shape", "dtype")

    def __init__(self, tensor: int, shape, dtype):
        self.tensor, self.shape, self.dtype = tensor, _sizes(shape), np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class _Recorder(LaunchTarget):
    """The launch target that records launches instead of running them."""

    name = "plan"
    stream = None

    def __init__(self, program: Program, index: int):
        self.where = f"region {program.name}: op {index} ({program.ops[index].op})"
        self.region = program.name
        self.tensors = program.tensors
        self.index = index
        self.launches: list[Launch] = []

    def reshape(self, array, shape, dtype=None):
        if not isinstance(array, _Placeholder):
            raise EngineError(f"{self.where}: its launcher reshapes {type(array).__name__}, not one of its arrays")
        shape = _sizes(shape)
        if math.prod(shape) != array.size:
            raise EngineError(f"{self.where}: its launcher views {array.shape} as {shape} (a different size)")
        if dtype is not None and np.dtype(dtype).itemsize != array.dtype.itemsize:
            raise EngineError(f"{self.where}: its launcher views {array.dtype} as {np.dtype(dtype)} (another item size)")
        return _Placeholder(array.tensor, shape, array.dtype if dtype is None else dtype)

    def workspace(self, shape, dtype):
        shape = tuple(shape)
        traced = [d for d in shape if isinstance(d, Traced)]
        if traced or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
            what = f"the size {traced[0].dim}" if traced else f"shape {shape}"
            raise EngineError(f"{self.where}: its launcher asks for a workspace of {what}; a workspace's shape is plain "
                              "numbers (it is allocated before a call's sizes are known): ask for a bound")
        if math.prod(shape) == 0:
            raise EngineError(f"{self.where}: its launcher asks for an empty workspace {shape}; ask for one only where "
                              "a launch uses it")
        return _Placeholder(WORKSPACE, shape, dtype)

    def launch(self, fn, grid, block, *args, shared_bytes: int = 0):
        recorded = []
        for position, arg in enumerate(args):
            if isinstance(arg, _Placeholder) and arg.tensor == WORKSPACE:
                recorded.append(View(WORKSPACE, arg.shape, arg.dtype.name))
            elif isinstance(arg, _Placeholder):
                own = np.dtype(self.tensors[arg.tensor].dtype)
                recorded.append(View(arg.tensor, arg.shape, None if arg.dtype == own else arg.dtype.name))
            elif isinstance(arg, (bool, int, float, np.integer, np.floating, Traced, TracedFloat)):
                recorded.append(arg.item() if isinstance(arg, np.generic) else arg)
            else:
                raise EngineError(
                    f"{self.where}: kernel {getattr(fn, '__name__', fn)} argument {position} is a "
                    f"{type(arg).__name__}; a kernel takes the op's arrays (or views of them) and numbers"
                )
        shared_bytes = shared_bytes if isinstance(shared_bytes, Traced) else int(shared_bytes)
        self.launches.append(Launch(self.index, fn, grid, block, shared_bytes, tuple(recorded)))


@dataclass(frozen=True)
class LaunchPlan:
    """A Program's kernel launches, built once (`LaunchPlan.of`) and read by every consumer.

    `launches`: every launch, in order; `per_op[k]`: op k's launches. Ops whose output is a
    view (`Program.views`) launch nothing; the launches that read a view name the view's own
    tensor id, which the caller resolves to memory (the runtime reshapes the owner's array,
    native regions patch in the owner's pointer).

    Where groups of simaccel.fusion fuse, each is launched by its producer's launcher with an
    epilogue (or by kernels/epilogue.py's `launch_group`): its launches are the group's last
    op's (`nodes[last]` reads what they read: the producer's inputs and the group's extras),
    its other ops are `fused_away` and the values in between are `unstored`. `unfused` is the
    twin in which every op launches on its own (the plan itself where nothing fuses): checked
    calls run it (the sanitizer and the other watchers see every op's output).
    """

    program: Program
    launches: tuple[Launch, ...]
    nodes: tuple[OpNode, ...]  # the Program's ops, a fused group's last one reading what its launches read
    fused_away: frozenset[int] = frozenset()  # ops whose work a later op's launches do
    unstored: frozenset[int] = frozenset()  # tensors no launch writes (a fused group's values)

    @classmethod
    def of(cls, program: Program, fuse: bool = True) -> "LaunchPlan":
        """The plan of `program` (a validated Program), fused where groups fuse unless `fuse` is
        false (where nothing fuses, both are one object): recorded once per Program
        (`Program.derived`), and again once declared ops are forgotten
        (`simaccel.ops.registry.generation`)."""
        key = ("launch_plan", fuse, generation())
        plan = program.derived.get(key)
        if plan is None:
            groups = fusion.groups(program) if fuse else ()
            plan = _build(program, groups) if groups or not fuse else cls.of(program, fuse=False)
            program.derived[key] = plan
        return plan

    @property
    def unfused(self) -> "LaunchPlan":
        """The twin in which every op launches on its own: this plan where nothing fuses."""
        return LaunchPlan.of(self.program, fuse=False) if self.fused_away else self

    @functools.cached_property
    def workspace(self) -> int:
        """Bytes of the region's workspace its launches view (0: none)."""
        return workspace_bytes(self.launches)

    @functools.cached_property
    def per_op(self) -> tuple[tuple[Launch, ...], ...]:
        per_op = [()] * len(self.program.ops)
        for launch in self.launches:
            per_op[launch.op] += (launch,)
        return tuple(per_op)

    @functools.cached_property
    def kernel_keys(self) -> tuple[tuple, ...]:
        """(kernel, Numba signature) of each launch (`signature`): what a compile is of."""
        return tuple((launch.kernel, signature(launch, self.program)) for launch in self.launches)

    @functools.cached_property
    def kernels(self) -> dict[tuple, Launch]:
        """Each distinct (kernel, signature), in the order of its first launch, with that launch."""
        distinct: dict[tuple, Launch] = {}
        for key, launch in zip(self.kernel_keys, self.launches):
            distinct.setdefault(key, launch)
        return distinct


def _build(program: Program, groups) -> LaunchPlan:
    """Record `program`'s launches, each of `groups` (simaccel.fusion) launched as one kernel."""
    fused = {g.first: g for g in groups}
    nodes = list(program.ops)
    skip: set[int] = set()
    launches = []
    for index, node in enumerate(program.ops):
        if node.output in program.views or index in skip:
            continue  # a view's output is its input's memory; a fused op runs in its group
        group = fused.get(index)
        recorder = _Recorder(program, group.last if group else index)
        if group is not None:
            skip.update(group.members)
            count = _record_group(recorder, program, group)
            nodes[group.last] = replace(program.ops[group.last], inputs=group_inputs(program, group))
        else:
            op = get_op(node.op)
            arrays = [_placeholder(program, i) for i in node.inputs]
            count = _record(recorder, node, op, _placeholder(program, node.output), arrays)
        if count != len(recorder.launches):
            raise EngineError(f"{recorder.where}: its launcher says it launched {count} kernels but launched "
                              f"{len(recorder.launches)}")
        launches += recorder.launches
    return LaunchPlan(program, tuple(launches), tuple(nodes),
                      frozenset(k for g in groups for k in g.members[:-1]),
                      frozenset(t for g in groups for t in g.fused_values(program)))


def workspace_bytes(launches) -> int:
    """The largest workspace view among `launches` (bytes; 0 where none views it)."""
    return max((math.prod(a.shape) * np.dtype(a.dtype).itemsize for launch in launches for a in launch.args
                if isinstance(a, View) and a.tensor == WORKSPACE), default=0)


def dims3(value) -> tuple:
    """A launch's grid or block (a number, or up to three) as three dims, 1 where not given."""
    dims = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    return dims + (1,) * (3 - len(dims))


def plan_launches(program: Program, fuse: bool = True) -> tuple[Launch, ...]:
    """Every kernel launch of `program` (a validated Program), in order (`LaunchPlan.of`)."""
    return LaunchPlan.of(program, fuse).launches


def fused_values(program: Program) -> frozenset[int]:
    """Tensors that a fused plan (`plan_launches(program)`) never writes."""
    return LaunchPlan.of(program).unstored


def group_inputs(program: Program, group) -> tuple[int, ...]:
    """The tensors a fused group's launches read: the producer's inputs and the extras."""
    head = program.ops[group.first]
    return tuple(dict.fromkeys((*head.inputs, *group.extras) if group.producer else group.extras))


def signature(launch: Launch, program: Program) -> tuple:
    """The Numba signature `launch`'s kernel is called with: arrays C-contiguous, ints int64, floats float64."""
    from numba import types
    from numba.cuda.np.numpy_support import from_dtype  # numba-cuda's: it knows bfloat16 (ml_dtypes)

    typed = []
    for arg in launch.args:
        if isinstance(arg, View):
            dtype = np.dtype(arg.dtype or program.tensors[arg.tensor].dtype)
            typed.append(types.Array(from_dtype(dtype), len(arg.shape), "C"))
        elif isinstance(arg, (bool, int, Traced)):
            typed.append(types.int64)
        else:
            typed.append(types.float64)
    return tuple(typed)


def _sizes(shape) -> tuple:
    """A shape's dims as ints, or as Traced where a symbolic Program's plan is traced (simaccel.traced)."""
    return tuple(d if isinstance(d, Traced) else int(d) for d in shape)


def _placeholder(program: Program, i: int) -> "_Placeholder":
    return _Placeholder(i, program.tensors[i].shape, program.tensors[i].dtype)


def _record_group(recorder: "_Recorder", program: Program, group) -> int:
    names = "+".join(program.ops[k].op.split(".", 1)[1] for k in group.members)
    epilogue = fusion.Epilogue(names, group.steps, tuple(_placeholder(program, t) for t in group.extras),
                               group.producer_dtype)
    out = _placeholder(program, group.output)
    if not group.producer:
        from .kernels.epilogue import launch_group  # imports numba: only where a group has no producer

        return launch_group(recorder, out, epilogue=epilogue)
    head = program.ops[group.first]
    op = get_op(head.op)
    arrays = [_placeholder(program, i) for i in head.inputs]
    return _record(recorder, head, op, out, arrays, epilogue=epilogue)


def _record(recorder: _Recorder, node, op, out, arrays, **extra) -> int:
    """Run op `node`'s launcher against the recorder; a launch that bypasses it is a "stream" error."""
    try:
        with recording(recorder.where):
            return op.kernel(recorder, out, *arrays, **op.all_attrs(node.attrs), **extra)
    except StrayLaunch as e:
        names = [recorder.tensors[a.tensor].name for a in e.launch_args
                 if isinstance(a, _Placeholder) and a.tensor != WORKSPACE]
        on = f" on tensors {', '.join(map(repr, dict.fromkeys(names)))}" if names else ""
        raise SanitizerError(
            f"{recorder.where}: its launcher launched kernel {getattr(e.kernel, '__name__', e.kernel)}{on} on a "
            f"KernelTarget of its own ({e.target.name!r}, stream {e.target.stream!r}), not on the target it was "
            "given: that launch would run on another stream than the region's (TVM's current one), unordered "
            "with it; launch through the `target` argument",
            region=recorder.region, op=node.op, tensor=names[0] if names else None, kind="stream") from None
    except SimAccelError:
        raise
    except Exception as e:
        if _numba_launch_in(e.__traceback__):
            raise SanitizerError(
                f"{recorder.where}: its launcher launched a kernel through numba.cuda itself "
                f"({type(e).__name__}: {e}); such a launch is neither recorded nor on the region's stream "
                "(TVM's current one): launch through the `target` argument",
                region=recorder.region, op=node.op, kind="stream") from e
        raise EngineError(f"{recorder.where}: its launcher failed while its launches were recorded: "
                          f"{type(e).__name__}: {e}") from e


_NUMBA_LAUNCHES = {("dispatcher.py", "call"), ("dispatcher.py", "__call__"), ("kernel.py", "__call__"),
                   ("dispatcher.py", "__getitem__"), ("kernel.py", "__getitem__")}


def _numba_launch_in(tb) -> bool:
    """Whether traceback `tb` passes through numba-cuda's kernel launch (GPU dispatcher or simulator)."""
    while tb is not None:
        code = tb.tb_frame.f_code
        path = code.co_filename.replace("\\", "/")
        if "/numba/cuda/" in path and (path.rsplit("/", 1)[-1], code.co_name) in _NUMBA_LAUNCHES:
            return True
        tb = tb.tb_next
    return False


def replay(launches, target: LaunchTarget, slots) -> None:
    """Launch `launches` on `target` (a simaccel.kernels.KernelTarget); `slots[i]` is tensor i's
    array there, `slots[WORKSPACE]` the workspace's bytes (a one-dimensional uint8 array)."""
    def array(view: View):
        if view.tensor != WORKSPACE:
            return target.reshape(slots[view.tensor], view.shape, view.dtype)
        nbytes = math.prod(view.shape) * np.dtype(view.dtype).itemsize
        return target.reshape(slots[WORKSPACE][:nbytes], view.shape, view.dtype)

    for launch in launches:
        args = [array(a) if isinstance(a, View) else a for a in launch.args]
        target.launch(launch.kernel, launch.grid, launch.block, *args, shared_bytes=launch.shared_bytes)
