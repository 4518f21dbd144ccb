"""`--cluster ADDRESS` on `simaccel fuzz` and `simaccel conformance` where no Dask scheduler answers.

Each bad address must end in one line naming it and exit 2 within seconds: a malformed one
(scheme, host, port) before anything connects; a refused port or an unknown host at once; a
server that accepts and never answers past the connection time limit
($SIMACCEL_CLUSTER_CONNECT_SECONDS); a server of another protocol (HTTP, random bytes, one that
hangs up) when it answers. The servers are small threads of this test process. A real
scheduler and workers are in tests/test_fuzz_cluster.py.
"""

from __future__ import annotations

import random
import socket
import threading
import time

import pytest

import forks
from simaccel.errors import SimAccelError
from simaccel.tvm_integration.tools import executors
from simaccel.tvm_integration.tools.executors import CONNECT_SECONDS_ENV, check_scheduler, parse_cluster

pytest.importorskip("distributed", reason="the dask extra is not installed")

LIMIT = 2  # seconds: the connection time limit the commands run with here
WITHIN = 30  # seconds a command may take, its start included, on a busy machine


def _serve(answer) -> int:
    """A TCP server on 127.0.0.1 that calls `answer(connection)` for each client; its port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []  # connections a silent server keeps open

    def loop():
        while True:
            connection, _ = server.accept()
            held.append(connection)
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return server.getsockname()[1]


def _silent(connection):
    pass  # accepts, reads nothing, says nothing, never closes


def _http(connection):
    connection.recv(65536)
    connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    connection.close()


def _garbage(connection):
    connection.sendall(random.Random(0).randbytes(4096))  # then stays open


def _small_garbage(connection):
    connection.sendall(b"\x01\x00\x00\x00\x00\x00\x00\x00\x10\x00")  # a frame count, then waits: a short read


def _hangs_up(connection):
    connection.close()


SERVERS = {"silent": _silent, "http": _http, "garbage": _garbage, "small-garbage": _small_garbage, "hangs-up": _hangs_up}


@pytest.fixture(scope="module")
def ports():
    return {name: _serve(answer) for name, answer in SERVERS.items()}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed


# (case, address or a server's name, what the one line must say)
CASES = [
    ("refused port", "refused", "connection refused: nothing listens there"),
    ("unresolvable host", "tcp://no-such-host.invalid:8786", "host"),
    ("silent server", "silent", f"no answer within {LIMIT} s while shaking hands in Dask's protocol"),
    ("HTTP server", "http", "answered in another protocol than Dask's"),
    ("garbage bytes", "garbage", "another protocol than Dask's"),
    ("a few garbage bytes", "small-garbage", "tcp://127.0.0.1:"),
    ("server that hangs up", "hangs-up", "closed the connection while shaking hands"),
    ("bad scheme", "http://127.0.0.1:8786", "scheme 'http://' is not one simaccel connects over"),
    ("bad port", "tcp://127.0.0.1:abc", "not HOST:PORT with a port number 1-65535"),
    ("missing port", "tcp://127.0.0.1", "no port"),
    ("port out of range", "tcp://127.0.0.1:65536", "port number 1-65535"),
    ("port zero", "tcp://127.0.0.1:0", "port 0 is out of range"),
    ("no host", "tcp://:8786", "no host"),
    ("a path", "tcp://127.0.0.1:8786/scheduler", "expected tcp://HOST:PORT and nothing more"),
]


def _address(where: str, ports: dict) -> str:
    if where == "refused":
        return f"tcp://127.0.0.1:{_closed_port()}"
    return f"tcp://127.0.0.1:{ports[where]}" if where in ports else where


COMMANDS = {
    "fuzz": lambda out: ["fuzz", "--cases", "2", "--export-every", "0", "--out", str(out)],
    "conformance": lambda out: ["conformance", "--zoo", "relax", "--only", "matmul_relu", "--out", str(out)],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case, where, message", CASES, ids=[c[0] for c in CASES])
def test_a_bad_cluster_address_is_one_line_and_exit_2_within_seconds(ports, tmp_path, command, case, where, message):
    address = _address(where, ports)
    start = time.monotonic()
    result = forks.cli(*COMMANDS[command](tmp_path / "out"), "--cluster", address, timeout=120,
                       env={CONNECT_SECONDS_ENV: str(LIMIT)})
    seconds = time.monotonic() - start
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("simaccel: error: SimAccelError: --cluster ") and address in line, line
    assert message in line, line
    assert seconds < WITHIN, f"{seconds:.0f} s"
    assert "cases" not in result.stdout and "models in" not in result.stdout  # nothing ran


def test_addresses_are_checked_before_anything_connects():
    assert parse_cluster("tcp://127.0.0.1:8786") == ("address", "tcp://127.0.0.1:8786")
    assert parse_cluster("tcp://[::1]:8786") == ("address", "tcp://[::1]:8786")
    assert parse_cluster("tcp://scheduler.example.org:9000") == ("address", "tcp://scheduler.example.org:9000")
    assert parse_cluster("local:3") == ("local", 3) and parse_cluster("local") == ("local", None)
    for spec, message in [("tls://127.0.0.1:8786", "scheme 'tls://'"), ("ucx://h:1", "scheme 'ucx://'"),
                          ("127.0.0.1:8786", "expected local, local:N or a Dask scheduler's address"),
                          ("tcp://user@h:1", "nothing more"), ("tcp://h:1?x=1", "nothing more"),
                          ("tcp://h:-1", "port number 1-65535"), ("tcp://[::1", "not HOST:PORT"),
                          ("local:0", "must be an integer >= 1")]:
        with pytest.raises(SimAccelError, match=r"--cluster .*" + message.replace("?", r"\?").replace("(", r"\(")):
            parse_cluster(spec)


def test_the_connection_time_limit_covers_a_silent_server_and_is_validated(ports, monkeypatch):
    start = time.monotonic()
    with pytest.raises(SimAccelError, match=r"no answer within 1 s .*SIMACCEL_CLUSTER_CONNECT_SECONDS"):
        check_scheduler(f"tcp://127.0.0.1:{ports['silent']}", 1)
    assert time.monotonic() - start < 5
    monkeypatch.delenv(CONNECT_SECONDS_ENV, raising=False)
    assert executors.connect_seconds() == executors.CONNECT_SECONDS == 10
    monkeypatch.setenv(CONNECT_SECONDS_ENV, "3.5")
    assert executors.connect_seconds() == 3.5
    for bad in ("0", "-1", "soon", "nan", "inf"):
        monkeypatch.setenv(CONNECT_SECONDS_ENV, bad)
        with pytest.raises(SimAccelError, match=f"{CONNECT_SECONDS_ENV}={bad!r}: must be a number of seconds > 0"):
            executors.connect_seconds()


def test_a_local_cluster_starts_its_workers_by_spawn(monkeypatch):
    """The config a LocalCluster is made under says spawn (a worker forked after CUDA started
    could not use CUDA); the cluster here is a stand-in that records it."""
    import dask
    import distributed

    seen = {}

    class Cluster:
        def __init__(self, **kwargs):
            seen["method"] = dask.config.get("distributed.worker.multiprocessing-method")
            seen["kwargs"] = kwargs

        def close(self):
            pass

    class Client:
        def __init__(self, cluster):
            self.scheduler = type("Scheduler", (), {"address": "inproc://stand-in"})()

        def run_on_scheduler(self, fn):
            pass

        def wait_for_workers(self, n, timeout):
            pass

        def scheduler_info(self, n_workers):
            return {"workers": {"a": {}, "b": {}}}

        def close(self):
            pass

    monkeypatch.setattr(distributed, "LocalCluster", Cluster)
    monkeypatch.setattr(distributed, "Client", Client)
    executor = executors.DaskExecutor("local:2", gpu=False, case_seconds=0, log=lambda _: None)
    executor.close()
    assert seen["method"] == "spawn" and seen["kwargs"]["n_workers"] == 2 and executor.workers == 2


def test_a_dask_worker_s_address_is_named_as_not_a_scheduler():
    """A worker answers Dask's handshake too: the probe tells it from a scheduler and names its scheduler."""
    import asyncio

    from distributed import Scheduler, Worker

    async def main():
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=None) as scheduler:
            async with Worker(scheduler.address, nthreads=1, host="127.0.0.1", dashboard_address=None) as worker:
                return scheduler.address, worker.address, await asyncio.to_thread(_probe, worker.address), \
                    await asyncio.to_thread(_probe, scheduler.address)

    scheduler, worker, on_worker, on_scheduler = asyncio.run(main())
    assert on_scheduler is None
    assert f"--cluster {worker}: that is a Dask Worker, not a scheduler; its scheduler is at {scheduler}" in on_worker


def _probe(address) -> str | None:
    try:
        check_scheduler(address, 10)
    except SimAccelError as e:
        return str(e)
    return None
