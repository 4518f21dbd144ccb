"""Native regions under the sanitizer and the trace, against the stand-in CUDA driver.

The stand-in runs no kernel, so by default every op's output keeps the sanitizer's poison: a
sanitized call must stop at the FIRST op with "unwritten". Its hooks make launches "write"
their output (`launch_fill`), one launch write too little, too much or into an input
(`launch_defect`), synchronisation fail as after an illegal address (`fault_after`) and a
stream belong to another context (`foreign_stream`); it counts every entry point that only the
sanitizer and the trace use, so the default path is shown to call none of them.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import time
import warnings

import numpy as np
import pytest

import tvm  # noqa: F401  (registers simaccel's errors and runtime functions with tvm-ffi)
import tvm_ffi

from simaccel.debug import flags, native_events
from simaccel.errors import SanitizerError
from simaccel.launch_plan import View, plan_launches
from simaccel.native.source import NativeRegion
from simaccel.program import OpNode, Program, TensorSpec
from native_support import FakeDriver, cuda_tensor, stand_in_library
from gpu_cases import one_op_program
from native_cases import _data_word, arrays_for, chain_program, constants_program, dims3, views_program

STREAM = 0x5EED


def unchecked(dtype: str) -> Program:
    """relu in `dtype`, a Program the ISA would refuse (it computes in float32 and float16 only):
    the sanitizer's other poisons, on kernels the launch plan records all the same."""
    return Program(f"relu_{dtype}", (TensorSpec("x", (3, 5), dtype), TensorSpec("y", (3, 5), dtype)), (0,), (1,),
                   (OpNode("simaccel.relu", (0,), 1),))


def baked(program):
    """`program` as build(..., sanitize=True) makes it (Program.sanitize true)."""
    object.__setattr__(program, "sanitize", True)
    return program


PROGRAMS = {
    "r_chain": chain_program(),  # dense_bias -> softmax -> gelu: h, g intermediates, y the output
    "r_views": views_program(),
    "r_gelu": one_op_program("simaccel.gelu", [(4, 3)], "float32"),
    "r_relu16": one_op_program("simaccel.relu", [(3, 5)], "float16"),
    "r_concat": one_op_program("simaccel.concat", [(2, 3), (2, 1), (2, 4)], "float32", {"axis": 1}),
    "r_baked": baked(chain_program()),
    "r_relu_i32": unchecked("int32"),
    "r_relu64": unchecked("float64"),
    "r_empty": one_op_program("simaccel.gelu", [(0, 3)], "float32"),
    "r_consts": constants_program("float32"),  # y = x * 0.5 + (-1.25): two 0-d constants the region holds
}


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    regions = [NativeRegion(s, p) for s, p in PROGRAMS.items()]
    with stand_in_library(regions, tmp_path_factory.mktemp("native_debug")) as both:
        yield both


@pytest.fixture
def fake(native):
    library, driver = native
    driver.reset()
    yield library, driver
    driver.reset()
    flags.set_bit(flags.SANITIZE, False)
    flags.set_bit(flags.TRACE, False)


@contextlib.contextmanager
def bit(which):
    flags.set_bit(which, True)
    try:
        yield
    finally:
        flags.set_bit(which, False)


def call(library, symbol, arrays, stream=STREAM):
    with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", 0), stream):
        library[symbol](*[cuda_tensor(a) for a in arrays])


def data_word(program, launch, index: int) -> int:
    """The parameter word holding the data pointer of array argument `index` (numba's layout:
    meminfo, parent, nitems, itemsize, data, shape, strides; a number is one word)."""
    word, arrays = 0, 0
    for arg in launch.args:
        if isinstance(arg, View):
            if arrays == index:
                return word + 4
            arrays += 1
            word += 5 + 2 * len(arg.shape)
        else:
            word += 1
    raise AssertionError(f"launch has no array argument {index}")


# -- cost: the default path asks the driver nothing new -------------------------------------------
def test_with_the_switches_off_no_sanitizer_or_trace_entry_point_is_called(fake):
    library, driver = fake
    driver.launch_fill(0x3C)
    for symbol in ("r_chain", "r_views", "r_gelu", "r_relu16"):
        arrays = arrays_for(PROGRAMS[symbol])
        call(library, symbol, arrays)
        call(library, symbol, arrays)
    gelu = np.ones((4, 3), np.float32)
    library["r_gelu"](cuda_tensor(gelu), cuda_tensor(gelu))  # aliased: a copy, still nothing new
    assert flags.value() == 0
    assert driver.debug_counters() == dict.fromkeys(FakeDriver.DEBUG_COUNTERS, 0)
    assert len(driver.launches()) > 8


def test_a_sanitized_call_gives_the_plain_calls_results(fake, clean_runtime):
    """Same outputs, same kernels, grids and blocks; inputs at TVM's pointers, outputs in scratch
    (copied into place after the last op); the ledger counts what the plain path counts."""
    library, driver = fake
    driver.launch_fill(0x3C)  # every launch writes its output with 0x3c bytes (1.15 in float32)
    results = {}
    for mode in ("plain", "sanitize"):
        driver.reset()
        driver.launch_fill(0x3C)
        arrays = arrays_for(PROGRAMS["r_chain"])
        with bit(flags.SANITIZE) if mode == "sanitize" else contextlib.nullcontext():
            call(library, "r_chain", arrays)
        results[mode] = (arrays[-1].copy(), driver.launches(), driver.debug_counters())
    (plain, plain_launches, plain_counts), (checked, checked_launches, counts) = results["plain"], results["sanitize"]
    assert np.array_equal(plain.view(np.uint32), checked.view(np.uint32)) and (plain.view(np.uint32) == 0x3C3C3C3C).all()
    assert [(l["entry"], l["grid"], l["block"]) for l in plain_launches] == [(l["entry"], l["grid"], l["block"]) for l in checked_launches]
    dense = checked_launches[0]["words"]
    assert dense[4] % 256 == 0 and dense[4] != plain_launches[0]["words"][4]  # h: guarded scratch
    assert counts["stream_syncs"] >= 3 and counts["memsets"] >= 3 * 3 and counts["host_copies"] > 0
    assert counts["event_records"] == 0 and plain_counts == dict.fromkeys(FakeDriver.DEBUG_COUNTERS, 0)
    assert driver.counter("copies") == 1  # y, from its scratch
    assert clean_runtime.ledger.snapshot()["bytes"]["device_to_device"] == 0


@pytest.mark.parametrize("symbol", ["r_views", "r_concat", "r_relu16"])
def test_sanitized_views_multi_launch_ops_and_float16_pass_when_every_element_is_written(fake, symbol):
    library, driver = fake
    driver.launch_fill(0x3C)
    arrays = arrays_for(PROGRAMS[symbol])
    with bit(flags.SANITIZE):
        call(library, symbol, arrays)
    for out in arrays[len(PROGRAMS[symbol].inputs):]:
        assert (out.view(np.uint8) == 0x3C).all()
    assert len(driver.launches()) == len(plan_launches(PROGRAMS[symbol]))


def test_a_sanitized_region_of_empty_tensors_checks_nothing_and_launches_nothing(fake):
    library, driver = fake
    arrays = arrays_for(PROGRAMS["r_empty"])
    with bit(flags.SANITIZE):
        call(library, "r_empty", arrays)
        library["r_empty"](*[cuda_tensor(a, byte_offset=1) for a in arrays])  # an empty tensor's pointer is never read
    assert driver.launches() == [] and driver.counter("memsets") == driver.counter("host_copies") == 0


def test_a_sanitized_region_fills_its_constants_and_an_op_writing_one_is_named(fake):
    library, driver = fake
    program = PROGRAMS["r_consts"]
    driver.launch_fill(0x3C)
    with bit(flags.SANITIZE):
        call(library, "r_consts", arrays_for(program), stream=0xC0)
    multiply = plan_launches(program, fuse=False)[0]  # a sanitized call runs every op on its own
    pointer = driver.launches()[0]["words"][_data_word(program, multiply, 1)]
    assert np.frombuffer(ctypes.string_at(pointer, 4), np.float32)[0] == 0.5  # 'half', written before the first launch
    driver.reset()
    driver.launch_fill(0x3C)
    driver.launch_defect(0, _data_word(program, multiply, 1), 0)  # multiply overwrites its constant 'half'
    with bit(flags.SANITIZE), pytest.raises(SanitizerError, match=r"op 0 \(simaccel.multiply\) changed its input 'half' \(\) "
                                                                  r"float32 \(a constant of the region\): 4 of 4 bytes differ"):
        call(library, "r_consts", arrays_for(program), stream=0xC1)


def test_a_sanitized_output_that_is_an_input_is_copied_and_counted_as_on_the_plain_path(fake, clean_runtime):
    library, driver = fake
    driver.launch_fill(0x3C)
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3)
    with bit(flags.SANITIZE):
        library["r_gelu"](cuda_tensor(x), cuda_tensor(x))
    assert (x.view(np.uint8) == 0x3C).all()
    assert clean_runtime.ledger.snapshot()["bytes"]["device_to_device"] == x.nbytes


# -- each finding, with its message -----------------------------------------------------------
def test_on_the_stand_in_driver_a_sanitized_call_stops_at_the_first_op_unwritten(fake):
    """Its launches write nothing: the first op's output still holds the poison."""
    library, driver = fake
    arrays = arrays_for(PROGRAMS["r_chain"])
    y = arrays[-1].copy()
    with bit(flags.SANITIZE), pytest.raises(SanitizerError) as caught:
        call(library, "r_chain", arrays)
    e = caught.value
    assert str(e) == ("region r_chain on cuda:0: op 0 (simaccel.dense_bias) left 32 of 32 elements of its output 'h' (4, 8) "
                      "float32 unwritten (first at element 0; they still hold the sanitizer's poison) "
                      "[sanitizer: kind=unwritten region=r_chain op=simaccel.dense_bias tensor=h]")
    assert (e.kind, e.region, e.op, e.tensor) == ("unwritten", "r_chain", "simaccel.dense_bias", "h")
    assert len(driver.launches()) == 1  # stopped after the first op
    assert np.array_equal(arrays[-1], y)  # TVM's output untouched


def test_a_library_built_to_be_sanitized_checks_every_call_with_the_switch_off(fake):
    library, driver = fake
    assert flags.value() == 0
    with pytest.raises(SanitizerError, match=r"^region r_baked on cuda:0: op 0 \(simaccel.dense_bias\) left 32 of 32"):
        call(library, "r_baked", arrays_for(PROGRAMS["r_baked"]))
    driver.reset()
    driver.launch_fill(0x3C)
    call(library, "r_baked", arrays_for(PROGRAMS["r_baked"]))
    assert driver.counter("stream_syncs") >= 3


def test_an_op_that_skips_its_last_element_is_named_with_the_count(fake):
    library, driver = fake
    driver.launch_fill(0x3C)
    driver.launch_defect(1, 4, -4)  # softmax writes all of g but its last float32
    with bit(flags.SANITIZE), pytest.raises(SanitizerError) as caught:
        call(library, "r_chain", arrays_for(PROGRAMS["r_chain"]))
    assert ("op 1 (simaccel.softmax) left 1 of 32 elements of its output 'g' (4, 8) float32 unwritten (first at element 31;"
            in str(caught.value))
    assert (caught.value.kind, caught.value.tensor) == ("unwritten", "g")


def test_float16_poison_counts_two_byte_elements(fake):
    library, driver = fake
    driver.launch_fill(0x3C)
    driver.launch_defect(0, 4, -6)  # the last three float16 elements
    with bit(flags.SANITIZE), pytest.raises(SanitizerError, match=r"op 0 \(simaccel.relu\) left 3 of 15 elements of its output "
                                                                  r"'out' \(3, 5\) float16 unwritten \(first at element 12;"):
        call(library, "r_relu16", arrays_for(PROGRAMS["r_relu16"]))


def test_a_write_past_the_end_names_the_op_and_the_bytes(fake):
    library, driver = fake
    driver.launch_fill(0x3C)
    driver.launch_defect(2, 4, 4)  # softmax writes one float32 past y
    arrays = arrays_for(PROGRAMS["r_chain"])
    y = arrays[-1].copy()
    with bit(flags.SANITIZE), pytest.raises(SanitizerError) as caught:
        call(library, "r_chain", arrays)
    assert str(caught.value) == ("region r_chain on cuda:0: op 2 (simaccel.gelu) wrote outside 'y' (4, 8) float32, 128 "
                                 "bytes: 4 canary bytes changed after its end (bytes +0 to +3 past it) "
                                 "[sanitizer: kind=out_of_bounds region=r_chain op=simaccel.gelu tensor=y]")
    assert (caught.value.kind, caught.value.op, caught.value.tensor) == ("out_of_bounds", "simaccel.gelu", "y")
    assert np.array_equal(arrays[-1], y)  # nothing copied into TVM's output


def test_a_write_far_past_the_end_is_caught_in_the_guard_band(fake):
    library, driver = fake
    driver.launch_fill(0x3C)
    driver.launch_defect(0, 4, 200)
    with bit(flags.SANITIZE), pytest.raises(SanitizerError, match=r"op 0 \(simaccel.dense_bias\) wrote outside 'h' .*: 200 "
                                                                  r"canary bytes changed after its end \(bytes \+0 to \+199"):
        call(library, "r_chain", arrays_for(PROGRAMS["r_chain"]))


def test_an_op_writing_into_a_region_input_is_named(fake):
    library, driver = fake
    program = PROGRAMS["r_chain"]
    driver.launch_fill(0)
    dense = plan_launches(program)[0]
    driver.launch_defect(0, data_word(program, dense, 1), 0)  # dense_bias writes 0xff bytes over x, its second array
    arrays = arrays_for(program)
    with bit(flags.SANITIZE), pytest.raises(SanitizerError) as caught:
        call(library, "r_chain", arrays)
    assert re.fullmatch(r"region r_chain on cuda:0: op 0 \(simaccel.dense_bias\) changed its input 'x' \(4, 6\) float32 "
                        r"\(an input of the region\): \d+ of 96 bytes differ \(first at byte \d+\) "
                        r"\[sanitizer: kind=input_written region=r_chain op=simaccel.dense_bias tensor=x\]", str(caught.value))
    assert (caught.value.kind, caught.value.tensor) == ("input_written", "x")


def test_an_op_writing_into_an_intermediate_it_reads_is_named(fake):
    library, driver = fake
    program = PROGRAMS["r_chain"]
    driver.launch_fill(0x3C)
    gelu = plan_launches(program)[1]
    driver.launch_defect(1, data_word(program, gelu, 1), -4)  # softmax writes h, its input, but its last float
    with bit(flags.SANITIZE), pytest.raises(SanitizerError, match=r"op 1 \(simaccel.softmax\) changed its input 'h' \(4, 8\) "
                                                                  r"float32: 124 of 128 bytes differ \(first at byte 0\) \["):
        call(library, "r_chain", arrays_for(program))


def test_an_asynchronous_fault_names_the_op_and_its_launch(fake):
    library, driver = fake
    program = PROGRAMS["r_chain"]
    driver.launch_fill(0x3C)
    driver.fault_after(2)  # the synchronisation after the second launch reports an illegal address
    with bit(flags.SANITIZE), pytest.raises(SanitizerError) as caught:
        call(library, "r_chain", arrays_for(program))
    gelu = plan_launches(program)[1]
    text = str(caught.value)
    assert text.startswith(f"region r_chain on cuda:0: op 1 (simaccel.softmax) faulted: launch 1 of the region (kernel "
                           f"{gelu.kernel.__name__}, grid {dims3(gelu.grid)}, block {dims3(gelu.block)}, shared "
                           f"{gelu.shared_bytes} bytes, arguments 'g' (4, 8) float32 at 0x")
    assert ", 'h' (4, 8) float32 at 0x" in text and "CUDA_ERROR_ILLEGAL_ADDRESS (700)" in text
    assert (caught.value.kind, caught.value.op, caught.value.tensor) == ("fault", "simaccel.softmax", None)


def test_a_stream_of_another_context_is_refused(fake):
    library, driver = fake
    driver.foreign_stream(STREAM)
    with bit(flags.SANITIZE), pytest.raises(SanitizerError, match=r"^region r_chain on cuda:0: TVM's current stream 0x5eed "
                                                                  r"belongs to another CUDA context than cuda:0's") as caught:
        call(library, "r_chain", arrays_for(PROGRAMS["r_chain"]))
    assert caught.value.kind == "stream" and caught.value.region == "r_chain"
    assert driver.launches() == []


def test_sanitizing_under_graph_capture_is_refused(fake):
    library, driver = fake
    driver.capturing(True)
    with bit(flags.SANITIZE), pytest.raises(SanitizerError) as caught:
        call(library, "r_chain", arrays_for(PROGRAMS["r_chain"]))
    assert str(caught.value).startswith("region r_chain on cuda:0: called while its stream 0x5eed is captured into a CUDA graph")
    assert caught.value.kind == "capture" and caught.value.op is None
    assert driver.launches() == [] and driver.counter("allocations") == driver.counter("async_allocations") == 0


def test_without_sanitizing_a_captured_first_call_still_allocates_on_the_stream(fake):
    """Stream-ordered allocation is legal under capture (graph memory nodes): not refused."""
    library, driver = fake
    driver.capturing(True)
    call(library, "r_chain", arrays_for(PROGRAMS["r_chain"]), stream=0xCA97)
    assert driver.counter("async_allocations") == 2 and len(driver.launches()) == 3


def test_the_poison_native_regions_write_is_the_python_sanitizers(fake):
    """float32 and float64 elements an op left hold flags.FLOAT_POISON, read back from the scratch."""
    library, driver = fake
    for symbol, dtype in (("r_gelu", np.float32), ("r_relu64", np.float64)):
        driver.reset()
        with bit(flags.SANITIZE), pytest.raises(SanitizerError, match="left 12 of 12 elements|left 15 of 15 elements"):
            call(library, symbol, arrays_for(PROGRAMS[symbol]))
        [launch] = driver.launches()
        scratch = np.frombuffer(ctypes.string_at(launch["words"][4], PROGRAMS[symbol].tensors[-1].nbytes), f"<u{np.dtype(dtype).itemsize}")
        assert (scratch == flags.FLOAT_POISON[np.dtype(dtype).name]).all()
    from simaccel.debug import sanitizer  # the Python engines' checks poison the same way

    for name, value in flags.FLOAT_POISON.items():
        assert sanitizer.poison(name) == value
    assert sanitizer.poison("int32") == int.from_bytes(bytes([flags.BYTE_POISON[0]]) * 4, "little")
    assert sanitizer.poison("int32", second=True) == int.from_bytes(bytes([flags.BYTE_POISON[1]]) * 4, "little")


def test_an_integer_output_that_holds_the_poison_is_run_again_over_other_bytes(fake):
    """Any int32 is a value: where elements hold the first poison (0xa5 bytes), the op runs once
    more over 0x5a bytes and only elements that kept both are unwritten."""
    library, driver = fake
    driver.launch_fill(flags.BYTE_POISON[0])  # the kernel writes exactly the poison's bytes
    arrays = arrays_for(PROGRAMS["r_relu_i32"])
    with bit(flags.SANITIZE):
        call(library, "r_relu_i32", arrays)
    assert len(driver.launches()) == 2 and (arrays[-1].view(np.uint8) == 0xA5).all()
    driver.reset()
    driver.launch_fill(flags.BYTE_POISON[0])
    driver.launch_defect(1, 4, -8, 0x11)  # the second run writes 0x11 bytes, and leaves the last two elements
    with bit(flags.SANITIZE), pytest.raises(SanitizerError, match=r"left 2 of 15 elements of its output 'y' \(3, 5\) int32 "
                                                                  r"unwritten \(first at element 13;"):
        call(library, "r_relu_i32", arrays_for(PROGRAMS["r_relu_i32"]))


def test_a_float64_output_missing_its_last_element_is_named(fake):
    library, driver = fake
    driver.launch_fill(0)
    driver.launch_defect(0, 4, -8)
    with bit(flags.SANITIZE), pytest.raises(SanitizerError, match=r"left 1 of 15 elements of its output 'y' \(3, 5\) float64 "
                                                                  r"unwritten \(first at element 14;"):
        call(library, "r_relu64", arrays_for(PROGRAMS["r_relu64"]))


def test_sanitizer_error_attributes_from_a_native_message():
    e = SanitizerError("region r1 on cuda:2: op 3 (myaccel.rms_norm) wrote outside 'y' (2,) float32, 8 bytes: ... "
                       "[sanitizer: kind=out_of_bounds region=r1 op=myaccel.rms_norm tensor=y]")
    assert (e.kind, e.region, e.op, e.tensor) == ("out_of_bounds", "r1", "myaccel.rms_norm", "y")
    assert e.kind in SanitizerError.KINDS


# -- the trace ---------------------------------------------------------------------------------
@pytest.fixture
def records():
    got = []
    native_events.subscribe(got.append)
    yield got
    native_events.unsubscribe(got.append)


def test_a_traced_call_hands_its_launches_to_subscribers(fake, records):
    library, driver = fake
    program = PROGRAMS["r_chain"]
    before = time.time_ns()
    with bit(flags.TRACE):
        call(library, "r_chain", arrays_for(program))
        call(library, "r_chain", arrays_for(program))
    after = time.time_ns()
    assert len(records) == 2
    record = records[0]
    assert record["region"] == "r_chain" and record["key"] == f"r_chain:{program.fingerprint()}"
    assert record["device"] == 0 and record["stream"] == STREAM and before <= record["host_start_ns"] <= after
    plan = plan_launches(program)
    assert [(l["launch"], l["op"], l["op_name"], l["kernel"]) for l in record["launches"]] == [
        (i, p.op, program.ops[p.op].op, p.kernel.__name__) for i, p in enumerate(plan)]
    for got, launch in zip(record["launches"], plan):
        assert tuple(got["grid"]) == dims3(launch.grid) and tuple(got["block"]) == dims3(launch.block)
        assert got["shared"] == launch.shared_bytes
    # The stand-in's clock: each event record advances it 1 us, each launch 10 us.
    assert [(l["start_us"], l["end_us"]) for l in record["launches"]] == [(0.0, 11.0), (12.0, 23.0), (24.0, 35.0)]
    assert driver.counter("events_created") == 6  # two per launch, kept for the next call
    assert driver.counter("event_records") == 12 and driver.counter("event_syncs") == 2
    assert records[1]["host_start_ns"] >= record["host_start_ns"]


def test_trace_off_calls_no_event_api_and_tells_nobody(fake, records):
    library, driver = fake
    call(library, "r_chain", arrays_for(PROGRAMS["r_chain"]))
    assert records == [] and driver.debug_counters() == dict.fromkeys(FakeDriver.DEBUG_COUNTERS, 0)


def test_a_captured_call_is_not_traced_but_runs(fake, records):
    library, driver = fake
    driver.capturing(True)
    with bit(flags.TRACE):
        call(library, "r_chain", arrays_for(PROGRAMS["r_chain"]), stream=0xCA98)
    assert records == [] and len(driver.launches()) == 3 and driver.counter("event_records") == 0


def test_a_traced_and_sanitized_call_is_both(fake, records):
    library, driver = fake
    driver.launch_fill(0x3C)
    with bit(flags.TRACE), bit(flags.SANITIZE):
        call(library, "r_chain", arrays_for(PROGRAMS["r_chain"]))
    [record] = records
    assert [l["op"] for l in record["launches"]] == [0, 1, 2] and driver.counter("stream_syncs") >= 3


def test_the_sanitizers_second_pass_is_not_traced(fake, records):
    library, driver = fake
    driver.launch_fill(flags.BYTE_POISON[0])  # int32 elements equal to the poison: the op runs twice
    with bit(flags.TRACE), bit(flags.SANITIZE):
        call(library, "r_relu_i32", arrays_for(PROGRAMS["r_relu_i32"]))
    [record] = records
    assert len(driver.launches()) == 2 and [l["launch"] for l in record["launches"]] == [0]
    assert driver.counter("event_records") == 2


def test_native_events_subscribers():
    got = []
    native_events.subscribe(got.append)
    native_events.subscribe(got.append)  # once only

    def broken(record):
        raise KeyError("oops")

    native_events.subscribe(broken)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            native_events.record('{"region": "r:1", "launches": []}')
        assert got == [{"region": "r:1", "launches": []}]
        assert "native trace subscriber" in str(caught[0].message) and "KeyError" in str(caught[0].message)
    finally:
        native_events.unsubscribe(got.append)
        native_events.unsubscribe(broken)
    native_events.record('{"region": "r:2", "launches": []}')
    assert len(got) == 1 and native_events.subscribers() == ()
