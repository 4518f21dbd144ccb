"""The fuzz campaign's tasks on a Dask cluster (the optional extra `simaccel[dask]`).

Where it sits: fuzz/campaign.py hands its tasks (`check_batch`, `shrink_failure`) to an
executor; this one submits them to Dask distributed. `--cluster local[:N]` starts a cluster of
N worker processes on this machine (one per GPU through dask-cuda's LocalCUDACluster where it
is installed and a GPU engine is asked for, without N); `--cluster tcp://HOST:PORT` connects
to a running scheduler (started by `dask scheduler`, dask-jobqueue, dask-kubernetes, ...).

Workers keep their process between tasks, so TVM, the compiled kernels and users' ops stay
loaded. A task whose worker dies (a crash in a kernel or in TVM, a hung case that ended its
worker: `campaign._time_limit`) is not retried by Dask (the scheduler's allowed-failures is set
to 0) but comes back as `Lost`, so the campaign decides: retry once, then case by case. Start
workers with one thread each (`dask worker --nthreads 1`); a worker with more still checks one
case at a time.
"""

from __future__ import annotations

import itertools
import os
import uuid

from ....errors import SimAccelError
from .campaign import EVENTS, Lost
from .check import ENGINE_DEVICE


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

    def __init__(self, spec: str, campaign, case_seconds: float, log):
        kind, value = parse_cluster(spec)
        try:
            import dask
            from distributed import Client, LocalCluster
        except ImportError as e:
            raise SimAccelError(f"simaccel fuzz --cluster {spec} runs on Dask, which is not installed here ({e}); "
                                "install it with: pip install 'simaccel[dask]'") from e
        self.case_seconds = case_seconds
        self.running = None  # no folder shared with the workers: their events say what ended them
        self.cluster = None
        if kind == "local":
            gpu = any(ENGINE_DEVICE[e] == "cuda" for e in campaign.engines)
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
        log(f"fuzz: Dask scheduler {self.client.scheduler.address}, {self.workers} worker(s)")

    def submit(self, key, fn, *args) -> None:
        future = self.client.submit(fn, *args, key=f"simaccel-fuzz-{self.run_id}-{next(self.serial)}", pure=False)
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
