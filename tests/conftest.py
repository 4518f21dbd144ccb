"""Shared fixtures: a fresh runtime state per test and the GPU marker's skip rule."""

from __future__ import annotations

import sys

import pytest

import simaccel


def _has_gpu() -> bool:
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # no driver, no numba-cuda binding: no GPU for our purpose
        return False


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a working CUDA driver (none found by numba.cuda)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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
def isolated_isa(monkeypatch):
    """Ops declared inside the test are forgotten after it (the ISA is process-wide)."""
    from simaccel.ops import registry

    monkeypatch.setattr(registry, "_OPS", dict(registry._OPS))
    monkeypatch.setattr(registry, "_FAMILIES", dict(registry._FAMILIES))
    monkeypatch.setattr(registry, "_loaded_env", registry._loaded_env)
    modules = set(sys.modules)
    yield registry
    simaccel.get_runtime().clear()  # plans hold resolved ops
    for name in set(sys.modules) - modules:  # users' op modules loaded meanwhile: a later load declares again
        path = getattr(sys.modules[name], "__file__", None) or ""
        if path.endswith(".py") and "site-packages" not in path and not name.startswith("simaccel."):
            del sys.modules[name]
