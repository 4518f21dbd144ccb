"""simaccel.engines: where a Program's ops execute.

* ``ref``  - numpy references on host memory.
* ``sim``  - Numba CUDA kernels on the Numba CUDA simulator (host memory).
* ``cuda`` - Numba CUDA kernels on an NVIDIA GPU, zero-copy on the caller's stream.
"""

from __future__ import annotations

from ..errors import EngineError
from .base import Call, Engine
from .cuda import CudaEngine
from .ref import RefEngine
from .sim import SimEngine

_ENGINES: dict[str, Engine] = {}
_FACTORIES = {"ref": RefEngine, "sim": SimEngine, "cuda": CudaEngine}
ENGINE_NAMES = tuple(_FACTORIES)


def get_engine(name: str) -> Engine:
    """The engine called `name` (one instance per process)."""
    if name not in _FACTORIES:
        raise EngineError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
    engine = _ENGINES.get(name)
    if engine is None:
        candidate = _FACTORIES[name]()
        reason = candidate.available()  # asked once per process: a driver does not come and go
        if reason:
            raise EngineError(f"engine {name!r} cannot run here: {reason}")
        engine = _ENGINES[name] = candidate
    return engine


__all__ = ["ENGINE_NAMES", "Call", "Engine", "get_engine"]
