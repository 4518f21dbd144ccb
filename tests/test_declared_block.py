"""`simaccel.ops.declared()`: what a block forgets after it, and what it must keep.

A module that declared ops inside the block leaves sys.modules (importing it again declares
again); any other module imported meanwhile stays, wherever it lives. On the GPU machine the
packages sit on $PYTHONPATH, outside site-packages: dropping numba-cuda's modules imported
inside a block (its typing, loaded on a kernel's first compile) made them run again and
register their typing twice, and every later compile failed with "cannot augment
class(float32) with class(float32)".
"""

from __future__ import annotations

import importlib
import sys

from simaccel.ops import registry


def _write(folder, name, text):
    (folder / f"{name}.py").write_text(text)


def test_a_declaring_module_is_forgotten_and_a_helper_beside_it_is_kept(tmp_path, monkeypatch):
    _write(tmp_path, "blockhelper", "RUNS = []\nRUNS.append(1)\n")
    _write(tmp_path, "blockops", (
        "import numpy as np\nimport blockhelper\n"
        "from simaccel.ops import OpFamily, declare, relax_op\n"
        "declare(OpFamily(name='blockaccel.neg', inputs=('data',), pattern=relax_op('relax.negative', 'data'),\n"
        "    infer=lambda shapes: shapes[0], reference=lambda data: -np.asarray(data), kernel=lambda target, out, data: 0))\n"))
    monkeypatch.syspath_prepend(str(tmp_path))
    with registry.declared():
        importlib.import_module("blockops")
        assert "blockaccel.neg" in registry.list_ops()
    assert "blockaccel.neg" not in registry.list_ops()
    assert "blockops" not in sys.modules  # importing it again declares again
    assert sys.modules["blockhelper"].RUNS == [1]  # kept: it ran once
    with registry.declared():
        importlib.import_module("blockops")
        assert "blockaccel.neg" in registry.list_ops()
    assert sys.modules["blockhelper"].RUNS == [1]
    del sys.modules["blockhelper"]


def test_a_package_outside_site_packages_imported_inside_a_block_is_kept(tmp_path, monkeypatch):
    """A third-party module on $PYTHONPATH (as numba-cuda is on the GPU machine) first imported
    inside a block stays imported after it."""
    _write(tmp_path, "thirdparty_like", "COUNT = [0]\nCOUNT[0] += 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with registry.declared():
        importlib.import_module("thirdparty_like")
    assert "thirdparty_like" in sys.modules and sys.modules["thirdparty_like"].COUNT == [1]
    del sys.modules["thirdparty_like"]
