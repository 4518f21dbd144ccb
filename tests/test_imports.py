"""The core never imports TVM; `import tvm` registers simaccel without importing heavy parts."""

import subprocess
import sys


def run(code: str) -> str:
    # Run outside the source tree, so the installed package is what gets imported.
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_core_and_kernels_do_not_import_tvm():
    out = run(
        "import sys, simaccel, simaccel.kernels, simaccel.runtime, simaccel.ops, simaccel.engines\n"
        "from simaccel.kernels import matmul, conv2d, pool2d, normalization, elementwise\n"
        "print(sorted(m for m in sys.modules if m == 'tvm' or m.startswith(('tvm.', 'tvm_ffi'))))"
    )
    assert out == "[]"


def test_import_tvm_registers_simaccel_lazily():
    out = run(
        "import sys, tvm, tvm_ffi\n"
        "print(tvm_ffi.get_global_func('relax.ext.simaccel', allow_missing=True) is not None,"
        " tvm_ffi.get_global_func('simaccel.runtime.invoke', allow_missing=True) is not None,"
        " 'numba' in sys.modules, 'tvm.relax' in sys.modules and 'simaccel.tvm_integration.backend.patterns' in sys.modules)"
    )
    assert out == "True True False False"
