"""The scripts in examples/ run and say what the README says they say.

Each example runs as a subprocess from the repository root, as a user would run it; the CPU
engines (`ref`, `sim`) run everywhere, the `gpu` tests where there is a GPU and the full TVM.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import forks

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args, env=None) -> subprocess.CompletedProcess:
    result = forks.run([sys.executable, str(EXAMPLES / name), *args], timeout=600, cwd=ROOT,
                       env={**os.environ, **(env or {})})
    print(result.stdout, result.stderr)  # shown by pytest when the test fails
    return result


def region_lines(stdout: str) -> list[str]:
    """The report's region listings: '<region symbol>: op -> op ...' lines."""
    return [line.strip() for line in stdout.splitlines() if re.match(r"^\s+fused_\S+: ", line)]


def reports(stdout: str) -> list[str]:
    """Each partition report printed by two_profiles.py, from its '== profile' line on."""
    return stdout.split("== profile ")[1:]


def test_the_rms_norm_declaration_stays_under_50_lines():
    lines = (EXAMPLES / "rms_norm_op.py").read_text().splitlines()
    assert len(lines) < 50, f"examples/rms_norm_op.py has {len(lines)} lines"


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_user_op_on_cpu_engines(engine):
    result = run_example("user_op.py", "--engine", engine)
    assert result.returncode == 0
    assert "RESULT: match" in result.stdout
    regions = region_lines(result.stdout)
    assert len(regions) == 1
    assert regions[0].endswith(": myaccel.rms_norm -> simaccel.dense_bias_relu"), regions
    assert "relax.nn.log_softmax: simaccel has no pattern for relax.nn.log_softmax" in result.stdout
    assert f"simaccel engine '{engine}'" in result.stdout
    launches = "1 launches" if engine == "sim" else "0 launches"
    assert f"myaccel.rms_norm x1 ({launches})" in result.stdout


def test_user_op_refuses_cuda_without_a_gpu():
    import tvm

    if tvm.cuda(0).exist:
        pytest.skip("this machine has a GPU")
    result = run_example("user_op.py", "--engine", "cuda")
    assert result.returncode == 2
    assert "no CUDA GPU" in result.stderr


def test_the_user_op_reaches_a_fresh_process_through_the_environment():
    # cwd "/": from the repository root, `python -m` would import the source folder simaccel/,
    # which is not the installed package (kernels/ and tvm_integration/ are installed into it).
    result = forks.run([sys.executable, "-m", forks.CLI, "ops"], timeout=300, cwd="/",
                       env={**os.environ, "SIMACCEL_OPS": str(EXAMPLES / "rms_norm_op.py")})
    assert result.returncode == 0, result.stderr
    line = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith("myaccel.rms_norm(")]
    assert line and line[0].startswith("myaccel.rms_norm(data, weight)") and "epsilon" in line[0], result.stdout


def test_two_profiles_give_two_correct_partitions():
    result = run_example("two_profiles.py")
    assert result.returncode == 0
    assert "RESULT: match" in result.stdout
    full, conv_only = reports(result.stdout)
    assert full.startswith("full:") and conv_only.startswith("conv-only:")
    assert region_lines(full) != region_lines(conv_only)
    assert [line.split(": ", 1)[1] for line in region_lines(full)] == [
        "simaccel.conv2d_bias_relu -> simaccel.conv2d_bias_relu -> simaccel.max_pool2d -> simaccel.reshape"
        " -> simaccel.dense_bias -> simaccel.softmax",
    ]
    assert [line.split(": ", 1)[1] for line in region_lines(conv_only)] == ["simaccel.conv2d_bias_relu"] * 2
    assert "split into 2 regions of at most 20000 bytes" in conv_only
    assert "op simaccel.max_pool2d is not enabled in profile conv-only" in conv_only
    assert "op simaccel.softmax is not enabled in profile conv-only" in conv_only
    assert "op simaccel.reshape is not enabled in profile conv-only" in conv_only
    assert len(re.findall(r"max abs error vs TVM alone = \S+: match\n", result.stdout)) == 2


def test_zero_copy_example_falls_back_to_the_cpu():
    result = run_example("zero_copy_gpu.py", "--device", "cpu", "--repeat", "3")
    assert result.returncode == 0
    assert "RESULT: match" in result.stdout
    assert "showing the same flow on the CPU" in result.stdout
    assert "pointer identity (the region read and wrote TVM's own buffers): yes" in result.stdout
    assert "NOT a buffer TVM handed over" not in result.stdout
    assert "zero-copy  : host->device 0 B, device->host 0 B, device->device 0 B; result matches" in result.stdout
    # TVM alone's untuned CPU dense is tens of times slower than numpy's here: the output says
    # what the ratio compares rather than leaving a bare "50x".
    times = " ".join(result.stdout[result.stdout.index("TVM alone  :"):].split())
    assert "on the CPU these ratios do not measure the accelerator" in times
    assert "numpy's BLAS matmul" in times and "untuned loops" in times and "needs a GPU" in times


def full_tvm_on_a_gpu():
    from simaccel.tvm_integration.tools.deploy import runtime_only

    if runtime_only():
        pytest.skip("the examples compile their models: needs the full TVM")


@pytest.mark.gpu
def test_user_op_on_the_gpu():
    full_tvm_on_a_gpu()
    result = run_example("user_op.py", "--engine", "cuda")
    assert result.returncode == 0
    assert "RESULT: match" in result.stdout
    assert region_lines(result.stdout)[0].endswith(": myaccel.rms_norm -> simaccel.dense_bias_relu")
    assert "run on cuda:0, simaccel engine 'cuda'" in result.stdout
    assert "myaccel.rms_norm x1 (1 launches)" in result.stdout
    assert "'host_to_device': 0, 'device_to_host': 0, 'device_to_device': 0" in result.stdout


@pytest.mark.gpu
def test_zero_copy_example_on_the_gpu():
    full_tvm_on_a_gpu()
    result = run_example("zero_copy_gpu.py", "--device", "cuda", "--repeat", "5")
    assert result.returncode == 0
    assert "RESULT: match" in result.stdout
    assert "on cuda:0" in result.stdout and "showing the same flow on the CPU" not in result.stdout
    assert "pointer identity (the region read and wrote TVM's own buffers): yes" in result.stdout
    assert "zero-copy  : host->device 0 B, device->host 0 B, device->device 0 B; result matches" in result.stdout
    staged = 4 * (64 * 256 + 512 * 256 + 512 + 64 * 512)  # h0, fc_w, fc_b in; h1 out; float32
    assert f"host-staged: host->device {staged} B, device->host {staged} B" in result.stdout


@pytest.mark.parametrize("engine", ["ref", "sim", "cuda"])
def test_torch_export_example_without_torch_says_how_to_install_it(tmp_path, engine):
    # A `torch` that cannot be found, whether or not this venv has the torch extra.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    result = run_example("torch_export.py", "--engine", engine, env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 2, result.stderr
    assert "pip install '.[torch]'" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_torch_export_example_with_a_broken_torch_shows_the_real_error(tmp_path):
    # torch installed but missing one of its own dependencies: not "install torch", the real error.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("import simaccel_no_such_dependency\n")
    result = run_example("torch_export.py", env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 1
    assert "No module named 'simaccel_no_such_dependency'" in result.stderr
    assert "pip install '.[torch]'" not in result.stderr


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_torch_export_example(engine):
    pytest.importorskip("torch", reason="examples/torch_export.py needs torch: pip install '.[torch]'")
    result = run_example("torch_export.py", "--engine", engine)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "RESULT: match" in result.stdout
    [region] = region_lines(result.stdout)
    assert region.endswith("simaccel.conv2d_bias -> simaccel.clip -> simaccel.reshape -> simaccel.conv2d_bias -> "
                           "simaccel.mean -> simaccel.dense_bias"), region
    assert "kept on TVM: 0 op(s)" in result.stdout
    assert "1 multiply by a per-channel constant folded into the weights of the conv2d before it" in result.stdout


@pytest.mark.parametrize("missing", ["torch", "transformers"])
def test_transformers_example_without_its_packages_says_how_to_install_them(tmp_path, missing):
    (tmp_path / missing).mkdir()
    (tmp_path / missing / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{missing}'\", name='{missing}')\n")
    result = run_example("transformers_llama.py", env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 2, result.stderr
    assert "pip install '.[torch]'" in result.stderr and missing in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize("attention,dtype,engine", [
    ("eager", "float32", "ref"), ("sdpa", "bfloat16", "sim"),
    # natively on a GPU, where TVM alone's CUDA build of the model faults, so it is not run
    pytest.param("sdpa", "float16", "cuda", marks=pytest.mark.gpu)])
def test_transformers_example(attention, dtype, engine):
    pytest.importorskip("transformers", reason="examples/transformers_llama.py needs transformers: pip install '.[torch]'")
    result = run_example("transformers_llama.py", "--attention", attention, "--dtype", dtype, "--engine", engine)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "RESULT: match" in result.stdout
    [region] = region_lines(result.stdout)
    assert "simaccel.grouped_attention" in region and "simaccel.softmax" not in region, region
    assert "2 matmul-softmax-matmul chain(s) rewritten as relax.nn.attention" in result.stdout  # one per layer
    assert "kept on TVM: 0 op(s)" in result.stdout
    assert ("TVM alone: not run" in result.stdout) == (engine == "cuda")


# -- examples/test_my_backend.py: what a user copies to test their ops with the pytest plugin --------------
def run_pytest(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfs", *map(str, args)],
                            check=False, capture_output=True, text=True, timeout=600, cwd=cwd)
    print(result.stdout, result.stderr)
    return result


def test_the_plugin_example_passes():
    result = run_pytest(EXAMPLES / "test_my_backend.py")
    assert result.returncode == 0
    import tvm

    gpu = tvm.cuda(0).exist
    summary = result.stdout.strip().splitlines()[-1]
    # 4 partition tests, 2 run tests on each engine: ref and sim everywhere, cuda and native on a GPU
    assert ("12 passed" in summary) if gpu else ("8 passed, 4 skipped" in summary), summary
    if not gpu:
        assert "simaccel engine 'cuda' cannot run here: needs an NVIDIA GPU" in result.stdout


def test_a_wrong_op_in_a_copy_of_the_plugin_example_fails_readably(tmp_path):
    """A kernel with a bug (|x| + 0.5 on the simulator) fails on sim with the output, the error and
    where; the numpy reference still passes on ref."""
    text = (EXAMPLES / "test_my_backend.py").read_text()
    assert "out[i] = abs(x[i])" in text
    (tmp_path / "test_copy.py").write_text(text.replace("out[i] = abs(x[i])", "out[i] = abs(x[i]) + 0.5"))
    result = run_pytest("test_copy.py", "--simaccel-engines=ref,sim", "-k", "matches_tvm and not own", cwd=tmp_path)
    assert result.returncode == 1
    out = result.stdout
    assert "1 failed, 1 passed" in out.strip().splitlines()[-1]
    assert "FAILED test_copy.py::test_the_model_matches_tvm[sim]" in out
    assert "simaccel differs from TVM alone: function 'main', engine 'sim' (target llvm)" in out
    assert "output 0 (8, 4) float32: " in out and "elements differ beyond rtol=0.0001, atol=1e-05; max abs error" in out
    assert "mybackend.abs -> simaccel.matmul_relu" in out  # the partition: which ops ran on simaccel
    assert "assert_matches_tvm(model(), engines=[simaccel_engine])" in out  # the user's line, not the plugin's
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("dtype, engine", [("float32", "ref"), ("float16", "ref"), ("bfloat16", "ref"), ("bfloat16", "sim")])
def test_the_decoder_is_one_region_and_matches_tvm_alone_from_prefill_through_decode(dtype, engine):
    """examples/decoder.py: embedding, two GQA layers with rotary embeddings and KV caches, the
    logits; one build, a prefill of 7 tokens (empty caches) then 2 decode steps fed the caches
    the step before returned, logits and every cache against TVM alone's."""
    result = run_example("decoder.py", "--dtype", dtype, "--engine", engine)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "offloaded to simaccel: 1 region(s)" in result.stdout and "kept on TVM: 0 op(s)" in result.stdout
    for op in ("simaccel.take", "simaccel.rms_norm", "simaccel.grouped_attention", "simaccel.negative", "simaccel.concat"):
        assert op in result.stdout, op
    for step, (what, tokens, cache) in enumerate([("prefill", 7, 7), ("decode", 1, 8), ("decode", 1, 9)]):
        assert (f"step {step}: {what} of {tokens} token(s), cache now {cache}: logits' max error" in result.stdout
                and f"against TVM alone ({dtype} on {engine}), caches match" in result.stdout), result.stdout