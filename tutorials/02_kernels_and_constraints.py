"""
Kernels and constraints
=======================

Stage 1 declared mynpu's two instructions and ran them on their numpy references. Now they
get kernels, and mynpu gets limits:

1. the kernels: module-level Numba CUDA kernel functions in ``mynpu_kernels.py``, each with a
   launcher that launches it through the kernel target simaccel hands it;
2. run them on the Numba CUDA simulator (the ``sim`` engine: the real kernel code, on the CPU,
   every CUDA thread interpreted in Python, so tiny shapes) and check them against the references;
3. a device profile: a scratchpad (``max_region_bytes``) too small for stage 1's region, a
   dtype list and an alignment, and how the partition changes;
4. fuzz the new instructions against TVM alone, briefly.

Run it with ``python tutorials/02_kernels_and_constraints.py`` (under a minute on a 2-core
CPU). No GPU is needed: stage 3 is about the GPU. The exercises' answers, at the end, run only
when you ask for them (``--answers``), so that you can try each exercise first.
"""

# %%
# Set-up
# ------
# As in stage 1: ``mynpu_ops`` declares the instructions, ``show`` prints definitions from a
# module's source, ``model`` is stage 1's model, and ``ANSWERS`` says whether the exercises'
# answers run (``python tutorials/02_kernels_and_constraints.py --answers``).

import ast
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import tvm
from numba import cuda, float32
from numba.cuda import simulator
from tvm import relax

import simaccel
from simaccel import DeviceProfile
from simaccel.compare import array_difference, assert_same
from simaccel.kernels import KernelTarget
from simaccel.ops import OpFamily, Reject, declared, relax_op
from simaccel.testing import assert_matches_tvm
from simaccel.tvm_integration import partition_report
from simaccel.tvm_integration.tools.fuzz import run_fuzz

HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
sys.path.insert(0, str(HERE))
import mynpu_ops  # noqa: E402  declares mynpu.leaky_relu and mynpu.log_softmax

ANSWERS = "--answers" in sys.argv[1:] or os.environ.get("SIMACCEL_TUTORIAL_ANSWERS") == "1"


def show(module, *names):
    """Print the top-level definitions `names` of `module`, as its source file has them."""
    source = Path(module.__file__).read_text()
    print(f"# {Path(module.__file__).name}: {', '.join(names)}")
    for node in ast.parse(source).body:
        defined = [node.name] if hasattr(node, "name") else [t.id for t in getattr(node, "targets", [])]
        if set(defined) & set(names):
            print(ast.get_source_segment(source, node), end="\n\n")


from mynpu_model import model  # noqa: E402  stage 1's model

mod = model()
workspace = tempfile.TemporaryDirectory(prefix="mynpu-tutorial-")  # removed when Python exits
workdir = Path(workspace.name)

# %%
# Step 1: the kernels
# -------------------
# ``mynpu_ops.py`` named each launcher, ``kernel="mynpu_kernels:launch_leaky_relu"``. A kernel
# is a plain function at module scope written against the ``numba.cuda`` API; simaccel
# compiles it for the engine that runs it: the simulator here, the GPU with numba-cuda, or
# ahead of time for a CUDA build's native regions. Leaky ReLU is one thread per element of
# flat views of the tensors:

import mynpu_kernels  # noqa: E402

show(mynpu_kernels, "leaky_relu_kernel", "launch_leaky_relu")

# %%
# The launcher gets a ``KernelTarget``, the output and the inputs as device arrays (views of
# TVM's buffers, never copies) and the attributes. It may only compute a grid and scalars from
# shapes and attributes, take views with ``target.reshape`` and launch with ``target.launch``:
# simaccel records its launches once per region and replays them on every call. It returns how
# many kernels it launched. log_softmax is one thread per row:

show(mynpu_kernels, "log_softmax_kernel", "launch_log_softmax")

# %%
# Step 2: on the simulator, against the references
# ------------------------------------------------
# A launcher can be called by hand with the ``sim`` target and the simulator's device arrays
# (``numba.cuda.simulator.to_device``). The inputs hold the values where a kernel most easily
# parts ways with its reference: NaN, both infinities, ``-0.0``, a row of ``-inf`` only.


def on_simulator(launcher, data, **attrs):
    """(launches, output) of `launcher` run by hand on the simulator; the output starts as NaN.

    The simulator does a kernel's float math on numpy scalars, which warn on NaN and inf
    results (on a GPU they are plain results); simaccel's ``sim`` engine silences those
    warnings itself, and by hand we do it here."""
    out = simulator.to_device(np.full(data.shape, np.nan, dtype=data.dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        launches = launcher(KernelTarget("sim"), out, simulator.to_device(data), **attrs)
    return launches, out.copy_to_host()


special = np.array([[1.0, np.nan, -2.0, 0.5, -0.0],
                    [np.inf, 1.0, 2.0, 3.0, -1.0],
                    [-np.inf, 1.0, 2.0, 3.0, -1.0],
                    [-np.inf] * 5,
                    [0.1, 0.2, 0.3, 0.4, 0.5]], dtype="float32")
for name, launcher, reference, attrs in [
    ("leaky_relu", mynpu_kernels.launch_leaky_relu, mynpu_ops.leaky_relu, {"alpha": 0.1}),
    ("log_softmax", mynpu_kernels.launch_log_softmax, mynpu_ops.log_softmax, {}),
]:
    for dtype in ("float32", "float16"):
        data = special.astype(dtype)
        launches, got = on_simulator(launcher, data, **attrs)
        with np.errstate(invalid="ignore"):  # inf - inf in the reference: NaN, as in TVM
            want = reference(data, **attrs).astype(dtype)
        assert launches == 1
        # simaccel.compare's rule, element by element as for a kernel: the same NaN and inf
        # positions, the rest within the dtype's tolerance; and the same signs of zeros
        assert_same(got, want, name=f"{name} {dtype}")
        assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()
    print(f"{name}: kernel == reference on the simulator, float32 and float16")
# rows with +inf or only -inf are NaN, as in TVM; a -inf beside finite values is -inf
print("log_softmax's float16 reference on the rows with +inf, with -inf beside finite values, with -inf only:")
print(want[1:4])
assert np.isnan(want[1]).all() and np.isnan(want[3]).all() and want[2, 0] == -np.inf

# %%
# An empty tensor launches nothing (a kernel with an empty grid is an error on a GPU):

assert on_simulator(mynpu_kernels.launch_leaky_relu, np.zeros((0, 4), "float32"), alpha=0.1)[0] == 0
assert on_simulator(mynpu_kernels.launch_log_softmax, np.zeros((3, 0), "float32"))[0] == 0

# %%
# Now the whole model, through TVM, with ``simaccel.testing.assert_matches_tvm``: it builds the
# model with simaccel and with TVM alone, runs both, compares every output, and runs simaccel
# with its *sanitizer* on, which fails a region whose kernel leaves an output element
# unwritten, writes outside its output or writes into its input. On ``ref`` the references
# run, on ``sim`` the kernels; each instruction launched one kernel:

runs = assert_matches_tvm(mod, engines=["ref", "sim"])
for run in runs:
    print(f"kernel launches on {run.engine}: {run.ledger['kernel_launches']}")
assert runs[0].ledger["kernel_launches"] == {"simaccel.dense_bias": 0, "mynpu.leaky_relu": 0, "mynpu.log_softmax": 0}
assert runs[1].ledger["kernel_launches"] == {"simaccel.dense_bias": 1, "mynpu.leaky_relu": 1, "mynpu.log_softmax": 1}

# %%
# Step 3: a device profile
# ------------------------
# A ``DeviceProfile`` describes the hardware's limits, and partitioning and the runtime read
# the same object. mynpu v1 computes in float32 only, its DMA needs 64-byte aligned buffers,
# and its scratchpad holds 2 KiB: every tensor of a region (inputs, intermediates, outputs)
# must fit in it together.

mynpu_v1 = DeviceProfile(name="mynpu-v1", dtypes=("float32",), alignment=64, max_region_bytes=2048)
print("mynpu v1:", mynpu_v1.to_dict())

_, default_report = partition_report(mod)
_, v1_report = partition_report(mod, mynpu_v1)
print("partition report, default profile:", default_report.format(), "", "partition report, mynpu v1:",
      v1_report.format(), sep="\n")

# %%
# Stage 1's region touches x, w and b (its inputs), h and a (intermediates, a also an output)
# and y: 2,336 bytes, more than the scratchpad. So it is cut, in execution order, into
# consecutive parts that each fit: dense + bias + leaky ReLU (1,824 bytes), then log_softmax
# (1,024). Nothing moves to TVM.

size = {name: int(np.prod(shape)) * 4 for name, shape in
        {"x": (16, 8), "w": (8, 8), "b": (8,), "h": (16, 8), "a": (16, 8), "y": (16, 8)}.items()}
assert sum(size.values()) == 2336
assert len(default_report.regions) == 1 and len(v1_report.regions) == 2
assert list(v1_report.regions.values()) == [["simaccel.dense_bias", "mynpu.leaky_relu"], ["mynpu.log_softmax"]]
assert size["x"] + size["w"] + size["b"] + size["h"] + size["a"] == 1824 <= 2048
assert size["a"] + size["y"] == 1024
[note] = v1_report.splits
assert note.endswith("needs 2336 bytes: split into 2 regions of at most 2048 bytes")
assert v1_report.kept == default_report.kept

# %%
# The split model still matches TVM alone on the kernels, now in two region calls. The ledger
# can trace every tensor a region is handed (``ledger.tracing``): each address TVM handed over
# meets the 64-byte alignment (TVM aligns its allocations to 64 bytes, and the runtime checks
# every address against the profile).

runtime = simaccel.get_runtime()
runtime.ledger.tracing = True
try:
    [run] = assert_matches_tvm(mod, engines=["sim"], profile=mynpu_v1)
    addresses = [entry["address"] for entry in runtime.ledger.trace()]
finally:
    runtime.ledger.tracing = False
print(f"{run.ledger['offloaded_calls']} region calls; {len(addresses)} tensors handed over, "
      f"addresses modulo 64: {sorted({a % 64 for a in addresses})}")
assert run.ledger["offloaded_calls"] == 2
assert len(addresses) == 6 and all(a % 64 == 0 for a in addresses)  # part 0: x, w, b in, a out; part 1: a in, y out

# %%
# The dtype list: in float16, mynpu v1 runs nothing, and the report says why for each op.

_, f16_report = partition_report(model("float16"), mynpu_v1)
print("partition report of the float16 model, mynpu v1:")
print(f16_report.format())
assert f16_report.regions == {}
assert all(reason.endswith("data dtype float16 is not supported (profile mynpu-v1: float32)")
           for _, op, reason in f16_report.kept if op != "relax.cumprod")

# %%
# Step 4: fuzz the new instructions
# ---------------------------------
# ``simaccel fuzz`` draws random Relax models, builds each with simaccel and with TVM alone and
# compares them; every declared family with a ``fuzz`` hook is drawn too (ours give the
# attributes a call needs: a slope, the last axis). From Python it is ``run_fuzz``. A campaign
# is seeded, so these five cases are the same wherever they run. ``$SIMACCEL_OPS`` names our
# module, so that a failure's saved reproduction and the fuzzer's fresh processes declare our
# ops too. ``export_every=0`` skips the fuzzer's reload of every 25th case in a fresh process,
# which stage 1 did by hand.

os.environ["SIMACCEL_OPS"] = str(HERE / "mynpu_ops.py")
status = run_fuzz(cases=5, seed=2, engines=("ref", "sim"), dtypes=("float32",), out_dir=str(workdir / "fuzz"),
                  export_every=0, shrink_seconds=60)
summary = json.loads((workdir / "fuzz" / "fuzz-summary.json").read_text())
print(f"fuzz-summary.json: counts {summary['counts']}; users' ops in the models {summary['user_ops_in_models']}")
assert status == 0 and summary["counts"]["failed"] == 0
assert set(summary["user_ops_in_models"]) == {"mynpu.leaky_relu", "mynpu.log_softmax"}

# %%
# Exercises
# ---------
# Try each one before you read its answer, in the next section. The answers run only when you
# ask: ``python tutorials/02_kernels_and_constraints.py --answers`` (or
# ``SIMACCEL_TUTORIAL_ANSWERS=1`` in the environment) runs them and checks them, as the tests do.
#
# **Exercise 1: a kernel for the third instruction.** Stage 1's exercise declared
# ``mynpu.cumprod`` (a running product along the last axis) with a kernel it named but never
# wrote. Write it, run it on the simulator against the reference, and run stage 1's model with
# cumprod on mynpu on ``sim``.
#
# **Exercise 2: three regions.** Make the scratchpad small enough that stage 1's region
# splits into three. Which sizes do it, and what happens below them?
#
# **Exercise 3: a DMA that needs 128-byte alignment.** What does mynpu run then?

if not ANSWERS:
    print("answers: not run (run this file with --answers, or SIMACCEL_TUTORIAL_ANSWERS=1, to run and check them)")

# %%
# Next: ``03_on_the_gpu.py`` runs the same regions natively on a GPU, zero-copy.

# %%
# Answers
# -------
# **Exercise 1.** One thread per row, multiplying in float32 as it goes. The kernel stays at module
# scope (a kernel defined inside a function would be compiled again on every call), and the
# declaration takes the launcher itself rather than its name.


def cumprod_kernel(out, x, rows, cols):  # one thread per row of (rows, cols) views
    r = cuda.grid(1)
    if r < rows:
        product = float32(1.0)
        for i in range(cols):
            product *= float32(x[r, i])
            out[r, i] = product


def launch_cumprod(target, out, data):
    *lead, cols = tuple(data.shape)
    rows = int(np.prod(lead))
    if rows * cols:
        target.launch(cumprod_kernel, (rows + 127) // 128, 128, target.reshape(out, (rows, cols)),
                      target.reshape(data, (rows, cols)), rows, cols)
    return int(rows * cols > 0)


def cumprod_from_relax(match):
    rank, axis = len(match.shapes["data"]), match.attrs["axis"]
    if rank == 0 or axis is None or axis % rank != rank - 1:
        raise Reject(f"cumprod over axis {axis} (mynpu multiplies along the last axis only)")
    return {}


CUMPROD = OpFamily(
    name="mynpu.cumprod", inputs=("data",), pattern=relax_op("relax.cumprod", "data"),
    from_relax=cumprod_from_relax, infer=lambda shapes: shapes[0],
    reference=lambda data: np.cumprod(data.astype(np.float32), axis=-1), kernel=launch_cumprod,
    doc="running product over the last axis")


def exercise_1():
    """(how the kernel's output differs from the reference's, the sim run's ledger)."""
    data = np.random.default_rng(1).standard_normal((5, 7)).astype("float32")
    launches, got = on_simulator(launch_cumprod, data)
    assert launches == 1
    with declared(CUMPROD):
        [run] = assert_matches_tvm(mod, engines=["sim"])
    return array_difference(got, CUMPROD.reference(data)), run.ledger


if ANSWERS:
    difference, ledger = exercise_1()
    print(f"exercise 1: cumprod kernel vs reference on the simulator, max abs difference {difference.max_error:.2g}; "
          f"kernel launches on sim {ledger['kernel_launches']}")
    assert difference.ok and ledger["kernel_launches"]["mynpu.cumprod"] == 1, difference

# %%
# **Exercise 2.** The cut is greedy, in execution order. Three regions means dense + bias alone
# (x, w, b and h: 1,312 bytes) must fit, and leaky ReLU with log_softmax (h, a and y: 1,536
# bytes) must not: any size from 1,312 to 1,535 bytes. Below 1,312 the fused dense + bias fits
# in no region, so the matmul and the add are matched as two instructions: four regions.


def exercise_2(scratchpad):
    _, report = partition_report(mod, DeviceProfile(name=f"mynpu-{scratchpad}", max_region_bytes=scratchpad))
    return list(report.regions.values())


if ANSWERS:
    assert size["x"] + size["w"] + size["b"] + size["h"] == 1312 and size["h"] + size["a"] + size["y"] == 1536
    split = {scratchpad: exercise_2(scratchpad) for scratchpad in (1311, 1312, 1400, 1535, 1536)}
    for scratchpad, regions in split.items():
        print(f"exercise 2: a {scratchpad}-byte scratchpad: {len(regions)} regions {regions}")
    for scratchpad in (1312, 1400, 1535):
        assert split[scratchpad] == [["simaccel.dense_bias"], ["mynpu.leaky_relu"], ["mynpu.log_softmax"]]
    assert len(split[1536]) == 2
    assert split[1311] == [["simaccel.dense"], ["simaccel.add"], ["mynpu.leaky_relu"], ["mynpu.log_softmax"]]

# %%
# **Exercise 3.** Nothing: TVM aligns its buffers to 64 bytes only, so no tensor it hands over
# can be relied on to meet 128, and every op mynpu could run stays on TVM with that reason.


def exercise_3():
    _, report = partition_report(mod, DeviceProfile(name="mynpu-dma128", alignment=128))
    return report


if ANSWERS:
    report = exercise_3()
    print("exercise 3: partition report with a 128-byte DMA alignment:")
    print(report.format())
    assert report.regions == {}
    assert all(reason.endswith("profile mynpu-dma128 needs 128-byte aligned tensors; TVM aligns its buffers to 64 bytes")
               for _, op, reason in report.kept if op != "relax.cumprod")
