"""
Your first accelerator
======================

You are building an accelerator, *mynpu*, and you will integrate it into Apache TVM through
BYOC (Bring Your Own Codegen). simaccel stands in for the hardware: you declare mynpu's
instructions, and simaccel derives the Relax patterns, the check functions, the codegen and
the runtime from the declarations. This first stage needs no GPU and no kernel:

1. declare two instructions in a namespace of your own, ``mynpu.leaky_relu`` and
   ``mynpu.log_softmax`` (simaccel's own ISA has neither: it leaves both to TVM);
2. write a small Relax model that uses them, beside ops that must stay on TVM;
3. partition it and read the partition report: what went to mynpu, what stayed, and why;
4. run it on the ``ref`` engine (numpy references) and compare with TVM alone;
5. export the library and run it again in a fresh process.

Run it with ``python tutorials/01_first_accelerator.py`` (about half a minute on a 2-core
CPU). Every claim below is checked by an ``assert`` beside it, so the file fails when one
stops being true. The exercises at the end come with answers that run only when you ask for
them (``--answers``), so that you can try each one first.
"""

# %%
# Set-up
# ------
# The declarations live in ``mynpu_ops.py``, a module beside this tutorial, because a
# process that never imports them cannot run a mynpu region (step 5 shows it). The folder
# goes on ``sys.path`` (a notebook runs in its own folder, which is there already).
# ``show`` prints a definition of that module as its file has it; ``single`` makes a Relax
# module of one expression, and ``tvm_alone`` runs one with TVM alone. ``ANSWERS``: whether the
# exercises' answers run (``python tutorials/01_first_accelerator.py --answers``).

import ast
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

import simaccel
from simaccel.compare import array_difference, assert_same
from simaccel.ops import ShapeError, declared, list_ops
from simaccel.tvm_integration import build, build_tvm_only, partition_report

HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
sys.path.insert(0, str(HERE))
ANSWERS = "--answers" in sys.argv[1:] or os.environ.get("SIMACCEL_TUTORIAL_ANSWERS") == "1"


def show(module, *names):
    """Print the top-level definitions `names` of `module`, as its source file has them."""
    source = Path(module.__file__).read_text()
    print(f"# {Path(module.__file__).name}: {', '.join(names)}")
    for node in ast.parse(source).body:
        defined = [node.name] if hasattr(node, "name") else [t.id for t in getattr(node, "targets", [])]
        if set(defined) & set(names):
            print(ast.get_source_segment(source, node), end="\n\n")


def single(expression, shape, dtype="float32"):
    """A Relax module whose main(x) returns `expression(x)`."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(expression(x))
        bb.emit_func_output(out)
    return bb.get()


def tvm_alone(expression, data):
    """`expression` of `data`, computed by TVM alone on the CPU."""
    executable = build_tvm_only(single(expression, data.shape, str(data.dtype)))
    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()


# %%
# Step 1: declare the instructions
# --------------------------------
# Before any declaration, simaccel leaves both ops to TVM:

both = single(lambda x: relax.op.nn.log_softmax(relax.op.nn.leakyrelu(x, alpha=0.1)), (2, 4))
_, before = partition_report(both)
print("partition report, before any declaration:")
print(before.format())
assert before.regions == {} and [reason for _, _, reason in before.kept] == [
    "simaccel has no pattern for relax.nn.leakyrelu", "simaccel has no pattern for relax.nn.log_softmax"]

# %%
# An instruction is one ``OpFamily`` passed to ``simaccel.ops.declare``. Importing
# ``mynpu_ops`` runs its two declarations, and the same module then goes to mynpu, in one
# region:

import mynpu_ops  # noqa: E402  declares mynpu.leaky_relu and mynpu.log_softmax

assert {"mynpu.leaky_relu", "mynpu.log_softmax"} <= set(list_ops())
_, after = partition_report(both)
print("partition report, after importing mynpu_ops:")
print(after.format())
assert list(after.regions.values()) == [["mynpu.leaky_relu", "mynpu.log_softmax"]] and after.kept == []

# %%
# Each declaration names the Relax call it replaces (``pattern``), its attributes and how
# they come from Relax (``attrs``, ``from_relax``), its output shape (``infer``), its numpy
# reference (``reference``) and its kernel launcher (``kernel``). For leaky ReLU:

show(mynpu_ops, "leaky_relu", "leaky_relu_from_relax", "same_shape", "LEAKY_RELU")

# %%
# The reference is the instruction's meaning: what the ``ref`` engine runs and what the kernels
# of stage 2 are checked against. It must compute what TVM computes, down to the sign of a
# zero: TVM's leaky ReLU is ``select(x > 0, x, x * alpha)``, so ``-0.0`` stays ``-0.0``. Here
# is TVM alone on the same values:

x = np.array([[-2.0, -0.0, 0.5, 3.0]], dtype="float32")
y = mynpu_ops.leaky_relu(x, alpha=0.1)
by_tvm = tvm_alone(lambda v: relax.op.nn.leakyrelu(v, alpha=0.1), x)
print(f"leaky_relu(x, alpha=0.1) of x = {x}: reference {y}, TVM alone {by_tvm}")
np.testing.assert_array_equal(y, by_tvm)
assert np.signbit(y[0, 1]) and np.signbit(by_tvm[0, 1]), "leaky_relu(-0.0) is -0.0"

# %%
# log_softmax normalises the last axis only. Its ``from_relax`` raises ``Reject`` for any other
# axis, with a reason the partition report will show, and its shape rule raises
# ``ShapeError`` for a tensor with no axis at all:

show(mynpu_ops, "log_softmax", "log_softmax_from_relax", "last_axis", "LOG_SOFTMAX")

rows = mynpu_ops.log_softmax(np.random.default_rng(0).standard_normal((3, 5)).astype("float32"))
assert_same(np.exp(rows).sum(axis=-1), np.ones(len(rows), "float32"), name="each row's probabilities summed")
try:
    mynpu_ops.last_axis([()])
    raise AssertionError("a 0-d tensor has no last axis to normalise")
except ShapeError as e:
    print(f"expected: the shape rule refuses a 0-d tensor with a ShapeError: {e}")

# %%
# The kernels are *named*: ``kernel="mynpu_kernels:launch_leaky_relu"``. simaccel imports that
# module on the first launch, and this stage launches nothing, so it has not been imported:

assert "mynpu_kernels" not in sys.modules

# %%
# Step 2: a model
# ---------------
# A dense layer with a bias, leaky ReLU and log_softmax, all three for mynpu (the dense layer
# is one of simaccel's built-in instructions), and two ops that must stay on TVM: ``cumprod``,
# which no instruction implements, and a log_softmax over axis 0, which ours refuses.
#
# ::
#
#     h = x @ w^T + b                   simaccel.dense_bias  (built in)
#     a = leaky_relu(h, alpha=0.1)      mynpu.leaky_relu
#     y = log_softmax(a)                mynpu.log_softmax    (the last axis)
#     z = log_softmax(cumprod(a), 0)     TVM, both


import mynpu_model  # noqa: E402  the model, in a module so stages 2 and 3 use the same one

show(mynpu_model, "model")
model = mynpu_model.model

mod = model()
print("the model, as TVMScript:")
print(mod.script())

# %%
# Step 3: partition, and read the report
# --------------------------------------
# ``partition_report`` partitions the module as the build will (patterns, check functions,
# merging neighbouring matches into regions) and says where every op went:

partitioned, report = partition_report(mod)
print("partition report of the model:")
print(report.format())

# %%
# One region holds the dense layer and both mynpu instructions, in that order; a built-in op
# and users' ops share regions. Each op left to TVM comes with its reason: no instruction
# matches ``cumprod``, and the axis-0 log_softmax was matched and then refused by our
# ``from_relax``, whose message the report quotes.

[(region, ops)] = report.regions.items()
assert ops == ["simaccel.dense_bias", "mynpu.leaky_relu", "mynpu.log_softmax"]
kept = {op: reason for _, op, reason in report.kept}
assert kept == {
    "relax.cumprod": "simaccel has no pattern for relax.cumprod",
    "relax.nn.log_softmax": "mynpu.log_softmax rejected: log_softmax over axis 0 of a rank-2 tensor "
                            "(mynpu normalises the last axis only)",
}

# %%
# The region is a Relax function marked for the ``simaccel`` codegen. TVM's cumprod still needs
# ``a``, so the region hands ``a`` back as a second output beside ``y``:

function = partitioned[region]
assert function.attrs["Codegen"] == "simaccel"
returned = function.ret_ty  # the Relax type it returns
print("the region returns:", returned)
assert len(returned.fields) == 2

# %%
# Step 4: run on ``ref`` and compare with TVM alone
# -------------------------------------------------
# ``build`` is partition + codegen + ``tvm.compile``; ``build_tvm_only`` compiles the same
# module with TVM alone, the reference every simaccel result is checked against, here by
# ``simaccel.compare``'s rule, the one every simaccel tool judges results by (NaN and
# infinities where the reference has them, every other element within the dtype's
# tolerance, ``atol`` times 1 + the output's largest magnitude: ``scaled=True``). The ``ref``
# engine runs each instruction's numpy reference on TVM's own buffers: with ``ledger.tracing``
# on, the ledger records the address of every tensor a region is handed.

simaccel_exec, tvm_exec = build(mod), build_tvm_only(mod)
rng = np.random.default_rng(0)
inputs = [rng.standard_normal(shape).astype("float32") for shape in [(16, 8), (8, 8), (8,)]]
tensors = [tvm.runtime.tensor(a) for a in inputs]

runtime = simaccel.get_runtime()
runtime.ledger.reset()
runtime.ledger.tracing = True
try:
    with runtime.use_engine("ref"):
        results = relax.VirtualMachine(simaccel_exec, tvm.cpu())["main"](*tensors)
finally:
    runtime.ledger.tracing = False
got = [t.numpy() for t in results]
want = [t.numpy() for t in relax.VirtualMachine(tvm_exec, tvm.cpu())["main"](*tensors)]
read = [e["address"] for e in runtime.ledger.trace() if e["role"] == "input"]
written = [e["address"] for e in runtime.ledger.trace() if e["role"] == "output"]
assert sorted(read) == sorted(t.data_ptr() for t in tensors)  # x, w and b, where the caller put them
assert results[0].data_ptr() in written  # y, in the buffer the VM returned
for name, g, w in zip("yz", got, want):
    print(f"{name} {g.shape}: max abs difference from TVM alone {np.abs(g - w).max():.2g}")
    assert_same(g, w, name=name, scaled=True)

# %%
# The ledger counts what simaccel did: one region call, each instruction once, no kernel
# launched (``ref`` runs references, not kernels), and no byte copied. Still no kernel module
# imported:

ledger = runtime.ledger.snapshot()
print("ledger after one call on ref:",
      {key: ledger[key] for key in ("offloaded_calls", "ops", "kernel_launches", "bytes")})
assert ledger["offloaded_calls"] == 1
assert ledger["ops"] == {"simaccel.dense_bias": 1, "mynpu.leaky_relu": 1, "mynpu.log_softmax": 1}
assert sum(ledger["kernel_launches"].values()) == 0
assert sum(ledger["bytes"].values()) == 0
assert "mynpu_kernels" not in sys.modules

# %%
# Step 5: export, and run again in a fresh process
# ------------------------------------------------
# ``export_library`` writes one shared library: TVM's compiled code and the region, which calls
# simaccel's runtime when it runs. A deployment loads it with TVM alone;
# TVM's ``tvm.backends`` entry point loads simaccel's runtime on ``import tvm``. The script
# below is such a deployment: it imports nothing but TVM and numpy.

workspace = tempfile.TemporaryDirectory(prefix="mynpu-tutorial-")  # removed when Python exits
workdir = Path(workspace.name)
library = workdir / "mynpu_model.so"
simaccel_exec.export_library(str(library))
np.savez(workdir / "inputs.npz", *inputs)

DEPLOY = """
import sys
import numpy as np
import tvm
library, inputs, outputs = sys.argv[1:]
print("simaccel loaded by import tvm:", "simaccel" in sys.modules)
vm = tvm.runtime.vm.VirtualMachine(tvm.runtime.load_module(library), tvm.cpu())
with np.load(inputs) as data:
    args = [tvm.runtime.tensor(data[f"arr_{i}"]) for i in range(len(data.files))]
np.savez(outputs, *[t.numpy() for t in vm["main"](*args)])
"""


def deploy(env):
    """Run the deployment script in a fresh Python; (completed process, outputs or None)."""
    out = workdir / "outputs.npz"
    out.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-c", DEPLOY, str(library), str(workdir / "inputs.npz"), str(out)],
                          capture_output=True, text=True, timeout=300, cwd=workdir, env=env)
    if not out.exists():
        return done, None
    with np.load(out) as data:
        return done, [data[f"arr_{i}"] for i in range(len(data.files))]


# %%
# The fresh process has never imported ``mynpu_ops``, so the first region call fails, and the
# error says what to do: name the module in ``$SIMACCEL_OPS``.

without = {k: v for k, v in os.environ.items() if k != "SIMACCEL_OPS"}
done, outputs = deploy(without)
error = done.stderr.strip().splitlines()[-1]  # the exception's last line: "module.Class: message"
kind, _, message = error.partition(": ")
print(f"expected: without $SIMACCEL_OPS the fresh process fails (exit status {done.returncode}) "
      f"with {kind.rsplit('.', 1)[-1]}: {message.split('; known ops:')[0]}")
assert done.returncode != 0 and outputs is None
assert kind == "simaccel.errors.UnsupportedOpError"
assert message.startswith("op 'mynpu.leaky_relu' is not in the simaccel ISA") and "name it in $SIMACCEL_OPS" in message

# %%
# With ``$SIMACCEL_OPS`` naming the module (a ``.py`` path, or a module name on the path),
# simaccel imports it when the region first looks an op up, and the reloaded library gives
# exactly the outputs it gave in this process:

done, outputs = deploy({**without, "SIMACCEL_OPS": str(HERE / "mynpu_ops.py")})
print(f"with $SIMACCEL_OPS the fresh process exits {done.returncode}; it printed: {done.stdout.strip()}")
assert done.returncode == 0, done.stderr
assert "simaccel loaded by import tvm: True" in done.stdout
for g, o in zip(got, outputs):
    np.testing.assert_array_equal(o, g)

# %%
# Exercises
# ---------
# Try each one before you read its answer, in the next section. The answers run only when you
# ask: ``python tutorials/01_first_accelerator.py --answers`` (or ``SIMACCEL_TUTORIAL_ANSWERS=1``
# in the environment) runs them and checks them, as the tests do.
#
# **Exercise 1: add a third instruction.** mynpu also has a running product over the last axis.
# Declare ``mynpu.cumprod`` so that ``cumprod`` joins the region, and check the result against
# TVM alone.
#
# **Exercise 2: which op stays on TVM, and how would you move it?** After exercise 1 the only
# op left is the log_softmax over axis 0. Rewrite the model so that mynpu runs it, and show
# that the result does not change.
#
# **Exercise 3: float16.** Does the same model in float16 go to mynpu too?

if not ANSWERS:
    print("answers: not run (run this file with --answers, or SIMACCEL_TUTORIAL_ANSWERS=1, to run and check them)")

# %%
# Next: ``02_kernels_and_constraints.py`` writes the kernels and gives mynpu a device profile.

# %%
# Answers
# -------
# **Exercise 1.** The same parts as the other two: the reference is numpy's cumprod and
# ``from_relax`` refuses any axis but the last. The kernel is named but not written yet
# (``mynpu_kernels`` has no ``launch_cumprod``; stage 2's exercise writes one): the ``ref``
# engine never looks a kernel up. ``declared`` declares the family for a ``with`` block and
# forgets it after, so the rest of the tutorial sees the ISA as before.

from simaccel.ops import OpFamily, Reject, relax_op  # noqa: E402


def cumprod_reference(data):
    return np.cumprod(data.astype(np.float32), axis=-1)


def cumprod_from_relax(match):
    rank, axis = len(match.shapes["data"]), match.attrs["axis"]
    if rank == 0 or axis is None or axis % rank != rank - 1:
        raise Reject(f"cumprod over axis {axis} (mynpu multiplies along the last axis only)")
    return {}


CUMPROD = OpFamily(
    name="mynpu.cumprod", inputs=("data",), pattern=relax_op("relax.cumprod", "data"),
    from_relax=cumprod_from_relax, infer=lambda shapes: shapes[0], reference=cumprod_reference,
    kernel="mynpu_kernels:launch_cumprod", doc="running product over the last axis")


def exercise_1():
    """(ops of the one region, ops kept on TVM, how each output differs from TVM alone's)."""
    with declared(CUMPROD):
        _, report = partition_report(mod)
        with runtime.use_engine("ref"):
            result = relax.VirtualMachine(build(mod), tvm.cpu())["main"](*tensors)
        differences = [array_difference(r.numpy(), w, scaled=True) for r, w in zip(result, want)]
    return list(report.regions.values()), [op for _, op, _ in report.kept], differences


if ANSWERS:
    regions, kept_ops, differences = exercise_1()
    print(f"exercise 1: regions {regions}; kept on TVM {kept_ops}; max abs difference from TVM alone "
          f"{max(d.max_error for d in differences):.2g}")
    assert regions == [["simaccel.dense_bias", "mynpu.leaky_relu", "mynpu.log_softmax", "mynpu.cumprod"]]
    assert kept_ops == ["relax.nn.log_softmax"] and all(d.ok for d in differences), differences
    assert "mynpu.cumprod" not in list_ops()  # forgotten after the with-block
    assert "mynpu_kernels" not in sys.modules  # the named kernel was never looked up

# %%
# **Exercise 2.** It stays because mynpu normalises the last axis only (its ``from_relax`` says
# so). A log_softmax over axis 0 is the transpose of a log_softmax over the last axis of the
# transpose, and ``permute_dims`` is a built-in instruction, so transposing around it moves the
# whole chain to mynpu.


def exercise_2():
    """(ops of each region, ops kept on TVM, the model's outputs on ``ref``)."""
    bb = relax.BlockBuilder()
    x, w, b = mod["main"].params
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            h = bb.emit(relax.op.add(relax.op.matmul(x, relax.op.permute_dims(w)), b))
            a = bb.emit(relax.op.nn.leakyrelu(h, alpha=0.1))
            y = bb.emit(relax.op.nn.log_softmax(a))
            c = bb.emit(relax.op.permute_dims(relax.op.cumprod(a, axis=1)))
            z = bb.emit(relax.op.permute_dims(relax.op.nn.log_softmax(c)))
            out = bb.emit_output(relax.Tuple([y, z]))
        bb.emit_func_output(out)
    rewritten = bb.get()
    with declared(CUMPROD):
        _, report = partition_report(rewritten)
        with runtime.use_engine("ref"):
            result = relax.VirtualMachine(build(rewritten), tvm.cpu())["main"](*tensors)
            outputs = [t.numpy() for t in result]
    return list(report.regions.values()), report.kept, outputs


if ANSWERS:
    regions, kept, outputs = exercise_2()
    errors = [float(np.abs(o - w).max()) for o, w in zip(outputs, want)]
    print(f"exercise 2: regions {regions}; kept on TVM {kept}; max abs difference of y, z from TVM alone "
          f"{errors[0]:.2g}, {errors[1]:.2g}")
    assert kept == []
    assert [op for ops in regions for op in ops].count("mynpu.log_softmax") == 2
    for name, o, w in zip("yz", outputs, want):
        assert_same(o, w, name=name, scaled=True)

# %%
# **Exercise 3.** Yes: a family takes float32, float16 and bfloat16 unless it declares
# ``dtypes``, and the default device profile takes them all, so the partition is the same. (Stage 2 makes a device
# that takes float32 only.)


def exercise_3():
    _, report = partition_report(model("float16"))
    return list(report.regions.values()), [op for _, op, _ in report.kept]


if ANSWERS:
    f16_regions, f16_kept = exercise_3()
    print(f"exercise 3: the float16 model's regions {f16_regions}; kept on TVM {f16_kept}")
    assert (f16_regions, f16_kept) == ([ops], ["relax.cumprod", "relax.nn.log_softmax"])
    assert mynpu_ops.LEAKY_RELU.dtypes == mynpu_ops.LOG_SOFTMAX.dtypes == ("float32", "float16", "bfloat16")
    assert {"float32", "float16"} <= set(simaccel.DEFAULT_PROFILE.dtypes)
