"""Check a simaccel fuzz failure again: python repro.py (exit 1 while it still fails)."""
import pathlib
import sys

from simaccel.tvm_integration.tools.fuzz import replay

sys.exit(replay(pathlib.Path(__file__).resolve().parent))
