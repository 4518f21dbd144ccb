"""
On the GPU
==========

mynpu lives on the GPU and shares its memory: a model runs as TVM kernels, then a mynpu
region reading and writing the very buffers TVM allocated, then TVM kernels again, with no
trip through host memory. This stage shows that on stage 1's model:

1. a CUDA build, made on any machine (no GPU needed): its regions are *native*, C++ that
   checks TVM's tensors and launches the kernels of stage 2, compiled ahead of time;
2. the trace of a run (``simaccel.trace``): TVM's kernels, the region and its ops on one
   timeline;
3. on a GPU: the native regions against TVM alone, zero-copy shown by pointer identity and by
   the ledger (0 bytes copied), TVM's stream (a stream of your own), a CUDA graph, and what
   staging every region tensor through host memory (``use_staged``) costs.

Run it with ``python tutorials/03_on_the_gpu.py``. What runs depends on the machine: the
CUDA build of step 1 needs NVIDIA's compiler libraries (NVVM, NVRTC and nvJitLink, from pip:
``pip install '.[aot]'``), and the GPU steps need those and a GPU that TVM finds
(``tvm.cuda(0).exist``). Where a step cannot run, it says why and shows what it printed when
this tutorial ran on an NVIDIA H200, read from the committed result files
(``results/gpu/2026-12-03-h200-tutorials/``) and marked as such. Step 2 runs everywhere (about
half a minute on a 2-core CPU with the compiler libraries, most of it compiling the kernels for
the GPU).
"""

# %%
# Set-up
# ------
# Stage 1's instructions and model, and the inputs. ``BUILD`` (the compiler libraries load)
# and ``GPU`` (they do, and TVM finds a GPU) decide what runs; ``mynpu_recorded``, a module
# beside this tutorial, shows a step's recorded output where it cannot. The exercises'
# answers, at the end, run only when asked: with ``--answers`` (see "Exercises").

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

import simaccel
from simaccel import DeviceProfile
from simaccel.aot import toolchain_missing
from simaccel.compare import assert_same
from simaccel.debug.timeline_summary import format_summary, load, summarize
from simaccel.tvm_integration import build, build_tvm_only, default_target, partition_report
from simaccel.tvm_integration.backend.native import has_native_regions
from simaccel.tvm_integration.tools.trace_tvm import traced_vm

HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
sys.path.insert(0, str(HERE))
import mynpu_ops  # noqa: E402,F401  declares mynpu.leaky_relu and mynpu.log_softmax
import mynpu_recorded  # noqa: E402  what each step printed on the GPU, for where it cannot run


from mynpu_model import model  # noqa: E402  stage 1's model

mod = model()
rng = np.random.default_rng(0)
inputs = [rng.standard_normal(shape).astype("float32") for shape in [(16, 8), (8, 8), (8,)]]
runtime = simaccel.get_runtime()
workspace = tempfile.TemporaryDirectory(prefix="mynpu-tutorial-")  # removed when Python exits
workdir = Path(workspace.name)

ANSWERS = "--answers" in sys.argv[1:] or os.environ.get("SIMACCEL_TUTORIAL_ANSWERS") == "1"
NO_COMPILERS = toolchain_missing()  # None where NVVM, NVRTC and nvJitLink load, else why not
BUILD = NO_COMPILERS is None
GPU = BUILD and bool(tvm.cuda(0).exist)
missing = [why for why, lacking in [("no CUDA compiler libraries", not BUILD),
                                     ("no CUDA GPU", not tvm.cuda(0).exist)] if lacking]
WHY = ", ".join(missing)  # what a GPU step that cannot run here says

if GPU:
    print("GPU:", tvm.cuda(0).device_name)
else:
    if not tvm.cuda(0).exist:
        print("no CUDA GPU: TVM finds none here (tvm.cuda(0).exist is False)")
    if not BUILD:
        print("no CUDA compiler libraries:", NO_COMPILERS)
    print(f"so the GPU steps{'' if BUILD else ' and the CUDA build'} do not run here; each shows instead what it "
          f"printed on {mynpu_recorded.where()}")

# %%
# Step 1: a CUDA build, without a GPU
# -----------------------------------
# ``default_target("cuda")`` is the GPU present, or an NVIDIA H100 (sm_90a) to build for when
# there is none. For a CUDA target, ``build`` records each region's launch plan (stage 2's
# launchers, run once against placeholders), compiles every kernel it launches to a cubin for
# the target's architecture and to PTX with NVIDIA's compilers from pip (the ``aot`` extra),
# and writes the region as C++ that TVM links into the library. Most of this step's time is
# that compile; a build machine needs no GPU and no CUDA driver, but it needs those compilers.

target = default_target("cuda")
if BUILD:
    start = time.perf_counter()
    cuda_exec = build(mod, target)
    print(f"built for {target.attrs['arch']} in {time.perf_counter() - start:.1f} s")
    assert has_native_regions(cuda_exec), "no native regions: install the aot extra (pip install '.[aot]') and g++"
    assert GPU or target.attrs["arch"] == "sm_90a"
else:
    mynpu_recorded.show("a CUDA build", "no CUDA compiler libraries")

# %%
# The library exports like any TVM library, on this machine. Its native regions call no Python;
# ``docs/native-regions.md`` says where such a library runs (a GPU it was built for, NVIDIA
# driver 580 or newer, with neither simaccel nor Numba installed there).

if BUILD:
    library = workdir / "mynpu_model_cuda.so"
    cuda_exec.export_library(str(library))
    print(f"{library.name}: {library.stat().st_size:,} bytes")
    assert library.stat().st_size > 0
else:
    mynpu_recorded.show("the exported library", "no CUDA compiler libraries")

# %%
# Step 2: the trace of a run
# --------------------------
# ``simaccel.trace(path)`` records a timeline of region calls while it is open, and a VM from
# ``traced_vm`` adds TVM's own calls (its kernels, its builtins, the call of each region) to
# it. The JSON opens in Perfetto (ui.perfetto.dev) or ``chrome://tracing``; ``simaccel trace
# --summary`` sums it up. Here it is the CPU build on ``ref``, which runs everywhere; on a GPU,
# step 3 traces the native regions too.

cpu_exec = build(mod)
trace_path = workdir / "trace_cpu.json"
with simaccel.trace(str(trace_path)):
    traced_vm(cpu_exec, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in inputs])
document = load(trace_path)
print("the trace, summed up (as `simaccel trace --summary` prints it):")
print(format_summary(summarize(document)))

# %%
# On one track, in order: TVM calls the region (``tvm.region_call``), inside it simaccel runs
# the region on ``ref`` (``simaccel.region``) and its three ops one after the other
# (``simaccel.op``); then TVM's own kernels, cumprod and log_softmax.

spans = sorted((e for e in document["traceEvents"] if e.get("ph") == "X"), key=lambda e: e["ts"])
timeline = [(e["cat"], e["name"]) for e in spans if e["cat"] != "tvm.builtin"]
print("the trace's spans in time order, TVM's builtins left out (category, name):")
for cat, name in timeline:
    print(f"  {cat:18} {name}")
region_call, region, *ops = timeline[:5]
assert region_call[0] == "tvm.region_call" and region == ("simaccel.region", region_call[1])
assert ops == [("simaccel.op", "simaccel.dense_bias"), ("simaccel.op", "mynpu.leaky_relu"),
               ("simaccel.op", "mynpu.log_softmax")]
assert timeline[5:] == [("tvm.kernel", "cumprod"), ("tvm.kernel", "log_softmax")]
assert {e["args"]["engine"] for e in spans if e["cat"] == "simaccel.region"} == {"ref"}
assert len({(e["pid"], e["tid"]) for e in spans}) == 1  # one track: the CPU's

# %%
# Step 3: on the GPU
# ------------------
# Everything from here on needs a GPU. First the native regions, against TVM alone's CUDA
# build of the same module. The ledger counts native calls too: one region call, and not one
# byte copied by simaccel.

if GPU:
    dev = tvm.cuda(0)
    tensors = [tvm.runtime.tensor(a, dev) for a in inputs]
    tvm_vm = relax.VirtualMachine(build_tvm_only(mod, target), dev)
    want = [t.numpy() for t in tvm_vm["main"](*tensors)]
    vm = relax.VirtualMachine(cuda_exec, dev)
    runtime.ledger.reset()
    got = [t.numpy() for t in vm["main"](*tensors)]
    ledger = runtime.ledger.snapshot()
    print("ledger after one call:", {key: ledger[key] for key in ("offloaded_calls", "ops", "bytes")})
    for name, g, w in zip("yz", got, want):
        assert_same(g, w, name=name, scaled=True)  # simaccel.compare's rule, as in stage 1
    assert ledger["offloaded_calls"] == 1
    assert ledger["bytes"] == {"host_to_device": 0, "device_to_host": 0, "device_to_device": 0}
else:
    mynpu_recorded.show("native regions against TVM alone", WHY)

# %%
# **Zero-copy, by pointer identity.** With ``ledger.tracing`` on, every tensor a region is
# handed is recorded with its device address. Native regions publish no addresses, so this
# runs the region on the Python ``cuda`` engine (the same kernels, through numba-cuda,
# readable): it read x, w and b where the caller's tensors are, and wrote y into the buffer
# the VM returned. Both engines give the same bits.

if GPU:
    runtime.ledger.reset()
    runtime.ledger.tracing = True
    try:
        with runtime.use_engine("cuda"):
            y, _ = vm["main"](*tensors)
            dev.sync()
    finally:
        runtime.ledger.tracing = False
    seen = runtime.ledger.trace()
    read = {e["address"] for e in seen if e["role"] == "input"}
    written = {e["address"] for e in seen if e["role"] == "output"}
    print(f"the region read {sorted(map(hex, read))}, wrote {sorted(map(hex, written))}; "
          f"the caller's x, w, b: {[hex(t.data_ptr()) for t in tensors]}; y: {hex(y.data_ptr())}")
    assert {t.data_ptr() for t in tensors} <= read and y.data_ptr() in written
    assert all(e["device"] == "cuda:0" for e in seen)
    assert sum(runtime.ledger.snapshot()["bytes"].values()) == 0
    np.testing.assert_array_equal(y.numpy(), got[0])
else:
    mynpu_recorded.show("zero-copy by pointer identity", WHY)

# %%
# **TVM's stream.** A native region queues its kernels on TVM's current stream for the
# device and returns: nothing synchronises, and TVM's kernels before and after are ordered
# with the region's by the stream. So a stream of your own works as it does for TVM alone:
# ``tvm_ffi.use_raw_stream`` makes it TVM's current one, and ten calls queue on it with no
# synchronisation in between. The trace shows every region on that stream.

if GPU:
    import tvm_ffi
    from numba import cuda

    stream = cuda.stream()
    gpu_trace = workdir / "trace_gpu.json"
    traced = traced_vm(cuda_exec, dev)
    batches = [[tvm.runtime.tensor(rng.standard_normal(a.shape).astype("float32"), dev) for a in inputs]
               for _ in range(10)]
    with simaccel.trace(str(gpu_trace)), tvm_ffi.use_raw_stream(dev, int(stream)):
        results = [traced["main"](*batch) for batch in batches]
        stream.synchronize()
    for batch, result in zip(batches, results):
        for r, w in zip(result, tvm_vm["main"](*batch)):
            assert_same(r.numpy(), w.numpy(), scaled=True)
    regions = [e for e in load(gpu_trace)["traceEvents"] if e.get("cat") == "simaccel.region"]
    print(f"{len(regions)} region calls traced, on streams {sorted({hex(e['args']['stream']) for e in regions})}")
    assert len(regions) == 10
    assert all(e["args"]["engine"] == "native" and e["args"]["stream"] == int(stream) for e in regions)
else:
    mynpu_recorded.show("TVM's stream", WHY)

# %%
# **A CUDA graph.** Built with TVM's ``relax.backend.use_cuda_graph``, TVM runs the model once,
# then captures what reads and writes only weights and memory it allocated itself, and replays
# that graph afterwards without the host. Two things keep a call out of the graph: a tensor
# that is an input (mark the weights: ``num_input=1``, only x is an input) and a tensor the
# function returns (TVM allocates those anew on every call). Stage 1's region reads x and
# returns y, so here it sits between TVM kernels, as regions mostly do: ``atan(x)`` before it,
# and ``atan(y)`` and the cumprod after it. Then the region's kernels are part of the graph: a
# replayed region makes no region call, so the ledger counts fewer calls than runs, and the
# results still follow new inputs. Return y itself and TVM runs the region outside the graph,
# on every call: the last lines show that too.


def behind_a_tvm_kernel(return_y=False):
    """atan(x) on TVM, stage 1's model on its result, TVM kernels after it (atan(y) is returned,
    or y itself with `return_y`); only x is an input."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((16, 8), "float32"))
    w = relax.Var("w", relax.TensorType((8, 8), "float32"))
    b = relax.Var("b", relax.TensorType((8,), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            s = bb.emit(relax.op.atan(x))
            h = bb.emit(relax.op.add(relax.op.matmul(s, relax.op.permute_dims(w)), b))
            a = bb.emit(relax.op.nn.leakyrelu(h, alpha=0.1))
            y = bb.emit(relax.op.nn.log_softmax(a))
            z = bb.emit(relax.op.nn.log_softmax(relax.op.cumprod(a, axis=1), axis=0))
            out = bb.emit_output(relax.Tuple([y if return_y else relax.op.atan(y), z]))
        bb.emit_func_output(out)
    graphed = bb.get()
    graphed["main"] = graphed["main"].with_attr("num_input", 1)
    return graphed


_, graph_report = partition_report(behind_a_tvm_kernel())
assert graph_report.kept[0][1] == "relax.atan" and list(graph_report.regions.values()) == [
    ["simaccel.dense_bias", "mynpu.leaky_relu", "mynpu.log_softmax"]]


def region_calls_in_four_runs(return_y):
    """Build with TVM's CUDA graphs on, run four times on new x, check each run against TVM
    alone; the region calls the ledger counted."""
    with tvm.transform.PassContext(config={"relax.backend.use_cuda_graph": True}):
        graph_vm = relax.VirtualMachine(build(behind_a_tvm_kernel(return_y), target), dev)
    graph_tvm = relax.VirtualMachine(build_tvm_only(behind_a_tvm_kernel(return_y), target), dev)
    runtime.ledger.reset()
    for _ in range(4):
        fresh = rng.standard_normal(inputs[0].shape).astype("float32")
        tensors[0].copyfrom(fresh)  # the graph reads the same buffer; its contents change
        for r, w in zip(graph_vm["main"](*tensors), graph_tvm["main"](*tensors)):
            assert_same(r.numpy(), w.numpy(), scaled=True)
    return runtime.ledger.snapshot()["offloaded_calls"]


if GPU:
    calls = region_calls_in_four_runs(return_y=False)
    print(f"4 runs, {calls} region call(s): the rest were replayed from the graph")
    assert 0 < calls < 4
    calls = region_calls_in_four_runs(return_y=True)
    print(f"returning y: 4 runs, {calls} region calls: y is allocated per call, so not captured")
    assert calls == 4
else:
    mynpu_recorded.show("a CUDA graph", WHY)

# %%
# **What host staging costs.** ``use_staged`` is simaccel's comparison mode, the flow of an
# accelerator that cannot read TVM's memory: every tensor at the region's border makes a trip
# through host memory, each input from TVM's buffer into memory of the accelerator's own, each
# output back into TVM's buffer. It runs on the Python ``cuda`` engine (a native region forwards
# to it), so it is timed against that engine zero-copy, and against the native region. The
# ledger counts the copies exactly: one device-to-host and one host-to-device copy of each
# border tensor (x, w, b, a and y).


def per_call(run, repeat=30):
    """Median seconds of `run()` followed by a device sync, after one warm-up call."""
    run()
    dev.sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        dev.sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


if GPU:
    border = 4 * (16 * 8 + 8 * 8 + 8 + 16 * 8 + 16 * 8)  # x, w, b in; a, y out; float32
    seconds, copied = {}, {}
    for mode, engine, staged in [("native", "auto", False), ("zero-copy", "cuda", False), ("host-staged", "cuda", True)]:
        with runtime.use_engine(engine), runtime.use_staged(staged):
            runtime.ledger.reset()
            vm["main"](*tensors)
            dev.sync()
            copied[mode] = runtime.ledger.snapshot()["bytes"]
            seconds[mode] = per_call(lambda: vm["main"](*tensors))
        print(f"{mode:12} {seconds[mode] * 1e6:8.0f} us per call; copied {copied[mode]}")
    assert copied["native"] == copied["zero-copy"] == {"host_to_device": 0, "device_to_host": 0, "device_to_device": 0}
    assert copied["host-staged"] == {"host_to_device": border, "device_to_host": border, "device_to_device": 0}
    assert seconds["host-staged"] > seconds["zero-copy"]
else:
    mynpu_recorded.show("the cost of host staging", WHY)

# %%
# Exercises
# ---------
# Try each one before you read its answer, in the next section. The answers run only when you
# ask: ``python tutorials/03_on_the_gpu.py --answers`` (or ``SIMACCEL_TUTORIAL_ANSWERS=1`` in
# the environment) runs them and checks them, as the tests do.
#
# **Exercise 1: predict the staging traffic.** How many bytes would host staging move each
# way per call for stage 2's device profile, mynpu v1, whose 2 KiB scratchpad splits the
# region in two? Work it out from the partition, then check it against the ledger.
#
# **Exercise 2: inside the region call.** In the CPU trace of step 2, which spans lie inside
# TVM's call of the region, and how much of that call did the three ops take?

if not ANSWERS:
    print("answers: not run (run this file with --answers, or SIMACCEL_TUTORIAL_ANSWERS=1, to run and check them)")

# %%
# That is the whole track: your instructions declared, given kernels and limits, fuzzed, and
# run natively on the GPU in TVM's own buffers. ``docs/adding-an-op.md`` and
# ``docs/native-regions.md`` hold the details.

# %%
# Answers
# -------
# **Exercise 1.** Staging copies what crosses a region's border: each part's parameters and
# results. Part 0 takes x, w and b and returns a; part 1 takes a and returns y. So a crosses
# twice: 1,312 + 1,024 = 2,336 bytes each way, 512 more than the single region's 1,824. On a
# GPU the ledger counts what the split model's host-staged call copied.

mynpu_v1 = DeviceProfile(name="mynpu-v1", dtypes=("float32",), alignment=64, max_region_bytes=2048)


def tensor_bytes(ty):
    return int(np.prod([int(d) for d in ty.shape.values])) * np.dtype(str(ty.dtype)).itemsize


def exercise_1(profile):
    """Bytes staged each way per call: every region's parameters and results."""
    partitioned, report = partition_report(mod, profile)
    total = 0
    for name in report.regions:
        function = partitioned[name]
        results = function.ret_ty.fields if hasattr(function.ret_ty, "fields") else [function.ret_ty]
        total += sum(tensor_bytes(p.ty) for p in function.params) + sum(tensor_bytes(r) for r in results)
    return total


if ANSWERS:
    staged = {"mynpu v1 (two regions)": exercise_1(mynpu_v1), "the default profile (one region)": exercise_1(None)}
    print("exercise 1: bytes staged each way per call, from the partition:", staged)
    assert staged == {"mynpu v1 (two regions)": 2336, "the default profile (one region)": 1824}
    if GPU:
        split_vm = relax.VirtualMachine(build(mod, target, profile=mynpu_v1, native=False), dev)
        with runtime.use_engine("cuda"), runtime.use_staged(True):
            runtime.ledger.reset()
            split_vm["main"](*tensors)
            dev.sync()
        counted = runtime.ledger.snapshot()["bytes"]
        print("exercise 1: bytes the ledger counted in one host-staged call of mynpu v1's split model:", counted)
        assert counted["host_to_device"] == counted["device_to_host"] == exercise_1(mynpu_v1)
    else:
        mynpu_recorded.show("exercise 1, checked against the ledger", WHY)

# %%
# **Exercise 2.** The simaccel region and its three ops lie inside the ``tvm.region_call``
# span (the trace nests them so); the ops take only part of the call: the rest is simaccel's
# runtime around them (the forwarder, finding the region's plan, binding TVM's tensors). On
# ``ref`` these are numpy's and Python's times, not an accelerator's; a GPU trace times the
# kernels with CUDA events.


def exercise_2(document):
    """(the names of the spans inside the region call, the share of the call its ops took)."""
    spans = [e for e in document["traceEvents"] if e.get("ph") == "X"]
    [call] = [e for e in spans if e["cat"] == "tvm.region_call"]
    inside = [e for e in spans if e is not call and call["ts"] <= e["ts"] and e["ts"] + e["dur"] <= call["ts"] + call["dur"]]
    ops = sum(e["dur"] for e in inside if e["cat"] == "simaccel.op")
    return [(e["cat"], e["name"]) for e in sorted(inside, key=lambda e: e["ts"])], ops / call["dur"]


if ANSWERS:
    inside, share = exercise_2(document)
    print(f"exercise 2: inside the region call: {[name for _, name in inside]}; its ops took {share:.0%} of it")
    assert inside == [region, *ops] and 0 < share < 1
