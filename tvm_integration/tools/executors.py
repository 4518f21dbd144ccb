"""Where a campaign's tasks run: this process, or a Dask cluster (the optional extra `simaccel[dask]`).

Where it sits: under `simaccel fuzz` (fuzz/campaign.py: tasks of a batch of cases, and of
shrinking a failure) and `simaccel conformance` (conformance/run.py: a task per model). Both
hand tasks to an executor, `InProcess` or `DaskExecutor`, and read back (key, result) pairs as
tasks finish. `--cluster local[:N]` starts a cluster of N worker processes on this machine (one
per GPU through dask-cuda's LocalCUDACluster where it is installed and a GPU is asked for,
without N); `--cluster tcp://HOST:PORT` connects to a running scheduler (started by `dask
scheduler`, dask-jobqueue, dask-kubernetes, ...).

Workers keep their process between tasks, so TVM, the compiled kernels and users' ops stay
loaded. A task whose worker dies (a crash in a kernel or in TVM, or a task past its time limit
that ended its worker: `time_limit`) is not retried by Dask (the scheduler's allowed-failures
is set to 0) but comes back as `Lost`, so the campaign decides what to retry. Start workers
with one thread each (`dask worker --nthreads 1`); a worker with more still runs one task at a
time (`ONE_AT_A_TIME`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
import uuid

from ...errors import SimAccelError

EVENTS = "simaccel-campaign"  # the topic of worker events: why a worker ended itself
ONE_AT_A_TIME = threading.Lock()  # a worker with several threads still runs one task at a time


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
    """("local", N or None) or ("address", "tcp://HOST:PORT"); SimAccelError for anything else."""
    if spec == "local" or spec.startswith("local:"):
        count = spec.partition(":")[2]
        if count and not (count.isdigit() and int(count) >= 1):
            raise SimAccelError(f"--cluster {spec}: the number of local workers must be an integer >= 1")
        return "local", int(count) if count else None
    if "://" in spec:
        return "address", spec
    raise SimAccelError(f"--cluster {spec}: expected local, local:N or a Dask scheduler's address (tcp://HOST:PORT)")


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
            with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                                  "distributed.scheduler.worker-saturation": 1.0}):
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
            try:
                self.client = Client(value, timeout="30s")
            except OSError as e:
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
