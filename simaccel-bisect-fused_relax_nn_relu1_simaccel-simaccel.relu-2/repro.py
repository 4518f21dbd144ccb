"""Check a simaccel bisect culprit again: python repro.py (exit 1 while simaccel and TVM alone differ)."""
import pathlib
import sys

from simaccel.tvm_integration.tools.bisect import replay

sys.exit(replay(pathlib.Path(__file__).resolve().parent))
