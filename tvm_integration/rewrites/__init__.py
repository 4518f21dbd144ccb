"""Relax-to-Relax rewrites run before partitioning: the model as TVM would infer it, in the form
simaccel's patterns (and TVM's) match. Where it sits: below the BYOC backend, which calls
`prepare_for_inference` first; it knows Relax ops, not simaccel's (those are declared in
simaccel.ops), and imports nothing of simaccel.
"""

from .inference import prepare_for_inference
from .types import tensor_info

__all__ = ["prepare_for_inference", "tensor_info"]
