"""Shape rules that hold only at some sizes: accepted with a requirement checked at every call.

A matmul of (31, n) by (5, 8) is right only where n == 5; a reshape of (p, 4) to (q, 4) only
where p == q. simaccel offloads such ops and checks the requirement per call (Python runtime and
native regions alike), where TVM alone runs them unchecked. What no size within the bounds
makes true stays on TVM with its reason, as before.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R, tirx as T

from simaccel import ProgramError, ShapeError
from simaccel.compare import array_difference
from simaccel.program import Program, SizeVar
from simaccel.requirements import Requirement, assuming, never_zero
from simaccel.shapes import Dim, parse
from simaccel.size_plans import sample_points, size_plans
from test_symbolic_program import make

N, P, Q, K = (Dim.var(name) for name in "npqk")
BOUNDS = {"n": (1, 64), "p": (1, 64), "q": (1, 64), "k": (1, 64)}


# -- comparisons while rules run ---------------------------------------------------------------
@pytest.mark.parametrize("lhs, rhs, made", [
    ("n", "5", "n == 5"),
    ("p", "q", "p == q"),
    ("4*p", "4*q", "p == q"),       # one requirement, in its simplest form
    ("n*p", "12", "n*p == 12"),
    ("n + 1", "k", "n + 1 == k"),
])
def test_an_equality_some_sizes_make_true_is_assumed_and_recorded(lhs, rhs, made):
    with assuming(BOUNDS) as assumed:
        assert parse(lhs) == parse(rhs)
        assert not parse(lhs) != parse(rhs)
    assert [str(r) for r in assumed.made.values()] == [made]


@pytest.mark.parametrize("lhs, rhs", [
    ("n + 1", "n"),     # differ by a constant
    ("2*n", "5"),       # no integer n
    ("n", "70"),        # outside n's bounds
    ("n + p", "1"),     # both at least 1
    ("n % 4", "9"),     # a remainder by 4 is below 4
])
def test_an_equality_no_size_within_the_bounds_makes_true_is_false(lhs, rhs):
    with assuming(BOUNDS) as assumed:
        assert parse(lhs) != parse(rhs)
    assert not assumed.made


def test_comparisons_with_0_and_1_choose_a_case_and_are_never_assumed():
    with assuming(BOUNDS) as assumed:
        assert N != 0 and N != 1 and 1 != N
    assert not assumed.made


@pytest.mark.parametrize("question, answer", [
    (lambda: N - 2 >= 1, None),          # n may be 1 or 2
    (lambda: N + 2 >= 3, True),
    (lambda: N < 65, True),
    (lambda: N > 64, False),
    (lambda: 1 > N - 2, None),
    (lambda: (N - 2) // 2 + 1 < 1, None),
    (lambda: P * Q <= 4096, True),
    (lambda: P - Q < 64, True),
    (lambda: N // 2 >= 0, True),
])
def test_an_order_of_sizes_is_decided_where_the_bounds_decide_it(question, answer):
    from simaccel.shapes import SymbolicError

    with assuming(BOUNDS) as assumed:
        if answer is None:
            with pytest.raises(SymbolicError, match="has no value until its vars"):
                question()
        else:
            assert question() is answer
    assert not assumed.made
    with pytest.raises(SymbolicError):  # outside rules, an order always needs the values
        question()


def test_a_range_check_the_bounds_do_not_decide_is_required_at_every_call():
    from simaccel.requirements import at_least
    from simaccel.shapes import SymbolicError

    with assuming(BOUNDS) as assumed:
        assert at_least(N + 3, 4) and at_least(64, N) and not at_least(N, 65) and at_least(7, 5)
        assert at_least(N - 2, 1) and at_least(2 * P, 2 * Q)  # n may be 1 or 2; p may be below q
    assert [str(r) for r in assumed.made.values()] == ["n - 2 >= 1", "p >= q"]
    assert [r.holds({"n": 3, "p": 2, "q": 2}) for r in assumed.made.values()] == [True, True]
    assert [r.holds({"n": 2, "p": 1, "q": 2}) for r in assumed.made.values()] == [False, False]
    with pytest.raises(SymbolicError):  # outside rules a size's range needs its value
        at_least(N - 2, 1)
    again = Requirement.parse("n - 2 >= 1")
    assert (again.relation, again.key) == (">=", next(iter(assumed.made.values())).key)
    assert Requirement.parse("p >= q").key != Requirement.parse("q >= p").key != Requirement.parse("p == q").key


def windowed():
    """A 3x3 convolution over a height h in [1, 16]: its output h - 2 is at least 0 (empty at h = 2,
    as TVM alone gives) only where h >= 2."""
    h = Dim.var("h")
    attrs = {"strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1}
    return make("windowed", [("x", (1, 3, h, 8), "float32"), ("w", (4, 3, 3, 3), "float32"),
                             ("y", (1, 4, h - 2, 6), "float32")],
                (0, 1), (2,), [("simaccel.conv2d", (0, 1), 2, attrs)], [SizeVar("h", 1, 16)])


def test_a_range_requirement_travels_in_the_json_and_is_checked_per_call(clean_runtime):
    program = windowed().requiring()
    assert json.loads(program.to_json())["requires"] == ["h - 2 >= 0"]
    assert Program.from_json(program.to_json()).requires == program.requires
    assert all(point["h"] >= 2 for point in sample_points(program))
    assert all(not plan.covers({"h": 1}) for plan in size_plans(program))
    with pytest.raises(ShapeError, match=r"h = 1 \(from x \(dim 2 of \(1, 3, 1, 8\)\)\) breaks h - 2 >= 0, which op 0 "
                                         r"\(simaccel.conv2d\)'s shape rule needs at every call"):
        program.bind_tensors([(1, 3, 1, 8), (4, 3, 3, 3), (1, 4, -1, 6)])
    empty = np.zeros((1, 4, 0, 6), np.float32)
    clean_runtime.run(program, np.ones((1, 3, 2, 8), np.float32), np.ones((4, 3, 3, 3), np.float32), empty)
    x, w = np.ones((1, 3, 5, 8), np.float32), np.ones((4, 3, 3, 3), np.float32)
    y = np.zeros((1, 4, 3, 6), np.float32)
    clean_runtime.run(program, x, w, y)
    np.testing.assert_array_equal(y, np.full_like(y, 27.0))


def test_outside_rules_dims_compare_as_expressions():
    assert N != 5 and P != Q and N == Dim.var("n")


def test_requirements_read_back_from_their_text_and_refuse_what_is_none():
    r = Requirement.parse("n*p == 12")
    assert (r.lhs, r.rhs, r.holds({"n": 3, "p": 4}), r.holds({"n": 3, "p": 5})) == (N * P, 12, True, False)
    assert Requirement.parse("q == p").key == Requirement(4 * P, 4 * Q).key
    for text in ("n", "n == 5 == 5", "3 == 3", "n < 5"):
        with pytest.raises(ValueError):
            Requirement.parse(text)


def test_never_zero_knows_unbounded_vars_reach_every_size():
    assert not never_zero(N - 1000, {"n": (1, None)})
    assert never_zero(N + 1, {"n": (0, None)})


# -- the Program --------------------------------------------------------------------------------
def pinned_matmul():
    """(31, n) @ (5, 8): right only where n == 5."""
    return make("pinned", [("a", (31, N), "float32"), ("b", (5, 8), "float32"), ("c", (31, 8), "float32")],
                (0, 1), (2,), [("simaccel.matmul", (0, 1), 2, {})], [SizeVar("n", 1, 64)])


def viewed():
    """relu of x (p, 4), then viewed as (q, 4): right only where p == q."""
    return make("viewed", [("x", (P, 4), "float32"), ("h", (P, 4), "float32"), ("y", (Q, 4), "float32")],
                (0,), (2,), [("simaccel.relu", (0,), 1, {}), ("simaccel.reshape", (1,), 2, {"shape": [Q, 4]})],
                [SizeVar("p", 1, 64), SizeVar("q", 1, 64)])


def test_a_program_must_require_what_its_rules_hold_for():
    with pytest.raises(ShapeError, match=r"Program pinned: op 0 \(simaccel.matmul\)'s shape rule holds only where "
                                         r"n == 5, which the Program does not require"):
        pinned_matmul().validate()
    program = pinned_matmul().requiring()
    assert [str(r) for r in program.requires] == ["n == 5"]
    assert program.validate() is program and program.requiring() is program


def test_requirements_are_written_in_the_json_and_read_back():
    program = viewed().requiring()
    data = json.loads(program.to_json())
    assert (data["version"], data["requires"]) == (2, ["q == p"])
    again = Program.from_json(program.to_json())
    assert again.requires == program.requires and again.fingerprint() == program.fingerprint()
    data["requires"] = ["q < p"]
    with pytest.raises(ProgramError, match=r"requires\[0\].*'lhs == rhs'"):
        Program.from_dict(data)


def test_a_requirement_no_size_makes_true_or_on_an_undeclared_var_is_refused():
    import dataclasses

    base = pinned_matmul()
    with pytest.raises(ShapeError, match="requirement n == 99 holds at no sizes"):
        dataclasses.replace(base, requires=(Requirement(N, 99),)).validate()
    with pytest.raises(ProgramError, match=r"requirement k == 5 reads size vars \['k'\]"):
        dataclasses.replace(base, requires=(Requirement(K, 5),)).validate()


def test_a_call_that_breaks_a_requirement_is_a_shape_error_naming_var_value_tensor_and_op():
    program = pinned_matmul().requiring()
    assert program.bind_tensors([(31, 5), (5, 8), (31, 8)]) == {"n": 5}
    with pytest.raises(ShapeError, match=r"region pinned: n = 3 \(from a \(dim 1 of \(31, 3\)\)\) breaks n == 5, "
                                         r"which op 0 \(simaccel.matmul\)'s shape rule needs at every call"):
        program.bind_tensors([(31, 3), (5, 8), (31, 8)])


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_the_runtime_runs_a_required_region_where_it_holds_and_refuses_it_elsewhere(engine, clean_runtime):
    program = viewed().requiring()
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4)
    y = np.zeros((6, 4), np.float32)
    with clean_runtime.use_engine(engine):
        clean_runtime.run(program, x, y)
        np.testing.assert_array_equal(y, np.maximum(x, 0))
        with pytest.raises(ShapeError, match=r"p = 6 .* q = 5 .* breaks q == p"):
            clean_runtime.run(program, x, np.zeros((5, 4), np.float32))


def test_size_plans_hold_the_requirements_and_sample_only_where_they_hold():
    pinned = pinned_matmul().requiring()
    assert sample_points(pinned) == [{"n": 5}]  # 5 is no end, middle or power of two: the requirement adds it
    (plan,) = size_plans(pinned)
    assert not plan.covers({"n": 6})
    both = viewed().requiring()
    points = sample_points(both)
    assert len(points) > 10 and all(point["p"] == point["q"] for point in points)
    assert all(not plan.covers({"p": 3, "q": 4}) for plan in size_plans(both))


# -- models: partitioned, built once, run at every size ---------------------------------------
@tvm.script.ir_module
class ValueDependent:
    """Every op's shapes agree only at some sizes: a matmul whose K is n (needs n == 5), a view
    of (p, 4) as (q, 4) added to y (p == q), a dense whose weight's K is k (k == 4), a batched matmul of
    K m by K r (m == r)."""

    @R.function
    def main(a: R.Tensor((31, "n"), "float32"), b: R.Tensor((5, 8), "float32"),
             x: R.Tensor(("p", 4), "float32"), z: R.Tensor(("p", "k"), "float32"),
             u: R.Tensor((2, 3, "m"), "float32"), v: R.Tensor((2, "r", 6), "float32"),
             y: R.Tensor(("q", 4), "float32")):
        n = T.int64()
        p = T.int64()
        q = T.int64()
        k = T.int64()
        m = T.int64()
        r = T.int64()
        R.func_attr({"tir_var_upper_bound": {"n": 64, "p": 64, "q": 64, "k": 64, "m": 16, "r": 16}})
        with R.dataflow():
            c = R.nn.relu(R.matmul(a, b))
            e = R.add(R.reshape(x, R.shape([q, 4])), y)
            f = R.matmul(x, R.permute_dims(z))
            g = R.matmul(u, v)
            R.output(c, e, f, g)
        return (c, e, f, g)


def _inputs(n_, p_, k_, m_, r_, q_=None, seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(31, n_), (5, 8), (p_, 4), (p_, k_), (2, 3, m_), (2, r_, 6), (p_ if q_ is None else q_, 4)]
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


def _run(executable, arrays):
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return [o.numpy() for o in vm["main"](*(tvm.runtime.tensor(a) for a in arrays))]


def test_value_dependent_rules_offload_every_op():
    from simaccel.tvm_integration.backend.partition import partition_report

    _, report = partition_report(ValueDependent)
    assert not report.kept, report.kept
    offloaded = sorted(op for ops in report.regions.values() for op in ops)
    assert offloaded == ["simaccel.add", "simaccel.dense", "simaccel.matmul", "simaccel.matmul_relu", "simaccel.reshape"]


@pytest.fixture(scope="module")
def builds():
    from simaccel.tvm_integration.backend.pipeline import build, build_tvm_only

    return build(ValueDependent, "llvm"), build_tvm_only(ValueDependent, "llvm")


@pytest.mark.parametrize("engine", ["ref", "sim"])
def test_one_build_matches_tvm_alone_wherever_the_requirements_hold(builds, engine, clean_runtime):
    import simaccel

    ours, theirs = builds
    sizes = [(5, 1, 4, 1, 1), (5, 64, 4, 16, 16)] if engine == "sim" else [(5, 1, 4, 1, 1), (5, 7, 4, 9, 9), (5, 64, 4, 16, 16)]
    for n_, p_, k_, m_, r_ in sizes:
        arrays = _inputs(n_, p_, k_, m_, r_)
        with simaccel.get_runtime().use_engine(engine):
            got = _run(ours, arrays)
        want = _run(theirs, arrays)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and array_difference(g, w, scaled=True).ok, (n_, p_, k_, m_, r_)


@pytest.mark.parametrize("sizes, broken", [
    ((3, 7, 4, 9, 9), r"n = 3 .* breaks n == 5"),
    ((5, 7, 6, 9, 9), r"k = 6 .* breaks k == 4"),
    ((5, 7, 4, 9, 10), r"breaks (m == r|r == m)"),
    ((5, 7, 4, 9, 9, 8), r"p = 7 .* q = 8 .* breaks q == p"),
])
def test_sizes_that_break_a_requirement_are_a_shape_error_where_tvm_alone_runs_unchecked(builds, sizes, broken,
                                                                                         clean_runtime):
    ours, theirs = builds
    with pytest.raises(ShapeError, match=broken):
        _run(ours, _inputs(*sizes))


def test_a_cuda_build_makes_the_required_regions_native(tmp_path, caplog):
    from test_symbolic_models import _built_natively

    _built_natively(ValueDependent, "nvidia/nvidia-h100", caplog)


@pytest.mark.gpu
def test_a_cuda_build_runs_required_regions_natively_and_refuses_broken_sizes(clean_runtime, caplog):
    """On a GPU: native regions bound per call, matching TVM alone's CUDA build where the
    requirements hold; a call that breaks one is a ShapeError (its sizes no size plan covers go
    to the Python runtime, which names the requirement); no byte goes through the host."""
    from simaccel.tvm_integration.backend.pipeline import build_tvm_only, default_target
    from test_symbolic_models import _built_natively

    target = default_target("cuda")
    ours = _built_natively(ValueDependent, target, caplog)
    theirs = build_tvm_only(ValueDependent, target)
    gpu = tvm.cuda(0)

    def on_gpu(executable, arrays):
        vm = relax.VirtualMachine(executable, gpu)
        return [o.numpy() for o in vm["main"](*(tvm.runtime.tensor(a, gpu) for a in arrays))]

    for sizes in [(5, 1, 4, 1, 1), (5, 33, 4, 7, 7), (5, 64, 4, 16, 16)]:
        arrays = _inputs(*sizes)
        for g, w in zip(on_gpu(ours, arrays), on_gpu(theirs, arrays), strict=True):
            assert g.shape == w.shape and array_difference(g, w, scaled=True).ok, sizes
    with pytest.raises(ShapeError, match=r"n = 6 .* breaks n == 5"):
        on_gpu(ours, _inputs(6, 3, 4, 2, 2))
    ledger = clean_runtime.ledger.snapshot()
    assert ledger["bytes"]["host_to_device"] == ledger["bytes"]["device_to_host"] == 0
