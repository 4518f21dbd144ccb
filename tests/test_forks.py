"""The test fork server's rule for GPU machines (tests/forks.py): no command is forked from a
server whose imports loaded the CUDA driver, since a fork of a process that started CUDA cannot
use CUDA (`cudaErrorInitializationError`, seen on an H100 for every example the tests forked)."""

from __future__ import annotations

import subprocess
import sys
import types

import forks


def test_a_process_that_loads_a_cuda_driver_is_seen_to_have_one(tmp_path):
    """`cuda_driver_loaded` reads the process's mappings: a library named libcuda.so.1 (here an
    empty one) makes it True; before that, in a process that imported only the standard
    library, it is False."""
    library = tmp_path / "libcuda.so.1"
    source = tmp_path / "empty.c"
    source.write_text("int simaccel_test_symbol(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    code = ("import ctypes, sys; sys.path.insert(0, sys.argv[2]); import forks; "
            "before = forks.cuda_driver_loaded(); ctypes.CDLL(sys.argv[1]); print(before, forks.cuda_driver_loaded())")
    done = subprocess.run([sys.executable, "-c", code, str(library), str(forks.Path(forks.__file__).parent)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_no_command_is_forked_from_a_server_that_loaded_the_cuda_driver(monkeypatch):
    """Where the server's warm-up mapped libcuda, `start` gives a process of its own."""
    never_forks = types.SimpleNamespace(forks=False, process=types.SimpleNamespace(poll=lambda: None),
                                        acts_at_start=lambda env: [])
    monkeypatch.setattr(forks, "_SERVER", never_forks)
    process = forks.start([sys.executable, "-c", "print('ran')"])
    out, _ = process.communicate(timeout=120)
    assert isinstance(process, subprocess.Popen) and process.returncode == 0 and out.strip() == "ran"


def test_the_server_here_says_whether_it_forks():
    """The real server reports its state; on a machine without a CUDA driver it forks (the
    suite's speed rests on it), and a forked command runs."""
    server = forks._server()
    assert server.forks == (not forks.cuda_driver_loaded(server.process.pid))
    result = forks.run([sys.executable, "-c", "print('ran')"])
    assert result.returncode == 0 and result.stdout.strip() == "ran"
