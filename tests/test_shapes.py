"""simaccel.shapes: the Dim algebra as a class of behaviour.

Seeded random expressions over size vars and ints (+, -, *, // c, % c) evaluate as the same
computation on Python ints, read back from their text form as an equal Dim, and obey the ring
laws exactly (one normal form: equal polynomials compare and hash equal, constants are plain
ints). What needs the vars' values raises SymbolicError (a TypeError); `parse` refuses what is
not a size expression with a ValueError quoting the text.
"""

import operator
import random
import re

import pytest

from simaccel.shapes import Dim, SymbolicError, bind_shape, evaluate, parse, shape_vars

n, s, m = Dim.var("n"), Dim.var("s"), Dim.var("m")
VARS = ("a", "b", "c")
SEED = 20261206
COUNT = 3000


# -- random expressions ------------------------------------------------------------------------
def random_expression(rng: random.Random, depth: int):
    """(the expression built with Dim arithmetic, the same expression as a function of the
    vars' int values), both from the same random choices."""
    if depth == 0 or rng.random() < 0.25:
        if rng.random() < 0.7:
            name = rng.choice(VARS)
            return Dim.var(name), lambda v, name=name: v[name]
        value = rng.randint(-3, 6)
        return value, lambda v, value=value: value
    op = rng.choice("+-*/%" if depth <= 2 else "+-/%")  # products only near the leaves: sizes stay small
    if op in "/%":
        c = rng.randint(1, 6)
        inner, f = random_expression(rng, depth - 1)
        if op == "/":
            return inner // c, lambda v: f(v) // c
        return inner % c, lambda v: f(v) % c
    (x, fx), (y, fy) = random_expression(rng, depth - 1), random_expression(rng, depth - 1)
    if op == "+":
        return x + y, lambda v: fx(v) + fy(v)
    if op == "-":
        return x - y, lambda v: fx(v) - fy(v)
    return x * y, lambda v: fx(v) * fy(v)


def random_cases(seed: int = SEED, count: int = COUNT):
    rng = random.Random(seed)
    return [random_expression(rng, rng.randint(1, 4)) for _ in range(count)]


def value_sets(rng: random.Random):
    """All vars 0, all 1, and two random mixes (0 and 1 among them often)."""
    yield {k: 0 for k in VARS}
    yield {k: 1 for k in VARS}
    for _ in range(2):
        yield {k: rng.choice((0, 1, rng.randint(2, 40))) for k in VARS}


def test_random_expressions_evaluate_as_python_ints():
    rng = random.Random(SEED + 1)
    symbolic = 0
    for expr, f in random_cases():
        assert type(expr) in (int, Dim)
        # normal form: an expression without atoms is a plain int, a Dim always reads a var
        assert isinstance(expr, Dim) == bool(shape_vars([expr])), expr
        symbolic += isinstance(expr, Dim)
        for values in value_sets(rng):
            assert evaluate(expr, values) == f(values), (str(expr), values)
    assert symbolic > COUNT // 2  # the property is about Dims, not mostly constants


def test_random_expressions_read_back_from_their_text():
    rng = random.Random(SEED + 2)
    checked = 0
    for expr, f in random_cases():
        text = str(expr)
        again = parse(text)
        assert again == expr and hash(again) == hash(expr) and type(again) is type(expr), (text, str(again))
        assert str(again) == text
        for values in value_sets(rng):
            assert evaluate(again, values) == f(values), (text, values)
        checked += 1
    assert checked > COUNT * 3 // 4  # the filter leaves the property its bulk


def test_random_expressions_obey_the_ring_laws():
    rng = random.Random(SEED + 3)
    cases = [e for e, _ in random_cases(SEED + 4, 600)]
    for _ in range(600):
        x, y, z = (rng.choice(cases) for _ in range(3))
        c = rng.randint(1, 7)
        laws = {
            "x + y == y + x": (x + y, y + x),
            "x * y == y * x": (x * y, y * x),
            "(x + y) + z == x + (y + z)": ((x + y) + z, x + (y + z)),
            "(x * y) * z == x * (y * z)": ((x * y) * z, x * (y * z)),
            "x * (y + z) == x*y + x*z": (x * (y + z), x * y + x * z),
            "x - y == x + (-1)*y": (x - y, x + (-1) * y),
            "(x * c) // c == x": ((x * c) // c, x),
            "x + 0 == x, x * 1 == x": (x + 0, x * 1),
        }
        for law, (left, right) in laws.items():
            assert left == right and hash(left) == hash(right), (law, str(x), str(y), str(z), c)
        for zero in (x - x, (x * c) % c, x * 0):
            assert type(zero) is int and zero == 0, (str(x), c)


# -- normal form, by example ----------------------------------------------------------------------
@pytest.mark.parametrize("left, right", [
    (n * s, s * n),
    (n + s + 1, 1 + s + n),
    ((n + s) + m, n + (s + m)),
    ((n * s) * m, n * (s * m)),
    ((n + 1) * 2 - 2, 2 * n),
    ((n + 1) * (n - 1), n * n - 1),
    ((n + s) * (n - s), n * n - s * s),
    (n * (s + m), m * n + n * s),
    ((2 * n) // 2, n),
    ((6 * n + 4) // 2, 3 * n + 2),
    ((2 * n + 2) // 2, n + 1),
    (n // 1, n),
    ((n + 1) // 2 * 2, 2 * ((1 + n) // 2)),
    (n % 4 + n // 4, n // 4 + n % 4),
    # a division's multiples of its divisor come out of it: a window's output (n - 2)//2 + 1
    # is numpy's n//2, and a remainder keeps a constant in [0, divisor)
    ((n - 2) // 2 + 1, n // 2),
    ((2 * n + 1) // 2, n),
    ((4 * n - 3) // 4, n - 1),
    ((n + 2 * s - 1) // 2, (n + 1) // 2 + s - 1),
    ((n + 3) % 2, (n + 1) % 2),
    ((n + 4 * s) % 4, n % 4),
], ids=str)
def test_equal_polynomials_compare_and_hash_equal(left, right):
    assert left == right
    assert hash(left) == hash(right)
    assert str(left) == str(right)
    assert {left: 1}[right] == 1


@pytest.mark.parametrize("left, right", [
    (n, s), (n + 1, n), (2 * n, n * n), ((n // 2) * 2, n), ((n + 1) // 2, n // 2 + 1), (n % 2, 0), (n, 3),
], ids=str)
def test_different_polynomials_are_not_equal(left, right):
    assert left != right
    assert not (left == right)


@pytest.mark.parametrize("make, value", [
    (lambda: n - n, 0),
    (lambda: (n + 2) - n, 2),
    (lambda: n * 0, 0),
    (lambda: 0 * (n + s), 0),
    (lambda: (4 * n) % 2, 0),
    (lambda: (6 * n + 3) % 3, 0),
    (lambda: n % 1, 0),
    (lambda: (n // 3) - (n // 3), 0),
    (lambda: (n + 1) * (n - 1) - n * n, -1),
    (lambda: parse("n - n + 7"), 7),
    (lambda: parse("12"), 12),
], ids=["n-n", "(n+2)-n", "n*0", "0*(n+s)", "(4n)%2", "(6n+3)%3", "n%1", "(n//3)-(n//3)", "(n+1)(n-1)-n*n",
        "parse n-n+7", "parse 12"])
def test_constant_results_are_plain_ints(make, value):
    result = make()
    assert type(result) is int
    assert result == value


def test_text_form_examples():
    assert str(n * s + 1) == "n*s + 1"
    assert str((m + 1) // 2) == "(m + 1)//2"
    assert str(n % 4) == "n%4"
    assert str(2 - n) == "-n + 2"
    assert str(-3 * (n // 2)) == "-3*(n//2)"
    assert str(n * (s // 2)) == "n*(s//2)"


def test_evaluate_bind_shape_and_shape_vars():
    shape = (n, n * s + 1, 16, (s + 1) // 2)
    assert shape_vars(shape) == {"n", "s"}
    assert shape_vars((1, 2)) == frozenset()
    assert bind_shape(shape, {"n": 3, "s": 4}) == (3, 13, 16, 2)
    assert all(type(d) is int for d in bind_shape(shape, {"n": 3, "s": 4}))
    assert evaluate(7, {}) == 7
    with pytest.raises(SymbolicError, match="size var s has no value"):
        evaluate(n + s, {"n": 1})


# -- what needs the values ------------------------------------------------------------------------
@pytest.mark.parametrize("question", [
    lambda: n < 3, lambda: n <= 3, lambda: n > 3, lambda: n >= 3, lambda: 3 < n, lambda: n < s,
    lambda: bool(n), lambda: bool(n - 1), lambda: int(n), lambda: float(n), lambda: operator.index(n),
    lambda: range(n), lambda: [0, 1][n],
    lambda: n / 2, lambda: 2 / n, lambda: n // s, lambda: n % s, lambda: 5 // n, lambda: 5 % n,
    lambda: n // 0, lambda: n % 0, lambda: n // -2, lambda: n % -1, lambda: (n + 1) // 0,
], ids=["<", "<=", ">", ">=", "int<", "dim<dim", "bool", "bool(n-1)", "int", "float", "index", "range",
        "subscript", "n/2", "2/n", "n//s", "n%s", "5//n", "5%n", "//0", "%0", "//-2", "%-1", "(n+1)//0"])
def test_what_needs_a_value_raises_symbolic_error(question):
    with pytest.raises(SymbolicError) as raised:
        question()
    assert isinstance(raised.value, TypeError)


def test_symbolic_error_names_the_size_and_its_vars():
    with pytest.raises(SymbolicError, match=r"n\*s \+ 1 .*\['n', 's'\]"):
        bool(n * s + 1)


def test_equality_with_an_int_is_structural_not_a_question():
    assert (n == 3) is False and (n != 3) is True  # a Dim is never a constant (those are ints)


@pytest.mark.parametrize("question", [lambda: n // 2.5, lambda: n % 2.5, lambda: n // "2"],
                         ids=["n//2.5", "n%2.5", "n//'2'"])
def test_division_by_a_non_int_is_refused(question):
    try:
        result = question()
    except TypeError:  # SymbolicError is one
        return
    raise AssertionError(f"gave {result!r}")


@pytest.mark.parametrize("question, written", [(lambda: n / 2, "n / 2"), (lambda: 2 / n, "2 / n"),
                                               (lambda: 5 % n, "5 % n")], ids=["n/2", "2/n", "5%n"])
def test_symbolic_error_names_the_operation_written(question, written):
    with pytest.raises(SymbolicError) as raised:
        question()
    message = str(raised.value)
    left, symbol, _ = written.split()
    pattern = r"(?<!/)/(?!/)" if symbol == "/" else re.escape(symbol)
    found = re.search(pattern, message)
    assert found, f"{written!r} raised {message!r}, which names another operation"
    assert left in message[:found.start()], f"{written!r} raised {message!r}, operands the other way round"


# -- text -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("expr", [-(n // 2), -(n % 3), 1 - n // 2, -((n + s) // 2), (1 - n // 2) // 3],
                         ids=str)
def test_text_of_a_negated_division_reads_back(expr):
    again = parse(str(expr))
    assert again == expr, (str(expr), str(again))


@pytest.mark.parametrize("text, want", [
    ("n", n), (" n*s + 1 ", n * s + 1), ("s*n + 1", n * s + 1), ("(m + 1)//2", (m + 1) // 2),
    ("n % 4", n % 4), ("-(n//2)", -(n // 2)), ("2*(n - 1) + 2", 2 * n), ("(n)", n), ("3 * 4", 12),
], ids=repr)
def test_parse_reads_size_expressions(text, want):
    got = parse(text)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("text", [
    "1.5", "n * 1.5", "f(n)", "max(n, 2)", "n ** 2", "2 ** n", "n / 2", "n.x", "n[0]", "1n", "$n", "n +", "",
    "   ", "True", "n if m else s", "n < 3", "[n]", "lambda: n", "n // m", "n % s", "n // 0", "n % -2",
], ids=repr)
def test_parse_refuses_what_is_not_a_size_expression(text):
    with pytest.raises(ValueError) as raised:
        parse(text)
    assert repr(text) in str(raised.value) or repr(text.strip()) in str(raised.value)


@pytest.mark.parametrize("value", [3, None, b"n", 1.5, ["n"], n], ids=repr)
def test_parse_takes_strings_only(value):
    with pytest.raises(ValueError, match="a symbolic size is a string") as raised:
        parse(value)
    assert repr(value) in str(raised.value)


@pytest.mark.parametrize("text", ["4 // 0", "2 % 0", "(n - n) // 0"])
def test_parse_refuses_an_int_divided_by_zero(text):
    with pytest.raises(ValueError, match="is not a size expression"):
        parse(text)


@pytest.mark.parametrize("name", ["1n", "n-1", "", "n s", None, 3])
def test_var_names_are_identifiers(name):
    with pytest.raises(ValueError, match="identifier"):
        Dim.var(name)
