"""The models nobody tuned for (torch_models.UNTUNED_NAMES, issue 21) at their "small" size:
each exports with torch.export, partitions with a reason for every op kept on TVM, and on the
`ref` engine computes what TVM alone and torch compute; batch-norm statistics are calibrated;
scripts/untuned_models_gpu.py runs end to end on the CPU.

torch and torchvision come with the `torch` extra; without them these tests skip and say why.
The GPU timings are the script's (results/gpu/). Each model costs a torch.export, two TVM
builds for the CPU and one run of each: about 5-15 s here, most of it TVM's LLVM compile.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the torch.export tests need torch and torchvision: pip install '.[torch]' "
                    "after the test extra (README: one command cannot install both)")
pytest.importorskip("torchvision", reason="the torch.export tests need torchvision: pip install '.[torch]'")

from compare import assert_same  # noqa: E402
from harness import compare_with_tvm, small_torch_model  # noqa: E402
from simaccel.tvm_integration import partition_report  # noqa: E402
from simaccel.tvm_integration.tools import model_bench, torch_models  # noqa: E402
from simaccel.tvm_integration.tools.models import random_inputs  # noqa: E402

# What the small models' partitions were when recorded (2026-12-01): at most this many regions,
# and nothing kept on TVM beyond these Relax ops. Offloading more passes; a model that falls
# apart into more regions, or leaves a new kind of op on TVM, fails and shows its report.
RECORDED = {
    "mobilenet_v3_small": (1, set()),
    "efficientnet_b0": (1, set()),
    "squeezenet1_1": (4, {"relax.nn.max_pool2d", "relax.zeros_like"}),  # ceil-mode pools (and their indices)
    "shufflenet_v2_x0_5": (2, {"relax.split"}),  # the channel split of the stride-1 blocks
    "regnet_y_400mf": (1, set()),
    "googlenet": (6, {"relax.nn.max_pool2d"}),  # ceil-mode pools
    "convnext_tiny": (1, set()),
    # The causal and padding masks are constants, folded at build time; split is strided slices;
    # nn.gelu_tanh is simaccel.gelu_tanh: each model is one region with nothing kept.
    "gpt_decoder": (1, set()),
    "padded_encoder": (1, set()),
}
# Built on simaccel, these do not compile yet; strict, so the fix shows and the mark goes.


def test_every_model_has_a_recorded_partition():
    assert set(RECORDED) == set(torch_models.UNTUNED_NAMES)
    assert not set(torch_models.UNTUNED_NAMES) & set(torch_models.MODEL_NAMES)
    assert torch_models.ALL_NAMES == torch_models.MODEL_NAMES + torch_models.UNTUNED_NAMES


@pytest.mark.parametrize("name", torch_models.UNTUNED_NAMES)
def test_an_untuned_model_partitions_into_few_regions_and_says_why_it_keeps_ops(name):
    _, mod = small_torch_model(name)
    partitioned, report = partition_report(mod)
    max_regions, may_stay = RECORDED[name]
    assert 1 <= len(report.regions) <= max_regions, report.format()
    assert {op for _, op, _ in report.kept} <= may_stay, report.format()
    assert all(reason for _, _, reason in report.kept), report.format()
    summary = model_bench.partition_summary(report, partitioned)  # what the GPU script reports
    assert summary["kept_total"] == len(report.kept) and summary["offloaded_counts"] == "calls"
    distinct = {op for ops in report.regions.values() for op in ops}
    assert set(summary["offloaded"]) == distinct  # every composite is called, and only those
    assert summary["offloaded_total"] >= sum(len(ops) for ops in report.regions.values()) > 0


@pytest.mark.parametrize("name", torch_models.UNTUNED_NAMES)
def test_an_untuned_model_matches_tvm_alone_and_torch(name):
    model, mod = small_torch_model(name)
    arrays = random_inputs(mod, seed=1)
    got, _, ledger = compare_with_tvm(mod, "ref", arrays=arrays)
    assert ledger["offloaded_calls"] >= 1
    first = got[0] if isinstance(got, list) else got
    assert_same(first, model.run(arrays[0]).astype(first.dtype), "float32", name=f"{name} against torch")


@pytest.mark.parametrize("name", torch_models.UNTUNED_NAMES)
def test_outputs_neither_vanish_nor_explode(name):
    # Random weights with calibrated statistics: the outputs are real numbers to compare.
    model, _ = small_torch_model(name)
    out = model.run(np.random.default_rng(0).standard_normal(model.input_shape).astype(np.float32))
    assert np.isfinite(out).all()
    assert 1e-3 < float(out.std()) < 1e2, (name, float(out.std()))


def test_batch_norm_statistics_are_calibrated_in_train_mode():
    import torch

    nn = torch.nn
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8))
    assert torch_models.calibrate_batch_norm(net, torch, (1, 3, 12, 12), seed=0, batches=4, batch=16)
    assert not net.training and all(m.momentum == 0.1 for m in (net[1], net[4]))
    for norm in (net[1], net[4]):
        assert norm.num_batches_tracked.item() == 4
        assert not torch.allclose(norm.running_var, torch.ones(8))
        assert not torch.allclose(norm.weight, torch.ones(8)) and not torch.allclose(norm.bias, torch.zeros(8))
    with torch.no_grad():  # in eval mode each normalised channel is close to N(bias, weight^2)
        first = net[1](net[0](torch.randn(64, 3, 12, 12)))
        mean, std = first.mean(dim=(0, 2, 3)), first.std(dim=(0, 2, 3))
    assert torch.allclose(mean, net[1].bias, atol=0.1), (mean, net[1].bias)
    assert torch.allclose(std, net[1].weight, rtol=0.15), (std, net[1].weight)
    assert not torch_models.calibrate_batch_norm(nn.Linear(2, 2), torch, (1, 2), seed=0)


def test_the_old_models_keep_their_batch_norm_calibrated_too():
    import torch

    model = torch_models.load("resnet18", "small")
    norms = [m for m in model.module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and all(m.num_batches_tracked.item() == 3 for m in norms)
    assert not model.module.training


def test_a_missing_model_lists_every_set():
    from simaccel import SimAccelError

    with pytest.raises(SimAccelError, match="no torch model named 'resnet19'; the models are resnet18, .*, "
                                            "mobilenet_v3_small, .*padded_encoder"):
        torch_models.load("resnet19")


def _script():
    path = Path(__file__).resolve().parents[1] / "scripts" / "untuned_models_gpu.py"
    spec = importlib.util.spec_from_file_location("untuned_models_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_script_runs_on_the_cpu(tmp_path):
    script = _script()
    assert script.model_list("untuned") == list(torch_models.UNTUNED_NAMES)
    assert script.model_list("all")[-4:] == list(torch_models.MODEL_NAMES)
    with pytest.raises(SystemExit, match="unknown models"):
        script.model_list("padded_encoder,resnet19")
    rc = script.main([str(tmp_path), "--device", "cpu", "--size", "small", "--models", "padded_encoder",
                      "--repeat", "2"])
    assert rc == 0
    report = json.loads((tmp_path / "untuned-models.json").read_text())
    entry = report["models"]["padded_encoder"]
    assert entry["check"] == "ok" and entry["mismatch_vs_tvm_only"] is None, entry
    assert entry["tvm_only_vs_torch"] is None and entry["engine"] == "ref"
    assert set(entry["median_us"]) == {"tvm_only", "simaccel_native", "torch"}
    assert all(v > 0 for v in entry["median_us"].values())
    assert entry["kernels"] is None  # no CUPTI on the CPU
    # The padding mask offloads (its arange is a constant, folded at build time): nothing kept.
    partition = entry["partition"]
    assert partition["regions"] == 1 and partition["kept"] == {}, partition
    assert partition["offloaded"]["simaccel.where"] == 1 and partition["offloaded"]["simaccel.softmax"] == 1, partition
    table = (tmp_path / "untuned-models.md").read_text()
    assert "| padded_encoder |" in table and "## Partitions" in table and "simaccel.where x1" in table
