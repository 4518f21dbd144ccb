"""The sanitizer in Python regions (simaccel.debug.sanitize, docs/debugging.md "Sanitizer").

Planted defects (tests/user_ops/planted_defects.py: user ops with correct references and
wrong kernels) are each caught with a message naming the region, the op and the tensor; a
clean region gives the same results sanitized as not; the default runs none of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import simaccel
from simaccel.debug import flags, sanitize, sanitizing, set_sanitize
from simaccel.debug import sanitizer
from simaccel.engines import Call, get_engine
from simaccel.errors import EngineError, ProgramError, SanitizerError
from simaccel.program import OpNode, Program, TensorSpec

PLANTED = str(Path(__file__).resolve().parent / "user_ops" / "planted_defects.py")
from simaccel.debug import sanitize_switch as switches


@pytest.fixture(autouse=True)
def switch_off(monkeypatch):
    """Every test starts with the switch off and leaves it so."""
    monkeypatch.delenv(switches.SANITIZE_ENV, raising=False)
    set_sanitize(None)
    yield
    set_sanitize(None)


@pytest.fixture
def planted(isolated_isa, monkeypatch):
    monkeypatch.setenv("SIMACCEL_OPS", PLANTED)
    isolated_isa.get_op("planted.skip_last")  # loads $SIMACCEL_OPS
    yield isolated_isa
    for name in [n for n, m in sys.modules.items() if getattr(m, "__file__", "") == PLANTED]:
        del sys.modules[name]


def one_op(op: str, dtype="float32", shape=(5,), region=None) -> Program:
    """region(x) = op(x)."""
    return Program(region or op.split(".")[1], (TensorSpec("x", shape, dtype), TensorSpec("y", shape, dtype)),
                   (0,), (1,), (OpNode(op, (0,), 1),))


def after_tanh(op: str, dtype="float32", shape=(5,)) -> Program:
    """region(x) = tanh(op(tanh(x))): the defect op reads and writes intermediates."""
    tensors = (TensorSpec("x", shape, dtype), TensorSpec("t", shape, dtype), TensorSpec("u", shape, dtype),
               TensorSpec("y", shape, dtype))
    ops = (OpNode("simaccel.tanh", (0,), 1), OpNode(op, (1,), 2), OpNode("simaccel.tanh", (2,), 3))
    return Program("after_tanh", tensors, (0,), (3,), ops)


def inputs(shape=(5,), dtype="float32"):
    return np.asarray(np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) - 2.25, dtype=dtype)


def run(program, engine, x, y=None, **switch):
    y = np.full(x.shape, 7, x.dtype) if y is None else y
    runtime = simaccel.get_runtime()
    with runtime.use_engine(engine), sanitize(**switch):
        runtime.run(program, x, y)
    return y


def caught(program, engine, kind, *parts, **switch) -> SanitizerError:
    with pytest.raises(SanitizerError) as info:
        run(program, engine, inputs(program.tensors[0].shape, program.tensors[0].dtype), **switch)
    error = info.value
    assert error.kind == kind, error
    for part in parts:
        assert part in str(error), (part, str(error))
    return error


# -- the planted defects --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_kernel_that_skips_its_last_element_is_caught_on_sim(planted, dtype):
    error = caught(one_op("planted.skip_last", dtype), "sim", "unwritten",
                   "region skip_last", "op 0 (planted.skip_last)", "left 1 of 5 elements", "output 'y' (5,)",
                   "at element 4", "skip_last_kernel[grid 1, block 128")
    assert (error.region, error.op, error.tensor) == ("skip_last", "planted.skip_last", "y")


def test_an_unwritten_intermediate_names_it(planted):
    error = caught(after_tanh("planted.skip_last", shape=(2, 3)), "sim", "unwritten",
                   "region after_tanh", "op 1 (planted.skip_last)", "output 'u' (2, 3)", "at element (1, 2)")
    assert error.tensor == "u"


def test_a_kernel_that_writes_past_its_output_is_caught_on_sim_always(planted):
    # The simulator's arrays know their bounds: the write itself fails, sanitizing or not.
    for switch in (True, False):
        error = caught(one_op("planted.past_end"), "sim", "index",
                       "region past_end", "op 0 (planted.past_end)", "kernel past_end_kernel (grid 1, block 128)",
                       "wrote its output 'y' (5,) float32 out of range", "index 5 is out of bounds", enabled=switch)
        assert (error.region, error.op, error.tensor) == ("past_end", "planted.past_end", "y")


def test_a_kernel_that_writes_into_its_input_is_caught_on_sim(planted):
    x = inputs()
    with pytest.raises(SanitizerError) as info:
        run(one_op("planted.into_input"), "sim", x)
    error = info.value
    assert (error.kind, error.region, error.op, error.tensor) == ("input_written", "into_input", "planted.into_input", "x")
    assert "op 0 (planted.into_input) wrote into its input 'x' (5,) float32" in str(error)
    assert "5 of 5 elements changed, first at element 0: -2.25 -> 5.0625" in str(error)


def test_a_kernel_that_writes_into_an_intermediate_input_is_caught(planted):
    error = caught(after_tanh("planted.into_input"), "sim", "input_written",
                   "op 1 (planted.into_input) wrote into its input 't' (5,) float32 (the region's intermediate")
    assert error.tensor == "t"


def test_a_launch_on_a_target_of_its_own_is_caught_on_sim_always(planted):
    for switch in (True, False):
        error = caught(one_op("planted.other_stream"), "sim", "stream",
                       "region other_stream: op 0 (planted.other_stream)", "launched kernel floor_kernel on tensors 'y', 'x'",
                       "KernelTarget of its own ('cuda', stream 0)", "TVM's current one", enabled=switch)
        assert (error.region, error.op, error.tensor) == ("other_stream", "planted.other_stream", "y")


def test_a_launcher_that_launches_through_numba_itself_is_a_stream_error(isolated_isa):
    from numba.cuda import simulator
    from simaccel.ops import OpFamily, declare, relax_op

    def copy_kernel(out, x):
        out[0] = x[0]

    def launch(target, out, data):
        simulator.jit(copy_kernel)[1, 1](out, data)  # with the recorder's placeholders
        return 1

    declare(OpFamily(name="planted2.direct", inputs=("data",), pattern=relax_op("relax.negative", "data"),
                     infer=lambda shapes: shapes[0], reference=np.negative, kernel=launch))
    error = caught(one_op("planted2.direct"), "sim", "stream", "op 0 (planted2.direct)",
                   "launched a kernel through numba.cuda itself")
    assert error.region == "direct"


def test_ref_never_runs_kernels_so_kernel_defects_pass_there(planted):
    for op, want in (("planted.skip_last", np.negative), ("planted.past_end", np.abs), ("planted.into_input", np.square),
                     ("planted.other_stream", np.floor)):
        x = inputs()
        np.testing.assert_array_equal(run(one_op(op), "ref", x), want(inputs()))
        np.testing.assert_array_equal(x, inputs())


def test_a_reference_that_writes_into_its_input_is_caught_on_ref(planted):
    error = caught(one_op("planted.ref_into_input"), "ref", "input_written",
                   "region ref_into_input: op 0 (planted.ref_into_input) wrote into its input 'x' (5,) float32",
                   "-2.25 -> -2.0")
    assert error.tensor == "x"
    x = inputs()
    np.testing.assert_array_equal(run(one_op("planted.ref_into_input"), "sim", x), np.ceil(inputs()))  # its kernel is right


def test_without_the_sanitizer_the_defects_go_unnoticed(planted):
    y = run(one_op("planted.skip_last"), "sim", inputs(), enabled=False)
    assert y[-1] == 7  # whatever the buffer held
    x = inputs()
    run(one_op("planted.into_input"), "sim", x, enabled=False)
    np.testing.assert_array_equal(x, np.square(inputs()))


# -- what the GPU would do, emulated on host memory ----------------------------------------------------
def _root(array: np.ndarray) -> np.ndarray:
    while array.base is not None and isinstance(array.base, np.ndarray):
        array = array.base
    return array


@pytest.mark.parametrize("where, expect", [("after", "up to 4 bytes past its end (4 bytes changed)"),
                                           ("before", "up to 2 bytes before its start (1 bytes changed)")])
def test_a_write_outside_the_output_changes_a_canary(monkeypatch, where, expect):
    # A GPU kernel writes past a buffer without noticing; emulate one on ref by writing the
    # guard bands of the scratch the op sees (the sanitizer's flat buffer around it).
    engine = get_engine("ref")
    original = type(engine).execute

    def overrunning(self, call, node, op, ins, output, launches=()):
        count = original(self, call, node, op, ins, output, launches)
        if node.op == "simaccel.exp":
            flat = _root(output).view(np.uint8)
            if where == "after":
                flat[sanitizer.GUARD + output.nbytes:sanitizer.GUARD + output.nbytes + 4] = 0
            else:
                flat[sanitizer.GUARD - 2] = 0
        return count

    monkeypatch.setattr(type(engine), "execute", overrunning)
    error = caught(after_tanh("simaccel.exp"), "ref", "out_of_bounds",
                   "region after_tanh: op 1 (simaccel.exp) wrote outside its output 'u' (5,) float32", expect)
    assert (error.op, error.tensor) == ("simaccel.exp", "u")


def test_a_gpu_fault_names_the_op_and_its_launches():
    from simaccel.launch_plan import Launch, View

    class Faulting:
        def synchronize(self):
            raise RuntimeError("Call to cuStreamSynchronize results in CUDA_ERROR_ILLEGAL_ADDRESS")

    program = one_op("simaccel.tanh", region="r")

    def kernel():
        pass

    launch = Launch(0, kernel, (1,), (128,), 0, (View(1, (5,)), View(0, (5,)), 5))
    run_ = SimpleNamespace(program=program, engine=SimpleNamespace(device_type="cuda"),
                           call=SimpleNamespace(target=SimpleNamespace(stream=Faulting())), launches=[(launch,)])
    with pytest.raises(SanitizerError) as info:
        sanitizer.synchronize(run_, 0)
    assert info.value.kind == "fault" and info.value.op == "simaccel.tanh"
    assert ("region r: op 0 (simaccel.tanh) faulted on the GPU: RuntimeError: Call to cuStreamSynchronize results in "
            "CUDA_ERROR_ILLEGAL_ADDRESS; its launches: kernel[grid (1,), block (128,), shared 0](y[5], x[5], 5)") in str(info.value)


# -- integer poison: a value equal to the first poison is no defect ------------------------------------
def test_integer_outputs_get_a_second_poison(planted):
    # No op of the ISA takes integers yet, so the plan is driven below the Program checks.
    from simaccel.runtime import Plan
    from simaccel.tensors import from_dlpack

    runtime = simaccel.get_runtime()
    program = one_op("planted.skip_last", "int32")
    assert sanitizer.poison("int32") == 0xA5A5A5A5 and sanitizer.needs_second_run("int32")
    x = np.array([1515870811, 1, 2, 3, 4], np.int32)  # -x[0] is the first poison's bit pattern, 0xA5A5A5A5
    for expect_error in (True, False):
        plan = Plan(program, get_engine("sim"), ("cpu", 0), sanitize=True)
        if not expect_error:  # the same values written everywhere: only the poison value itself stays
            monkey = [launch for launch in plan.launches[0]]
            plan.launches[0] = tuple(type(l)(l.op, l.kernel, l.grid, l.block, l.shared_bytes,
                                             l.args[:2] + (l.args[2] + 1,)) for l in monkey)
        y = np.zeros(5, np.int32)
        refs = [from_dlpack(a, ("cpu", 0), "r", role, name) for a, role, name in ((x, "input", "x"), (y, "output", "y"))]
        call = Call(program.name, ("cpu", 0), None, False, runtime.ledger, plan.scratch)
        if expect_error:
            with pytest.raises(SanitizerError, match=r"left 1 of 5 elements of its output 'y' \(5,\) int32 unwritten.*"
                                                     r"first at element 4, last at 4"):
                runtime._run_plan(plan, call, zip((0, 1), ("input", "output"), refs), [])
        else:
            runtime._run_plan(plan, call, zip((0, 1), ("input", "output"), refs), [])
            np.testing.assert_array_equal(y, -x)


def test_poisons():
    for dtype in ("float16", "float32", "float64"):
        value = np.array([sanitizer.poison(dtype)], f"u{np.dtype(dtype).itemsize}").view(dtype)
        assert np.isnan(value[0]) and not sanitizer.needs_second_run(dtype)
        quiet = np.array([np.nan], dtype).view(f"u{np.dtype(dtype).itemsize}")[0]
        assert quiet != sanitizer.poison(dtype)  # arithmetic's NaN is not the poison
    assert sanitizer.poison("uint8") == 0xA5 and sanitizer.poison("uint8", second=True) == 0x5A
    assert not sanitizer.needs_second_run("bool")


# -- a clean region passes, with the same results ----------------------------------------------------
def clean_program(dtype) -> Program:
    """x (2,3,4) -> reshape (a view) -> dense_bias -> tanh -> add -> y; and exp(t) -> z."""
    tensors = (TensorSpec("x", (2, 3, 4), dtype), TensorSpec("w", (5, 12), dtype), TensorSpec("b", (5,), dtype),
               TensorSpec("xr", (2, 12), dtype), TensorSpec("h", (2, 5), dtype), TensorSpec("t", (2, 5), dtype),
               TensorSpec("y", (2, 5), dtype), TensorSpec("z", (2, 5), dtype))
    ops = (OpNode("simaccel.reshape", (0,), 3, {"shape": [2, 12]}), OpNode("simaccel.dense_bias", (3, 1, 2), 4),
           OpNode("simaccel.tanh", (4,), 5), OpNode("simaccel.add", (5, 4), 6), OpNode("simaccel.exp", (5,), 7))
    return Program("clean", tensors, (0, 1, 2), (6, 7), ops)


def aliased_program(dtype) -> Program:
    """y = tanh(x) + x, called with y in x's memory."""
    tensors = (TensorSpec("x", (3, 4), dtype), TensorSpec("t", (3, 4), dtype), TensorSpec("y", (3, 4), dtype))
    return Program("aliased", tensors, (0,), (2,), (OpNode("simaccel.tanh", (0,), 1), OpNode("simaccel.add", (1, 0), 2)))


@pytest.mark.parametrize("engine", ["ref", "sim"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_clean_region_gives_the_same_results_sanitized(engine, dtype):
    runtime = simaccel.get_runtime()
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in ((2, 3, 4), (5, 12), (5,)))
    h = x.reshape(2, 12).astype(np.float64) @ w.T.astype(np.float64) + b
    original = rng.standard_normal((3, 4)).astype(dtype)
    results = {}
    for on in (False, True):
        y, z = np.zeros((2, 5), dtype), np.zeros((2, 5), dtype)
        with runtime.use_engine(engine), sanitize(on):
            runtime.run(clean_program(dtype), x, w, b, y, z)
        tol = 2e-2 if dtype == "float16" else 1e-5
        np.testing.assert_allclose(y, np.tanh(h) + h, rtol=tol, atol=tol)
        np.testing.assert_allclose(z, np.exp(np.tanh(h)), rtol=tol, atol=tol)
        results[on] = (y, z)
        xa = original.copy()
        with runtime.use_engine(engine), sanitize(on):
            runtime.run(aliased_program(dtype), xa, xa)  # the output is the input's memory: allowed
        np.testing.assert_allclose(xa, np.tanh(original.astype(np.float64)) + original, rtol=tol, atol=tol)
        results[on] += (xa,)
    for a, b_ in zip(results[False], results[True]):
        np.testing.assert_array_equal(a, b_)


@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3)])
def test_scalar_and_empty_tensors_pass(planted, shape):
    x = inputs(shape)
    np.testing.assert_allclose(run(after_tanh("simaccel.exp", shape=shape), "sim", x), np.tanh(np.exp(np.tanh(x))), rtol=1e-6)
    if shape == ():
        caught(one_op("planted.into_input", shape=()), "sim", "input_written", "wrote into its input 'x' () float32")
        caught(one_op("planted.skip_last", shape=()), "sim", "unwritten", "left 1 of 1 elements of its output 'y' ()")


def test_sanitized_plans_are_their_own():
    runtime = simaccel.get_runtime()
    runtime.clear()
    x, w, b = (np.ones(s, np.float32) for s in ((2, 3, 4), (5, 12), (5,)))
    for on in (False, True, True):
        with runtime.use_engine("ref"), sanitize(on):
            runtime.run(clean_program("float32"), x, w, b, np.zeros((2, 5), np.float32), np.zeros((2, 5), np.float32))
    plans = list(runtime._plans.items())
    assert sorted(len(key) for key, _ in plans) == [4, 5] and [k[4] for k, _ in plans if len(k) == 5] == ["sanitized"]
    by_switch = {len(key) == 5: plan for key, plan in plans}
    assert not by_switch[False].watcher_scratch
    assert len(by_switch[True].watcher_scratch) == 4  # dense_bias, tanh, add, exp (not the view)
    runtime.clear()
    assert not by_switch[True].watcher_scratch


def test_the_default_runs_none_of_the_sanitizer(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("sanitizer code ran with the switch off")

    for name in ("region_start", "op_start", "op_end", "region_end"):
        monkeypatch.setattr(sanitizer.Sanitizer, name, never)
    for name in ("check_guards", "check_stream", "synchronize", "poison_image", "_compare_input"):
        monkeypatch.setattr(sanitizer, name, never)
    runtime = simaccel.get_runtime()
    x, w, b = (np.ones(s, np.float32) for s in ((2, 3, 4), (5, 12), (5,)))
    for engine in ("ref", "sim"):
        with runtime.use_engine(engine):
            runtime.run(clean_program("float32"), x, w, b, np.zeros((2, 5), np.float32), np.zeros((2, 5), np.float32))
    assert not sanitizing() and not flags.value() & flags.SANITIZE
    with sanitize(), pytest.raises(AssertionError, match="sanitizer code ran"):  # and the patches do bite
        with runtime.use_engine("ref"):
            runtime.run(clean_program("float32"), x, w, b, np.zeros((2, 5), np.float32), np.zeros((2, 5), np.float32))


# -- capture and streams ---------------------------------------------------------------------------------
def test_a_sanitized_call_during_capture_is_refused(monkeypatch):
    engine = get_engine("sim")
    monkeypatch.setattr(engine, "capturing", lambda device, stream: "is capturing a CUDA graph", raising=False)
    with pytest.raises(SanitizerError) as info:
        run(one_op("simaccel.tanh", region="captured"), "sim", inputs())
    assert info.value.kind == "capture" and info.value.region == "captured"
    assert "called while stream 0x0 is capturing a CUDA graph; a sanitized call synchronises" in str(info.value)


def test_a_first_call_that_must_allocate_during_capture_is_refused_always(monkeypatch):
    engine = get_engine("sim")
    monkeypatch.setattr(engine, "capturing", lambda device, stream: "is capturing a CUDA graph", raising=False)
    simaccel.get_runtime().clear()
    with pytest.raises(SanitizerError) as info:
        # softmax: not elementwise, so its input and output are stored intermediates (tanh, exp,
        # tanh would fuse into one kernel and need none: simaccel.fusion)
        run(after_tanh("simaccel.softmax"), "sim", inputs(), enabled=False)
    assert info.value.kind == "capture"
    assert ("region after_tanh: its first call on stream 0x0 must allocate its intermediates and constants, but the stream is "
            "capturing a CUDA graph: call the region once on this stream before capturing") in str(info.value)
    run(one_op("simaccel.tanh"), "sim", inputs(), enabled=False)  # no intermediates: nothing to allocate


def test_a_stream_other_than_the_calls_is_refused():
    class Stream:  # as numba's: the raw handle in `handle` (its __int__ gives an enum for the default stream)
        handle = 0x1234

        def __int__(self):
            raise AssertionError("the handle is what is compared")

    run_ = SimpleNamespace(program=one_op("simaccel.tanh", region="r"), engine=SimpleNamespace(device_type="cuda"),
                           call=SimpleNamespace(target=SimpleNamespace(stream=Stream()), stream=0x5678, device=("cuda", 0)))
    with pytest.raises(SanitizerError, match=r"region r: its kernels would launch on stream 0x1234, but the call's "
                                             r"stream \(TVM's current one\) is 0x5678") as info:
        sanitizer.check_stream(run_)
    assert info.value.kind == "stream"


# -- switches ------------------------------------------------------------------------------------------
def test_switches_and_the_native_bit(monkeypatch):
    assert not sanitizing() and not flags.value() & flags.SANITIZE
    with sanitize():
        assert sanitizing() and flags.value() & flags.SANITIZE
        with sanitize(False):
            assert not sanitizing() and flags.value() & flags.SANITIZE  # the word is process-wide
    assert not sanitizing() and not flags.value() & flags.SANITIZE
    set_sanitize(True)
    assert sanitizing() and flags.value() & flags.SANITIZE
    set_sanitize(False)
    monkeypatch.setenv("SIMACCEL_SANITIZE", "1")
    assert not sanitizing()  # set_sanitize wins over the environment
    set_sanitize(None)
    assert sanitizing() and flags.value() & flags.SANITIZE
    for text, value in (("yes", True), (" On ", True), ("0", False), ("off", False), ("", False)):
        monkeypatch.setenv("SIMACCEL_SANITIZE", text)
        switches.update_flag()
        assert sanitizing() is value and bool(flags.value() & flags.SANITIZE) is value
    with pytest.raises(EngineError, match="set_sanitize takes True, False or None, got 1"):
        set_sanitize(1)


def test_a_bad_environment_value_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("SIMACCEL_SANITIZE", "sometimes")
    with pytest.raises(EngineError, match=r"SIMACCEL_SANITIZE='sometimes' is not a boolean; use 1/true/yes/on or "
                                          r"0/false/no/off"):
        sanitizing()
    with pytest.raises(EngineError, match="SIMACCEL_SANITIZE='sometimes'"):  # on every Python region call
        simaccel.get_runtime().run(one_op("simaccel.tanh"), inputs(), np.zeros(5, np.float32))
    switches.update_flag()
    assert flags.value() & flags.SANITIZE  # native regions sanitize rather than guess


def test_the_environment_sanitizes_python_regions(planted, monkeypatch):
    monkeypatch.setenv("SIMACCEL_SANITIZE", "1")
    runtime = simaccel.get_runtime()
    with runtime.use_engine("sim"), pytest.raises(SanitizerError, match="left 1 of 5"):
        runtime.run(one_op("planted.skip_last"), inputs(), np.zeros(5, np.float32))


# -- Program.sanitize ------------------------------------------------------------------------------------
def test_program_sanitize_is_in_json_only_when_true():
    plain = one_op("simaccel.tanh")
    assert "sanitize" not in plain.to_json()
    baked = Program(plain.name, plain.tensors, plain.inputs, plain.outputs, plain.ops, sanitize=True)
    assert '"sanitize":true' in baked.to_json() and baked.fingerprint() != plain.fingerprint()
    assert Program.from_json(baked.to_json()).sanitize is True
    assert Program.from_json(plain.to_json()) == plain
    with pytest.raises(ProgramError, match=r"Program 'tanh': sanitize must be true or false, got 1 \(int\)"):
        Program.from_json(plain.to_json().replace('"version":1', '"sanitize":1,"version":1'))
    with pytest.raises(ProgramError, match="sanitize must be true or false, got 'yes'"):
        Program(plain.name, plain.tensors, plain.inputs, plain.outputs, plain.ops, sanitize="yes").validate()


def test_a_program_with_sanitize_is_sanitized_whatever_the_switch(planted):
    plain = one_op("planted.skip_last")
    baked = Program(plain.name, plain.tensors, plain.inputs, plain.outputs, plain.ops, sanitize=True)
    with pytest.raises(SanitizerError, match="left 1 of 5"):
        run(baked, "sim", inputs(), enabled=False)
    run(plain, "sim", inputs(), enabled=False)


# -- the cuda engine (skipped without a GPU) ---------------------------------------------------------------
def _gpu(array):
    import tvm

    return tvm.runtime.tensor(array, tvm.cuda(0))


@pytest.mark.gpu
@pytest.mark.parametrize("op, kind, part", [
    ("planted.skip_last", "unwritten", "left 1 of 5 elements of its output 'y' (5,) float32 unwritten"),
    ("planted.past_end", "out_of_bounds", "wrote outside its output 'y' (5,) float32: up to 4 bytes past its end"),
    ("planted.into_input", "input_written", "wrote into its input 'x' (5,) float32"),
    ("planted.other_stream", "stream", "KernelTarget of its own ('cuda', stream 0)"),
])
def test_planted_defects_on_the_cuda_engine(planted, op, kind, part):
    runtime = simaccel.get_runtime()
    with runtime.use_engine("cuda"), sanitize(), pytest.raises(SanitizerError) as info:
        runtime.run(one_op(op), _gpu(inputs()), _gpu(np.zeros(5, np.float32)))
    assert info.value.kind == kind and info.value.op == op, info.value
    assert f"region {op.split('.')[1]}: op 0 ({op})" in str(info.value) and part in str(info.value), str(info.value)


@pytest.mark.gpu
def test_a_clean_region_gives_the_same_results_sanitized_on_the_cuda_engine():
    runtime = simaccel.get_runtime()
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 4), (5, 12), (5,)))
    h = x.reshape(2, 12).astype(np.float64) @ w.T.astype(np.float64) + b
    results = []
    for on in (False, True):
        y, z = _gpu(np.zeros((2, 5), np.float32)), _gpu(np.zeros((2, 5), np.float32))
        with runtime.use_engine("cuda"), sanitize(on):
            runtime.run(clean_program("float32"), _gpu(x), _gpu(w), _gpu(b), y, z)
        np.testing.assert_allclose(y.numpy(), np.tanh(h) + h, rtol=1e-5, atol=1e-5)
        results.append((y.numpy(), z.numpy()))
    for a, b_ in zip(*results):
        np.testing.assert_array_equal(a, b_)


@pytest.mark.gpu
def test_a_sanitized_call_on_a_capturing_stream_is_refused_on_the_gpu():
    from numba import cuda
    from numba.cuda.cudadrv.driver import binding, driver

    runtime = simaccel.get_runtime()
    x, y = _gpu(inputs()), _gpu(np.zeros(5, np.float32))
    stream = cuda.stream()
    handle = int(stream.handle)
    driver.cuStreamBeginCapture(handle, binding.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
    try:
        with runtime.use_engine("cuda"), sanitize(), pytest.raises(SanitizerError) as info:
            runtime.run(one_op("simaccel.tanh", region="captured"), x, y, stream=handle)
    finally:
        graph = driver.cuStreamEndCapture(handle)
        driver.cuGraphDestroy(graph)
    assert info.value.kind == "capture" and f"stream {handle:#x} is capturing a CUDA graph" in str(info.value)
