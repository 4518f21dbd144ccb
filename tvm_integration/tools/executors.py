"""Where a campaign's tasks run: this process, or a Dask cluster (the optional extra `simaccel[dask]`).

Where it sits: under `simaccel fuzz` (fuzz/campaign.py: tasks of a batch of cases, and of
shrinking a failure) and `simaccel conformance` (conformance/run.py: a task per model). Both
hand tasks to an executor, `InProcess` or `DaskExecutor`, and read back (key, result) pairs as
tasks finish. `--cluster local[:N]` starts a cluster of N worker processes on this machine (one
per GPU through dask-cuda's LocalCUDACluster where it is installed and a GPU is asked for,
without N), its workers started by spawn (a process forked after CUDA started cannot use
CUDA); `--cluster tcp://HOST:PORT` connects to a running scheduler (started by `dask
scheduler`, dask-jobqueue, dask-kubernetes, ...). The address is checked first (scheme tcp://,
a host, a port 1-65535), then what answers there (`check_scheduler`: a Dask scheduler, within
$SIMACCEL_CLUSTER_CONNECT_SECONDS, default 10 s): a wrong address, a refused port, an unknown
host, a server that never answers or speaks another protocol is one SimAccelError naming it.

Workers keep their process between tasks, so TVM, the compiled kernels and users' ops stay
loaded. A task whose worker dies (a crash in a kernel or in TVM, or a task past its time limit
that ended its worker: `time_limit`) is not retried by Dask (the scheduler's allowed-failures
is set to 0) but comes back as `Lost`, so the campaign decides what to retry. Start workers
with one thread each (`dask worker --nthreads 1`); a worker with more still runs one task at a
time (`ONE_AT_A_TIME`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import socket
import threading
import time
import uuid

from ...errors import SimAccelError

EVENTS = "simaccel-campaign"  # the topic of worker events: why a worker ended itself
ONE_AT_A_TIME = threading.Lock()  # a worker with several threads still runs one task at a time
CONNECT_SECONDS_ENV = "SIMACCEL_CLUSTER_CONNECT_SECONDS"
CONNECT_SECONDS = 10.0  # the default time limit on reaching a scheduler: its handshake and first answer


class Lost(Exception):
    """A task whose worker died (or ended itself on a task past its time limit)."""


class InProcess:
    """Runs the tasks one after the other in this process (no cluster, no time limit)."""

    name = "this process"
    workers = 1
    case_seconds = 0

    def __init__(self, running=None):
        self.queue: list = []
        self.running = str(running) if running else None  # where the case being checked is saved first

    def submit(self, key, fn, *args) -> None:
        self.queue.append((key, fn, args))

    def completed(self):
        """(key, result or a Lost) for every task submitted, also those submitted meanwhile."""
        while self.queue:
            key, fn, args = self.queue.pop(0)
            yield key, fn(*args)

    def events(self) -> list[dict]:
        return []

    def close(self) -> None:
        pass


@contextlib.contextmanager
def time_limit(seconds: float, event: dict):
    """End this process when the block runs past `seconds` (0: no limit), after sending `event`
    (what the campaign is told: the case or model, and why)."""
    if not seconds:
        yield
        return
    timer = threading.Timer(seconds, end_worker, (event, this_worker()))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def this_worker():
    """The Dask worker running this task (known in the task's own thread only), or None."""
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def end_worker(event: dict, worker=None) -> None:
    """Tell the campaign why (a worker event), then end this worker process at once."""
    worker = worker or this_worker()
    if worker is not None:
        try:
            worker.log_event(EVENTS, event)
            time.sleep(1)  # the event travels before the process goes
        except Exception:  # noqa: BLE001 - the death alone still says it
            pass
    os._exit(70)


def parse_cluster(spec: str) -> tuple[str, object]:
    """("local", N or None) or ("address", "tcp://HOST:PORT"); SimAccelError for anything else,
    naming the address and what is wrong with it (before anything connects)."""
    if spec == "local" or spec.startswith("local:"):
        count = spec.partition(":")[2]
        if count and not (count.isdigit() and int(count) >= 1):
            raise SimAccelError(f"--cluster {spec}: the number of local workers must be an integer >= 1")
        return "local", int(count) if count else None
    if "://" not in spec:
        raise SimAccelError(f"--cluster {spec}: expected local, local:N or a Dask scheduler's address (tcp://HOST:PORT)")
    return "address", _scheduler_address(spec)


def _scheduler_address(spec: str) -> str:
    """`spec` checked as tcp://HOST:PORT (an IPv6 host in brackets), the form it is connected to."""
    from urllib.parse import urlsplit

    scheme = spec.partition("://")[0]
    if scheme != "tcp":
        raise SimAccelError(f"--cluster {spec}: scheme {scheme + '://'!r} is not one simaccel connects over; give the "
                            "scheduler's tcp://HOST:PORT (Dask's tls://, ws:// and ucx:// need security settings or "
                            "packages simaccel does not pass; http:// is the dashboard's, not the scheduler's)")
    try:
        parts = urlsplit(spec)
        host, port = parts.hostname, parts.port
    except ValueError as e:
        raise SimAccelError(f"--cluster {spec}: not HOST:PORT with a port number 1-65535 ({e})") from None
    if parts.path or parts.query or parts.fragment or parts.username or parts.password:
        raise SimAccelError(f"--cluster {spec}: expected tcp://HOST:PORT and nothing more")
    if not host:
        raise SimAccelError(f"--cluster {spec}: no host (expected tcp://HOST:PORT)")
    if port is None or not 1 <= port <= 65535:
        what = "no port" if port is None else f"port {port} is out of range"
        raise SimAccelError(f"--cluster {spec}: {what} (expected tcp://HOST:PORT, the port a number 1-65535, "
                            "the scheduler's 8786 unless it was started with another)")
    return f"tcp://{parts.netloc}"


def connect_seconds() -> float:
    """The time limit on reaching a Dask scheduler: ${CONNECT_SECONDS_ENV}, else CONNECT_SECONDS."""
    text = os.environ.get(CONNECT_SECONDS_ENV, "").strip()
    if not text:
        return CONNECT_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not (math.isfinite(seconds) and seconds > 0):
        raise SimAccelError(f"${CONNECT_SECONDS_ENV}={text!r}: must be a number of seconds > 0")
    return seconds


def check_scheduler(address: str, seconds: float) -> None:
    """Make sure a Dask scheduler answers at `address` (tcp://HOST:PORT, as `parse_cluster`
    returns it) within `seconds`, before Dask's Client connects: Dask waits for its handshake's
    answer with no time limit (a server that accepts and never answers hangs it for good), and
    takes another protocol's first bytes for a message's length (an HTTP server: a MemoryError).
    First a plain TCP connection (a refused port or an unknown host is said at once), then
    Dask's handshake and an `identity` request; all of it, the host's name lookup included, in
    a thread given `seconds`. A SimAccelError naming the address and what happened otherwise."""
    found: dict = {"stage": LOOKUP}

    def probe():
        try:
            found["identity"] = _identity(address, seconds, found)
        except BaseException as e:  # noqa: BLE001 - whatever it was, said below as this address's problem
            found["error"] = e

    thread = threading.Thread(target=probe, name="simaccel-cluster-probe", daemon=True)
    thread.start()
    thread.join(seconds + 1)  # the probe's own steps time out first; this covers a name lookup that hangs
    problem, stage = found.get("error"), found["stage"]
    if thread.is_alive() or isinstance(problem, (TimeoutError, asyncio.TimeoutError)):
        raise SimAccelError(f"--cluster {address}: no answer within {seconds:g} s while {stage} "
                            f"(${CONNECT_SECONDS_ENV} sets this limit): is it a Dask scheduler's address?")
    if isinstance(problem, socket.gaierror):
        raise SimAccelError(f"--cluster {address}: cannot resolve its host ({problem.strerror or problem})")
    if isinstance(problem, ConnectionRefusedError):
        raise SimAccelError(f"--cluster {address}: connection refused: nothing listens there (is the Dask scheduler "
                            "running, on that port?)")
    if isinstance(problem, OSError) and stage == CONNECTING:
        raise SimAccelError(f"--cluster {address}: cannot connect ({problem.strerror or problem})")
    if isinstance(problem, OSError):  # Dask's CommClosedError among them
        raise SimAccelError(f"--cluster {address}: the server there closed the connection while {stage}: not a Dask "
                            "scheduler, or one that refused this client")
    identity = found.get("identity")
    if problem is not None or not isinstance(identity, dict):
        raise SimAccelError(f"--cluster {address}: the server there answered in another protocol than Dask's "
                            f"({_class_name(problem) if problem is not None else 'not an identity'} while "
                            f"{stage}); is it another service, such as the dashboard's HTTP port (8787)?")
    if identity.get("type") != "Scheduler":
        scheduler = identity.get("scheduler")
        raise SimAccelError(f"--cluster {address}: that is a Dask {identity.get('type')}, not a scheduler"
                            + (f"; its scheduler is at {scheduler}" if scheduler else ""))


def _class_name(error: BaseException) -> str:
    kind = type(error)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"


LOOKUP, CONNECTING, HANDSHAKE = "looking its host up", "connecting", "shaking hands in Dask's protocol"


def _identity(address: str, seconds: float, found: dict) -> dict:
    """What the Dask server at `address` says it is (its `identity`); `found["stage"]` tells how far it got."""
    from urllib.parse import urlsplit

    deadline = time.monotonic() + seconds
    parts = urlsplit(address)
    addresses = dict.fromkeys(info[4][0] for info in socket.getaddrinfo(parts.hostname, parts.port,
                                                                         type=socket.SOCK_STREAM))
    found["stage"] = CONNECTING
    for ip in addresses:  # each address the name has (IPv6 and IPv4), as socket.create_connection tries them
        try:
            socket.create_connection((ip, parts.port), timeout=max(deadline - time.monotonic(), 0.1)).close()
            break
        except OSError:
            if ip == list(addresses)[-1]:
                raise
    found["stage"] = HANDSHAKE
    at = f"tcp://[{ip}]:{parts.port}" if ":" in ip else f"tcp://{ip}:{parts.port}"  # no second name lookup
    return asyncio.run(_dask_identity(at, max(deadline - time.monotonic(), 0.1)))


async def _dask_identity(address: str, seconds: float) -> dict:
    from distributed.comm import connect

    async def ask():
        comm = await connect(address, timeout=seconds)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    return await asyncio.wait_for(ask(), seconds)


def _no_retries(dask_scheduler=None) -> int:
    """On the scheduler: a task whose worker dies errs at once (KilledWorker), the campaign
    retries; and a worker holds one task per thread, none queued behind it (a task queued on a
    worker that dies is lost with it, and would be taken for the one that killed it)."""
    dask_scheduler.allowed_failures = 0
    dask_scheduler.WORKER_SATURATION = 1.0
    return 0


class DaskExecutor:
    """Runs the campaign's tasks on a Dask cluster; `completed()` yields them as they finish."""

    def __init__(self, spec: str, gpu: bool, case_seconds: float, log, command: str = "fuzz"):
        kind, value = parse_cluster(spec)
        try:
            import dask
            from distributed import Client, LocalCluster
        except ImportError as e:
            raise SimAccelError(f"simaccel {command} --cluster {spec} runs on Dask, which is not installed here ({e}); "
                                "install it with: pip install 'simaccel[dask]'") from e
        self.case_seconds = case_seconds
        self.running = None  # no folder shared with the workers: their events say what ended them
        self.cluster = None
        self.command = command
        if kind == "local":
            # spawn, not fork: a worker forked from a process where CUDA started could not use CUDA
            with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                                  "distributed.scheduler.worker-saturation": 1.0,
                                  "distributed.worker.multiprocessing-method": "spawn"}):
                if gpu and value is None and _has_dask_cuda():
                    from dask_cuda import LocalCUDACluster

                    self.cluster = LocalCUDACluster(threads_per_worker=1, dashboard_address=None)
                    self.name = "a local Dask CUDA cluster (one worker per GPU)"
                else:
                    workers = value or max(1, min(os.cpu_count() or 1, 8))
                    self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                host="127.0.0.1", dashboard_address=None)
                    self.name = "a local Dask cluster" + (" (its workers share the GPU)" if gpu else "")
            self.client = Client(self.cluster)
        else:
            seconds = connect_seconds()
            check_scheduler(value, seconds)
            try:
                self.client = Client(value, timeout=f"{seconds}s")
            except (OSError, TimeoutError) as e:
                raise SimAccelError(f"--cluster {value}: cannot reach the Dask scheduler ({e})") from e
            self.name = f"the Dask cluster at {value}"
        self.client.run_on_scheduler(_no_retries)
        try:
            self.client.wait_for_workers(1, timeout=120)
        except TimeoutError as e:
            self.close()
            raise SimAccelError(f"--cluster {spec}: no Dask worker joined in 120 s") from e
        self.workers = len(self.client.scheduler_info(n_workers=-1)["workers"])
        self.run_id = uuid.uuid4().hex[:8]
        self.serial = itertools.count()
        self.keys: dict[str, tuple] = {}
        self.pending: list = []
        self.iterating = None
        log(f"{command}: Dask scheduler {self.client.scheduler.address}, {self.workers} worker(s)")

    def submit(self, key, fn, *args) -> None:
        future = self.client.submit(fn, *args, key=f"simaccel-{self.command}-{self.run_id}-{next(self.serial)}", pure=False)
        self.keys[future.key] = key
        if self.iterating is not None:
            self.iterating.add(future)
        else:
            self.pending.append(future)

    def completed(self):
        """(key, result or a Lost) per task, as they finish, also those submitted meanwhile."""
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        self.iterating = as_completed(self.pending)
        self.pending = []
        try:
            for future in self.iterating:
                key = self.keys.pop(future.key)
                try:
                    result = future.result()
                except KilledWorker as e:
                    result = Lost(str(e).splitlines()[0])
                future.release()
                yield key, result
        finally:
            self.iterating = None

    def events(self) -> list[dict]:
        """What workers said before they ended themselves (a hung case, a lost GPU context)."""
        return [msg for _, msg in self.client.get_events(EVENTS)]

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def _has_dask_cuda() -> bool:
    try:
        import dask_cuda  # noqa: F401
    except ImportError:
        return False
    return True
