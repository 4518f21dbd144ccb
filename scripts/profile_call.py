"""Profile the host-side cost of one warm simaccel region call on a GPU.

Usage: python -P scripts/profile_call.py ARTIFACTS_DIR [CASE] -- prints the top functions
by cumulative time over 300 calls of CASE (default mm8, an 8x8 matmul+relu region).
"""

import cProfile
import os
import pstats
import sys
import time

import tvm

from simaccel.tvm_integration.tools import deploy
from simaccel.tvm_integration.tools.artifacts import case_inputs, load_manifest

directory = sys.argv[1]
name = sys.argv[2] if len(sys.argv) > 2 else "mm8"
vm, dev = deploy.load(os.path.join(directory, f"{name}.simaccel.so"), "cuda")
tensors = [tvm.runtime.tensor(a, dev) for a in case_inputs(load_manifest(directory), name)]
for _ in range(20):
    vm["main"](*tensors)
dev.sync()
start = time.perf_counter()
for _ in range(300):
    vm["main"](*tensors)
dev.sync()
print(f"{name}: {(time.perf_counter() - start) / 300 * 1e6:.1f} us per call (host loop, one sync)")
profile = cProfile.Profile()
profile.enable()
for _ in range(300):
    vm["main"](*tensors)
dev.sync()
profile.disable()
pstats.Stats(profile).sort_stats("tottime").print_stats(22)
