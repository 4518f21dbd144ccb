"""simaccel.testing, the pytest plugin for users' own tests: the option, the parametrisation,
skips with their reasons, the user-op context and the failure messages users read.

Inner pytest runs (`pytester`) load the plugin as a user's run does, through setup.py's
`pytest11` entry point; examples/test_my_backend.py itself runs in tests/test_examples.py.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from tvm import relax

from model_zoo import single_op
from simaccel import EngineError, SimAccelError
from simaccel.compare import mismatch
from simaccel.ops import list_ops
from simaccel.testing import Engine, assert_matches_tvm, assert_offloads, declared
from test_isa import silu_family

pytest_plugins = ["pytester"]

ENGINE_TEST = """
def test_engine(simaccel_engine):
    assert simaccel_engine.device == ("cpu" if simaccel_engine in ("ref", "sim") else "cuda")
"""


def cuda_reason():
    return Engine("cuda").unavailable()


# -- the option and the parametrisation ---------------------------------------------------------------
def test_the_fixture_runs_a_test_once_per_engine_by_default(pytester):
    pytester.makepyfile(ENGINE_TEST)
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_engine[[]ref[]]", "*test_engine[[]sim[]]", "*test_engine[[]cuda[]]",
                                 "*test_engine[[]native[]]", "4 tests collected*"])


def test_the_option_chooses_the_engines(pytester):
    pytester.makepyfile(ENGINE_TEST)
    result = pytester.runpytest("--simaccel-engines=sim,ref", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*simaccel: simaccel_engine engines sim, ref*", "*test_engine[[]sim[]] PASSED*",
                                 "*test_engine[[]ref[]] PASSED*"])


def test_the_ini_option_chooses_them_too_and_the_command_line_wins(pytester):
    pytester.makeini("[pytest]\nsimaccel_engines = sim\n")
    pytester.makepyfile(ENGINE_TEST)
    pytester.runpytest("-v").stdout.fnmatch_lines(["*test_engine[[]sim[]] PASSED*", "*1 passed*"])
    pytester.runpytest("-v", "--simaccel-engines", "ref").stdout.fnmatch_lines(["*test_engine[[]ref[]] PASSED*",
                                                                                "*1 passed*"])


@pytest.mark.parametrize("value, message", [
    ("ref,bogus", "--simaccel-engines: unknown engine 'bogus'; valid engines: ref, sim, cuda, native"),
    ("gpu,tpu", "--simaccel-engines: unknown engines 'gpu', 'tpu'; valid engines: ref, sim, cuda, native"),
    (",", "--simaccel-engines: no engine named; valid engines: ref, sim, cuda, native"),
])
def test_an_unknown_engine_is_a_usage_error_naming_the_valid_ones(pytester, value, message):
    pytester.makepyfile(ENGINE_TEST)
    result = pytester.runpytest(f"--simaccel-engines={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_a_test_may_parametrise_the_engine_itself(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.parametrize("simaccel_engine", ["sim"], indirect=True)
        def test_only_sim(simaccel_engine):
            assert simaccel_engine == "sim"
    """)
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_only_sim[[]sim[]] PASSED*"])


def test_the_plugin_can_be_turned_off(pytester):
    pytester.makepyfile(ENGINE_TEST)
    result = pytester.runpytest("-p", "no:simaccel")
    result.stdout.fnmatch_lines(["*fixture 'simaccel_engine' not found*"])


def test_gpu_engines_are_skipped_with_the_reason(pytester):
    if cuda_reason() is None:
        pytest.skip("this machine has a GPU: the cuda and native engines run")
    pytester.makepyfile(ENGINE_TEST)
    result = pytester.runpytest("--simaccel-engines=ref,cuda,native", "-rs")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines([
        "SKIPPED*simaccel engine 'cuda' cannot run here: needs an NVIDIA GPU: numba-cuda finds no usable CUDA GPU*",
        "SKIPPED*simaccel engine 'native' cannot run here: needs an NVIDIA GPU that TVM's CUDA runtime finds*",
    ])


def test_engines_say_where_they_run():
    assert [(e, e.device, e.runtime_engine, e.native) for e in map(Engine, ["ref", "sim", "cuda", "native"])] == [
        ("ref", "cpu", "ref", None), ("sim", "cpu", "sim", None), ("cuda", "cuda", "cuda", False),
        ("native", "cuda", "auto", True)]
    assert Engine("ref").target.kind.name == "llvm" and Engine("native").target.kind.name == "cuda"
    assert "slow" in Engine("sim").description
    with pytest.raises(EngineError, match="unknown simaccel test engine 'gpu'; choose one of ref, sim, cuda, native"):
        Engine("gpu")


# -- declaring ops for one test -----------------------------------------------------------------------
def test_declared_ops_are_forgotten_after_the_block():
    before = list_ops()
    with declared(silu_family()) as family:
        assert family.name == "testaccel.silu" and "testaccel.silu" in list_ops()
    assert list_ops() == before


def test_declared_forgets_even_when_the_block_fails():
    with pytest.raises(RuntimeError), declared(silu_family()):
        raise RuntimeError("the test failed")
    assert "testaccel.silu" not in list_ops()


def test_the_fixture_form_forgets_after_the_test(pytester):
    pytester.makepyfile("""
        from simaccel.ops import list_ops
        from test_isa import silu_family

        def test_declares(simaccel_declare):
            assert simaccel_declare(silu_family()).name in list_ops()

        def test_after_it():
            assert "testaccel.silu" not in list_ops()
    """)
    pytester.runpytest().assert_outcomes(passed=2)  # in this process: tests/ is on sys.path


# -- assert_offloads ------------------------------------------------------------------------------------
def silu_model(dtype="float32"):
    return single_op(lambda x, w: relax.op.nn.relu(relax.op.matmul(relax.op.multiply(x, relax.op.sigmoid(x)), w)),
                     [((4, 8), dtype), ((8, 6), dtype)])


def test_assert_offloads_takes_op_and_family_names():
    with declared(silu_family()):
        report = assert_offloads(silu_model(), ops=["testaccel.silu", "simaccel.matmul"], regions=1, kept=0)
        assert list(report.regions.values()) == [["testaccel.silu", "simaccel.matmul_relu"]]
        assert_offloads(silu_model(), ops=["simaccel.matmul_relu"])
        assert_offloads(silu_model())


def test_assert_offloads_says_what_was_offloaded_and_what_was_kept_with_reasons():
    from simaccel import DeviceProfile

    profile = DeviceProfile(name="matmul-only", ops={"simaccel.matmul"})
    with pytest.raises(AssertionError) as failure:
        assert_offloads(silu_model(), ops=["simaccel.sigmoid", "simaccel.matmul"], regions=2, kept=0, profile=profile)
    message = str(failure.value)
    assert message.startswith("assert_offloads: simaccel.sigmoid is not offloaded; 1 region(s), expected 2; "
                              "2 op(s) kept on TVM, expected 0\n"), message
    assert "offloaded to simaccel: 1 region(s) (profile matmul-only)" in message
    assert ": simaccel.matmul_relu" in message
    assert "relax.sigmoid: simaccel.sigmoid rejected: op simaccel.sigmoid is not enabled in profile matmul-only" in message
    with pytest.raises(AssertionError, match="simaccel.matmul_relu is not offloaded 2 times"):
        assert_offloads(silu_model(), ops=["simaccel.matmul_relu"] * 2)


def test_assert_offloads_with_nothing_offloaded():
    mod = single_op(lambda x: relax.op.nn.log_softmax(x), [((4, 8), "float32")])
    with pytest.raises(AssertionError, match="(?s)assert_offloads: nothing is offloaded\n.*simaccel has no pattern for "
                                             "relax.nn.log_softmax"):
        assert_offloads(mod)
    assert_offloads(mod, regions=0, kept=1)


# -- assert_matches_tvm -----------------------------------------------------------------------------------
def test_assert_matches_tvm_returns_what_ran():
    with declared(silu_family()):
        [run] = assert_matches_tvm(silu_model(), engines="ref")
    assert run.engine == "ref" and run.ledger["ops"] == {"testaccel.silu": 1, "simaccel.matmul_relu": 1}
    assert len(run.outputs) == len(run.reference) == 1 and run.outputs[0].shape == (4, 6)
    np.testing.assert_allclose(run.outputs[0], run.reference[0], rtol=1e-4, atol=1e-5)


def test_assert_matches_tvm_refuses_a_model_that_offloads_nothing():
    mod = single_op(lambda x: relax.op.nn.log_softmax(x), [((4, 8), "float32")])
    with pytest.raises(AssertionError, match="(?s)nothing of the model was offloaded to simaccel .*\n.*kept on TVM: 1 op"):
        assert_matches_tvm(mod)
    [run] = assert_matches_tvm(mod, expect_offload=False)
    assert run.ledger["offloaded_calls"] == 0


def test_a_wrong_op_fails_with_the_output_the_error_and_where():
    wrong = dataclasses.replace(silu_family(), reference=lambda data, *, beta: data.astype(np.float32))  # no sigmoid
    with declared(wrong), pytest.raises(AssertionError) as failure:
        assert_matches_tvm(silu_model(), engines=["ref"])
    message = str(failure.value)
    assert message.startswith("simaccel differs from TVM alone: function 'main', engine 'ref' (target llvm)\n"
                              "  output 0 (4, 6) float32: "), message
    assert "elements differ beyond rtol=0.0001, atol=1e-05; max abs error" in message and "at index (" in message
    assert "testaccel.silu -> simaccel.matmul_relu" in message  # the partition, to see which ops ran on simaccel
    bisection = message.split("bisection:\n", 1)[1]  # the bisection's report follows, naming the wrong op
    assert "testaccel.silu" in bisection and "reproducer" in bisection, bisection


def test_explicit_tolerances_and_inputs_are_used():
    x = np.full((4, 8), 2.0, np.float32)
    w = np.ones((8, 6), np.float32)
    [run] = assert_matches_tvm(silu_model(), [x, w], rtol=0, atol=0)
    np.testing.assert_array_equal(run.outputs[0], run.reference[0])
    with pytest.raises(SimAccelError, match=r"main takes 2 inputs \(\w+, \w+\), got 1"):
        assert_matches_tvm(silu_model(), [x])


def test_an_engine_that_cannot_run_is_an_error_outside_the_fixture():
    reason = cuda_reason()
    if reason is None:
        pytest.skip("this machine has a GPU")
    with pytest.raises(EngineError, match="engine 'cuda' cannot run here: needs an NVIDIA GPU"):
        assert_matches_tvm(silu_model(), engines=["ref", "cuda"])


# -- simaccel.compare, which says how outputs differ -------------------------------------------------------
@pytest.mark.parametrize("got, want, message", [
    ([1.0, 2.0], [1.0, 2.5], "1 of 2 elements differ beyond rtol=0.0001, atol=1e-05; max abs error 0.5 at index (1,): "
                             "got 2, want 2.5"),
    ([1.0, np.nan], [1.0, 2.0], "NaN positions differ (1 of 2 elements); first at index (1,): got nan, want 2"),
    ([1.0, 2.0], [np.inf, 2.0], "infinities differ (1 of 2 elements); first at index (0,): got 1, want inf"),
    ([1.0, np.inf], [1.0, 2.0], "non-finite where the reference is finite (1 of 2 elements); first at index (1,)"),
    ([[1.0]], [1.0], "got shape (1, 1) float32, want (1,) float32"),
])
def test_mismatch_says_how_results_differ(got, want, message):
    problem = mismatch(np.array(got, np.float32), np.array(want, np.float32))
    assert problem.startswith(message), problem
    assert mismatch(np.array(want, np.float32), np.array(want, np.float32)) is None


def test_mismatch_tolerances_are_per_dtype_and_exact_for_integers():
    assert mismatch(np.float16([1.0]), np.float16([1.01])) is None  # within float16's 2e-2
    assert mismatch(np.float32([1.0]), np.float32([1.01])) is not None
    assert "rtol=0, atol=0" in mismatch(np.int32([1]), np.int32([2]))
    assert mismatch(np.float32([1.0]), np.float32([1.01]), rtol=0.1) is None


# -- the layout: simaccel.testing is the core's name for the TVM side's tools ------------------------------
def test_importing_simaccel_testing_imports_no_tvm():
    code = ("import sys, simaccel.testing as t; print(sorted(t.TEST_ENGINES), "
            "any(m == 'tvm' or m.startswith('tvm.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    assert out.stdout.split("] ")[-1].strip() == "False", out.stdout + out.stderr


def test_simaccel_testing_hands_over_the_tvm_side_s_names():
    import simaccel.testing
    from simaccel.tvm_integration.tools import testing

    assert simaccel.testing.assert_matches_tvm is testing.assert_matches_tvm
    assert simaccel.testing.assert_offloads is testing.assert_offloads
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        simaccel.testing.nothing_here  # noqa: B018


# -- symbolic sizes ----------------------------------------------------------------------------------
def _symbolic_relu_matmul():
    """(n, 16) @ w (16, 8) -> relu, n in [1, 32]."""
    import tvm
    from tvm.script import relax as R, tirx as T

    @tvm.script.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor(("n", 16), "float32"), w: R.Tensor((16, 8), "float32")) -> R.Tensor(("n", 8), "float32"):
            n = T.int64()
            R.func_attr({"tir_var_upper_bound": {"n": 32}})
            with R.dataflow():
                y = R.nn.relu(R.matmul(x, w))
                R.output(y)
            return y

    return Module


def test_a_symbolic_module_is_checked_once_built_at_every_size_given():
    matches = assert_matches_tvm(_symbolic_relu_matmul(), sizes=[{"n": 1}, {"n": 17}, {"n": 32}], engines=["ref", "sim"])
    assert [(m.engine, m.outputs[0].shape) for m in matches] == \
        [(e, (n, 8)) for e in ("ref", "sim") for n in (1, 17, 32)]


def test_a_symbolic_module_without_inputs_or_sizes_is_refused_naming_its_vars():
    with pytest.raises(SimAccelError, match=r"main has symbolic dims \(n\); give inputs, or sizes=\{'n': \.\.\.\}"):
        assert_matches_tvm(_symbolic_relu_matmul())
    with pytest.raises(SimAccelError, match="give no value to size var n"):
        assert_matches_tvm(_symbolic_relu_matmul(), sizes={"m": 3})


def test_a_fault_at_one_size_fails_naming_the_size(monkeypatch):
    from harness import plant_reference

    import simaccel

    plant_reference(monkeypatch, "simaccel.matmul_relu", lambda y: y + 1 if y.shape[0] == 17 else y)
    with pytest.raises(AssertionError, match="at n = 17"):
        assert_matches_tvm(_symbolic_relu_matmul(), sizes=[{"n": 1}, {"n": 17}], bisect=False)
    monkeypatch.undo()
    simaccel.get_runtime().clear()  # no Program keeps the planted op
