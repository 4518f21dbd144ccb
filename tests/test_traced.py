"""Traced sizes (simaccel.traced): arithmetic keeps the expression, questions become guards,
conversions pin the value, floats keep Python's order of operations."""

from __future__ import annotations

import math
import operator
import struct

import numpy as np
import pytest

from simaccel.shapes import Dim, evaluate
from simaccel.traced import Traced, TracedFloat, float_value, recording

n, s = Dim.var("n"), Dim.var("s")


def traced(value, dim):
    return Traced(value, dim)


@pytest.mark.parametrize("op", [operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod])
@pytest.mark.parametrize("other", [1, 3, 7, 256])
def test_arithmetic_with_ints_keeps_the_expression_and_records_nothing(op, other):
    with recording() as guards:
        x = traced(13, n)
        for got, of in ((op(x, other), lambda v: v), (op(x * 5 + 2, other), lambda v: v * 5 + 2)):
            # a Traced, or a plain int where the result is a constant (x % 1)
            assert (got.value if isinstance(got, Traced) else got) == op(of(13), other)
            dim = got.dim if isinstance(got, Traced) else got
            for value in (1, 13, 40, 1001):  # the expression holds at every size, not only at the point
                assert evaluate(dim, {"n": value}) == op(of(value), other)
        ceil = -(-x // 4)
        assert [evaluate(ceil.dim, {"n": v}) for v in (1, 4, 5, 13)] == [1, 1, 2, 4]
    assert guards == []


def test_reflected_arithmetic_and_products_of_sizes():
    with recording() as guards:
        x, y = traced(3, n), traced(5, s)
        z = 2 * x * y + 1 - x
        assert z.value == 28 and z.dim == 2 * n * s + 1 - n
        assert math.prod([x, y, 4]).dim == 4 * n * s
        assert (np.int64(2) * x).dim == 2 * n
    assert guards == []


@pytest.mark.parametrize("question, relation", [
    (lambda x: x < 256, "<"), (lambda x: x >= 8, ">="), (lambda x: x == 13, "=="), (lambda x: x != 4, "!="),
    (lambda x: bool(x - 13), "=="), (lambda x: min(x, 256) == x, "<=")])
def test_questions_are_answered_at_the_point_and_recorded_as_guards(question, relation):
    with recording() as guards:
        question(traced(13, n))
    assert guards and all(g.holds({"n": 13}) for g in guards)
    assert any(g.relation == relation for g in guards), [str(g) for g in guards]


def test_a_guard_separates_the_sizes_where_the_answer_differs():
    with recording() as guards:
        assert traced(100, n) * 4 < 1024
    [guard] = guards
    assert guard.holds({"n": 255}) and not guard.holds({"n": 256})


@pytest.mark.parametrize("convert", [int, operator.index, float, hash, str, lambda x: f"{x}", lambda x: range(x)])
def test_a_conversion_to_a_plain_value_pins_the_size(convert):
    with recording() as guards:
        convert(traced(13, n))
    assert [str(g) for g in guards] == ["n - 13 == 0"]


def test_division_by_a_size_pins_it_unless_the_ratio_is_fixed():
    with recording() as guards:
        assert (traced(26, 2 * n) // traced(13, n)) == 2  # a fixed ratio: the same wherever n > 0
    assert [str(g) for g in guards] == ["n > 0"]
    with recording() as guards:
        x = traced(40, s) // traced(13, n)
    assert x.dim == s // 13 and [str(g) for g in guards] == ["n - 13 == 0"]


def test_constant_results_are_plain_ints():
    with recording() as guards:
        x = traced(13, n)
        assert type(x - x) is int and (x - x) == 0 and type(x * 0) is int
    assert guards == []


@pytest.mark.parametrize("make", [lambda x: 1.0 / x, lambda x: x / 3.0, lambda x: (x + 1) / (2 * x) * 0.5 - 1.25,
                                  lambda x: -(1.0 / x)])
def test_floats_evaluate_bit_for_bit_as_python_computes_them(make):
    with recording() as guards:
        f = make(traced(7, n))
    assert isinstance(f, TracedFloat) and guards == []
    for value in (1, 3, 7, 1000, 12345):
        want = make(value)
        assert struct.pack("<d", float_value(f.code, {"n": value})) == struct.pack("<d", want)


def test_a_float_question_pins_every_size_it_reads():
    with recording() as guards:
        assert (1.0 / traced(7, n)) < 0.5
    assert [str(g) for g in guards] == ["n - 7 == 0"]
