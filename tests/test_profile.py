"""Device profiles: the accelerator's limits, honoured by partitioning (with reasons) and by the runtime."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from tvm import relax

from harness import compare_with_tvm, offloaded_ops
from model_zoo import single_op
from simaccel import LayoutError, ProgramError, SimAccelError, UnsupportedOpError
from simaccel.profile import DeviceProfile
from simaccel.runtime import Runtime
from simaccel.tvm_integration import partition_report
from simaccel.tvm_integration.backend.split import region_bytes

op = relax.op
F32 = "float32"


def mlp(batch=4, width=16):
    """x -> dense+bias+relu -> layer_norm -> dense -> softmax: four ops in one region by default."""
    def make(x, w1, b1, g, beta, w2):
        h = op.nn.relu(op.add(op.matmul(x, op.permute_dims(w1)), b1))
        return op.nn.softmax(op.matmul(op.nn.layer_norm(h, g, beta, axes=[-1]), w2))

    w = width
    return single_op(make, [((batch, w), F32), ((w, w), F32), ((w,), F32), ((w,), F32), ((w,), F32), ((w, w), F32)])


def regions(mod, profile):
    mod, report = partition_report(mod, profile)
    return mod, report, list(report.regions.values())


def test_two_profiles_give_two_different_correct_partitions():
    model = mlp()
    wide = DeviceProfile(name="wide")
    dense_only = DeviceProfile(name="dense-only", ops={"simaccel.dense"})  # a family: all its variants
    _, _, wide_regions = regions(model, wide)
    _, report, narrow_regions = regions(model, dense_only)
    assert wide_regions == [["simaccel.dense_bias_relu", "simaccel.layer_norm", "simaccel.matmul", "simaccel.softmax"]]
    assert narrow_regions == [["simaccel.dense_bias_relu"]]
    assert {k[1] for k in report.kept} == {"relax.nn.layer_norm", "relax.matmul", "relax.nn.softmax"}
    assert all("not enabled in profile dense-only" in k[2] for k in report.kept)
    for profile in (wide, dense_only):
        compare_with_tvm(model, "ref", profile=profile)


def test_a_tensor_over_the_profile_s_size_stays_on_tvm():
    model = mlp(batch=64)  # x and the hidden values are 64 x 16 x 4 = 4096 bytes
    _, report, found = regions(model, DeviceProfile(name="small-tensors", max_tensor_bytes=2048))
    assert set(sum(found, [])) <= {"simaccel.permute_dims"}  # only transposes of small weights fit
    assert any("takes 4096 bytes, more than profile small-tensors's 2048 per tensor" in k[2] for k in report.kept)


def test_a_region_over_the_scratchpad_is_split_into_parts_that_fit():
    model = mlp()
    default_mod, _, _ = regions(model, DeviceProfile())
    [whole] = [f for f in default_mod.functions.values() if f.attrs and f.attrs.get("Codegen")]
    limit = region_bytes(whole) // 2
    profile = DeviceProfile(name="scratchpad", max_region_bytes=limit)
    split_mod, report, parts = regions(model, profile)
    assert len(parts) >= 2 and sum(parts, []) == ["simaccel.dense_bias_relu", "simaccel.layer_norm",
                                                   "simaccel.matmul", "simaccel.softmax"]
    assert report.splits and f"of at most {limit} bytes" in report.splits[0]
    for func in split_mod.functions.values():
        if func.attrs and func.attrs.get("Codegen"):
            assert region_bytes(func) <= limit
    compare_with_tvm(model, "ref", profile=profile)
    compare_with_tvm(model, "sim", profile=profile)


def test_an_op_alone_over_the_scratchpad_stays_on_tvm():
    model = single_op(lambda x: op.nn.softmax(x), [((8, 8), F32)])  # 256 bytes in, 256 out
    _, report, found = regions(model, DeviceProfile(name="tiny", max_region_bytes=500))
    assert found == [] and "simaccel.softmax alone needs 512 bytes, more than profile tiny's 500-byte scratchpad" in report.kept[0][2]


def test_an_alignment_tvm_cannot_promise_is_a_reason():
    model = single_op(lambda x: op.nn.softmax(x), [((8, 8), F32)])
    assert offloaded_ops(model) == ["simaccel.softmax"]
    _, report, found = regions(model, DeviceProfile(name="dma256", alignment=256))
    assert found == [] and "needs 256-byte aligned tensors; TVM aligns its buffers to 64 bytes" in report.kept[0][2]
    _, _, found = regions(model, DeviceProfile(name="dma64", alignment=64))
    assert found == [["simaccel.softmax"]]


def softmax_program():
    from simaccel.program import Program, TensorSpec, OpNode

    tensors = (TensorSpec("x", (4, 4), F32), TensorSpec("y", (4, 4), F32))
    return Program("p", tensors, (0,), (1,), (OpNode("simaccel.softmax", (0,), 1),))


def aligned(offset: int = 0) -> np.ndarray:
    """A (4, 4) float32 array whose data starts `offset` elements after a 64-byte boundary."""
    buffer = np.arange(16 + 16 + offset, dtype=np.float32)
    start = (-buffer.ctypes.data % 64) // 4 + offset
    return buffer[start:start + 16].reshape(4, 4)


def test_the_runtime_enforces_the_profile_s_alignment():
    runtime = Runtime(profile=DeviceProfile(name="dma64", alignment=64))
    x, y = aligned(), aligned()
    runtime.run(softmax_program(), x, y)
    assert np.allclose(y.sum(axis=-1), 1)
    misaligned = aligned(offset=1)
    with pytest.raises(LayoutError, match="input 'x' data pointer .* is not aligned to the 64 bytes profile dma64 needs"):
        runtime.run(softmax_program(), misaligned, y)


def test_the_runtime_refuses_a_program_over_the_scratchpad():
    with pytest.raises(ProgramError, match="needs 128 bytes, more than profile tiny's 100-byte scratchpad"):
        softmax_program().validate(DeviceProfile(name="tiny", max_region_bytes=100))
    softmax_program().validate(DeviceProfile(name="enough", max_region_bytes=128))


def test_profiles_from_json_and_bad_values(tmp_path):
    path = tmp_path / "edge.json"
    path.write_text(json.dumps({"name": "edge", "ops": ["simaccel.conv2d"], "dtypes": ["float16"], "max_region_bytes": 4096}))
    profile = DeviceProfile.load(str(path))
    assert profile.ops == frozenset({"simaccel.conv2d"}) and profile.dtypes == ("float16",)
    assert DeviceProfile.from_dict(profile.to_dict()) == profile
    for bad, message in [({"max_rank": -1}, "max_rank must be"), ({"alignment": 48}, "power of two"),
                         ({"max_region_bytes": 0}, "max_region_bytes must be"), ({"ops": "simaccel.conv2d"}, "ops must be a set"),
                         ({"scratchpad": 1}, "unknown field 'scratchpad'")]:
        with pytest.raises(SimAccelError, match=message):
            DeviceProfile.from_dict(bad)
    path.write_text("{not json")
    with pytest.raises(SimAccelError, match="device profile .*edge.json"):
        DeviceProfile.load(str(path))


@pytest.mark.parametrize("data", [[1, 2], [], "simaccel.conv2d", 3, 2.5, None, True, [{"name": "x"}]])
def test_a_profile_that_is_not_an_object_is_refused_as_such(tmp_path, data):
    with pytest.raises(SimAccelError, match=f"a device profile is an object of the fields .*got a {type(data).__name__}") as e:
        DeviceProfile.from_dict(data)
    assert "unknown" not in str(e.value)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SimAccelError, match="p.json: a device profile is an object"):
        DeviceProfile.load(str(path))


@pytest.mark.parametrize("names, unknown", [
    ({"simaccel.convv2d"}, ["simaccel.convv2d"]),                                   # a misspelt family
    ({"simaccel.conv2d", "simaccel.softmaxx"}, ["simaccel.softmaxx"]),              # one good, one not
    ({"conv2d"}, ["conv2d"]),                                                       # no namespace
    ({"simaccel.dense_bias_gelu", "myaccel.rms_norm", "simaccel.Dense"}, ["myaccel.rms_norm", "simaccel.Dense"]),
    ({"simaccel.conv2d_bias_gelu"}, ["simaccel.conv2d_bias_gelu"]),                  # a variant conv2d does not have
])
def test_a_profile_naming_ops_the_isa_lacks_is_refused_when_used(names, unknown):
    profile = DeviceProfile(name="typo", ops=names)  # users' ops may be declared later: not refused here
    with pytest.raises(UnsupportedOpError, match=re.escape(f"profile typo: ops {unknown} are neither ops nor op families")):
        partition_report(mlp(), profile)
    with pytest.raises(UnsupportedOpError, match="SIMACCEL_OPS"):
        profile.check_ops()


@pytest.mark.parametrize("names, offloaded", [({"simaccel.dense"}, True), ({"simaccel.dense_bias_relu", "simaccel.softmax"}, True),
                                               (None, True), (frozenset(), False)])
def test_a_profile_naming_only_isa_ops_and_families_is_used(names, offloaded):
    _, report = partition_report(mlp(), DeviceProfile(name="fine", ops=names))
    assert bool(report.regions) == offloaded and all("profile fine" in why for *_, why in report.kept), report.format()


@pytest.mark.parametrize("seed", [39, 90, 102, 200, 209])
def test_split_regions_of_drawn_models_equal_tvm(seed):
    """Drawn models cut to a 1 KiB scratchpad (seeds 90, 200 and 209 have regions that end in
    `gv = lv`, which the first split code did not follow) still compute what TVM alone does."""
    from simaccel.tvm_integration.tools.fuzz.models import Config, Draw, draw_case

    case = draw_case(Draw.seeded(seed), Config(specials_percent=0, zero_dim_percent=0))
    profile = DeviceProfile(name="scratch1k", max_region_bytes=1024)
    mod = case.bound_module()
    _, report = partition_report(mod, profile)
    for func in partition_report(mod, profile)[0].functions.values():
        if func.attrs and func.attrs.get("Codegen"):
            assert region_bytes(func) <= 1024
    compare_with_tvm(mod, "ref", arrays=case.runtime_arrays(), profile=profile, expect_offload=bool(report.regions))


def test_the_profile_in_the_environment_is_partitioning_s_and_the_runtime_s_default(tmp_path, monkeypatch):
    from simaccel.profile import DEFAULT_PROFILE, active_profile

    path = tmp_path / "fp16.json"
    path.write_text(json.dumps({"name": "fp16-only", "dtypes": ["float16"]}))
    monkeypatch.setenv("SIMACCEL_PROFILE", str(path))
    assert active_profile().name == "fp16-only" and Runtime().profile.name == "fp16-only"
    model = single_op(lambda x: op.nn.softmax(x), [((8, 8), F32)])
    _, report, found = regions(model, None)
    assert found == [] and "profile fp16-only" in report.kept[0][2]
    with pytest.raises(SimAccelError, match="float32 is not supported"):
        Runtime().run(softmax_program(), aligned(), aligned())
    path.write_text(json.dumps({"name": "wide"}))  # a changed file is read again
    import os

    os.utime(path, ns=(1, 1))
    assert active_profile().name == "wide"
    monkeypatch.setenv("SIMACCEL_PROFILE", str(tmp_path / "missing.json"))
    with pytest.raises(SimAccelError, match="SIMACCEL_PROFILE=.*missing.json"):
        active_profile()
    monkeypatch.delenv("SIMACCEL_PROFILE")
    assert active_profile() is DEFAULT_PROFILE
