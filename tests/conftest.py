"""Shared fixtures: a fresh runtime state per test and the GPU marker's skip rule; a run that
leaves files in the folder it ran from fails."""

from __future__ import annotations

import os
import random

import pytest

import forks
import simaccel


def _has_gpu() -> bool:
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # no driver, no numba-cuda binding: no GPU for our purpose
        return False


HAS_GPU = _has_gpu()


# What a test run may leave in the folder it runs from (caches, an editable install's metadata).
_LEFT_BY_TOOLS = {".pytest_cache", "__pycache__", "build", "simaccel.egg-info"}


def pytest_sessionstart(session):
    session.config._files_before = set(os.listdir(session.config.invocation_params.dir))


def pytest_sessionfinish(session, exitstatus):
    """Tests write under tmp_path: anything new in the invocation folder is a test's leak."""
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller checks once
        return
    left = set(os.listdir(session.config.invocation_params.dir)) - session.config._files_before - _LEFT_BY_TOOLS
    if left:
        print(f"\ntests left files in {session.config.invocation_params.dir}: {sorted(left)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_finish(session):
    """The fork server (tests/forks.py) starts with the environment as collecting left it (torch,
    imported by test modules, sets $TORCHINDUCTOR_CACHE_DIR), before any test changes it."""
    forks.BASE_ENV = dict(os.environ)


ORDER_ENV = "SIMACCEL_TEST_ORDER"  # "reverse" or "shuffle:SEED": tests are isolated, any order passes
# The files that take longest (seconds of one worker on a 2-core machine, 2026-12-05, after the
# fork server warmed TVM and native builds cached their runtime: aot 300, fuzz_cluster 128, fuzz
# 93, conformance 81, faults 67, untuned_models 49, torch_models 47, end_to_end 31, mask_models
# 29, rewrite_shapes 28, tutorials 26, cli 26; kernels took 44 before it was split by kernel
# family, whose longest files, each run alone on 2026-12-06, are kernels_normalization 22 and
# kernels_conv2d 15), collected first, in this order:
# `--dist loadfile` hands files to idle workers in collection order (pytest.ini turns off
# xdist's own order, by test count, which handed the three-test Dask file out last: one worker
# then ran it alone for its last 126 s, measured with per-test start and end times).
LONGEST_FILES = ("test_aot.py", "test_fuzz_cluster.py", "test_fuzz.py", "test_conformance.py", "test_faults.py",
                 "test_untuned_models.py", "test_torch_models.py", "test_end_to_end.py", "test_mask_models.py",
                 "test_rewrite_shapes.py", "test_tutorials.py", "test_cli.py", "test_kernels_normalization.py",
                 "test_kernels_conv2d.py")


def _reorder(items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
    order = os.environ.get(ORDER_ENV, "").strip()
    if order == "reverse":
        items.reverse()
    elif order.startswith("shuffle:"):
        random.Random(int(order.partition(":")[2])).shuffle(items)  # seeded: every xdist worker agrees
    elif order:
        raise pytest.UsageError(f"${ORDER_ENV}={order!r}: expected reverse or shuffle:SEED")


def pytest_collection_modifyitems(config, items):
    _reorder(items)
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a working CUDA driver (none found by numba.cuda)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def restored_environment():
    """The environment after each test is the one before it: what a library sets on its own
    (torch's compile cache sets $TORCHINDUCTOR_CACHE_DIR) does not reach later tests, nor the
    processes they start."""
    before = dict(os.environ)
    yield
    if os.environ != before:
        for key in set(os.environ) - set(before):
            del os.environ[key]
        os.environ.update(before)


@pytest.fixture(autouse=True)
def clean_runtime(monkeypatch):
    """Each test starts with the default engine choice and an empty ledger."""
    monkeypatch.delenv("SIMACCEL_ENGINE", raising=False)
    runtime = simaccel.get_runtime()
    runtime.set_engine(None)
    runtime.ledger.reset()
    yield runtime
    runtime.set_engine(None)


@pytest.fixture
def isolated_isa():
    """Ops declared inside the test are forgotten after it (the ISA is process-wide):
    `simaccel.ops.declared()`, which the plugin's `simaccel_declare` fixture also uses."""
    from simaccel.ops import registry

    with registry.declared():
        yield registry
