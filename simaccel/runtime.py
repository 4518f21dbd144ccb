"""The simaccel runtime: executes Programs on the tensors a caller (TVM) hands over.

TVM's compiled region function calls `Runtime.invoke(key, program_json, *tensors, stream=...)`
with the region's inputs followed by its DPS outputs and the caller's current stream. The
runtime parses and validates each Program once, picks an engine, checks every tensor
(dtype, shape, device, layout, alignment) and binds it as a zero-copy view, runs the ops in
order with intermediates from a per-plan pool, and records the call in its ledger. An
intermediate that is a view (a reshape, `Program.views`) is its owner's memory reshaped.

An output whose memory is also one of the call's inputs (an aliased DPS output) is computed
into plan-owned scratch and copied into place after the last op, so no op reads what an
earlier op of the same call already overwrote; the ledger counts that copy. Two outputs that
share memory are refused.

Parsed Programs and plans live in LRU caches of `max_plans` entries (default 256, or
$SIMACCEL_MAX_PLANS); an evicted plan gives its intermediates back at once. They are dropped
when declared ops are forgotten (simaccel.ops.registry.generation, read on each call).

Where it sits: above the engines and the switches, below the debugging tools, which it knows
only through simaccel.events (watchers, the sanitizer's checks, its own creation).

Engine choice, first match wins (simaccel.switches): `use_engine(...)` (a context),
`set_engine(...)`, the environment variable SIMACCEL_ENGINE, then "auto" (CPU tensors -> "ref",
CUDA -> "cuda").

Native regions (a CUDA build's regions compiled to C++, simaccel.native) do not come here:
they run without Python while "auto" is the choice. While a Python engine or the
host-staged mode is chosen anywhere in the process (`route_flag`), they forward every call
here instead, so the same library runs on the readable Python "cuda" engine.
Host-staged mode (GPU only, for comparison): `set_staged(True)`, `use_staged()` or
SIMACCEL_STAGED=1 (also true/yes/on; 0/false/no/off or unset: zero-copy).

Sanitized calls (simaccel.debug.sanitize, or a Program built with `sanitize=True`) run with
the sanitizer's watcher (simaccel.debug.sanitizer) on plans of their own, keyed apart from the
others, so its scratch memory is its own.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections import OrderedDict

from . import events
from .engines import ENGINE_NAMES, Call, get_engine
from .engines.sim import index_error
from .errors import DeviceError, EngineError, LayoutError, ProgramError, SanitizerError, SimAccelError
from .launch_plan import WORKSPACE_DTYPE, LaunchPlan
from .ledger import Ledger
from .ops import get_op
from .ops.registry import generation
from .profile import DeviceProfile, active_profile
from .program import Program, TensorSpec
from .shapes import sizes_text
from .switches import AUTO, ENGINE, ENGINE_ENV, ROUTE, STAGED, sanitizing
from .switches import STAGED_ENV  # noqa: F401  (simaccel.runtime.STAGED_ENV, as ENGINE_ENV and AUTO)
from .tensors import TensorRef, check, describe, device_of, from_dlpack, overlaps

MAX_PLANS_ENV = "SIMACCEL_MAX_PLANS"
DEFAULT_MAX_PLANS = 256
_DEFAULT_ENGINE_FOR_DEVICE = {"cpu": "ref", "cuda": "cuda"}


class Plan:
    """One Program bound to one engine, device and stream: resolved ops and reusable memory.

    Intermediates are allocated once, here; so is the scratch an aliased output is computed
    into. Keying plans by stream keeps two streams from sharing (and racing on) one set of
    intermediates; calls on one stream are ordered by it, calls from several threads by `lock`.
    """

    def __init__(self, program: Program, engine, device: tuple[str, int], stream: int | None = None,
                 sanitize: bool = False):
        self.program = program
        self.engine = engine
        self.device = device
        self.stream = stream
        self.sanitize = sanitize  # calls run under the sanitizer (simaccel.debug.sanitizer)
        # The kernel engines replay each op's recorded launches (simaccel.launch_plan), with
        # epilogue fusion (simaccel.fusion) unless the calls are watched: the sanitizer and the
        # other watchers see every op's output. A fused group runs at its last op, reading
        # what its launches read; its other ops run nothing and their values are never stored.
        nodes = program.ops
        self.launches = [()] * len(program.ops)
        self.fused_away: frozenset[int] = frozenset()  # ops whose work a later op's launches do
        unstored: frozenset[int] = frozenset()
        if engine.launches_kernels:
            plan = LaunchPlan.of(program, fuse=not sanitize and not events.listeners(events.WATCH))
            nodes, self.launches = plan.nodes, list(plan.per_op)
            self.fused_away, unstored = plan.fused_away, plan.unstored
        self.steps = [(node, get_op(node.op)) for node in nodes]
        self.slots: list = [None] * len(program.tensors)
        allocated = [i for i in program.intermediates if i not in program.views and i not in unstored]
        if program.constants or allocated:
            self.check_capture("allocate its intermediates and constants")
        for i in allocated:  # a view gets its owner's memory on each call; a fused value none
            self.slots[i] = engine.allocate(program.tensors[i], device[1])
        for i in program.constants:
            self.slots[i] = engine.constant(program.tensors[i], device[1])
        self.workspace = None  # the launches' shared scratch (simaccel.launch_plan.WORKSPACE), if they view one
        if engine.launches_kernels and plan.workspace:
            self.check_capture("allocate its workspace")
            self.workspace = engine.allocate(TensorSpec("workspace", (plan.workspace,), WORKSPACE_DTYPE.name), device[1])
        self.scratch: dict = {}  # staging buffers, host-staged mode only
        self.alias_scratch: dict = {}  # tensor id -> buffer an aliased output is computed into
        self.watcher_scratch: dict = {}  # buffers watchers keep with the plan (events.RegionRun.scratch)
        self.lock = threading.Lock()
        self.freed = False

    def check_capture(self, what: str) -> None:
        """Refuse to allocate while the plan's stream is capturing a CUDA graph (cudaMalloc is not
        allowed then, and would invalidate the capture)."""
        reason = self.engine.capturing(self.device[1], self.stream)
        if reason:
            raise SanitizerError(
                f"region {self.program.name}: its first call on stream {int(self.stream or 0):#x} must {what}, but "
                f"the stream {reason}: call the region once on this stream before capturing",
                region=self.program.name, kind="capture")

    def alias_buffer(self, index: int):
        buffer = self.alias_scratch.get(index)
        if buffer is None:
            self.check_capture(f"allocate scratch for its aliased output {self.program.tensors[index].name!r}")
            buffer = self.alias_scratch[index] = self.engine.allocate(self.program.tensors[index], self.device[1])
        return buffer

    def free(self) -> None:
        """Give the plan's device or host memory back (it is evicted from the cache)."""
        with self.lock:
            buffers = [b for b in self.slots if b is not None]
            buffers += list(self.scratch.values()) + list(self.alias_scratch.values())
            buffers += list(self.watcher_scratch.values())
            if self.workspace is not None:
                buffers.append(self.workspace)
                self.workspace = None
            self.slots = [None] * len(self.slots)
            self.scratch.clear()
            self.alias_scratch.clear()
            self.watcher_scratch.clear()
            self.freed = True
            self.engine.free(buffers, self.device[1])


class Runtime:
    """Plan cache, engine choice and ledger. Use `simaccel.get_runtime()` for the shared one.

    Parameters
    ----------
    profile:
        The device profile every Program is validated against; default: `active_profile()`
        ($SIMACCEL_PROFILE, else the default profile), read when a Program is first seen.
    max_plans:
        How many parsed Programs, and how many plans, stay cached (least recently used first
        out). Default: $SIMACCEL_MAX_PLANS, else 256.
    """

    def __init__(self, profile: DeviceProfile | None = None, max_plans: int | None = None):
        self._profile = profile
        self.ledger = Ledger()
        self.max_plans = _max_plans(max_plans)
        self._engine: str | None = None
        self._staged: bool | None = None
        self._programs: OrderedDict[str, tuple[str, Program]] = OrderedDict()
        self._plans: OrderedDict[tuple, Plan] = OrderedDict()
        self._lock = threading.Lock()
        self._generation = generation()  # of the op registry, when the caches were last emptied

    @property
    def profile(self) -> DeviceProfile:
        return self._profile or active_profile()

    # -- engine choice -------------------------------------------------------------------
    def set_engine(self, name: str | None) -> None:
        """Use engine `name` for every later call in this process (None: back to the default)."""
        if name is not None:
            _check_engine_name(name)
        self._engine = name
        self.route_flag()

    @contextlib.contextmanager
    def use_engine(self, name: str):
        """Use engine `name` inside a `with` block (per thread / task)."""
        _check_engine_name(name)
        with ENGINE.scope(name, self.route_flag):
            yield self

    def set_staged(self, staged: bool | None) -> None:
        """Copy GPU tensors through host memory (True), zero-copy (False), or default (None)."""
        self._staged = staged
        self.route_flag()

    @contextlib.contextmanager
    def use_staged(self, staged: bool = True):
        """Host-staged mode inside a `with` block (per thread / task)."""
        with STAGED.scope(staged, self.route_flag):
            yield self

    def route_flag_set(self) -> bool:
        """Whether native regions go through this runtime now (see `route_flag`)."""
        self.route_flag()
        return bool(ROUTE.value())

    def route_flag(self) -> int:
        """Update and return the address of the flag native regions read on every call.

        Set (1) while the process chooses a Python engine or the host-staged mode:
        `set_engine`, `set_staged`, an open `use_engine`/`use_staged` block in any thread,
        $SIMACCEL_ENGINE / $SIMACCEL_STAGED as they are when a native region is first
        called or this is next updated, or an installed watcher that wants every region
        (simaccel.debug.hooks). Native regions then forward to `invoke`.
        """
        python = ENGINE.process_wide(self._engine) or STAGED.process_wide(self._staged)
        return ROUTE.set(python or events.python_regions_wanted())

    @property
    def staged(self) -> bool:
        """Whether the next call copies through host memory (default False: zero-copy)."""
        return STAGED.value(self._staged)

    def engine_name(self, device_type: str = "cpu") -> str:
        """The engine a call on `device_type` tensors would use now."""
        name = ENGINE.value(self._engine)
        _check_engine_name(name, source=ENGINE_ENV if name == os.environ.get(ENGINE_ENV) else "engine")
        if name != AUTO:
            return name
        try:
            return _DEFAULT_ENGINE_FOR_DEVICE[device_type]
        except KeyError:
            raise EngineError(
                f"no simaccel engine runs on {device_type} tensors (engines: {', '.join(ENGINE_NAMES)}; "
                "ref and sim use host memory, cuda uses NVIDIA GPUs)"
            ) from None

    # -- execution -----------------------------------------------------------------------
    def program(self, key: str, program_json: str) -> Program:
        """The validated Program of `program_json`, cached under `key` (parsed on first use only).

        A cached entry is used only if its JSON is the same text, so two different Programs
        can never share a key's entry.
        """
        self._forget_if_ops_were()
        with self._lock:
            entry = self._programs.get(key)
            if entry is not None and (entry[0] is program_json or entry[0] == program_json):
                self._programs.move_to_end(key)
                return entry[1]
        if not isinstance(program_json, str):
            raise ProgramError(f"region {key!r}: a Program is JSON text, got {type(program_json).__name__}")
        program = Program.from_json(program_json).validate(self.profile)
        self._keep(key, program_json, program)
        return program

    def _keep(self, key, program_json, program: Program) -> None:
        """Cache `program` under `key` (the least recently used entry goes past `max_plans`)."""
        with self._lock:
            self._programs[key] = (program_json, program)
            self._programs.move_to_end(key)
            while len(self._programs) > self.max_plans:
                self._programs.popitem(last=False)

    def bound(self, program: Program, shapes, shape_values=()) -> tuple[Program, dict[str, int]]:
        """The static Program a symbolic `program` is for one call's tensor shapes (inputs, then
        outputs), and its vars' values: bound from them and checked (`Program.bind_tensors`),
        validated once per bound shape and cached beside the parsed Programs (the same LRU of
        `max_plans`)."""
        values = program.bind_tensors(shapes, shape_values)
        key = ("bound", program.fingerprint(), tuple(sorted(values.items())))
        with self._lock:
            entry = self._programs.get(key)
            if entry is not None:
                self._programs.move_to_end(key)
                return entry[1], values
        try:
            static = program.bind(values).validate(self.profile)
        except SimAccelError as e:
            raise type(e)(f"region {program.name} at {sizes_text(values)}: {e}") from e
        self._keep(key, None, static)
        return static, values

    def invoke(self, key: str, program_json: str, *tensors, stream: int | None = None) -> None:
        """Run one region: `tensors` are the inputs, then the DPS outputs, in Program order.

        Each tensor is a `simaccel.tensors.TensorRef` (what TVM's region functions pass) or
        any DLPack tensor. `stream` is the caller's current raw stream handle on the
        tensors' device (GPU only).
        """
        self.execute(self.program(key, program_json), tensors, stream)

    def run(self, program: Program, *tensors, stream: int | None = None) -> None:
        """Run `program` on DLPack tensors (inputs then outputs) from any producer.

        The Program is checked the way a loaded library's would be (through its JSON form).
        """
        if not isinstance(program, Program):
            raise ProgramError(f"Runtime.run takes a simaccel Program, got {type(program).__name__}")
        self.invoke(f"{program.name}:{program.fingerprint()}", program.to_json(), *tensors, stream=stream)

    def execute(self, program: Program, tensors, stream: int | None = None) -> None:
        shape_values = ()
        if program.shape_args:  # a symbolic region's shape arguments: sizes, no tensors
            positions = [k for k, _ in program.shape_args]
            if len(tensors) != len(program.inputs) + len(program.outputs) + len(positions):
                raise ProgramError(f"region {program.name} takes {len(program.inputs)} inputs, {len(positions)} shape "
                                   f"arguments and {len(program.outputs)} outputs, got {len(tensors)} arguments")
            shape_values = [shape_argument(program.name, k, tensors[k]) for k in positions]
            tensors = [t for k, t in enumerate(tensors) if k not in positions]
        n_in, n_out = len(program.inputs), len(program.outputs)
        if len(tensors) != n_in + n_out:
            raise ProgramError(
                f"region {program.name} takes {n_in} inputs and {n_out} outputs, got {len(tensors)} tensors"
            )
        ids = program.inputs + program.outputs
        roles = ["input"] * n_in + ["output"] * n_out
        devices = [t.device if isinstance(t, TensorRef) else device_of(t) for t in tensors]
        if len(set(devices)) > 1:
            listing = ", ".join(f"{program.tensors[i].name}@{describe(d)}" for i, d in zip(ids, devices))
            raise DeviceError(f"region {program.name}: tensors are on mixed devices ({listing})")
        device = devices[0]
        sizes = {}
        if program.vars:  # sizes first: a call whose shapes are wrong is that error wherever it runs
            program, sizes = self.bound(program, [tuple(t.shape) for t in tensors], shape_values)
        engine = get_engine(self.engine_name(device[0]))
        if engine.device_type != device[0]:
            raise DeviceError(
                f"region {program.name}: engine {engine.name!r} runs on {engine.device_type} memory, "
                f"but the tensors are on {describe(device)}"
            )
        refs = [tensor if isinstance(tensor, TensorRef) else from_dlpack(tensor, device, program.name, role,
                                                                         program.tensors[i].name)
                for i, role, tensor in zip(ids, roles, tensors)]
        for i, role, ref in zip(ids, roles, refs):
            spec = program.tensors[i]
            check(program.name, role, spec, ref)
            self.profile.check_address(f"region {program.name}: {role} {spec.name!r}", ref.address)
        aliased = self._aliased_outputs(program, refs)
        staged = self.staged
        sanitize = program.sanitize or sanitizing()
        plan_key = (program.fingerprint(), engine.name, device, stream)
        if sanitize:  # a plan of its own: the sanitizer's scratch is never part of the plain plan
            plan_key += ("sanitized",)
        elif events.listeners(events.WATCH):  # watched calls run unfused plans (Plan)
            plan_key += ("unfused",)
        with self._live_plan(plan_key, program, engine, device, stream, sanitize) as plan:
            call = Call(program.name, device, stream, staged, self.ledger, plan.scratch, workspace=plan.workspace)
            self._run_plan(plan, call, zip(ids, roles, refs), aliased, sizes)

    def _run_plan(self, plan: Plan, call: Call, boundary, aliased, sizes: dict | None = None) -> None:
        """One call of a locked plan: bind the boundary (tensor id, role, TensorRef), run the ops
        (`sizes`: a symbolic region's size var values for this call, which watchers see)."""
        program, engine = plan.program, plan.engine
        with engine.activate(call):
            start = time.perf_counter()
            slots = list(plan.slots)
            boundary_list = list(boundary)
            for i, role, ref in boundary_list:
                slots[i] = engine.bind(call, ref, i, program.tensors[i], role)
            views = {i: slots[i] for i in aliased}
            for i in aliased:
                slots[i] = plan.alias_buffer(i)
            for i, owner in program.views.items():
                slots[i] = engine.view(slots[owner], program.tensors[i])
            watchers = events.listeners(events.WATCH)
            if plan.sanitize:  # the sanitizer first: the others see the real tensors after an op
                watchers = (*_sanitizer(program), *watchers)
            run = None
            if watchers:
                run = events.RegionRun(program, engine, call, slots, list(boundary_list), list(plan.launches),
                                       scratch=plan.watcher_scratch, sizes=sizes or {})
                for w in watchers:
                    w.region_start(run)
            for index, ((node, op), recorded) in enumerate(zip(plan.steps, plan.launches)):
                if run is not None:
                    for w in watchers:
                        w.op_start(run, index)
                if node.output in program.views or index in plan.fused_away:  # no work of its own
                    self.ledger.record_op(node.op, 0)
                    if run is not None:
                        for w in watchers:
                            w.op_end(run, index)
                    continue
                try:
                    launches = engine.execute(call, node, op, [slots[i] for i in node.inputs], slots[node.output], recorded)
                except SimAccelError:
                    raise
                except Exception as e:  # a kernel or reference failure: name where it happened
                    error = index_error(program, index, [slots[i] for i in node.inputs], slots[node.output], recorded, e)
                    if error is not None:  # a simulated kernel indexed out of range
                        raise error from e
                    raise SimAccelError(
                        f"region {program.name}: op {node.op} failed on engine {engine.name!r} "
                        f"({', '.join(str(program.tensors[i]) for i in node.inputs)}): {type(e).__name__}: {e}"
                    ) from e
                self.ledger.record_op(node.op, launches)
                if run is not None:
                    for w in watchers:
                        w.op_end(run, index)
            for i, view in views.items():
                engine.copy(call, view, slots[i])
                self.ledger.record_copy("device_to_device", program.tensors[i].nbytes)
            if run is not None:
                for i in views:  # watchers see the caller's buffers, now written
                    slots[i] = views[i]
                for w in watchers:
                    w.region_end(run)
            engine.finish(call)
            self.ledger.record_region(program.name, time.perf_counter() - start, program)

    @staticmethod
    def _aliased_outputs(program: Program, refs) -> list[int]:
        """Tensor ids of outputs that share memory with an input; refuse outputs sharing with outputs."""
        n_in = len(program.inputs)
        ids = program.inputs + program.outputs
        aliased = []
        for out, other in overlaps(refs, n_in):
            if other >= n_in:
                names = sorted(program.tensors[ids[k]].name for k in (out, other))
                raise LayoutError(
                    f"region {program.name}: outputs {names[0]!r} and {names[1]!r} share memory "
                    f"({refs[out].address:#x}, {refs[other].address:#x}); each output needs a buffer of its own"
                )
            if ids[out] not in aliased:
                aliased.append(ids[out])
        return aliased

    @contextlib.contextmanager
    def _live_plan(self, plan_key: tuple, program: Program, engine, device, stream=None, sanitize=False):
        """The cached plan for `plan_key`, locked; never one that another thread's eviction freed."""
        while True:
            plan = self._plan(plan_key, program, engine, device, stream, sanitize)
            with plan.lock:
                if not plan.freed:
                    yield plan
                    return

    def _plan(self, plan_key: tuple, program: Program, engine, device, stream=None, sanitize=False) -> Plan:
        self._forget_if_ops_were()
        with self._lock:
            plan = self._plans.get(plan_key)
            if plan is not None:
                self._plans.move_to_end(plan_key)
                return plan
        plan = Plan(program, engine, device, stream, sanitize)  # allocates: outside the lock
        evicted = []
        with self._lock:
            plan = self._plans.setdefault(plan_key, plan)
            self._plans.move_to_end(plan_key)
            while len(self._plans) > self.max_plans:
                evicted.append(self._plans.popitem(last=False)[1])
        for old in evicted:
            old.free()
        return plan

    def _forget_if_ops_were(self) -> None:
        """Clear the caches once declared ops were forgotten (`simaccel.ops.registry.generation`):
        their Programs and plans may hold ops that are gone or declared anew."""
        if self._generation != generation():
            self._generation = generation()
            self.clear()

    def clear(self) -> None:
        """Drop cached Programs and plans, freeing the plans' memory."""
        with self._lock:
            plans = list(self._plans.values())
            self._programs.clear()
            self._plans.clear()
        for plan in plans:
            plan.free()


def shape_argument(region: str, position: int, value) -> tuple[int, ...]:
    """A shape argument's sizes: any sequence of ints (a tuple, TVM's ShapeTuple)."""
    try:
        return tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise ProgramError(f"region {region}: argument {position} is a shape argument (sizes), got "
                           f"{type(value).__name__}") from None


def _max_plans(value: int | None) -> int:
    source = "max_plans"
    if value is None:
        text = os.environ.get(MAX_PLANS_ENV)
        if text is None:
            return DEFAULT_MAX_PLANS
        source = MAX_PLANS_ENV
        try:
            value = int(text)
        except ValueError:
            raise EngineError(f"{MAX_PLANS_ENV}={text!r} is not a whole number") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EngineError(f"{source} must be a whole number >= 1, got {value!r}")
    return value


def _sanitizer(program: Program) -> tuple:
    """The watcher that checks a sanitized call (simaccel.debug.sanitizer registers it, as a
    SANITIZE listener of simaccel.events, when simaccel is imported)."""
    checks = events.listeners(events.SANITIZE)
    if not checks:
        raise EngineError(f"region {program.name}: a sanitized call needs simaccel.debug.sanitizer, which is not loaded")
    return checks


def _check_engine_name(name: str, source: str = "engine") -> None:
    if name != AUTO and name not in ENGINE_NAMES:
        raise EngineError(f"unknown {source} value {name!r}; choose one of {AUTO}, {', '.join(ENGINE_NAMES)}")


_RUNTIME: Runtime | None = None
_RUNTIME_LOCK = threading.Lock()


def get_runtime() -> Runtime:
    """The process-wide runtime used by TVM-compiled models (created on first use, announced
    to the RUNTIME listeners of simaccel.events: $SIMACCEL_TRACE starts there)."""
    global _RUNTIME
    created = False
    if _RUNTIME is None:
        with _RUNTIME_LOCK:
            if _RUNTIME is None:
                _RUNTIME = Runtime()
                # Free device memory while the GPU drivers are still loaded, not during
                # interpreter teardown.
                atexit.register(_RUNTIME.clear)
                created = True
    if created:
        events.announce(events.RUNTIME, _RUNTIME)
    return _RUNTIME
