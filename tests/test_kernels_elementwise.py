"""The elementwise kernels on the simulator: binary ops, activations, clip, broadcast_to, ILP and vector copies."""

from __future__ import annotations

import numpy as np
import pytest
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from simaccel.errors import ShapeError
from simaccel.kernels.activation import ACTIVATIONS, apply_activation
from simaccel.ops import get_op
from kernel_cases import DTYPES, PlanOnlyTarget, RecordingTarget, _misaligned, _random, check, run_op


# Large launches give each thread ILP elements (a block apart, all loaded before any is
# stored); forced here on sizes that leave partial chunks: 2 blocks of 256 x 8 and a tail.
ILP_CASES = [("simaccel.add", [(3, 1500), (1500,)], {}), ("simaccel.multiply", [(4100,), ()], {}),
             ("simaccel.gelu", [(4111,)], {}), ("simaccel.clip", [(2, 2053)], {"min": -0.5, "max": 0.5}),
             ("simaccel.permute_dims", [(7, 9, 65)], {"axes": [2, 0, 1]}), ("simaccel.broadcast_to", [(1, 600)],
                                                                              {"shape": [7, 600]}),
             # A thread's next elements step along the innermost dim from its first one's
             # indices: an innermost dim of 1500 with a stride-0 operand (the step adds 0 to it),
             # and one of 9, shorter than a block (every step divides again), rank 4.
             ("simaccel.subtract", [(2, 3, 5, 300), (3, 1, 1)], {}), ("simaccel.divide", [(3, 5, 7, 9), (5, 1, 9)], {}),
             # Lengths a multiple of 4: the vector copies (a bias along rows of 48, broadcast
             # into vectors; a clip; a relu with the NaN rule).
             ("simaccel.add", [(2, 4, 6, 8), (4, 1, 1)], {}), ("simaccel.clip", [(2, 2052)], {"min": -0.5, "max": 0.5}),
             ("simaccel.relu", [(4112,)], {})]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, shapes, attrs", ILP_CASES, ids=[c[0] for c in ILP_CASES])
def test_elementwise_kernels_with_several_elements_per_thread(name, shapes, attrs, dtype, monkeypatch):
    from simaccel.kernels import elementwise

    monkeypatch.setattr(elementwise, "MIN_ILP_TOTAL", 0)
    assert elementwise.per_thread(5) == elementwise.ILP
    rng = np.random.default_rng(21)
    arrays = [_random(rng, s, dtype) for s in shapes]
    if name in ("simaccel.relu", "simaccel.clip"):  # TVM's NaN rules (0, and max), in both copies
        arrays[0].reshape(-1)[[3, 700]] = np.nan
    check(name, arrays, attrs)


# (op, input shapes, attrs, the misplaced arrays with which the vector copy still runs): the
# innermost collapsed dim a multiple of 4 with each input along it or broadcast along it (one
# element a vector: its alignment does not matter); none where an input strides across it or
# the length is odd.
VECTOR_CASES = [("simaccel.add", [(3, 1500), (1500,)], {}, {None}), ("simaccel.multiply", [(4100,), ()], {}, {None, -1}),
                ("simaccel.subtract", [(2, 3, 5, 300), (3, 1, 1)], {}, {None, -1}),
                ("simaccel.add", [(5, 1, 7), (1, 4, 7)], {}, set()), ("simaccel.divide", [(3, 5, 7, 12), (5, 1, 12)], {}, {None}),
                ("simaccel.relu", [(4112,)], {}, {None}), ("simaccel.gelu", [(4111,)], {}, set()),
                ("simaccel.clip", [(2, 2052)], {"min": -0.5, "max": 0.5}, {None}),
                ("simaccel.broadcast_to", [(1, 600)], {"shape": [7, 600]}, {None})]


@pytest.mark.parametrize("misplaced", [None, 0, -1, "out"])
@pytest.mark.parametrize("name, shapes, attrs, vector", VECTOR_CASES, ids=[f"{c[0]}{c[1]}" for c in VECTOR_CASES])
def test_elementwise_vector_copies_only_on_aligned_arrays(name, shapes, attrs, vector, misplaced, monkeypatch):
    """Large launches move 4 elements per access where the shapes allow and every array read
    or written in vectors is 16-byte aligned (the simulator's stand-ins check each access the
    GPU would fault on); an array off the alignment (an input or the output, a view into a
    larger buffer) takes the element copy, with the same results."""
    from simaccel.kernels import elementwise, vector as vector_module

    monkeypatch.setattr(elementwise, "MIN_ILP_TOTAL", 0)
    taken = []
    check_vector = vector_module._check_vector
    monkeypatch.setattr(vector_module, "_check_vector", lambda array, index, count: (count > 1 and taken.append(count))
                        or check_vector(array, index, count))
    rng = np.random.default_rng(5)
    arrays = [_random(rng, s, "float32") for s in shapes]
    if misplaced in (0, -1):
        arrays[misplaced] = _misaligned(arrays[misplaced])
    op = get_op(name)
    attrs = op.all_attrs(attrs)
    shape_out, dtype = op.infer([a.shape for a in arrays], ["float32"] * len(arrays), **attrs)
    out = np.full(shape_out, np.nan, dtype)
    if misplaced == "out":
        out = _misaligned(out)
    op.kernel(RecordingTarget(), FakeCUDAArray(out), *map(FakeCUDAArray, arrays), **attrs)
    np.testing.assert_allclose(out, op.reference(*arrays, **attrs), rtol=1e-6, atol=1e-6)
    assert bool(taken) == (misplaced in vector), (taken, misplaced)


BROADCAST_CASES = [
    ((2, 3, 4), (4,)),
    ((3, 1), (1, 5)),
    ((2, 1, 3, 1), (4, 1, 1)),
    ((), (3, 2)),
    ((5,), (5,)),
    ((2, 3, 1, 2), (2, 3, 4, 2)),
    ((1, 4), (3, 2, 1, 1)),
    ((2, 1, 3, 1), (1, 4, 1, 5)),  # nothing collapses: all four dims indexed
]


BINARY_OPS = ["simaccel.add", "simaccel.subtract", "simaccel.multiply", "simaccel.divide", "simaccel.power"]
UNARY_OPS = [f"simaccel.{name}" for name in ACTIVATIONS if name != "none"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BINARY_OPS)
def test_binary(name, dtype):
    rng = np.random.default_rng(17 + BINARY_OPS.index(name))
    for lhs_shape, rhs_shape in BROADCAST_CASES:
        for a_shape, b_shape in ((lhs_shape, rhs_shape), (rhs_shape, lhs_shape)):
            a, b = _random(rng, a_shape, dtype), _random(rng, b_shape, dtype)
            if name.endswith("divide"):
                b = (np.sign(b) + (b == 0)) * (np.abs(b) + 0.5)  # away from 0: relative error stays small
            if name.endswith("power"):
                a = np.abs(a) + 0.5  # a positive base: a real result (special cases: the test below)
            check(name, [np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype)])


def test_binary_ops_are_not_commutative_by_mistake():
    a, b = np.array([6.0, 1.0], np.float32), np.array([2.0, 4.0], np.float32)
    assert run_op("simaccel.subtract", [a, b])[0].tolist() == [4.0, -3.0]
    assert run_op("simaccel.divide", [a, b])[0].tolist() == [3.0, 0.25]
    assert run_op("simaccel.power", [a, b])[0].tolist() == [36.0, 1.0]


def test_power_special_values_are_cs():
    # C's powf (TVM's, on CPU and GPU): NaN for a negative base and a fractional exponent,
    # x ** 0 = 1 and 1 ** y = 1 even for NaN, inf for 0 ** -1 and for overflow.
    a = np.array([-2.0, 0.0, 2.0, np.nan, 1.0, 10.0, -8.0], np.float32)
    b = np.array([0.5, -1.0, 3.0, 0.0, np.nan, 100.0, 3.0], np.float32)
    out, ref = run_op("simaccel.power", [a, b])
    np.testing.assert_array_equal(out, ref)
    assert np.isnan(out[0]) and out[1] == np.inf and out[3] == 1.0 and out[4] == 1.0 and out[6] == -512.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", UNARY_OPS)
@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (2, 1, 3, 4), (2, 1, 3, 2, 2), (1, 2, 1, 2, 3, 2)], ids=str)
def test_unary(name, shape, dtype):
    rng = np.random.default_rng(len(shape))
    x = _random(rng, shape, dtype, scale=3.0)
    if name.endswith("sqrt"):
        x = np.asarray(np.abs(x) + 0.1, dtype=dtype)
    out, _ = check(name, [x])
    if name.endswith("relu"):
        assert (out >= 0).all()


@pytest.mark.parametrize("name", UNARY_OPS + ["simaccel.clip"])
def test_unary_special_values_match_the_reference(name):
    # NaN, infinities, zeros and large magnitudes (sigmoid must not overflow either way).
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 100.0, -100.0, -1.0, 7.0], np.float32)
    attrs = {"min": 0.0, "max": 6.0} if name.endswith("clip") else {}
    out, ref = run_op(name, [x], attrs)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-30, equal_nan=True)
    if name.endswith("clip"):  # TVM's clip: NaN -> max, like max(min(x, 6), 0) as selects
        assert out.tolist() == [6.0, 6.0, 0.0, 0.0, 0.0, 6.0, 0.0, 0.0, 6.0]
    if name.endswith("sigmoid"):
        assert out[5] == 1.0 and 0 <= out[6] < 1e-40
    if name.endswith("negative"):  # TVM's: an IEEE negation, so 0.0 -> -0.0 and -0.0 -> 0.0 (1 / -x tells)
        assert np.signbit(out[3]) and not np.signbit(out[4]) and np.isnan(out[0]) and out[1] == -np.inf
    if name.endswith(("sin", "cos")):  # TVM's: NaN for NaN and both infinities
        assert np.isnan(out[:3]).all() and not np.isnan(out[3:]).any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_clip(dtype):
    rng = np.random.default_rng(5)
    for low, high in ((0.0, 6.0), (-0.5, 0.25), (1.0, 1.0)):
        out, _ = check("simaccel.clip", [_random(rng, (3, 7), dtype, scale=4.0)], {"min": low, "max": high})
        assert out.min() >= np.asarray(low, dtype) and out.max() <= np.asarray(high, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,to", [((3,), (2, 3)), ((2, 1), (2, 4)), ((1, 3, 1), (2, 2, 3, 4)), ((), (2, 2)), ((4,), (4,)),
                                      # repeat_kv (B, KV, 1, S, D) -> (B, KV, G, S, D); GPT-J's rotary interleave;
                                      # rank 6: 3 broadcast dims once merged
                                      ((1, 2, 1, 8, 16), (1, 2, 3, 8, 16)), ((1, 8, 1, 4, 1), (1, 8, 1, 4, 2)),
                                      ((2, 1, 3, 5, 1, 1), (2, 4, 3, 5, 2, 3))],
                         ids=str)
def test_broadcast_to(shape, to, dtype):
    x = _random(np.random.default_rng(1), shape, dtype)
    out, _ = check("simaccel.broadcast_to", [x], {"shape": list(to)})
    np.testing.assert_array_equal(out, np.broadcast_to(x, to))


@pytest.mark.parametrize(
    "a_shape,b_shape,nd",
    [((2, 3, 4), (2, 3, 4), 1), ((), (3, 2), 1), ((2, 3, 4), (4,), 2), ((1, 4), (3, 2, 1, 1), 2),
     ((2, 3, 1, 2), (2, 3, 4, 2), 3), ((2, 1, 3, 1), (1, 4, 1, 5), 4),
     ((1, 2, 1, 8, 16), (1, 2, 3, 8, 16), 3), ((2, 1, 3, 4, 5, 6), (1, 5, 1, 1, 5, 6), 4)],
)
def test_binary_collapses_dims(a_shape, b_shape, nd):
    # Same shapes run as one flat loop, a bias add as two dims: checked on the launch args.
    target = PlanOnlyTarget()
    a, b = np.zeros(a_shape, np.float32), np.zeros(b_shape, np.float32)
    out = np.zeros(np.broadcast_shapes(a_shape, b_shape), np.float32)
    add = get_op("simaccel.add")
    add.kernel(target, FakeCUDAArray(out), FakeCUDAArray(a), FakeCUDAArray(b), **add.all_attrs({}))
    (_, _, _, args), = target.launches
    assert args[3] == nd


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["simaccel.add", "simaccel.less", "simaccel.where"])
def test_rank_5_and_6_broadcasts_run_in_their_merged_dims(name, dtype):
    """Shapes of rank 5 and 6 that merge into at most 4 broadcast dims, against the reference."""
    rng = np.random.default_rng(3)
    for a_shape, b_shape in (((1, 2, 1, 8, 16), (1, 2, 3, 8, 16)), ((2, 1, 3, 4, 5, 6), (1, 5, 1, 1, 5, 6))):
        a, b = _random(rng, a_shape, dtype), _random(rng, b_shape, dtype)
        if name.endswith("add"):
            check(name, [a, b])
            continue
        arrays = [np.asarray(_random(rng, a_shape, "float32") > 0), a, b] if name.endswith("where") else [a, b]
        out, ref = run_op(name, arrays)
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("a_shape, b_shape", [((2, 1, 2, 1, 2), (1, 2, 1, 2, 1)), ((2, 3, 1, 4, 5, 6), (1, 3, 7, 1, 5, 6)),
                                              ((1, 2, 3, 4, 5, 6, 7), (7,))],
                         ids=str)
def test_broadcasts_of_more_merged_dims_or_ranks_are_refused_by_the_rule(a_shape, b_shape):
    """Five dims that alternate between the inputs stay five once merged; rank 7 is past the ISA."""
    with pytest.raises(ShapeError, match="broadcast dims once merged|rank 0..6"):
        get_op("simaccel.add").infer([a_shape, b_shape], ["float32"] * 2)


@pytest.mark.parametrize("name", ["simaccel.exp", "simaccel.clip"])
def test_unary_ops_take_rank_6_and_refuse_rank_7(name):
    op = get_op(name)
    attrs = op.all_attrs({"min": 0.0, "max": 1.0} if name.endswith("clip") else {})
    assert op.infer([(1, 2, 1, 2, 3, 2)], ["float32"], **attrs)[0] == (1, 2, 1, 2, 3, 2)
    with pytest.raises(ShapeError, match="rank 0..6"):
        op.infer([(1,) * 7], ["float32"], **attrs)


def test_divmod_fast():
    # The index helper of the elementwise and pooling kernels (float64 quotient estimate).
    from simaccel.kernels.elementwise import divmod_fast

    rng = np.random.default_rng(3)
    for d in (1, 2, 3, 7, 16, 17, 1000, 65535, 3 * 2**20 + 1):
        ns = list(range(0, min(2 * d + 3, 200))) + [d * k + e for k in (10**6, 2**30 + 1) for e in (-1, 0, 1)]
        ns += [int(v) for v in rng.integers(0, 2**48, 200)]
        for n in ns:
            assert tuple(int(v) for v in divmod_fast(n, d, 1.0 / d)) == divmod(n, d), (n, d)


def test_apply_activation_scalar():
    # Plain Python on the simulator: the same helper the kernels call.
    assert apply_activation(-2.0, ACTIVATIONS["relu"]) == 0.0
    assert apply_activation(-2.0, ACTIVATIONS["none"]) == np.float32(-2.0)
    assert apply_activation(1.0, ACTIVATIONS["gelu"]) == pytest.approx(0.8413447460685429, rel=1e-6)
    assert isinstance(apply_activation(1.0, ACTIVATIONS["gelu"]), np.float32)
