"""Python processes at the cost of a fork: a warm server per test process (tests only).

Each `python -m simaccel.tvm_integration.tools.cli ...`, `python SCRIPT.py` or `python -c CODE`
a test starts imports TVM's FFI, numba and (through tvm-ffi) torch: 4-7 s of CPU on 2 cores before its
first line runs, which the suite paid some two hundred times. `run` and `start` take the argv
`subprocess` would (`[sys.executable, ...]`) and hand it to a server: a process, one per test
process (pytest-xdist worker), started on first use, that has imported what the command line
imports before it reads an argument (`simaccel.tvm_integration.tools.cli`) and what nearly
every command imports next (TVM's Relax and simaccel's build pipeline: 1.4 s more per command,
paid a hundred times a run), and nothing else (no TVM module built, no kernel compiled, no
thread started). For each command it
forks a child that takes the command's environment (all of it, `os.environ` replaced),
folder, argv, `sys.path[0]` and `__main__`, with stdout and stderr in files of their own (or
one, as `stderr=STDOUT` merges them), runs the module, script or code as Python would, then
the exit handlers, and exits with the status a fresh interpreter gives (an uncaught exception:
its traceback and 1; killed by a signal: -N).

What a fork cannot be is a process that has imported nothing. A command runs in a process of
its own (plain `subprocess`) where that could show:
- its environment differs from the server's in a variable the server's imports read (each
  read is recorded while it imports), or one of a family that acts when a process starts or a
  library loads (PYTHON*, LD_*, TVM_*, CUDA_*, NUMBA_*, OMP_*, ...);
- its `sys.path[0]` (the script's folder; the working folder for -m and -c) holds a module
  or package named like one the server has imported (a source checkout's `simaccel/`).
And no command is forked where the server's imports loaded the CUDA driver (a machine with a
GPU and its driver): a process forked after CUDA started in its parent cannot use CUDA
(`cudaErrorInitializationError`), so there every command runs in a process of its own.
Tests whose point is what a process imports (tests/test_imports.py, a deployed library that
needs neither simaccel nor numba, which simaccel modules a reload loads, import-time warnings)
call `subprocess` themselves.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CLI = "simaccel.tvm_integration.tools.cli"
# What the server imports: what `python -m CLI` imports before main() runs, then what its
# commands import to build or run a model.
WARM = [CLI, "tvm.relax", "simaccel.tvm_integration.backend.pipeline"]

# Variables that act when an interpreter starts or a native library loads, whatever Python code
# reads: a command that sets one of these differently gets a process of its own.
START_PREFIXES = ("PYTHON", "LD_", "TVM", "CUDA", "NUMBA", "NVIDIA", "OMP_", "MKL_", "KMP_", "OPENBLAS", "TORCH",
                  "PYTORCH", "MALLOC", "GLIBC", "LC_", "LANG", "TZ", "HOME", "TMPDIR", "PATH", "DASK", "XDG_")
# Set per test by pytest and xdist (read by nothing a command runs).
IGNORED = {"PYTEST_CURRENT_TEST"}


class _Server:
    """The warm process and how to reach it; one per test process, closed at exit."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="simaccel-forks-")
        self.address = os.path.join(self.folder, "socket")
        self.env = dict(BASE_ENV)
        self.process = subprocess.Popen([sys.executable, __file__, self.address], cwd="/", env=self.env,
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        stderr=open(os.path.join(self.folder, "server.log"), "w"))
        deadline = time.monotonic() + 300
        ready = os.path.join(self.folder, "ready.json")
        while not os.path.exists(ready):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fork server did not start: {Path(self.folder, 'server.log').read_text()}")
            time.sleep(0.05)
        state = json.loads(Path(ready).read_text())
        self.read_at_import = set(state["read"])
        # Forks of a process that loaded the CUDA driver cannot use CUDA: then no command is forked.
        self.forks = not state["cuda_driver"]
        atexit.register(self.close)

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()  # the server exits when its stdin ends
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.folder, ignore_errors=True)

    def acts_at_start(self, env: dict) -> list[str]:
        """The variables of `env` that differ from the server's and may have acted before a command runs."""
        changed = {k for k in set(env) | set(self.env) if env.get(k) != self.env.get(k)} - IGNORED
        return sorted(k for k in changed if k in self.read_at_import or k.startswith(START_PREFIXES))


# The environment the server starts with: this process's before any test changed it (conftest
# sets it once the tests are collected).
BASE_ENV = dict(os.environ)
_SERVER: _Server | None = None
_SERVER_LOCK = threading.Lock()


def _server() -> _Server:
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None or _SERVER.process.poll() is not None:
            _SERVER = _Server()
        return _SERVER


class Forked:
    """A command running as a fork of the server: `subprocess.Popen`'s poll, wait, communicate,
    kill, pid and returncode (stdout and stderr are read when it has ended)."""

    def __init__(self, args, connection: socket.socket, folder: str, text: bool, merged: bool):
        self.args = args
        self.returncode = None
        self._connection = connection
        self._folder = folder
        self._text = text
        self._merged = merged
        self._reply = b""
        self.pid = int(self._line())

    def _line(self, timeout=None) -> str:
        self._connection.settimeout(timeout)
        while b"\n" not in self._reply:
            chunk = self._connection.recv(4096)
            if not chunk:
                raise RuntimeError(f"the fork server dropped the command {self.args}")
            self._reply += chunk
        line, _, self._reply = self._reply.partition(b"\n")
        return line.decode()

    def poll(self):
        if self.returncode is None:
            try:
                self._ended(self._line(timeout=0.0001))
            except (TimeoutError, BlockingIOError, socket.timeout):
                return None
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            try:
                self._ended(self._line(timeout=timeout))
            except (TimeoutError, socket.timeout):
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        return self.returncode

    def _ended(self, line: str):
        self.returncode = int(line)
        self._connection.close()

    def kill(self):
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _read(self, name):
        path = os.path.join(self._folder, name)
        data = Path(path).read_bytes() if os.path.exists(path) else b""
        return data.decode(errors="replace") if self._text else data

    def communicate(self, timeout=None):
        self.wait(timeout)
        out, err = self._read("out"), (None if self._merged else self._read("err"))
        shutil.rmtree(self._folder, ignore_errors=True)
        return out, err


def _sys_path0(argv: list[str], cwd: str) -> str | None:
    """What a fresh interpreter puts first on sys.path for `argv` run in `cwd` (None: not a form we run)."""
    if len(argv) >= 3 and argv[1] in ("-m", "-c"):
        return os.path.abspath(cwd) if argv[1] == "-m" else ""
    if len(argv) >= 2 and not argv[1].startswith("-"):
        return os.path.dirname(os.path.realpath(os.path.join(cwd, argv[1])))
    return None


def start(args, *, env=None, cwd="/", text=True, stderr_to_stdout=False):
    """`subprocess.Popen(args, stdout=PIPE, stderr=PIPE or STDOUT, ...)` as a fork of the warm
    server where nothing tells the two apart (module docstring), else as that very Popen.
    `env` is the command's whole environment (default: this process's)."""
    env = dict(os.environ if env is None else env)
    cwd = str(cwd)
    argv = [str(a) for a in args]
    path0 = _sys_path0(argv, cwd) if argv and argv[0] == sys.executable else None
    server = None if path0 is None else _server()
    def own_process():
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if stderr_to_stdout else subprocess.PIPE,
                                text=text, env=env, cwd=cwd)

    if server is None or not server.forks or server.acts_at_start(env):
        return own_process()
    folder = tempfile.mkdtemp(prefix="cmd-", dir=server.folder)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(server.address)
    request = {"argv": argv[1:], "env": env, "cwd": cwd, "path0": path0, "folder": folder, "merged": stderr_to_stdout}
    connection.sendall(json.dumps(request).encode() + b"\n")
    forked = Forked(argv, connection, folder, text, stderr_to_stdout)
    if forked.pid < 0:  # the server found a module on sys.path[0] that shadows one it imported
        connection.close()
        return own_process()
    return forked


def run(args, *, env=None, cwd="/", timeout=600, text=True) -> subprocess.CompletedProcess:
    """`subprocess.run(args, capture_output=True, text=True, timeout=..., env=..., cwd=...)`, through
    `start`: on a timeout the command is killed and `subprocess.TimeoutExpired` raised."""
    process = start(args, env=env, cwd=cwd, text=text)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess([str(a) for a in args], process.returncode, out, err)


def cli(*args, env=None, cwd="/", timeout=600) -> subprocess.CompletedProcess:
    """`python -m simaccel.tvm_integration.tools.cli ARGS...` with this process's environment plus `env`."""
    return run([sys.executable, "-m", CLI, *map(str, args)], env={**os.environ, **(env or {})}, cwd=cwd,
               timeout=timeout)


def cli_many(commands: list[dict], parallel: int | None = None, timeout=900) -> list[subprocess.CompletedProcess]:
    """Each {"argv": [...], "env": {...}, "cwd": "/"} as `cli(*argv, env=env, cwd=cwd)`, `parallel`
    at a time (default: one per core), the results in order."""
    parallel = parallel or os.cpu_count() or 2
    results: list = [None] * len(commands)
    running: dict[int, object] = {}
    pending = list(enumerate(commands))
    while pending or running:
        while pending and len(running) < parallel:
            i, command = pending.pop(0)
            running[i] = start([sys.executable, "-m", CLI, *map(str, command["argv"])],
                               env={**os.environ, **(command.get("env") or {})}, cwd=command.get("cwd", "/"))
        i = next(iter(running))
        out, err = running[i].communicate(timeout=timeout)
        results[i] = subprocess.CompletedProcess(commands[i]["argv"], running.pop(i).returncode, out, err)
    return results


# -- the server ---------------------------------------------------------------------------------

class _RecordingEnviron(type(os.environ)):
    """os.environ that notes every key Python code reads (while the server imports)."""

    def __init__(self, environ, read: set):
        super().__init__(environ._data, environ.encodekey, environ.decodekey, environ.encodevalue,
                         environ.decodevalue)
        self._read = read

    def _note(self, key):
        self._read.add(key.decode(errors="replace") if isinstance(key, bytes) else str(key))

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self._note(key)
        return super().__contains__(key)


def _warm_up() -> set[str]:
    """Import what the command line imports, noting which variables Python read meanwhile."""
    import importlib

    read: set[str] = set()
    plain = os.environ
    os.environ = _RecordingEnviron(plain, read)
    try:
        for name in WARM:
            importlib.import_module(name)
    finally:
        os.environ = plain
    return read


def cuda_driver_loaded(pid: int | str = "self") -> bool:
    """Whether the process (default: this one) has mapped the CUDA driver (libcuda), which its
    imports may have initialised: a fork of it could not use CUDA."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:  # no /proc: assume the worst
        return True
    return any(os.path.basename(line.split()[-1]).startswith("libcuda.so") for line in maps.splitlines()
               if "/" in line)


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _execute(request: dict) -> int:
    """In the command's process: run it as `python ARGV...` would, return its exit status."""
    import runpy
    import traceback
    import types

    argv = request["argv"]
    sys.path[0] = request["path0"]
    try:
        try:
            if argv[0] == "-m":
                sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file first
                # A fresh `python -m` runs the module as __main__ only: the server's import of
                # it (as itself) is forgotten, so it is not there twice.
                package, _, leaf = argv[1].rpartition(".")
                if sys.modules.pop(argv[1], None) is not None and package in sys.modules:
                    sys.modules[package].__dict__.pop(leaf, None)
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            elif argv[0] == "-c":
                sys.argv = ["-c", *argv[2:]]
                main = types.ModuleType("__main__")
                main.__dict__["__builtins__"] = __builtins__
                sys.modules["__main__"] = main
                exec(compile(argv[1], "<string>", "exec"), main.__dict__)
            else:
                sys.argv = list(argv)
                runpy.run_path(argv[0], run_name="__main__")
            status = 0
        except SystemExit as e:
            status = _exit_status(e.code)
        except KeyboardInterrupt:
            traceback.print_exc()
            status = 130
        except BaseException:  # noqa: BLE001 - what the interpreter does with an uncaught exception
            etype, value, tb = sys.exc_info()
            while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>"):
                tb = tb.tb_next  # the traceback starts in the command's code, as Python's does
            sys.excepthook(etype, value.with_traceback(tb), tb)
            status = 1
        threading._shutdown()  # as at interpreter exit: non-daemon threads are joined first
        atexit._run_exitfuncs()
    except SystemExit as e:
        status = _exit_status(e.code)
    return status


def _command(request: dict, connection: socket.socket) -> None:
    """In the monitor (a fork of the server): fork the command, report its pid and status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # as Python starts (SIGPIPE stays ignored, as Python sets it)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    folder = request["folder"]
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            connection.close()
            os.environ.clear()
            os.environ.update(request["env"])
            os.chdir(request["cwd"])
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            out = os.open(os.path.join(folder, "out"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            err = out if request["merged"] else os.open(os.path.join(folder, "err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, 1)
            os.dup2(err, 2)
            for fd in {out, err}:
                os.close(fd)
            if "numpy" in sys.modules:  # a fresh process seeds numpy's global generator from the OS
                sys.modules["numpy"].random.seed()
            status = _execute(request)
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(status)
    connection.sendall(f"{pid}\n".encode())
    _, wait_status = os.waitpid(pid, 0)
    connection.sendall(f"{os.waitstatus_to_exitcode(wait_status)}\n".encode())


def _shadowed(path0: str, cwd: str) -> bool:
    """Whether sys.path[0] holds a module or a regular package named like one this process
    imported (a folder without __init__.py shadows nothing: it is at most a namespace portion)."""
    folder = path0 or cwd
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False
    imported = {name.partition(".")[0] for name in sys.modules}
    for entry in entries:
        if entry.is_dir():
            name = entry.name if os.path.exists(os.path.join(entry.path, "__init__.py")) else None
        else:
            name = entry.name.partition(".")[0] if entry.name.endswith((".py", ".pyc", ".so")) else None
        if name in imported:
            return True
    return False


def _serve(address: str) -> None:
    read = _warm_up()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    folder = os.path.dirname(address)
    Path(folder, "ready.tmp").write_text(json.dumps({"read": sorted(read), "cuda_driver": cuda_driver_loaded()}))
    os.rename(os.path.join(folder, "ready.tmp"), os.path.join(folder, "ready.json"))
    import select

    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            return  # the test process is gone or done
        if listener not in readable:
            continue
        connection, _ = listener.accept()
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            try:
                listener.close()
                stream = connection.makefile("rb")
                request = json.loads(stream.readline())
                if _shadowed(request["path0"], request["cwd"]):
                    connection.sendall(b"-1\n")
                else:
                    _command(request, connection)
            finally:
                os._exit(0)
        connection.close()


if __name__ == "__main__":
    # Started as `python tests/forks.py` in "/": its imports must not see tests/ first on sys.path,
    # but "/", as `python -m` run there would (each command then puts its own first).
    sys.path[0] = os.getcwd()
    _serve(sys.argv[1])
