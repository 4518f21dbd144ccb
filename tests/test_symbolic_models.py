"""Symbolic shapes end to end: models with dynamic dims, partitioned, built once and run at
several shapes, against TVM alone (and torch, for exported models).

Covers the TVM layer of symbolic regions: size vars and their bounds read from
`tir_var_*_bound`, shape values and TVM's `tir_vars` passed to a region as shape arguments,
derived dims (`b * s`, `m + 1`), and their native regions in a CUDA build.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R, tirx as T

from simaccel.compare import array_difference
from simaccel.errors import SimAccelError
from simaccel.tvm_integration.backend.partition import partition_report
from simaccel.tvm_integration.backend.pipeline import build, build_tvm_only


def run(executable, *arrays):
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*(tvm.runtime.tensor(a) for a in arrays))
    return out.numpy()


def check_at_shapes(mod, make_inputs, shapes, engine="ref", reference=None):
    """Build `mod` once with simaccel and once with TVM alone; at each shape, the outputs match."""
    import simaccel

    ours, theirs = build(mod, "llvm"), build_tvm_only(mod, "llvm")
    runtime = simaccel.get_runtime()
    for shape in shapes:
        arrays = make_inputs(shape)
        with runtime.use_engine(engine):
            got = run(ours, *arrays)
        want = run(theirs, *arrays)
        assert got.shape == want.shape
        found = array_difference(got, want, scaled=True)
        assert found.ok, f"{shape}: {found.reason}"
        if reference is not None:
            assert array_difference(got, reference(*arrays), scaled=True).ok


# -- Relax models written here: derived dims -------------------------------------------------
@tvm.script.ir_module
class CacheAppend:
    """A decode step's cache: (m, 8) cache and one new row -> (m + 1, 8), then a projection."""

    @R.function
    def main(cache: R.Tensor(("m", 8), "float32"), new: R.Tensor((1, 8), "float32"),
             w: R.Tensor((8, 8), "float32")) -> R.Tensor(("m + 1", 8), "float32"):
        m = T.int64()
        R.func_attr({"tir_var_upper_bound": {"m": 64}})
        with R.dataflow():
            grown = R.concat((cache, new), axis=0)
            out = R.nn.relu(R.matmul(grown, w))
            R.output(out)
        return out


@tvm.script.ir_module
class Flattened:
    """(b, s, 16) -> (b * s, 16) @ w -> (b, s, 4): the reshapes around every Linear of a transformer."""

    @R.function
    def main(x: R.Tensor(("b", "s", 16), "float32"), w: R.Tensor((16, 4), "float32")) -> R.Tensor(("b", "s", 4), "float32"):
        b = T.int64()
        s = T.int64()
        R.func_attr({"tir_var_upper_bound": {"b": 4, "s": 32}})
        with R.dataflow():
            h = R.reshape(x, R.shape([b * s, 16]))
            y = R.nn.relu(R.matmul(h, w))
            out = R.reshape(y, R.shape([b, s, 4]))
            R.output(out)
        return out


def _rng(shape):
    return np.random.default_rng(sum(shape) + len(shape))


def test_a_grown_cache_offloads_and_matches_at_every_length():
    _, report = partition_report(CacheAppend)
    assert report.kept == [] and len(report.regions) == 1, report.format()
    w = _rng((8,)).standard_normal((8, 8)).astype("float32")
    check_at_shapes(CacheAppend, lambda m: [_rng((m,)).standard_normal((m, 8)).astype("float32"),
                                            np.ones((1, 8), "float32"), w], [1, 7, 64])


def test_derived_dims_bind_from_the_tensors_of_each_call():
    _, report = partition_report(Flattened)
    assert report.kept == [], report.format()
    w = _rng((16,)).standard_normal((16, 4)).astype("float32")
    check_at_shapes(Flattened, lambda bs: [_rng(bs).standard_normal((*bs, 16)).astype("float32"), w],
                    [(1, 1), (3, 5), (4, 32)],
                    reference=lambda x, w: np.maximum(x.reshape(-1, 16) @ w, 0).reshape(*x.shape[:2], 4))


def test_the_simulator_runs_a_symbolic_region_at_two_shapes():
    w = _rng((16,)).standard_normal((16, 4)).astype("float32")
    check_at_shapes(Flattened, lambda bs: [_rng(bs).standard_normal((*bs, 16)).astype("float32"), w],
                    [(1, 1), (2, 3)], engine="sim")


def test_a_shape_past_its_upper_bound_is_an_error_naming_the_var():
    import simaccel

    ours = build(Flattened, "llvm")
    x, w = np.zeros((5, 2, 16), "float32"), np.zeros((16, 4), "float32")
    with pytest.raises(Exception) as caught:
        run(ours, x, w)
    assert "b" in str(caught.value) and "5" in str(caught.value) and "[0, 4]" in str(caught.value)
    assert isinstance(caught.value, simaccel.SimAccelError) or "ShapeError" in str(caught.value)


def test_a_symbolic_region_reads_its_vars_and_bounds():
    from simaccel.tvm_integration.backend import codegen

    partitioned = partition_report(Flattened)[0]
    regions = [f for f in partitioned.functions.values() if f.attrs is not None and "Codegen" in f.attrs]
    program = codegen.region_program(str(regions[0].attrs["global_symbol"]), regions[0], codegen.sync_patterns())
    assert [v.name for v in program.vars] == ["b", "s"] and [v.upper for v in program.vars] == [4, 32]


def _Heads():
    """Self-attention of 4 heads as GPT-style code writes it: one qkv projection split in three,
    heads by view and transpose, then the last token's output (x[:, -1]) plus the mean over the
    sequence. With a dynamic sequence, the split and the pick read a symbolic axis or its length."""
    import torch

    class Heads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(32, 96), torch.nn.Linear(32, 32)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (z.view(b, t, 4, 8).transpose(1, 2) for z in self.qkv(x).split(32, dim=-1))
            a = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, dim=-1) @ v
            y = self.out(a.transpose(1, 2).reshape(b, t, 32))
            return y[:, -1, :] + y.mean(1)

    torch.manual_seed(0)
    return Heads()


@tvm.script.ir_module
class Windows:
    """A 3x3 convolution (padded), relu and a 2x2 max pooling over a dynamic batch, height and
    width: the output sizes are expressions whose range the bounds decide."""

    @R.function
    def main(x: R.Tensor(("b", 3, "h", "w"), "float32"), k: R.Tensor((8, 3, 3, 3), "float32")):
        b = T.int64()
        h = T.int64()
        w = T.int64()
        R.func_attr({"tir_var_lower_bound": {"b": 1, "h": 3, "w": 4},
                     "tir_var_upper_bound": {"b": 4, "h": 32, "w": 40}})
        with R.dataflow():
            y = R.nn.max_pool2d(R.nn.relu(R.nn.conv2d(x, k, padding=[1, 1, 1, 1])), pool_size=[2, 2], strides=[2, 2])
            R.output(y)
        return y


def _symbolic_models():
    return {"Flattened": Flattened, "SizesPassed": SizesPassed, "CacheAppend": CacheAppend, "Windows": Windows}


def _torch_model(name):
    """(torch model, its Relax module exported with Dim, shapes to run, per-sample shape): the
    encoder layer (batch <= 8, seq <= 64), the CNN (batch <= 16) or the fully convolutional net
    (batch <= 8, height 8..32, width 8..40) the symbolic tests share."""
    torch = pytest.importorskip("torch")
    from torch.export import Dim

    torch.manual_seed(0)
    if name == "encoder":
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32),
                                    torch.nn.LayerNorm(32))
        mod = _exported(model, torch.randn(2, 5, 32), {0: Dim("batch", max=8), 1: Dim("seq", max=64)})
        return model, mod, [(1, 1), (3, 7), (8, 64)], (32,)
    if name == "heads":  # multi-head attention: split, heads, and the last token's row
        model = _Heads()
        mod = _exported(model, torch.randn(2, 5, 32), {0: Dim("batch", max=8), 1: Dim("seq", max=64)})
        return model, mod, [(1, 1), (3, 7), (8, 64)], (32,)
    if name == "fcn":  # convolutions and a pooling over a dynamic height and width
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                    torch.nn.Conv2d(8, 4, 3), torch.nn.Sigmoid())
        dynamic = {0: Dim("batch", max=8), 2: Dim("height", min=8, max=32), 3: Dim("width", min=8, max=40)}
        mod = _exported(model, torch.randn(2, 3, 16, 20), dynamic)
        return model, mod, [(1, 3, 8, 8), (3, 3, 17, 23), (8, 3, 32, 40)], ()
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10))
    mod = _exported(model, torch.randn(2, 3, 16, 16), {0: Dim("batch", max=16)})
    return model, mod, [(1,), (5,), (16,)], (3, 16, 16)


def _built_natively(mod, target, caplog):
    """`build(mod, target)`, asserting that the build logs no region as a Python one."""
    import logging

    with caplog.at_level(logging.INFO, logger="simaccel.codegen"):
        executable = build(mod, target)
    assert not [r.message for r in caplog.records if "Python region" in r.message]
    return executable


@pytest.mark.parametrize("name", ["Flattened", "SizesPassed", "CacheAppend", "Windows", "encoder", "cnn", "fcn",
                                  "heads"])
def test_a_cuda_build_makes_every_symbolic_region_native(name, tmp_path, caplog):
    """Each region of a CUDA build is a native one (size plans, sizes.h), none a Python region;
    the exported library exports every region's function. Their results are the GPU tests'."""
    import subprocess

    from simaccel.tvm_integration.backend.native import has_native_regions

    mod = _torch_model(name)[1] if name in ("encoder", "cnn", "fcn", "heads") else _symbolic_models()[name]
    _, report = partition_report(mod)
    executable = _built_natively(mod, "nvidia/nvidia-h100", caplog)
    assert has_native_regions(executable)
    executable.export_library(str(tmp_path / "model.so"))
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(tmp_path / "model.so")],
                             capture_output=True, text=True, check=True).stdout
    assert report.regions and all(f"__tvm_ffi_{region}" in symbols for region in report.regions)


# -- torch.export models with Dim ------------------------------------------------------------------
def _exported(model, example, dynamic):
    torch = pytest.importorskip("torch")
    from torch.export import export
    from tvm.relax.frontend.torch import from_exported_program

    with torch.no_grad():
        program = export(model.eval(), (example,), dynamic_shapes=(dynamic,))
    return from_exported_program(program, unwrap_unit_return_tuple=True)


def _torch_reference(model):
    import torch

    def reference(x):
        with torch.no_grad():
            return model(torch.from_numpy(x)).numpy()
    return reference


def test_a_cnn_with_a_dynamic_batch_offloads_as_its_static_twin():
    model, dynamic, _, _ = _torch_model("cnn")
    import torch

    static = _exported(model, torch.randn(2, 3, 16, 16), {})
    offloaded = [sum(len(ops) for ops in partition_report(m)[1].regions.values()) for m in (dynamic, static)]
    assert offloaded[0] >= offloaded[1] > 0
    check_at_shapes(dynamic, lambda n: [_rng((n,)).standard_normal((n, 3, 16, 16)).astype("float32")],
                    [1, 5, 16], reference=_torch_reference(model))


def test_convolutions_over_a_dynamic_height_and_width_offload_as_their_static_twin():
    """A convolution's output height (h + 2 - 3)//1 + 1 and a pooling's (h - 2)//2 + 1 are
    expressions whose order against 0 the bounds decide (h >= 8), so the whole net is one region,
    as its static twin, and matches TVM alone and torch at three sizes."""
    import torch

    model, mod, shapes, _ = _torch_model("fcn")
    static = _exported(model, torch.randn(2, 3, 16, 20), {})
    dynamic_report, static_report = (partition_report(m)[1] for m in (mod, static))
    assert list(dynamic_report.regions.values()) == list(static_report.regions.values())
    assert len(dynamic_report.regions) == 1 and not dynamic_report.kept
    check_at_shapes(mod, lambda shape: [_rng(shape).standard_normal(shape).astype("float32")], shapes,
                    reference=_torch_reference(model))


@tvm.script.ir_module
class WindowsPastTheData:
    """A 1x2 convolution and a 1x2 pooling over a width w in [1, 11]: their output width w - 1 is
    0 at w = 1, where TVM alone gives an empty tensor."""

    @R.function
    def main(x: R.Tensor((1, 2, 4, "w"), "float32"), k: R.Tensor((3, 2, 1, 2), "float32")):
        w = T.int64()
        R.func_attr({"tir_var_upper_bound": {"w": 11}})
        with R.dataflow():
            y = R.nn.relu(R.nn.conv2d(x, k))
            z = R.nn.max_pool2d(x, pool_size=[1, 2])
            R.output(y, z)
        return (y, z)


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_a_window_past_the_data_gives_an_empty_output_as_tvm_alone(engine):
    """A window's output is required to be at least 0 at each call (what TVM alone runs), not at
    least 1: every width the bounds allow runs, the empty one included."""
    import simaccel

    report = partition_report(WindowsPastTheData)[1]
    assert len(report.regions) == 2 and not report.kept, report.format()
    ours, theirs = build(WindowsPastTheData, "llvm"), build_tvm_only(WindowsPastTheData, "llvm")
    k = _rng((3,)).standard_normal((3, 2, 1, 2)).astype("float32")
    for width in (1, 2, 11):
        x = _rng((width,)).standard_normal((1, 2, 4, width)).astype("float32")
        with simaccel.get_runtime().use_engine(engine):
            got = relax.VirtualMachine(ours, tvm.cpu())["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(k))
        want = relax.VirtualMachine(theirs, tvm.cpu())["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(k))
        for g, t in zip(got, want):
            assert g.numpy().shape == t.numpy().shape == (1, g.numpy().shape[1], 4, width - 1)
            assert array_difference(g.numpy(), t.numpy(), scaled=True).ok


@tvm.script.ir_module
class RepeatedHeads:
    """repeat_kv as transformers writes it, over a symbolic batch: (b, 2, 1, 8, 16) broadcast to
    (b, 2, 3, 8, 16) (rank 5, 3 broadcast dims once merged), then a rank-6 add of a scale per
    (head, group, channel) (4 dims once merged); and a rank-5 where between (b, 2, 1, 8, 16)
    and a (1, 1, 1, 8, 16) branch."""

    @R.function
    def main(x: R.Tensor(("b", 2, 8, 16), "float32"), g: R.Tensor((1, 1, 2, 3, 1, 16), "float32"),
             h: R.Tensor((1, 1, 8, 16), "float32")):
        b = T.int64()
        R.func_attr({"tir_var_upper_bound": {"b": 9}})
        with R.dataflow():
            e = R.expand_dims(x, axis=[2])
            r: R.Tensor((b, 2, 3, 8, 16), "float32") = R.broadcast_to(e, R.shape([b, 2, 3, 8, 16]))
            s = R.add(R.expand_dims(r, axis=[0]), g)
            y = R.expand_dims(R.multiply(x, R.const(2.0, "float32")), axis=[2])
            m = R.where(R.less(y, R.const(0.0, "float32")), y, R.expand_dims(h, axis=[0]))
            R.output(s, m)
        return (s, m)


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_broadcasts_of_rank_5_and_6_offload_and_match_tvm_alone_at_every_size(engine):
    """Broadcasting ops of rank 5 and 6 (shapes that merge into at most 4 broadcast dims) offload,
    nothing kept on TVM, one build run at batch 1, a middle size and the upper bound."""
    from simaccel.testing import assert_matches_tvm, assert_offloads

    assert_offloads(RepeatedHeads, ["simaccel.broadcast_to", "simaccel.add", "simaccel.where"], kept=0)
    assert_matches_tvm(RepeatedHeads, sizes=[{"b": 1}, {"b": 4}, {"b": 9}], engines=[engine])


@tvm.script.ir_module
class ReadsOfSymbolicShapes:
    """Ops of several kinds reading results whose shape is given by a shape value of size vars:
    a rank-4 and a rank-5 `broadcast_to` and a `reshape` (FuseOpsByPattern types such a call by
    rank only; the retyping passes give it, and what reads it, the shape back)."""

    @R.function
    def main(x: R.Tensor(("b", 8, 16), "float32"), k: R.Tensor(("b", 2, 8, 16), "float32"),
             w: R.Tensor((16, 16), "float32")):
        b = T.int64()
        R.func_attr({"tir_var_upper_bound": {"b": 9}})
        with R.dataflow():
            r = R.broadcast_to(R.expand_dims(x, axis=[1]), R.shape([b, 3, 8, 16]))
            m = R.where(R.less(r, R.const(0.0, "float32")), R.multiply(r, R.const(2.0, "float32")), r)
            p = R.nn.softmax(R.matmul(m, w), axis=-1)
            q = R.broadcast_to(R.expand_dims(k, axis=[2]), R.shape([b, 2, 3, 8, 16]))
            g = R.sum(R.exp(R.subtract(q, R.const(1.0, "float32"))), axis=[4])
            f = R.reshape(q, R.shape([b, 2, 3, 128]))
            h = R.add(f, R.reshape(p, R.shape([b, 1, 3, 128])))
            R.output(g, h)
        return (g, h)


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_ops_reading_a_symbolic_broadcast_or_reshape_offload_and_match_tvm_alone(engine):
    """Elementwise ops, a where, a matmul, a softmax and a sum reading symbolic broadcast_to and
    reshape results offload (nothing kept on TVM, one region) and match TVM alone at batch 1,
    a middle size and the upper bound, from one build."""
    from simaccel.testing import assert_matches_tvm

    _, report = partition_report(ReadsOfSymbolicShapes)
    assert report.kept == [], report.kept
    assert len(report.regions) == 1, report.regions
    ops = next(iter(report.regions.values()))
    for op in ("simaccel.broadcast_to", "simaccel.where", "simaccel.matmul", "simaccel.softmax", "simaccel.sum",
               "simaccel.reshape", "simaccel.add"):
        assert op in ops, (op, ops)
    assert_matches_tvm(ReadsOfSymbolicShapes, sizes=[{"b": 1}, {"b": 4}, {"b": 9}], engines=[engine])


@tvm.script.ir_module
class PackedSequences:
    """transformers' packed-sequence check over a symbolic sequence: each row's position diffs
    (the positions sliced, shifted and subtracted on axis -1, with min/max dims that only the
    bound s >= 2 makes equal), the places where a diff is not 1, their running or (a bool
    cumsum), then a float mask of it. TVM 0.27 builds none of it: the subtract is typed by rank
    only, a slice on axis -1 with a symbolic end does not legalize, nor does a bool cumsum."""

    @R.function
    def main(pos: R.Tensor(("b", "s"), "int64"), h: R.Tensor(("b", "s"), "float32")):
        b = T.int64()
        s = T.int64()
        R.func_attr({"tir_var_lower_bound": {"s": 2}, "tir_var_upper_bound": {"b": 4, "s": 64}})
        with R.dataflow():
            first = R.subtract(R.strided_slice(pos, (1,), (0,), (1,), (1,)), R.const(1, "int64"))
            shifted = R.concat((first, pos), axis=-1)
            diff = R.subtract(R.strided_slice(shifted, (-1,), (1,), (s + 1,), (1,)),
                              R.strided_slice(shifted, (-1,), (0,), (s,), (1,)))
            packed = R.cumsum(R.not_equal(diff, R.const(1, "int64")), axis=-1)
            out = R.multiply(R.where(packed, R.const(-1.0, "float32"), R.const(1.0, "float32")), h)
            R.output(out)
        return out


def packed_sequences(pos, h):
    diff = np.diff(pos, axis=-1, prepend=pos[:, :1] - 1)
    return np.where(np.cumsum(diff != 1, axis=-1, dtype=bool), -1.0, 1.0).astype(np.float32) * h


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_dims_the_bounds_decide_are_cast_and_a_symbolic_mask_chain_builds_and_matches_numpy(engine):
    """The min/max dims are cast to what the bounds give (one match_cast), so the subtract, the
    comparison, the cumsum (bool) and the float ops after them have shapes and offload; the
    slices whose end reads s (which no input has as a whole dim) stay on TVM, with their axis
    counted from 0. One build, at the lower bound, a middle size and the upper bounds, with
    positions that restart (packed sequences) and ones that do not."""
    import simaccel

    _, report = partition_report(PackedSequences)
    assert any("min/max dim(s) that the size bounds decide" in note for note in report.rewritten), report.rewritten
    offloaded = {op for ops in report.regions.values() for op in ops}
    assert {"simaccel.cumsum", "simaccel.not_equal", "simaccel.integer_subtract", "simaccel.where"} <= offloaded, offloaded
    kept = {op: why for _, op, why in report.kept}
    assert set(kept) == {"relax.strided_slice"} and "no input has as a whole dim" in kept["relax.strided_slice"], kept
    executable = build(PackedSequences, "llvm")
    rng = np.random.default_rng(0)
    with simaccel.get_runtime().use_engine(engine):
        for b, s in ((1, 2), (3, 9), (4, 64)):
            pos = np.tile(np.arange(s, dtype=np.int64), (b, 1))
            pos[b - 1, s // 2:] -= s // 2  # a second sequence packed after the first
            h = rng.standard_normal((b, s)).astype(np.float32)
            got = run(executable, pos, h)
            np.testing.assert_array_equal(got, packed_sequences(pos, h))
            signs = packed_sequences(pos, np.ones_like(h))  # both kinds of row are there
            assert signs[b - 1].min() < 0 and (b == 1 or signs[0].min() > 0)


@tvm.script.ir_module
class SliceToTheBound:
    """``x[:, :8]`` of a (b, s) tensor where s <= 8: TVM types it (b, min(8, s)), which the bound
    makes s. A match_cast to a bare size var sends TVM 0.27's build into endless recursion (a
    segfault), so that dim is left as TVM wrote it."""

    @R.function
    def main(x: R.Tensor(("b", "s"), "float32")):
        b = T.int64()
        s = T.int64()
        R.func_attr({"tir_var_upper_bound": {"b": 4, "s": 8}})
        with R.dataflow():
            w = R.strided_slice(x, (1,), (0,), (8,), (1,))
            q = R.add(w, w)
            R.output(q)
        return q


def test_a_dim_the_bound_makes_a_bare_size_var_is_not_cast_and_the_model_builds():
    from simaccel.testing import assert_matches_tvm

    _, report = partition_report(SliceToTheBound)
    assert not any("min/max dim(s)" in note for note in report.rewritten), report.rewritten
    assert_matches_tvm(SliceToTheBound, sizes=[{"b": 1, "s": 1}, {"b": 4, "s": 8}], engines=["ref"], expect_offload=False)


@tvm.script.ir_module
class BroadcastAcrossAKeptOp:
    """A symbolic broadcast_to (its shape value reads b, which x lacks) before an op kept on TVM
    (sort), grouped with ops after it: TVM's MergeCompositeFunctions made a region without the
    broadcast's binding, and the build failed (CodegenError)."""

    @R.function
    def main(x: R.Tensor((1, "s"), "float32"), a: R.Tensor(("b", "s"), "float32")):
        b = T.int64()
        s = T.int64()
        R.func_attr({"tir_var_lower_bound": {"s": 2}, "tir_var_upper_bound": {"s": 16, "b": 4}})
        with R.dataflow():
            bt = R.broadcast_to(x, R.shape([b, s]))
            sl = R.sort(R.strided_slice(a, (1,), (0,), (1,), (1,), assume_inbound=True), axis=1)
            out = R.nn.relu(R.concat((R.subtract(sl, R.const(1.0, "float32")), bt), axis=-1))
            R.output(out)
        return out


def test_a_region_that_would_lose_a_shape_argument_call_keeps_those_calls_on_tvm_and_matches():
    from simaccel.testing import assert_matches_tvm

    _, report = partition_report(BroadcastAcrossAKeptOp)
    kept = {op: why for _, op, why in report.kept}
    assert "MergeCompositeFunctions dropped" in kept["relax.broadcast_to"], kept
    assert "simaccel.concat" in {op for ops in report.regions.values() for op in ops}
    assert_matches_tvm(BroadcastAcrossAKeptOp, sizes=[{"b": 1, "s": 2}, {"b": 4, "s": 16}], engines=["ref", "sim"])


@tvm.script.ir_module
class SliceOfAGrownAxis:
    """``y[:, :s]`` of a (b, s + 1) tensor: its end reads s, which only z defines."""

    @R.function
    def main(y: R.Tensor(("b", "s + 1"), "float32"), z: R.Tensor(("b", "s"), "float32")):
        b = T.int64()
        s = T.int64()
        R.func_attr({"tir_var_upper_bound": {"b": 4, "s": 16}})
        with R.dataflow():
            out = R.nn.relu(R.add(R.strided_slice(y, (1,), (0,), (s,), (1,)), z))
            R.output(out)
        return out


def test_a_slice_tvm_cannot_fuse_stays_on_tvm_with_its_reason_and_the_rest_matches():
    """FuseOpsByPattern failed inside on this slice (prim.if_then_else has no type rule), and so
    did partitioning the model; the slice now stays on TVM and what reads it offloads."""
    from simaccel.testing import assert_matches_tvm

    _, report = partition_report(SliceOfAGrownAxis)
    assert [(op, "its end reads the size var(s) s" in why) for _, op, why in report.kept] == [("relax.strided_slice", True)]
    assert_matches_tvm(SliceOfAGrownAxis, inputs=[np.ones((2, 6), np.float32), -np.ones((2, 5), np.float32) / 2],
                       engines=["ref", "sim"])
    assert_matches_tvm(SliceOfAGrownAxis, sizes=[{"b": 1, "s": 1}, {"b": 4, "s": 16}], engines=["ref"])


def test_split_heads_and_the_last_token_offload_as_their_static_twin():
    """A split of a static axis, x[:, -1] on the dynamic sequence (a slice from its length,
    required to be at least 1 at each call), and broadcasts that only repeat what a matmul
    broadcasts (`s + 1` and `1 + s` being one dim): as in the static twin, all one region."""
    import torch

    model, mod, shapes, _ = _torch_model("heads")
    dynamic_report = partition_report(mod)[1]
    static_report = partition_report(_exported(model, torch.randn(2, 5, 32), {}))[1]
    assert list(dynamic_report.regions.values()) == list(static_report.regions.values())
    assert len(dynamic_report.regions) == 1 and not dynamic_report.kept, dynamic_report.format()
    # TVM alone is the one wrong here: its take of index -1 in "fast" mode (torch's x[:, -1]) reads
    # out of bounds, so the model is checked against torch, on the ref and sim engines
    import simaccel

    ours, theirs = build(mod, "llvm"), build_tvm_only(mod, "llvm")
    reference = _torch_reference(model)
    for engine, sizes in (("ref", shapes), ("sim", shapes[:2])):
        for bs in sizes:
            x = _rng(bs).standard_normal((*bs, 32)).astype("float32")
            with simaccel.get_runtime().use_engine(engine):
                found = array_difference(run(ours, x), reference(x), scaled=True)
            assert found.ok, f"{engine} at {bs}: {found.reason}"
    x = _rng((2, 3)).standard_normal((2, 3, 32)).astype("float32")
    assert not array_difference(run(theirs, x), reference(x), scaled=True).ok


def test_attention_over_a_grown_kv_cache_offloads_as_its_static_twin():
    """A decode step: the cache (b, m, 16) grown by one row, a query attending over the m + 1 rows,
    and the grown cache returned; one build matches TVM alone and torch at three cache lengths."""
    torch = pytest.importorskip("torch")
    from torch.export import Dim, export
    from tvm.relax.frontend.torch import from_exported_program

    class Step(torch.nn.Module):
        def forward(self, cache, new, q):
            kv = torch.cat([cache, new], dim=1)
            return torch.softmax(q @ kv.transpose(-1, -2), dim=-1) @ kv, kv

    example = (torch.randn(2, 7, 16), torch.randn(2, 1, 16), torch.randn(2, 1, 16))
    batch = Dim("batch", max=8)
    with torch.no_grad():
        mod, static = (from_exported_program(export(Step(), example, dynamic_shapes=d), unwrap_unit_return_tuple=True)
                       for d in (({0: batch, 1: Dim("m", max=128)}, {0: batch}, {0: batch}), None))
    dynamic_report, static_report = partition_report(mod)[1], partition_report(static)[1]
    assert list(dynamic_report.regions.values()) == list(static_report.regions.values())
    assert not dynamic_report.kept, dynamic_report.format()
    ours, theirs = build(mod, "llvm"), build_tvm_only(mod, "llvm")
    for b, m in ((1, 1), (3, 40), (8, 128)):
        arrays = [_rng((b, m, k)).standard_normal(shape).astype("float32")
                  for k, shape in enumerate([(b, m, 16), (b, 1, 16), (b, 1, 16)])]
        got, want = ([o.numpy() for o in relax.VirtualMachine(e, tvm.cpu())["main"](*map(tvm.runtime.tensor, arrays))]
                     for e in (ours, theirs))
        with torch.no_grad():
            expected = [t.numpy() for t in Step()(*map(torch.from_numpy, arrays))]
        for g, w, e in zip(got, want, expected, strict=True):
            assert g.shape == (b, 1, 16) or g.shape == (b, m + 1, 16)
            assert array_difference(g, w, scaled=True).ok and array_difference(g, e, scaled=True).ok, (b, m)


def test_an_encoder_with_dynamic_batch_and_sequence_matches_at_each_shape():
    layer, mod, _, _ = _torch_model("encoder")
    _, report = partition_report(mod)
    assert report.kept == [], report.format()
    check_at_shapes(mod, lambda bs: [_rng(bs).standard_normal((*bs, 32)).astype("float32")],
                    [(1, 1), (3, 7), (8, 64)], reference=_torch_reference(layer))


@tvm.script.ir_module
class SizesPassed:
    """A region whose tensors show b and s only as b * s: TVM passes it their values as a shape
    argument (`tir_vars`), which the Program binds them from."""

    @R.function
    def main(x: R.Tensor(("b", "s", 16), "float32"), w: R.Tensor((16, 4), "float32")) -> R.Tensor(("b", "s", 4), "float32"):
        b = T.int64()
        s = T.int64()
        R.func_attr({"tir_var_upper_bound": {"b": 4, "s": 32}})
        with R.dataflow():
            h = R.nn.log_softmax(R.reshape(x, R.shape([b * s, 16])))  # log_softmax stays on TVM
            out = R.reshape(R.nn.relu(R.matmul(h, w)), R.shape([b, s, 4]))
            R.output(out)
        return out


def _sizes_passed_inputs(bs):
    return [_rng(bs).standard_normal((*bs, 16)).astype("float32"), _rng((16,)).standard_normal((16, 4)).astype("float32")]


def test_sizes_passed_as_a_shape_argument_bind_the_region():
    partitioned, report = partition_report(SizesPassed)
    regions = [f for f in partitioned.functions.values() if f.attrs is not None and "Codegen" in f.attrs]
    with_sizes = [f for f in regions if any(isinstance(p.ty, relax.ShapeType) for p in f.params)]
    assert with_sizes, "no region takes a shape argument: the test no longer covers tir_vars"
    check_at_shapes(SizesPassed, _sizes_passed_inputs, [(1, 1), (3, 5), (4, 32)])


def test_an_exported_symbolic_library_runs_in_a_fresh_process(tmp_path):
    import subprocess
    import sys

    build(SizesPassed, "llvm").export_library(str(tmp_path / "model.so"))
    want = {}
    theirs = build_tvm_only(SizesPassed, "llvm")
    for bs in [(1, 1), (2, 7), (4, 32)]:
        np.savez(tmp_path / f"in_{bs[0]}_{bs[1]}.npz", *_sizes_passed_inputs(bs))
        want[bs] = run(theirs, *_sizes_passed_inputs(bs))
    code = (
        "import sys, numpy as np, tvm\nfrom tvm import relax\nimport simaccel.tvm_integration\n"
        "vm = relax.VirtualMachine(tvm.runtime.load_module(sys.argv[1] + '/model.so'), tvm.cpu())\n"
        "for b, s in [(1, 1), (2, 7), (4, 32)]:\n"
        "    a = np.load(f'{sys.argv[1]}/in_{b}_{s}.npz')\n"
        "    out = vm['main'](*(tvm.runtime.tensor(a[k]) for k in sorted(a.files))).numpy()\n"
        "    np.save(f'{sys.argv[1]}/out_{b}_{s}.npy', out)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    for (b, s), expected in want.items():
        assert array_difference(np.load(tmp_path / f"out_{b}_{s}.npy"), expected, scaled=True).ok


# -- on a GPU ----------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["Flattened", "SizesPassed", "CacheAppend", "Windows"])
def test_one_cuda_build_matches_tvm_alone_at_every_shape_with_no_host_copies(name, clean_runtime, caplog):
    """A CUDA build: symbolic regions are native (size plans bound per call in C++, zero-copy,
    on TVM's stream) and match at each shape TVM alone's CUDA build of the same module (its CPU
    build where TVM cannot build it for CUDA); no byte goes through the host."""
    from simaccel.tvm_integration.backend.pipeline import default_target

    mod = _symbolic_models()[name]
    shapes = {"Flattened": [(1, 1), (3, 5), (4, 32)], "SizesPassed": [(1, 1), (3, 5), (4, 32)],
              "CacheAppend": [(1,), (7,), (64,)], "Windows": [(1, 3, 4), (2, 17, 9), (4, 32, 40)]}[name]
    target = default_target("cuda")
    ours = _built_natively(mod, target, caplog)
    try:
        theirs, their_device = build_tvm_only(mod, target), tvm.cuda(0)
    except tvm.error.InternalError:  # TVM alone's CUDA build of a dynamic concat: "constant size stack allocation"
        theirs, their_device = build_tvm_only(mod, "llvm"), tvm.cpu()
    gpu = tvm.cuda(0)
    for shape in shapes:
        if name == "CacheAppend":
            arrays = [_rng(shape).standard_normal((shape[0], 8)).astype("float32"), np.ones((1, 8), "float32"),
                      _rng((8,)).standard_normal((8, 8)).astype("float32")]
        elif name == "Windows":
            b, h, w = shape
            arrays = [_rng(shape).standard_normal((b, 3, h, w)).astype("float32"),
                      _rng((3,)).standard_normal((8, 3, 3, 3)).astype("float32")]
        else:
            arrays = [_rng(shape).standard_normal((*shape, 16)).astype("float32"),
                      _rng((16,)).standard_normal((16, 4)).astype("float32")]
        outs = []
        for executable, device in ((ours, gpu), (theirs, their_device)):
            vm = relax.VirtualMachine(executable, device)
            outs.append(vm["main"](*(tvm.runtime.tensor(a, device) for a in arrays)).numpy())
        found = array_difference(outs[0], outs[1], scaled=True)
        assert found.ok, f"{name} at {shape}: {found.reason}"
    ledger = clean_runtime.ledger.snapshot()
    assert ledger["offloaded_calls"] >= len(shapes)
    assert ledger["bytes"]["host_to_device"] == ledger["bytes"]["device_to_host"] == 0


@tvm.script.ir_module
class StaticThenSymbolic:
    """A static part (relu of w @ w, which TVM's CUDA graphs can capture) feeding a symbolic one
    (x (n, 16) @ that, then tanh), each a simaccel region: a log_softmax between them stays on TVM."""

    @R.function
    def main(x: R.Tensor(("n", 16), "float32"), w: R.Tensor((16, 16), "float32")) -> R.Tensor(("n", 16), "float32"):
        n = T.int64()
        R.func_attr({"tir_var_upper_bound": {"n": 64}})
        with R.dataflow():
            square = R.nn.log_softmax(R.nn.relu(R.matmul(w, w)))
            out = R.tanh(R.matmul(x, square))
            R.output(out)
        return out


@pytest.mark.gpu
def test_tvm_cuda_graphs_run_a_model_with_symbolic_regions(clean_runtime, caplog):
    """Built with relax.backend.use_cuda_graph, a model with a static and a symbolic region:
    every call matches TVM alone's plain CUDA build at each size, twice over, with no host bytes.
    (TVM 0.27 captured no graph in this function, seen on an H100: both regions are called at
    each run, which the ledger counts.)"""
    from simaccel.tvm_integration.backend.pipeline import default_target

    target, gpu = default_target("cuda"), tvm.cuda(0)
    with tvm.transform.PassContext(config={"relax.backend.use_cuda_graph": True}):
        ours = relax.VirtualMachine(_built_natively(StaticThenSymbolic, target, caplog), gpu)
    theirs = relax.VirtualMachine(build_tvm_only(StaticThenSymbolic, target), gpu)
    w = tvm.runtime.tensor(_rng((16,)).standard_normal((16, 16)).astype("float32") / 4, gpu)
    for round_ in range(2):
        for n in (1, 9, 64):
            x = tvm.runtime.tensor(_rng((n, round_)).standard_normal((n, 16)).astype("float32"), gpu)
            found = array_difference(ours["main"](x, w).numpy(), theirs["main"](x, w).numpy(), scaled=True)
            assert found.ok, f"round {round_}, n = {n}: {found.reason}"
    ledger = clean_runtime.ledger.snapshot()
    assert ledger["bytes"]["host_to_device"] == ledger["bytes"]["device_to_host"] == 0
    assert ledger["regions"]["fused_relax_matmul_relax_tanh_simaccel"]["calls"] == 6  # the symbolic one, each run


@pytest.mark.gpu
def test_a_graph_captured_per_shape_replays_a_native_symbolic_region(clean_runtime):
    """A user captures TVM's stream (torch.cuda.graph) once per shape, after warm-up calls at
    that shape; the graphs, replayed in turn with new input contents, match TVM alone: the
    region's intermediates, sized for the upper bounds, stay where each graph holds them."""
    torch = pytest.importorskip("torch")
    import tvm_ffi
    from simaccel.tvm_integration.backend.pipeline import default_target

    target, gpu = default_target("cuda"), tvm.cuda(0)
    ours = relax.VirtualMachine(build(Flattened, target), gpu)
    theirs = relax.VirtualMachine(build_tvm_only(Flattened, target), gpu)
    w = tvm.runtime.tensor(_rng((16,)).standard_normal((16, 4)).astype("float32"), gpu)
    stream, graphs = torch.cuda.Stream(), {}
    with tvm_ffi.use_raw_stream(gpu, stream.cuda_stream), torch.cuda.stream(stream):
        for shape in ((2, 3), (4, 32), (1, 1)):
            x = tvm.runtime.tensor(_rng(shape).standard_normal((*shape, 16)).astype("float32"), gpu)
            for _ in range(3):
                ours["main"](x, w)
            stream.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                out = ours["main"](x, w)
            graphs[shape] = (graph, x, out)
    for seed in (5, 6):
        for shape, (graph, x, out) in graphs.items():
            x.copyfrom(np.random.default_rng([seed, *shape]).standard_normal((*shape, 16)).astype("float32"))
            graph.replay()
            torch.cuda.synchronize()
            found = array_difference(out.numpy(), theirs["main"](x, w).numpy(), scaled=True)
            assert found.ok, f"graph of shape {shape}, inputs {seed}: {found.reason}"


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["encoder", "cnn"])
def test_exported_dynamic_models_run_native_on_the_gpu_at_every_shape(name, clean_runtime, caplog):
    """torch.export models with Dim: one CUDA build, every region native, against TVM alone's CUDA
    build and torch at 1, a middle size and the upper bounds."""
    from simaccel.tvm_integration.backend.pipeline import default_target

    model, mod, shapes, per = _torch_model(name)
    target = default_target("cuda")
    ours = _built_natively(mod, target, caplog)
    theirs, gpu = build_tvm_only(mod, target), tvm.cuda(0)
    reference = _torch_reference(model)
    for shape in shapes:
        x = _rng(shape).standard_normal((*shape, *per)).astype("float32")
        outs = [relax.VirtualMachine(e, gpu)["main"](tvm.runtime.tensor(x, gpu)).numpy() for e in (ours, theirs)]
        for want, against in ((outs[1], "TVM alone"), (reference(x), "torch")):
            found = array_difference(outs[0], want, scaled=True)
            assert found.ok, f"{name} at {shape} against {against}: {found.reason}"
    ledger = clean_runtime.ledger.snapshot()
    assert ledger["bytes"]["host_to_device"] == ledger["bytes"]["device_to_host"] == 0


@pytest.mark.gpu
def test_split_heads_run_native_on_the_gpu_against_torch(clean_runtime, caplog):
    """The multi-head attention with x[:, -1]: one CUDA build, every region native, against torch
    at 1, a middle size and the upper bounds (TVM alone reads x[:, -1] out of bounds: not run)."""
    from simaccel.tvm_integration.backend.pipeline import default_target

    model, mod, shapes, per = _torch_model("heads")
    ours = relax.VirtualMachine(_built_natively(mod, default_target("cuda"), caplog), tvm.cuda(0))
    reference = _torch_reference(model)
    for shape in shapes:
        x = _rng(shape).standard_normal((*shape, *per)).astype("float32")
        found = array_difference(ours["main"](tvm.runtime.tensor(x, tvm.cuda(0))).numpy(), reference(x), scaled=True)
        assert found.ok, f"heads at {shape}: {found.reason}"
    ledger = clean_runtime.ledger.snapshot()
    assert ledger["bytes"]["host_to_device"] == ledger["bytes"]["device_to_host"] == 0


def test_an_attention_encoder_offloads_every_op_as_its_static_twin():
    """Attention with dynamic batch and sequence: TVM's fusion types some fused calls by rank only
    while matching; partitioning retypes them and matches again, so nothing stays on TVM."""
    torch = pytest.importorskip("torch")
    from torch.export import Dim

    class Encoder(torch.nn.Module):
        def __init__(self, d=32):
            super().__init__()
            self.q, self.k = torch.nn.Linear(d, d), torch.nn.Linear(d, d)
            self.up, self.down, self.norm = torch.nn.Linear(d, 64), torch.nn.Linear(64, d), torch.nn.LayerNorm(d)

        def forward(self, x):
            attention = torch.softmax(self.q(x) @ self.k(x).transpose(1, 2) / 5.0, dim=-1) @ x
            h = self.norm(x + attention)
            return self.norm(h + self.down(torch.relu(self.up(h))))

    torch.manual_seed(0)
    model = Encoder()
    dynamic = _exported(model, torch.randn(2, 5, 32), {0: Dim("batch", max=8), 1: Dim("seq", max=64)})
    static = _exported(model, torch.randn(2, 5, 32), {})
    reports = [partition_report(m)[1] for m in (dynamic, static)]
    assert reports[0].kept == [], reports[0].format()
    offloaded = [sum(len(ops) for ops in r.regions.values()) for r in reports]
    assert offloaded[0] >= offloaded[1]
    check_at_shapes(dynamic, lambda bs: [_rng(bs).standard_normal((*bs, 32)).astype("float32")],
                    [(1, 1), (3, 7), (8, 64)], reference=_torch_reference(model))


def test_the_sanitizer_and_the_trace_see_each_call_at_its_own_shape(tmp_path):
    import json

    import simaccel.debug as debug

    executable = build(SizesPassed, "llvm")
    theirs = build_tvm_only(SizesPassed, "llvm")
    with debug.sanitize():
        for bs in [(1, 1), (3, 5)]:
            got = run(executable, *_sizes_passed_inputs(bs))
            assert array_difference(got, run(theirs, *_sizes_passed_inputs(bs)), scaled=True).ok
    with debug.trace(tmp_path / "trace.json"):
        for bs in [(2, 3), (4, 32)]:
            run(executable, *_sizes_passed_inputs(bs))
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    shapes = [tuple(i["shape"]) for e in events if e.get("ph") == "X" and "inputs" in e.get("args", {})
              and "op" not in e["args"] for i in e["args"]["inputs"] if i["name"] == "x"]
    assert (2, 3, 16) in shapes and (4, 32, 16) in shapes, shapes


def test_simaccel_build_makes_inputs_at_the_sizes_given_and_run_checks_them(tmp_path, capsys):
    """`simaccel build MODEL.py --sizes b=3,s=5`: one library, inputs and TVM alone's outputs at
    those sizes; `simaccel run` matches. Missing sizes, sizes past a bound and a malformed
    --sizes are one-line errors."""
    from simaccel.tvm_integration.tools.build_library import module_source
    from simaccel.tvm_integration.tools.cli import main

    model = tmp_path / "model.py"
    model.write_text(module_source(Flattened))
    library = str(tmp_path / "model.so")
    assert main(["build", str(model), "-o", library, "--sizes", "b=3,s=5"]) == 0
    inputs = np.load(tmp_path / "model.inputs.npz")
    assert sorted(a.shape for a in inputs.values()) == [(3, 5, 16), (16, 4)]
    assert main(["run", library, "--inputs", str(tmp_path / "model.inputs.npz"),
                 "--expect", str(tmp_path / "model.expect.npz")]) == 0
    capsys.readouterr()
    assert main(["build", str(model), "-o", library]) == 2
    assert main(["build", str(model), "-o", library, "--sizes", "b=9,s=2"]) == 2
    assert main(["build", str(model), "-o", library, "--sizes", "b:3"]) == 2
    err = capsys.readouterr().err
    assert "--sizes b=2,s=2" in err and "b=9: outside the bounds [0, 4]" in err and "'b:3' is not NAME=N" in err


def test_whatif_models_a_symbolic_model_at_the_sizes_given(tmp_path):
    """The timing model at the bound shape: more bytes moved at b=4, s=32 than at b=1, s=1."""
    from simaccel.profile import DeviceProfile
    from simaccel.tvm_integration.tools.whatif import whatif

    profile = DeviceProfile.load(str(Path(__file__).resolve().parents[1] / "examples" / "profiles" / "h200.json"))
    small, large = (whatif(Flattened, [profile], sizes)[0] for sizes in ({"b": 1, "s": 1}, {"b": 4, "s": 32}))
    assert 0 < small.shares["memory"] < large.shares["memory"]
    with pytest.raises(SimAccelError, match=r"give them with --sizes \(b=N, s=N\)"):
        whatif(Flattened, [profile])
