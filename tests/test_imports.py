"""The core never imports TVM; `import tvm` registers simaccel without importing heavy parts."""

import os
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


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# An editable install maps simaccel's folders by itself; drop its finder, so that the import
# resolves as it does where simaccel is installed non-editable (pip install .) or not at all.
NOT_EDITABLE = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path "
                "if not getattr(f, '__module__', '').startswith('__editable__')]\n")


def run_in_checkout_root(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NOT_EDITABLE + code], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


def test_the_checkout_root_imports_its_own_folders_without_an_autoload_warning():
    # From the checkout root the source folder simaccel/ comes first on sys.path; it has no
    # kernels/ or tvm_integration/ inside, so those must come from the top-level folders.
    result = run_in_checkout_root(
        "import os, warnings; warnings.simplefilter('error')\n"
        "import tvm\n"
        "from simaccel.tvm_integration import build, partition_report\n"
        "import simaccel, simaccel.kernels.matmul, simaccel.tvm_integration.backend.autoload\n"
        "print(os.path.dirname(simaccel.__file__)); print(os.path.dirname(simaccel.kernels.matmul.__file__))\n"
        "print(os.path.dirname(simaccel.tvm_integration.__file__))\n"
        "import tvm_ffi; print(tvm_ffi.get_global_func('relax.ext.simaccel', allow_missing=True) is not None)"
    )
    assert result.returncode == 0, result.stderr
    assert "Failed to autoload" not in result.stderr and "Warning" not in result.stderr, result.stderr
    assert result.stdout.split() == [os.path.join(ROOT, "simaccel"), os.path.join(ROOT, "kernels"),
                                     os.path.join(ROOT, "tvm_integration"), "True"]


def test_the_checkout_root_maps_only_the_two_installed_folders():
    # tests/, examples/, scripts/ and setup.py sit beside them, but are not part of the package.
    for name in ("tests", "examples", "scripts", "setup", "simaccel"):
        result = run_in_checkout_root(f"import simaccel.{name}")
        assert result.returncode == 1 and f"No module named 'simaccel.{name}'" in result.stderr, (name, result.stderr)
