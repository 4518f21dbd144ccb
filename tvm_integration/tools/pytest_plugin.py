"""The pytest plugin of simaccel.testing: the `simaccel_engine` fixture, its option and `simaccel_declare`.

Where it sits: setup.py's `pytest11` entry point names this module, so every pytest run where
simaccel is installed loads it (``-p no:simaccel`` turns it off; with plugin autoloading off,
``-p simaccel.tvm_integration.tools.pytest_plugin`` turns it on). It imports neither TVM nor
Numba when pytest starts: the engines are looked at when a test asks for one, through
`simaccel.tvm_integration.tools.testing`.

* ``--simaccel-engines=ref,sim`` (or the ini option ``simaccel_engines``): the engines the
  fixture is parametrised over; default: all of ``ref, sim, cuda, native``. An unknown name
  is a usage error naming the valid ones.
* `simaccel_engine`: one `Engine` per chosen engine (test ids ``[ref]``, ``[sim]``, ...); one
  that cannot run here (no GPU, no CUDA toolchain) is skipped with the reason.
* `simaccel_declare`: `simaccel.ops.declare` for one test; its ops are forgotten after it.
"""

from __future__ import annotations

import pytest

from ...testing import TEST_ENGINES

OPTION = "--simaccel-engines"
INI = "simaccel_engines"
FIXTURE = "simaccel_engine"
_ENGINES_KEY = pytest.StashKey[list]()


def pytest_addoption(parser):
    group = parser.getgroup("simaccel", "simaccel (simaccel.testing)")
    help_text = (f"comma-separated engines the {FIXTURE} fixture runs tests on, of {', '.join(TEST_ENGINES)} "
                 "(sim is the Numba CUDA simulator: slow; cuda and native need a GPU and are skipped without "
                 "one). Default: all")
    group.addoption(OPTION, dest="simaccel_engines", default=None, metavar="ENGINES", help=help_text)
    parser.addini(INI, help_text, default="")


def selected_engines(config) -> list[str]:
    """The engine names chosen by the option, else the ini option, else all; UsageError for unknown ones."""
    value = config.getoption("simaccel_engines") or config.getini(INI) or ""
    source = OPTION if config.getoption("simaccel_engines") else INI
    names = list(dict.fromkeys(n.strip() for n in str(value).split(",") if n.strip()))
    unknown = [n for n in names if n not in TEST_ENGINES]
    if unknown:
        raise pytest.UsageError(f"{source}: unknown engine{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                                f"valid engines: {', '.join(TEST_ENGINES)}")
    if value and not names:
        raise pytest.UsageError(f"{source}: no engine named; valid engines: {', '.join(TEST_ENGINES)}")
    return names or list(TEST_ENGINES)


def pytest_configure(config):
    config.stash[_ENGINES_KEY] = selected_engines(config)


def pytest_report_header(config):
    return f"simaccel: {FIXTURE} engines {', '.join(config.stash[_ENGINES_KEY])} ({OPTION})"


def pytest_generate_tests(metafunc):
    if FIXTURE not in metafunc.fixturenames or _parametrized_by_test(metafunc):
        return
    names = metafunc.config.stash[_ENGINES_KEY]
    metafunc.parametrize(FIXTURE, names, indirect=True, ids=names)


def _parametrized_by_test(metafunc) -> bool:
    """Whether the test parametrises `simaccel_engine` itself (``@pytest.mark.parametrize(..., indirect=True)``)."""
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        if FIXTURE in names:
            return True
    return False


@pytest.fixture
def simaccel_engine(request):
    """An engine to run simaccel regions on (`simaccel.testing.Engine`: a str, with its target
    device); pass it on: ``assert_matches_tvm(mod, engines=[simaccel_engine])``."""
    from .testing import Engine

    engine = Engine(getattr(request, "param", None) or request.config.stash[_ENGINES_KEY][0])
    reason = engine.unavailable()
    if reason:
        pytest.skip(f"simaccel engine {str(engine)!r} cannot run here: {reason}")
    return engine


@pytest.fixture
def simaccel_declare():
    """`simaccel.ops.declare` for this test: the ops it declares are forgotten after it."""
    from ...ops import declare, declared

    with declared():
        yield declare
