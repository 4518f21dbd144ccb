"""The simaccel runtime: executes Programs on the tensors a caller (TVM) hands over.

TVM's forwarder calls `Runtime.invoke(key, program_json, *tensors, stream=...)` with the
region's inputs followed by its DPS outputs and the caller's current stream. The runtime
parses and validates each Program once, picks an engine, binds every tensor as a zero-copy
view after checking dtype, shape, device and layout, runs the ops in order with
intermediates from a per-plan pool, and records the call in its ledger.

Engine choice, first match wins: `use_engine(...)` (a context), `set_engine(...)`, the
environment variable SIMACCEL_ENGINE, then "auto" (CPU tensors -> "ref", CUDA -> "cuda").
Host-staged mode (GPU only, for comparison): `set_staged(True)`, `use_staged()` or
SIMACCEL_STAGED=1.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import os
import threading
import time

from .engines import ENGINE_NAMES, Call, get_engine
from .errors import DeviceError, EngineError, ProgramError, SimAccelError
from .ledger import Ledger
from .ops import get_op
from .profile import DEFAULT_PROFILE, DeviceProfile
from .program import Program
from .tensors import describe, device_of

ENGINE_ENV = "SIMACCEL_ENGINE"
STAGED_ENV = "SIMACCEL_STAGED"
AUTO = "auto"
_DEFAULT_ENGINE_FOR_DEVICE = {"cpu": "ref", "cuda": "cuda"}
_scoped_engine: contextvars.ContextVar[str | None] = contextvars.ContextVar("simaccel_engine", default=None)
_scoped_staged: contextvars.ContextVar[bool | None] = contextvars.ContextVar("simaccel_staged", default=None)


class Plan:
    """One Program bound to one engine, device and stream: resolved ops and reusable memory.

    Intermediates are allocated once, here. Keying plans by stream keeps two streams from
    sharing (and racing on) one set of intermediates; calls on one stream are ordered by it.
    """

    def __init__(self, program: Program, engine, device: tuple[str, int]):
        self.program = program
        self.engine = engine
        self.device = device
        self.steps = [(node, get_op(node.op)) for node in program.ops]
        self.slots: list = [None] * len(program.tensors)
        for i in program.intermediates:
            self.slots[i] = engine.allocate(program.tensors[i], device[1])
        self.scratch: dict = {}  # staging buffers, host-staged mode only
        self.lock = threading.Lock()


class Runtime:
    """Plan cache, engine choice and ledger. Use `simaccel.get_runtime()` for the shared one."""

    def __init__(self, profile: DeviceProfile = DEFAULT_PROFILE):
        self.profile = profile
        self.ledger = Ledger()
        self._engine: str | None = None
        self._staged: bool | None = None
        self._programs: dict[str, Program] = {}
        self._plans: dict[tuple, Plan] = {}
        self._lock = threading.Lock()

    # -- engine choice -------------------------------------------------------------------
    def set_engine(self, name: str | None) -> None:
        """Use engine `name` for every later call in this process (None: back to the default)."""
        if name is not None:
            _check_engine_name(name)
        self._engine = name

    @contextlib.contextmanager
    def use_engine(self, name: str):
        """Use engine `name` inside a `with` block (per thread / task)."""
        _check_engine_name(name)
        token = _scoped_engine.set(name)
        try:
            yield self
        finally:
            _scoped_engine.reset(token)

    def set_staged(self, staged: bool | None) -> None:
        """Copy GPU tensors through host memory (True), zero-copy (False), or default (None)."""
        self._staged = staged

    @contextlib.contextmanager
    def use_staged(self, staged: bool = True):
        """Host-staged mode inside a `with` block (per thread / task)."""
        token = _scoped_staged.set(staged)
        try:
            yield self
        finally:
            _scoped_staged.reset(token)

    @property
    def staged(self) -> bool:
        """Whether the next call copies through host memory (default False: zero-copy)."""
        for value in (_scoped_staged.get(), self._staged):
            if value is not None:
                return value
        return os.environ.get(STAGED_ENV, "0") not in ("", "0")

    def engine_name(self, device_type: str = "cpu") -> str:
        """The engine a call on `device_type` tensors would use now."""
        name = _scoped_engine.get() or self._engine or os.environ.get(ENGINE_ENV) or AUTO
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
        """The validated Program cached under `key` (parsed on first use only)."""
        program = self._programs.get(key)
        if program is None:
            program = Program.from_json(program_json).validate(self.profile)
            with self._lock:
                self._programs[key] = program
        return program

    def invoke(self, key: str, program_json: str, *tensors, stream: int | None = None) -> None:
        """Run one region: `tensors` are the inputs, then the DPS outputs, in Program order.

        `stream` is the caller's current raw stream handle on the tensors' device (GPU only).
        """
        self.execute(self.program(key, program_json), tensors, key, stream)

    def run(self, program: Program, *tensors, stream: int | None = None) -> None:
        """Run `program` on DLPack tensors (inputs then outputs) from any producer."""
        key = program.fingerprint()
        if key not in self._programs:
            with self._lock:
                self._programs[key] = program.validate(self.profile)
        self.execute(self._programs[key], tensors, key, stream)

    def execute(self, program: Program, tensors, key: str, stream: int | None = None) -> None:
        n_in, n_out = len(program.inputs), len(program.outputs)
        if len(tensors) != n_in + n_out:
            raise ProgramError(
                f"region {program.name} takes {n_in} inputs and {n_out} outputs, got {len(tensors)} tensors"
            )
        devices = [device_of(t) for t in tensors]
        if len(set(devices)) > 1:
            listing = ", ".join(
                f"{program.tensors[i].name}@{describe(d)}" for i, d in zip(program.inputs + program.outputs, devices)
            )
            raise DeviceError(f"region {program.name}: tensors are on mixed devices ({listing})")
        device = devices[0]
        engine = get_engine(self.engine_name(device[0]))
        if engine.device_type != device[0]:
            raise DeviceError(
                f"region {program.name}: engine {engine.name!r} runs on {engine.device_type} memory, "
                f"but the tensors are on {describe(device)}"
            )
        plan = self._plan((key, engine.name, device, stream), program, engine, device)
        call = Call(program.name, device, stream, self.staged, self.ledger, plan.scratch)
        with plan.lock, engine.activate(call):
            start = time.perf_counter()
            slots = list(plan.slots)
            for role, ids, group in (("input", program.inputs, tensors[:n_in]), ("output", program.outputs, tensors[n_in:])):
                for i, tensor in zip(ids, group):
                    slots[i] = engine.bind(call, tensor, i, program.tensors[i], role)
            for node, op in plan.steps:
                try:
                    launches = engine.execute(call, node, op, [slots[i] for i in node.inputs], slots[node.output])
                except SimAccelError:
                    raise
                except Exception as e:  # a kernel or reference failure: name where it happened
                    raise SimAccelError(
                        f"region {program.name}: op {node.op} failed on engine {engine.name!r} "
                        f"({', '.join(str(program.tensors[i]) for i in node.inputs)}): {type(e).__name__}: {e}"
                    ) from e
                self.ledger.record_op(node.op, launches)
            engine.finish(call)
            self.ledger.record_region(program.name, time.perf_counter() - start)

    def _plan(self, plan_key: tuple, program: Program, engine, device) -> Plan:
        plan = self._plans.get(plan_key)
        if plan is None:
            with self._lock:
                plan = self._plans.get(plan_key)
                if plan is None:
                    plan = self._plans[plan_key] = Plan(program, engine, device)
        return plan

    def clear(self) -> None:
        """Drop cached Programs and plans (their intermediates are freed)."""
        with self._lock:
            self._programs.clear()
            self._plans.clear()


def _check_engine_name(name: str, source: str = "engine") -> None:
    if name != AUTO and name not in ENGINE_NAMES:
        raise EngineError(f"unknown {source} value {name!r}; choose one of {AUTO}, {', '.join(ENGINE_NAMES)}")


_RUNTIME: Runtime | None = None
_RUNTIME_LOCK = threading.Lock()


def get_runtime() -> Runtime:
    """The process-wide runtime used by TVM-compiled models."""
    global _RUNTIME
    if _RUNTIME is None:
        with _RUNTIME_LOCK:
            if _RUNTIME is None:
                _RUNTIME = Runtime()
                # Free device memory while the GPU drivers are still loaded, not during
                # interpreter teardown.
                atexit.register(_RUNTIME.clear)
    return _RUNTIME
