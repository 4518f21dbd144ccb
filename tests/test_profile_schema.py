"""A device profile is checked field by field when it is made (DeviceProfile(...), from_dict, load,
`--profile FILE`): each bad value is a SimAccelError naming the profile, the field's path and
what is wrong with it; on the command line, one line and exit 2.

The table below is this file's own account of the fields (what kind of value each takes), not
the code's schema: a field added to the code without a line here fails
`test_the_table_covers_every_field`. Every field is tried with every kind of bad value: a wrong
JSON type, negative, zero where not allowed, NaN, inf, a string, missing where required, an
unknown key, a misspelt dtype.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

import forks
from simaccel import DeviceProfile, SimAccelError
from simaccel.ops.rules import ISA_DTYPES
from simaccel.timing import FIELDS, Performance

# performance field -> (kind, required): "rate" a positive finite number, "time" a finite number
# >= 0, "per-dtype" an object of the ISA's dtypes to rates.
PERFORMANCE = {
    "peak_flops": ("per-dtype", True),
    "memory_bandwidth": ("rate", True),
    "scratchpad_bandwidth": ("rate", False),
    "op_dispatch": ("time", False),
    "region_dispatch": ("time", False),
    "dma_bandwidth": ("rate", False),
    "dma_latency": ("time", False),
}
GOOD = {"peak_flops": {"float32": 1e12, "float16": 4e12}, "memory_bandwidth": 1e11, "scratchpad_bandwidth": 1e12,
        "op_dispatch": 1e-6, "region_dispatch": 1e-5, "dma_bandwidth": 1e10, "dma_latency": 2e-5}
NAN, INF = float("nan"), float("inf")
# A bad number of each kind, and the words of what the message says it must be.
BAD_NUMBERS = [("string", "fast"), ("list", [1e9]), ("object", {"value": 1e9}), ("boolean", True),
               ("negative", -1.0), ("nan", NAN), ("inf", INF), ("-inf", -INF), ("overflow", 10 ** 400)]
MUST = {"rate": "must be a positive finite number", "time": "must be a finite number >= 0"}


def _performance_cases():
    """(id, performance object, path the message names, what it says)."""
    for field, (kind, required) in PERFORMANCE.items():
        if kind == "per-dtype":
            for label, value in [("number", 1e12), ("string", "fast"), ("list", [1e12]), ("boolean", True),
                                 ("null", None), ("pairs-not-pairs", [["float32"]])]:
                yield f"{field}-{label}", {**GOOD, field: value}, f"performance.{field}", "must be an object of dtype"
            yield f"{field}-empty", {**GOOD, field: {}}, f"performance.{field}", "names no dtype"
            for label, table in [("misspelt", {"fp16": 4e12, "float32": 1e12}), ("case", {"Float32": 1e12}),
                                 ("not-isa", {"float64": 1e12}), ("blank", {"": 1e12})]:
                bad = next(k for k in table if k not in ISA_DTYPES)
                yield (f"{field}-dtype-{label}", {**GOOD, field: table}, f"performance.{field}",
                       f"unknown dtype {bad!r} (known: {', '.join(ISA_DTYPES)})")
            for label, value in BAD_NUMBERS + [("zero", 0), ("null", None)]:
                yield (f"{field}-figure-{label}", {**GOOD, field: {"float32": 1e12, "float16": value}},
                       f"performance.{field}.float16", MUST["rate"])
        else:
            zero = [("zero", 0)] if kind == "rate" else []
            null = [] if kind == "rate" and not required else [("null", None)]  # an optional rate: null = not given
            for label, value in BAD_NUMBERS + zero + null:
                yield f"{field}-{label}", {**GOOD, field: value}, f"performance.{field}", MUST[kind]
        if required:
            yield (f"{field}-missing", {k: v for k, v in GOOD.items() if k != field}, f"performance.{field}",
                   "missing")
    yield "unknown-field", {**GOOD, "clock": 1e9}, "performance", "unknown field 'clock'"
    yield "misspelt-field", {**GOOD, "memory_bandwith": 1e11}, "performance", "unknown field 'memory_bandwith'"
    for label, value in [("number", 1e12), ("list", [GOOD]), ("string", "fast"), ("boolean", True)]:
        yield f"performance-{label}", value, "performance", "must be an object of the fields"


PERFORMANCE_CASES = list(_performance_cases())

# The rest of a profile: field -> bad values and what the message says.
OTHER_CASES = [
    ("name-number", {"name": 3}, "name must be a non-empty string"),
    ("name-empty", {"name": ""}, "name must be a non-empty string"),
    ("name-null", {"name": None}, "name must be a non-empty string"),
    ("ops-string", {"ops": "simaccel.conv2d"}, "ops must be a set of op or family names"),
    ("ops-object", {"ops": {"simaccel.conv2d": 1}}, "ops must be a set of op or family names"),
    ("ops-number-in-list", {"ops": ["simaccel.conv2d", 3]}, "ops must be a set of op or family names"),
    ("ops-list-in-list", {"ops": [["simaccel.conv2d"]]}, "ops must be a set of op or family names"),
    ("dtypes-string", {"dtypes": "float32"}, "dtypes must be a list of dtype names"),
    ("dtypes-null", {"dtypes": None}, "dtypes must be a list of dtype names"),
    ("dtypes-object", {"dtypes": {"float32": 1}}, "dtypes must be a list of dtype names"),
    ("dtypes-number", {"dtypes": ["float32", 16]}, "dtypes must be a list of dtype names"),
    ("dtypes-misspelt", {"dtypes": ["float32", "fp16"]}, "dtypes: unknown dtype 'fp16' (known: "),
    ("dtypes-not-isa", {"dtypes": ["float64"]}, "dtypes: unknown dtype 'float64'"),
    *[(f"{field}-{label}", {field: value}, f"{field} must be a positive integer")
      for field in ("max_rank", "max_tensor_bytes", "max_region_bytes", "alignment", "max_elements")
      for label, value in [("negative", -1), ("float", 1.5), ("string", "8"), ("boolean", True), ("nan", NAN),
                           ("inf", INF)]],
    *[(f"{field}-zero", {field: 0}, f"{field} must be a positive integer")
      for field in ("max_tensor_bytes", "max_region_bytes", "alignment", "max_elements")],
    *[(f"{field}-null", {field: None}, f"{field} must be a positive integer") for field in ("max_rank", "max_elements")],
    ("alignment-not-power-of-two", {"alignment": 48}, "alignment must be a power of two"),
    ("unknown-field", {"scratchpad": 1024}, "unknown field 'scratchpad' (fields: name, ops, dtypes, "),
    ("misspelt-field", {"max_ranks": 4}, "unknown field 'max_ranks'"),
]


def test_the_table_covers_every_field():
    assert set(PERFORMANCE) == set(FIELDS)
    others = {f.name for f in dataclasses.fields(DeviceProfile)} - {"performance"}
    assert others <= {next(iter(case[1])) for case in OTHER_CASES}


@pytest.mark.parametrize("perf, path, what", [c[1:] for c in PERFORMANCE_CASES], ids=[c[0] for c in PERFORMANCE_CASES])
def test_a_bad_performance_field_is_an_error_naming_the_profile_and_the_field(perf, path, what):
    for make in (lambda: DeviceProfile.from_dict({"name": "npu", "performance": perf}),
                 lambda: DeviceProfile(name="npu", performance=perf)):
        with pytest.raises(SimAccelError) as error:
            make()
        message = str(error.value)
        assert message.startswith(f"profile npu: {path}: ") and what in message, message
    if isinstance(perf, dict) and path.startswith("performance.") and "missing" not in what:
        with pytest.raises(SimAccelError) as error:  # the Python constructor checks the same
            Performance(**perf)
        assert str(error.value).startswith(f"{path}: ") and what in str(error.value)


@pytest.mark.parametrize("fields, what", [c[1:] for c in OTHER_CASES], ids=[c[0] for c in OTHER_CASES])
def test_a_bad_profile_field_is_an_error_naming_the_profile_and_the_field(fields, what):
    named = "profile: " if "name" in fields else "profile npu: "  # a bad name cannot be named
    makers = [lambda: DeviceProfile.from_dict({"name": "npu", **fields})]
    if "unknown" not in what:  # DeviceProfile(scratchpad=...) is Python's own TypeError
        makers.append(lambda: DeviceProfile(**{"name": "npu", **fields}))
    for make in makers:
        with pytest.raises(SimAccelError) as error:
            make()
        assert str(error.value).startswith(named) and what in str(error.value), str(error.value)


@pytest.mark.parametrize("perf, path, what", [c[1:] for c in PERFORMANCE_CASES[::7]],
                         ids=[c[0] for c in PERFORMANCE_CASES[::7]])
def test_a_bad_field_in_a_file_names_the_file_and_the_field(tmp_path, perf, path, what):
    file = tmp_path / "npu.json"
    file.write_text(json.dumps({"name": "npu", "performance": perf}))
    with pytest.raises(SimAccelError) as error:
        DeviceProfile.load(str(file))
    message = str(error.value)
    assert message.startswith(f"device profile {file}: profile npu: {path}: ") and what in message, message


def test_good_figures_are_taken_and_stored_as_floats():
    perf = Performance(**{**GOOD, "op_dispatch": 0, "region_dispatch": 0, "dma_latency": 0, "memory_bandwidth": 10 ** 11,
                          "scratchpad_bandwidth": None, "dma_bandwidth": None})
    assert perf.op_dispatch == 0.0 and perf.memory_bandwidth == 1e11 and perf.scratchpad_bandwidth is None
    assert all(type(v) is float for _, v in perf.peak_flops)
    every = Performance(peak_flops={dtype: 1e12 for dtype in ISA_DTYPES}, memory_bandwidth=1e9)  # each ISA dtype
    assert [d for d, _ in every.peak_flops] == sorted(ISA_DTYPES)
    pairs = Performance(peak_flops=(("float16", 4e12), ("float32", 1e12)), memory_bandwidth=1e9)
    assert pairs == Performance(peak_flops={"float32": 1e12, "float16": 4e12}, memory_bandwidth=1e9)
    with pytest.raises(SimAccelError, match="performance.peak_flops: dtype 'float32' given twice"):
        Performance(peak_flops=(("float32", 1e12), ("float32", 2e12)), memory_bandwidth=1e9)
    assert DeviceProfile(dtypes=["float16"]).dtypes == ("float16",)  # a JSON list, stored as a tuple
    assert DeviceProfile(ops=["simaccel.conv2d"]).ops == frozenset({"simaccel.conv2d"})


def test_a_misspelt_dtype_no_longer_slows_a_float16_matmul():
    """The report: {"fp16": 4e12, "float32": 1e12} was taken, and float16 modeled at float32's 1e12."""
    with pytest.raises(SimAccelError, match="unknown dtype 'fp16'"):
        Performance(peak_flops={"fp16": 4e12, "float32": 1e12}, memory_bandwidth=1e9)
    assert Performance(peak_flops={"float16": 4e12, "float32": 1e12}, memory_bandwidth=1e9).peak("float16") == 4e12


def _cli_cases():
    """(id, profile JSON text, what stderr says): every performance case and every other-field case."""
    for case_id, perf, path, what in PERFORMANCE_CASES:
        yield case_id, {"name": "npu", "performance": perf}, f"profile npu: {path}: ", what
    for case_id, fields, what in OTHER_CASES:
        yield f"other-{case_id}", {"name": "npu", **fields}, "profile: " if "name" in fields else "profile npu: ", what


CLI_CASES = list(_cli_cases())


def _expected(path, prefix: str) -> str:
    return f"simaccel: error: SimAccelError: device profile {path}: {prefix}"


def test_whatif_answers_each_bad_profile_with_one_line_and_exit_2(tmp_path, capsys):
    """Every case through the command line's main() (the line it prints, the status it returns)."""
    from simaccel.tvm_integration.tools.cli import main

    failures = []
    for i, (case_id, content, prefix, what) in enumerate(CLI_CASES):
        path = tmp_path / f"p{i}.json"
        path.write_text(json.dumps(content))  # NaN and Infinity as Python's json writes them (and reads them back)
        status = main(["whatif", "--demo", "--profile", str(path)])
        out, err = capsys.readouterr()
        if not (status == 2 and out == "" and err.count("\n") == 1 and err.startswith(_expected(path, prefix))
                and what in err):
            failures.append((case_id, status, err[-300:]))
    assert not failures, failures


def test_whatif_in_a_process_of_its_own_exits_2_naming_the_field(tmp_path):
    """One case a field, as `simaccel whatif` run as a command (a fork of a warm process, tests/forks.py)."""
    first = {}
    for case in CLI_CASES:
        other = case[0].startswith("other-")
        first.setdefault((other, case[0].removeprefix("other-").split("-")[0]), case)  # (other field?, field)
    cases = [first[key] for key in sorted(first)] + [c for c in CLI_CASES if "misspelt" in c[0]]
    commands = []
    for i, (_, content, _, _) in enumerate(cases):
        path = tmp_path / f"p{i}.json"
        path.write_text(json.dumps(content))
        commands.append({"argv": ["whatif", "--demo", "--profile", str(path)]})
    failures = []
    for (case_id, _, prefix, what), command, result in zip(cases, commands, forks.cli_many(commands)):
        if not (result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1
                and result.stderr.startswith(_expected(command["argv"][-1], prefix)) and what in result.stderr):
            failures.append((case_id, result.returncode, result.stderr[-300:]))
    assert not failures, failures
    assert len(cases) >= len(PERFORMANCE) + 2
