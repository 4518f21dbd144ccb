"""Native region libraries against a stand-in CUDA driver: launches, parameters, memory, errors, threads, GPU images."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tvm  # noqa: F401  (registers simaccel's errors and runtime functions with tvm-ffi)
import tvm_ffi

from simaccel import DeviceError, DtypeError, EngineError, LayoutError, ProgramError, ShapeError
from simaccel.aot import abi_params, compile_kernel, signature
from simaccel.launch_plan import fused_values, View, plan_launches
from simaccel.native.source import NativeRegion
from simaccel.program import OpNode, Program, TensorSpec
from native_cases import arrays_for, chain_program, dims3, views_program
from native_support import cuda_tensor, region_library, stand_in_library
from simaccel.ops.rules import FLOAT_DTYPES
from gpu_cases import one_op_program
from test_launch_plan import CASES

# The region libraries here are generated, AOT-compiled and linked exactly as the codegen does
# for a CUDA target; the stand-in driver (tests/fake_cuda_driver.c) records every launch. So
# these tests check what a native region hands the driver: which kernel, grid, block, shared
# memory, stream, and every 8-byte parameter (the data pointers TVM passed, the shapes and
# byte strides numba's kernel ABI expects), and every error it raises. Whether the kernels
# then compute the right thing is the GPU tests' job (tests/test_gpu_*.py).
SM90 = (9, 0)
STREAM = 0x5EED


def region_symbol(name: str, dtype: str) -> str:
    return f"r_{name.replace('simaccel.', '').replace('.', '_')}_{dtype}"


def fused_program() -> Program:
    """dense_bias -> gelu -> multiply by a per-column scale: one fused group (simaccel.fusion)."""
    t = (TensorSpec("x", (4, 6), "float32"), TensorSpec("w", (8, 6), "float32"), TensorSpec("b", (8,), "float32"),
         TensorSpec("s", (8,), "float32"), TensorSpec("h", (4, 8), "float32"), TensorSpec("g", (4, 8), "float32"),
         TensorSpec("y", (4, 8), "float32"))
    ops = (OpNode("simaccel.dense_bias", (0, 1, 2), 4), OpNode("simaccel.gelu", (4,), 5),
           OpNode("simaccel.multiply", (5, 3), 6))
    return Program("fused", t, (0, 1, 2, 3), (6,), ops).validate()


def masks_program() -> Program:
    """A causal mask from indices: int64 subtract, a bool comparison, where and logical_not:
    int64 and bool tensors as inputs, intermediates and outputs."""
    t = (TensorSpec("cols", (1, 8), "int64"), TensorSpec("rows", (8, 1), "int64"), TensorSpec("zero", (), "int64"),
         TensorSpec("x", (8, 8), "float32"), TensorSpec("fill", (8, 8), "float32"), TensorSpec("d", (8, 8), "int64"),
         TensorSpec("keep", (8, 8), "bool"), TensorSpec("y", (8, 8), "float32"), TensorSpec("drop", (8, 8), "bool"))
    ops = (OpNode("simaccel.integer_subtract", (0, 1), 5), OpNode("simaccel.less_equal", (5, 2), 6),
           OpNode("simaccel.where", (6, 3, 4), 7), OpNode("simaccel.logical_not", (6,), 8))
    return Program("masks", t, (0, 1, 2, 3, 4), (7, 8), ops).validate()


def wide_program(inputs: int = 70) -> Program:
    """x0 + x1 + ... + x69, one add at a time: more boundary tensors (71) and tensors (139) than
    the runtime keeps on its stack per call (64 and 128: region.h's CallArray), so its heap path runs."""
    t = tuple(TensorSpec(f"x{i}", (4, 8), "float32") for i in range(inputs)) + \
        tuple(TensorSpec(f"s{i}", (4, 8), "float32") for i in range(1, inputs))
    ops = tuple(OpNode("simaccel.add", (inputs + i - 2 if i > 1 else 0, i), inputs + i - 1) for i in range(1, inputs))
    return Program("wide", t, tuple(range(inputs)), (len(t) - 1,), ops).validate()


PROGRAMS = {region_symbol(n, d): one_op_program(n, s, d, a) for n, s, a in CASES for d in FLOAT_DTYPES}
PROGRAMS["r_wide"] = wide_program()
PROGRAMS["r_masks"] = masks_program()
PROGRAMS["r_chain"] = chain_program()
PROGRAMS["r_views"] = views_program()


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    """(library, driver): every op in both dtypes and a 3-op chain, in one library."""
    with stand_in_library([NativeRegion(s, p) for s, p in PROGRAMS.items()], tmp_path_factory.mktemp("native")) as both:
        yield both


@pytest.fixture
def fake(native, clean_runtime):
    library, driver = native
    driver.reset()
    yield library, driver
    driver.reset()


def expected_words(program: Program, launch, addresses: dict[int, int]) -> list[int] | None:
    """numba's kernel ABI, written out: per array meminfo, parent, nitems, itemsize, data,
    shape, byte strides (C order); an int as int64; a float as the bits of a float64.
    None for a word the test cannot know (an intermediate's address)."""
    words = []
    for arg in launch.args:
        if isinstance(arg, View):
            item = np.dtype(program.tensors[arg.tensor].dtype).itemsize
            strides = [item * int(np.prod(arg.shape[k + 1:], dtype=np.int64)) for k in range(len(arg.shape))]
            owner = program.views.get(arg.tensor, arg.tensor)  # a view is its owner's memory
            words += [0, 0, int(np.prod(arg.shape, dtype=np.int64)), item, addresses.get(owner), *arg.shape, *strides]
        elif isinstance(arg, (bool, int)):
            words.append(int(arg))
        else:
            words.append(int(np.array(float(arg), np.float64).view(np.int64)))
    return words


@pytest.mark.parametrize("symbol", sorted(PROGRAMS))
def test_a_region_launches_its_plan_on_tvms_stream_with_tvms_pointers(fake, symbol):
    library, driver = fake
    program = PROGRAMS[symbol]
    arrays = arrays_for(program)
    ids = program.inputs + program.outputs
    with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", 0), STREAM):
        library[symbol](*[cuda_tensor(a) for a in arrays])
    plan = plan_launches(program)
    launches = driver.launches()
    assert len(launches) == len(plan) >= 1
    addresses = {i: a.ctypes.data for i, a in zip(ids, arrays)}
    intermediates = set()
    for got, launch in zip(launches, plan):
        kernel = compile_kernel(launch.kernel, signature(launch, program), SM90)
        assert got["entry"] == kernel.entry and got["stream"] == STREAM
        assert got["grid"] == dims3(launch.grid) and got["block"] == dims3(launch.block)
        # The fake GPU (sm_100) runs the PTX: a launch's own shared bytes and what its code
        # stages in dynamic shared memory (the float16 matmuls' stage buffers).
        assert got["shared"] == launch.shared_bytes + kernel.ptx_shared_bytes
        assert len(got["words"]) == abi_params(launch)
        for word, want in zip(got["words"], expected_words(program, launch, addresses), strict=True):
            if want is None:  # an intermediate: the region's own, aligned memory
                assert word % 256 == 0 and word not in addresses.values()
                intermediates.add(word)
            else:
                assert word == want
    # a fused group's values in between are never stored (simaccel.fusion): no memory either
    assert len(intermediates) == len(program.intermediates) - len(program.views) - len(fused_values(program))


def test_views_are_their_owners_memory_and_only_a_viewed_output_is_copied(fake):
    library, driver = fake
    program = PROGRAMS["r_views"]
    assert program.views == {1: 0, 3: 2}  # x_rows is x, h_wide is h; h_flat is an output
    x, y, h_flat = arrays_for(program)
    before = driver.counter("allocations")
    with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", 0), 0x7E1):  # a stream of its own: fresh memory
        library["r_views"](*[cuda_tensor(a) for a in (x, y, h_flat)])
    assert driver.counter("allocations") - before == 1  # h only: no memory for either view
    relu, softmax, copy = driver.launches()
    # Each kernel's first array is its output (data pointer in word 4), the next its input
    # (word 11: a 1-D array is 7 words, a 2-D one 9).
    h = relu["words"][4]
    assert relu["words"][11] == x.ctypes.data  # relu reads x itself through its view
    assert softmax["words"][4] == y.ctypes.data and softmax["words"][11] == h  # softmax reads h's rows flat
    assert copy["words"][4] == h_flat.ctypes.data and copy["words"][11] == h  # the viewed output is a copy of h


def test_intermediates_are_allocated_once_per_stream(fake):
    library, driver = fake
    program = PROGRAMS["r_chain"]
    tensors = [cuda_tensor(a) for a in arrays_for(program)]
    device = tvm_ffi.device("cuda", 0)
    before = driver.counter("allocations")
    for stream in (11, 11, 11, 12, 12):
        with tvm_ffi.use_raw_stream(device, stream):
            library["r_chain"](*tensors)
    stored = len(program.intermediates) - len(fused_values(program))  # a fused group's values need none
    assert stored >= 1 and driver.counter("allocations") - before == 2 * stored
    streams = [launch["stream"] for launch in driver.launches()]
    per_call = len(plan_launches(program))
    assert streams == [11] * (3 * per_call) + [12] * (2 * per_call)


def test_under_graph_capture_intermediates_come_from_the_stream(fake):
    """cuMemAlloc is illegal while a stream is captured: a region first called there allocates
    and frees on the stream (graph memory nodes); the stand-in fails a plain cuMemAlloc."""
    library, driver = fake
    program = PROGRAMS["r_chain"]
    tensors = [cuda_tensor(a) for a in arrays_for(program)]
    driver.capturing(True)
    with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", 0), 77):
        library["r_chain"](*tensors)
        library["r_chain"](*tensors)
    assert driver.counter("allocations") == 0
    stored = len(program.intermediates) - len(fused_values(program))
    assert driver.counter("async_allocations") == driver.counter("async_frees") == 2 * stored
    assert len(driver.launches()) == 2 * len(plan_launches(program))


def test_an_output_that_is_an_input_is_computed_aside_and_copied(fake, clean_runtime):
    library, driver = fake
    program = PROGRAMS[region_symbol("simaccel.gelu", "float32")]
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3)
    same = cuda_tensor(x)
    library[region_symbol("simaccel.gelu", "float32")](same, same)
    [launch] = driver.launches()
    out_word = launch["words"][4]  # the kernel's first argument is the output
    assert out_word != x.ctypes.data and driver.counter("copies") == 1
    assert clean_runtime.ledger.snapshot()["bytes"]["device_to_device"] == x.nbytes
    assert program.outputs == (1,)


def test_two_outputs_in_one_buffer_are_refused(tmp_path, native):
    program = Program("two", (TensorSpec("x", (4,), "float32"), TensorSpec("a", (4,), "float32"),
                              TensorSpec("b", (4,), "float32")), (0,), (1, 2),
                      (OpNode("simaccel.relu", (0,), 1), OpNode("simaccel.gelu", (0,), 2))).validate()
    library, _ = region_library([NativeRegion("two", program)], tmp_path)
    x, out = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(LayoutError, match="outputs 'a' and 'b' share memory"):
        library["two"](cuda_tensor(x), cuda_tensor(out), cuda_tensor(out))


SYMBOL = region_symbol("simaccel.layer_norm", "float32")


def layer_norm_tensors(**changes):
    program = PROGRAMS[SYMBOL]
    arrays = arrays_for(program)
    tensors = [cuda_tensor(a) for a in arrays]
    for index, tensor in changes.items():
        tensors[int(index[1:])] = tensor(arrays)
    return tensors


@pytest.mark.parametrize("error, match, tensors", [
    (ProgramError, "takes 3 inputs and 1 outputs, got 3 tensors", lambda: layer_norm_tensors()[:3]),
    (ShapeError, r"input 't0' expects shape \(2, 9\), got \(2, 8\)",
     lambda: layer_norm_tensors(t0=lambda a: cuda_tensor(np.zeros((2, 8), np.float32)))),
    (DtypeError, "input 't1' expects dtype float32, got float16",
     lambda: layer_norm_tensors(t1=lambda a: cuda_tensor(np.zeros(9, np.float16)))),
    (DeviceError, "output 'out' is on cpu:0; this region was compiled for CUDA GPUs",
     lambda: layer_norm_tensors(t3=lambda a: tvm_ffi.from_dlpack(np.zeros((2, 9), np.float32)))),
    (DeviceError, r"tensors are on mixed devices \(cuda:0 and cuda:1 for 't2'\)",
     lambda: layer_norm_tensors(t2=lambda a: cuda_tensor(a[2], device_id=1))),
    (LayoutError, r"input 't0' \(2, 9\) must be compact row-major, got element strides \(1, 2\)",
     lambda: layer_norm_tensors(t0=lambda a: cuda_tensor(np.zeros(18, np.float32), shape=(2, 9), strides=(1, 2)))),
    (LayoutError, "input 't0' data pointer 0x[0-9a-f]+ \\(byte_offset included\\) is not aligned to 4 bytes",
     lambda: layer_norm_tensors(t0=lambda a: cuda_tensor(np.zeros(19, np.float32), shape=(2, 9), byte_offset=2))),
])
def test_bad_tensors_get_simaccels_errors_naming_region_and_tensor(fake, error, match, tensors):
    library, driver = fake
    with pytest.raises(error, match=f"region {SYMBOL}: {match}|region {SYMBOL} {match}"):
        library[SYMBOL](*tensors())
    assert driver.launches() == []


def test_a_byte_offset_is_part_of_the_data_pointer(fake):
    library, driver = fake
    program = PROGRAMS[SYMBOL]
    backing = np.zeros(2 * 9 + 4, np.float32)
    tensors = layer_norm_tensors(t0=lambda a: cuda_tensor(backing, shape=(2, 9), byte_offset=16))
    library[SYMBOL](*tensors)
    [launch] = driver.launches()
    assert backing.ctypes.data + 16 in launch["words"]
    assert len(plan_launches(program)) == 1


def test_the_ledger_counts_native_calls(fake, clean_runtime):
    library, _ = fake
    program = PROGRAMS["r_chain"]
    tensors = [cuda_tensor(a) for a in arrays_for(program)]
    for _ in range(3):
        library["r_chain"](*tensors)
    ledger = clean_runtime.ledger.snapshot()
    assert ledger["offloaded_calls"] == 3 and ledger["regions"]["chain"]["calls"] == 3
    assert ledger["ops"] == {"simaccel.dense_bias": 3, "simaccel.gelu": 3, "simaccel.softmax": 3}
    assert sum(ledger["kernel_launches"].values()) == 9
    assert ledger["bytes"] == {"host_to_device": 0, "device_to_host": 0, "device_to_device": 0}
    clean_runtime.ledger.reset()
    assert clean_runtime.ledger.snapshot()["offloaded_calls"] == 0


def test_choosing_a_python_engine_routes_native_regions_through_python(fake, clean_runtime):
    """The switch: with a Python engine chosen the region forwards to simaccel.runtime.invoke
    (here engine "sim", which refuses the CUDA tensors: proof the call went there)."""
    library, driver = fake
    tensors = [cuda_tensor(a) for a in arrays_for(PROGRAMS["r_chain"])]
    with clean_runtime.use_engine("sim"), pytest.raises(DeviceError, match="engine 'sim' runs on cpu memory"):
        library["r_chain"](*tensors)
    assert driver.launches() == []
    library["r_chain"](*tensors)  # the block is closed: native again
    assert len(driver.launches()) == 3


def test_threads_on_their_own_streams(fake):
    library, driver = fake
    program = PROGRAMS["r_chain"]
    tensors = [cuda_tensor(a) for a in arrays_for(program)]
    errors = []

    def work(stream):
        try:
            with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", 0), stream):
                for _ in range(20):
                    library["r_chain"](*tensors)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(100 + i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    launches = driver.launches()
    assert len(launches) == 6 * 20 * 3
    for stream in range(100, 106):
        assert [l["entry"] for l in launches if l["stream"] == stream] == [l["entry"] for l in launches[:3]] * 20


def test_threads_on_one_stream_do_not_interleave_their_launches(fake):
    """Calls on one stream share the region's intermediates: each call's launches must reach
    the stream together, or one call's kernel would read another call's intermediate."""
    library, driver = fake
    tensors = [cuda_tensor(a) for a in arrays_for(PROGRAMS["r_chain"])]
    start = threading.Barrier(6)
    errors = []

    def work():
        try:
            start.wait()
            for _ in range(40):
                library["r_chain"](*tensors)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    entries = [launch["entry"] for launch in driver.launches()]
    assert len(entries) == 6 * 40 * 3 and entries == entries[:3] * (6 * 40)


def test_a_ptx_the_driver_cannot_jit_is_an_error_naming_the_minimum_driver(fake):
    """The stand-in GPU is sm_100: no cubin of this sm_90 library fits, and its PTX is refused."""
    library, driver = fake
    driver.reject_ptx(True)
    tensors = [cuda_tensor(a, device_id=3) for a in arrays_for(PROGRAMS["r_chain"])]
    with pytest.raises(EngineError, match=r"region r_chain on cuda:3: kernel .* cannot run on this sm_100 GPU: its PTX for "
                                          r"sm_90: CUDA_ERROR_UNSUPPORTED_PTX_VERSION .* \(the driver must be 580 \(CUDA 13.0\) "
                                          r"or newer\); the library holds cubins for sm_90 and PTX for sm_90"):
        library["r_chain"](*tensors)


# -- Any NVIDIA GPU: a fat library picks, per GPU, the cubin it runs, else JITs the PTX -----------
FAT = ((7, 5), (8, 0), (9, 0))


@pytest.fixture(scope="module")
def fat(native, tmp_path_factory):
    """A library of the 3-op chain with cubins for sm_75, sm_80 and sm_90 and PTX for sm_75."""
    library, _ = region_library([NativeRegion("fat_chain", PROGRAMS["r_chain"])], tmp_path_factory.mktemp("fat"), FAT)
    return library, native[1]


# (device's compute capability, the cubin it takes or None for the PTX): the same major and
# the highest minor not above the device's; none of another major (sm_100, sm_120).
PICKS = [((7, 5), 75), ((8, 0), 80), ((8, 6), 80), ((8, 9), 80), ((9, 0), 90), ((10, 0), None), ((12, 0), None)]


@pytest.mark.parametrize("device, arch, cubin", [(d, a, c) for d, (a, c) in enumerate(PICKS)],
                         ids=[f"sm_{a[0]}{a[1]}" for a, _ in PICKS])
def test_a_fat_library_loads_the_cubin_each_gpu_runs_else_its_ptx(fat, device, arch, cubin, capfd, monkeypatch):
    library, driver = fat
    driver.reset()
    driver.set_compute(device, arch)
    monkeypatch.setenv("SIMACCEL_NATIVE_LOG", "1")
    ptx_before = driver.counter("ptx_loads")
    program = PROGRAMS["r_chain"]
    library["fat_chain"](*[cuda_tensor(a, device_id=device) for a in arrays_for(program)])
    kernels = len({(launch.kernel, signature(launch, program)) for launch in plan_launches(program)})
    if cubin is None:
        assert driver.counter("cubin_loads") == 0 and driver.counter("ptx_loads") - ptx_before == kernels
    else:
        assert driver.counter("cubin_loads") == kernels and driver.counter("cubin_arch") == cubin
        assert driver.counter("ptx_loads") == ptx_before
    assert len(driver.launches()) == len(plan_launches(program))
    line = f"cuda:{device} GPU (sm_{arch[0]}{arch[1]}): {kernels if cubin else 0} of {kernels} kernels from cubins"
    assert line in capfd.readouterr().err


@pytest.fixture(scope="module")
def fat_gemm(native, tmp_path_factory):
    """A library of one float16 GEMM on 128 x 256 tiles (its stage buffers in dynamic shared
    memory), with cubins for sm_75, sm_80 and sm_90 and PTX for sm_75."""
    program = one_op_program("simaccel.dense_bias_relu", [(16384, 64), (1024, 64), (1024,)], "float16")
    library, _ = region_library([NativeRegion("fat_gemm", program)], tmp_path_factory.mktemp("fat_gemm"), FAT)
    return library, native[1], program


# (device's compute capability, the target of the image it runs): sm_90 runs the sm_90a cubin
# (wgmma), sm_86 the sm_80 cubin, sm_100 the PTX of sm_75 (mma.sync JITs from sm_80 on, and
# the PTX of sm_75 has the float32-FMA path: it stages nothing).
GEMM_PICKS = [((9, 0), (9, 0, "a")), ((8, 6), (8, 0)), ((7, 5), (7, 5)), ((10, 0), (7, 5))]


@pytest.mark.parametrize("device, arch, target", [(d, a, t) for d, (a, t) in enumerate(GEMM_PICKS)],
                         ids=[f"sm_{a[0]}{a[1]}" for a, _ in GEMM_PICKS])
def test_a_float16_gemm_launches_with_the_shared_memory_its_image_stages(fat_gemm, device, arch, target):
    """The float16 GEMM's stage buffers are dynamic shared memory sized for the code a GPU runs
    (kernels.tensor_core.dynamic_shared_bytes); over 48 KiB the kernel is allowed it once, as
    a GPU requires (the stand-in refuses the launch otherwise)."""
    from simaccel.kernels.tensor_core import dynamic_shared_bytes

    library, driver, program = fat_gemm
    driver.reset()
    driver.set_compute(device, arch)  # a device of its own: a library loads its kernels once per device
    library["fat_gemm"](*[cuda_tensor(a, device_id=device) for a in arrays_for(program)])
    [got] = driver.launches()
    [launch] = plan_launches(program)
    assert launch.kernel.__name__ == "_dense_tensor_core_kernel_256"
    assert got["shared"] == launch.shared_bytes + dynamic_shared_bytes(256, target)
    assert driver.counter("shared_opt_ins") == (1 if got["shared"] > 48 * 1024 else 0)


def test_a_gpu_with_too_little_shared_memory_for_a_kernel_is_an_error_naming_it(fat_gemm):
    library, driver, program = fat_gemm
    driver.reset()
    driver.set_compute(7, (9, 0))
    driver.set_shared_limit(100 * 1024)
    try:
        with pytest.raises(EngineError, match=r"region fat_gemm on cuda:7: kernel _dense_tensor_core_kernel_256 needs "
                                              r"197632 bytes of shared memory per block; this sm_90 GPU gives at most 102400"):
            library["fat_gemm"](*[cuda_tensor(a, device_id=7) for a in arrays_for(program)])
        assert driver.launches() == []
    finally:
        driver.reset()


def test_a_gpu_no_cubin_or_ptx_fits_is_an_error_naming_what_the_library_holds(native, tmp_path):
    library, _ = region_library([NativeRegion("fat_high", PROGRAMS["r_chain"])], tmp_path, ((8, 0), (9, 0)))
    driver = native[1]
    driver.reset()
    driver.set_compute(5, (7, 5))
    ptx_before = driver.counter("ptx_loads")
    try:
        with pytest.raises(EngineError, match=r"region fat_high on cuda:5: kernel \S+ cannot run on this sm_75 GPU: the "
                                              r"library holds cubins for sm_80, sm_90 and PTX for sm_80 \(build with "
                                              r"cuda_archs including sm_75\)"):
            library["fat_high"](*[cuda_tensor(a, device_id=5) for a in arrays_for(PROGRAMS["r_chain"])])
        assert driver.counter("cubin_loads") == 0 and driver.counter("ptx_loads") == ptx_before
    finally:
        driver.reset()


def test_a_fat_library_carries_one_cubin_per_architecture_and_the_lowest_ptx(tmp_path):
    from simaccel.native.source import library_source

    source = library_source([NativeRegion("fat_src", PROGRAMS["r_chain"])], ((9, 0), (8, 0), (9, 0)))
    kernels = len({(launch.kernel, signature(launch, PROGRAMS["r_chain"])) for launch in plan_launches(PROGRAMS["r_chain"])})
    assert source.count("const unsigned char kCubin") == 2 * kernels  # sm_80 and sm_90, the duplicate dropped
    assert source.count("const char kPtx") == kernels
    assert '"cubins for sm_80, sm_90 and PTX for sm_80"' in source


def test_the_library_links_no_cuda_library(native, tmp_path):
    program = PROGRAMS["r_chain"]
    _, path = region_library([NativeRegion("r_chain", program)], tmp_path)
    needed = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    assert "NEEDED" in needed and "cuda" not in needed.lower()


def test_a_deployed_region_needs_neither_simaccel_nor_numba(native, tmp_path):
    """In a process that cannot import simaccel or numba, the library still runs (and counts locally)."""
    program = PROGRAMS["r_chain"]
    _, path = region_library([NativeRegion("r_chain", program)], tmp_path)
    script = f"""
import sys
sys.modules["simaccel"] = sys.modules["numba"] = None  # any import of them fails
sys.path.insert(0, {str(os.path.dirname(__file__))!r})
import numpy as np, tvm_ffi
from native_support import FakeDriver, cuda_tensor
lib = tvm_ffi.load_module({str(path)!r})
arrays = [np.ones(s, np.float32) for s in [(4, 6), (8, 6), (8,), (4, 8)]]
lib["r_chain"](*[cuda_tensor(a) for a in arrays])
print(len(FakeDriver({os.environ["SIMACCEL_CUDA_DRIVER"]!r}).launches()))
"""
    env = {**os.environ}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3"]


# -- no driver, bad settings, a user's op, a fused group --------------------------------------
def test_without_a_driver_the_region_says_so(native, tmp_path):
    program = PROGRAMS["r_chain"]
    _, path = region_library([NativeRegion("r_chain", program)], tmp_path)
    script = f"""
import sys
sys.path.insert(0, {str(os.path.dirname(__file__))!r})
import numpy as np, tvm, tvm_ffi
from native_support import cuda_tensor
lib = tvm_ffi.load_module({str(path)!r})
arrays = [np.ones(s, np.float32) for s in [(4, 6), (8, 6), (8,), (4, 8)]]
try:
    lib["r_chain"](*[cuda_tensor(a) for a in arrays])
except Exception as e:
    print(type(e).__name__, e)
"""
    env = {**os.environ, "SIMACCEL_CUDA_DRIVER": str(tmp_path / "no-such-libcuda.so")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("EngineError region r_chain: cannot open the CUDA driver ")
    assert "no-such-libcuda.so" in done.stdout


@pytest.mark.parametrize("variable, value, error, match", [
    # (on a machine without a GPU the Python runtime first finds it has no cuda engine)
    ("SIMACCEL_STAGED", "maybe", EngineError, "SIMACCEL_STAGED='maybe' is not a boolean|engine 'cuda' cannot run here"),
    ("SIMACCEL_ENGINE", "warp", EngineError, "unknown SIMACCEL_ENGINE value 'warp'"),
])
def test_a_bad_engine_setting_is_an_error_not_ignored(fake, clean_runtime, monkeypatch, variable, value, error, match):
    """Native regions read the settings through the route flag: a value the Python runtime
    cannot read sends the call there, where it is refused with the reason."""
    library, driver = fake
    monkeypatch.setenv(variable, value)
    clean_runtime.route_flag()
    tensors = [cuda_tensor(a) for a in arrays_for(PROGRAMS["r_chain"])]
    try:
        with pytest.raises(error, match=match):
            library["r_chain"](*tensors)
    finally:
        monkeypatch.delenv(variable)
        clean_runtime.route_flag()
    assert driver.launches() == []


def test_a_users_op_gets_a_native_region(isolated_isa, monkeypatch, native, tmp_path):
    """examples/rms_norm_op.py declares myaccel.rms_norm with a Numba kernel and no native code:
    its region launches the AOT-compiled kernel with TVM's pointers like a built-in op's."""
    import pathlib

    monkeypatch.setenv("SIMACCEL_OPS", str(pathlib.Path(__file__).parents[1] / "examples" / "rms_norm_op.py"))
    program = one_op_program("myaccel.rms_norm", [(3, 5, 16), (16,)], "float32", {"epsilon": 1e-5})
    library, _ = region_library([NativeRegion("user", program)], tmp_path)
    driver = native[1]
    driver.reset()
    arrays = arrays_for(program)
    library["user"](*[cuda_tensor(a) for a in arrays])
    [launch] = driver.launches()
    [planned] = plan_launches(program)
    assert launch["entry"] == compile_kernel(planned.kernel, signature(planned, program), SM90).entry
    addresses = {i: a.ctypes.data for i, a in zip(program.inputs + program.outputs, arrays)}
    assert launch["words"] == expected_words(program, planned, addresses)


@pytest.fixture(scope="module")
def fused_library(native, tmp_path_factory):
    """A library of one region whose three ops fuse into one kernel (simaccel.fusion)."""
    program = fused_program()
    library, _ = region_library([NativeRegion("r_fused", program)], tmp_path_factory.mktemp("fused"))
    return library, native[1], program


def test_a_fused_group_is_one_launch_and_its_values_in_between_are_never_allocated(fused_library, clean_runtime):
    from simaccel.debug import flags

    library, driver, program = fused_library
    driver.reset()
    tensors = [cuda_tensor(a) for a in arrays_for(program)]
    with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", 0), STREAM):
        library["r_fused"](*tensors)
    (launch,) = driver.launches()
    (planned,) = plan_launches(program)
    assert "_fused_" in planned.kernel.__name__
    assert launch["entry"] == compile_kernel(planned.kernel, signature(planned, program), SM90).entry
    assert fused_values(program) == {4, 5} and driver.counter("allocations") == 0  # h and g stay in registers
    # A sanitized call runs the checked plan: each op on its own, its output stored and checked.
    driver.reset()
    driver.launch_fill(0x3C)
    flags.set_bit(flags.SANITIZE, True)
    try:
        with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", 0), STREAM):
            library["r_fused"](*tensors)
    finally:
        flags.set_bit(flags.SANITIZE, False)
    checked = plan_launches(program, fuse=False)
    assert [l["entry"] for l in driver.launches()] == [
        compile_kernel(l.kernel, signature(l, program), SM90).entry for l in checked]
    assert len(checked) == 3
