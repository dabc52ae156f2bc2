"""Where the per-file work of a multi-rank analysis runs: this machine's process pool, or a Dask cluster.

Each rank is loaded and analysed by one call of a module-level function on one file; only its small result
comes back. :func:`executor_for` turns the user's choice (``--executor``) into an :class:`Executor`:

- ``local`` (the default): forked worker processes on this machine (``concurrent.futures``), no extra
  dependency;
- ``dask``: the cluster at ``$DASK_SCHEDULER_ADDRESS`` when set, else a ``LocalCluster`` started for the
  run (one single-threaded worker process per core, as many as there are files at most);
- ``dask://host:port`` (or ``tcp://host:port``): the Dask scheduler there.

Dask is the optional extra ``aiprof[dask]``, imported only here and only when chosen. A task whose worker
dies is run again elsewhere (Dask's ``retries``), so losing a worker mid-run loses no rank; a file that
cannot be read is the task's own result (the caller turns it into a skipped rank), never a failed run.
Results come back in the order of the jobs whatever the order they finish in, so every executor gives the
same report.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from aiprof.errors import AiprofError

J = TypeVar("J", bound=tuple[Any, ...])
O = TypeVar("O")
Progress = Callable[[Path, int, int], None]

DASK_ENV = "DASK_SCHEDULER_ADDRESS"
TASK_RETRIES = 3  # a task whose worker died is run again on another worker this many times


@dataclass(frozen=True)
class Watch(Generic[J, O]):
    """What the caller of a map hears while it runs. After each job: ``on_failed(path, why)`` when ``failed``
    says its result is a failed file (why; None: it is not), then ``progress(path, done, total)``. ``lost``
    makes the result of a job the executor could not run at all (its worker died on every retry, a Dask
    ``KilledWorker``) from the job and why; None: that ends the run."""

    progress: Progress | None = None
    failed: Callable[[O], str | None] | None = None
    on_failed: Callable[[Path, str], None] | None = None
    lost: Callable[[J, str], O] | None = None

    def done(self, job: J, result: O, done: int, total: int) -> None:
        """Report one finished job."""
        if self.failed is not None and self.on_failed is not None:
            why = self.failed(result)
            if why is not None:
                self.on_failed(Path(job[0]), why)
        if self.progress is not None:
            self.progress(job[0], done, total)


class Executor(Protocol):
    """Runs ``fn`` over jobs whose first item is a file path; results in job order."""

    @property
    def name(self) -> str:
        """``local``, ``dask``."""
        ...

    def map(self, fn: Callable[[J], O], jobs: Sequence[J], workers: int | None, watch: Watch[J, O] | None) -> list[O]:
        """``fn(job)`` for every job, ``workers`` at a time at most (None: the executor's choice)."""
        ...


@dataclass(frozen=True)
class LocalExecutor:
    """This machine's forked process pool (``aiprof.trace.runset.local_map``)."""

    name: str = "local"

    def map(self, fn: Callable[[J], O], jobs: Sequence[J], workers: int | None, watch: Watch[J, O] | None) -> list[O]:
        return local_map(fn, list(jobs), workers, watch)


def local_map(fn: Callable[[J], O], jobs: list[J], workers: int | None, watch: Watch[J, O] | None) -> list[O]:
    """``fn`` over jobs whose first item is a file path, in worker processes when there are several
    (forked, so ``fn`` and what it closes over need not be importable), in order, reporting progress."""
    from aiprof.trace.cores import fork_safe, share_cores, usable_cores

    count = len(jobs)
    cores = usable_cores()
    workers = min(workers or memory_bound_workers(jobs, cores), count)
    results: list[O] = []
    if workers <= 1 or not fork_safe():  # not safe: under a sanitizer runtime (cores.fork_safe)
        for i, job in enumerate(jobs):
            results.append(fn(job))
            if watch is not None:
                watch.done(job, results[-1], i + 1, count)
        return results
    from concurrent.futures import ProcessPoolExecutor  # imported here: one file needs no pool

    share = (max(1, cores // workers),)  # each worker's decode helpers use only its share of the cores
    with ProcessPoolExecutor(workers, _fork_context(), initializer=share_cores, initargs=share) as pool:
        for i, (job, result) in enumerate(zip(jobs, pool.map(fn, jobs))):
            results.append(result)
            if watch is not None:
                watch.done(job, result, i + 1, count)
    return results


# A rank's peak memory per byte of its decompressed trace (the MTIA rank: 114-119 MB for 87 MB of JSON,
# reader and forked analysis together; bench/RESULTS.md), with room to spare; and a floor for small files.
PEAK_PER_TRACE_BYTE = 1.6
PEAK_FLOOR_BYTES = 64 << 20
MEMORY_HEADROOM = 0.8  # use at most this share of the memory available now


def memory_bound_workers(jobs: Sequence[tuple[Any, ...]], wanted: int) -> int:
    """How many files to analyse at once so that the largest ranks in flight fit in the memory available
    now (``MemAvailable``): ``wanted`` (usually one per core) or fewer, never less than one. Without
    ``/proc/meminfo`` (not Linux), ``wanted``."""
    available = _available_bytes()
    if available is None or not jobs:
        return wanted
    peaks = sorted((_peak_estimate(Path(job[0])) for job in jobs), reverse=True)
    budget, n = available * MEMORY_HEADROOM, 0
    for peak in peaks[:wanted]:
        if budget < peak and n:
            break
        budget -= peak
        n += 1
    return max(1, n)


def _peak_estimate(path: Path) -> int:
    """A rank's expected peak memory from its file: the decompressed size of a gzip file (its trailer's
    ISIZE; 10x the file when that wrapped past 4 GiB) or the file's size, times PEAK_PER_TRACE_BYTE."""
    try:
        size = path.stat().st_size
        text = size
        if path.name.endswith(".gz") and size >= 18:
            with path.open("rb") as f:
                f.seek(-4, os.SEEK_END)
                isize = int.from_bytes(f.read(4), "little")
            text = isize if isize >= size else 10 * size
    except OSError:
        return PEAK_FLOOR_BYTES
    return max(PEAK_FLOOR_BYTES, int(PEAK_PER_TRACE_BYTE * text))


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _fork_context() -> Any:
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else methods[0])


@dataclass(frozen=True)
class DaskExecutor:
    """A Dask cluster: the scheduler at ``address``, or a ``LocalCluster`` for the run when it is None."""

    address: str | None = None
    name: str = "dask"

    def map(self, fn: Callable[[J], O], jobs: Sequence[J], workers: int | None, watch: Watch[J, O] | None) -> list[O]:
        if not jobs:
            return []
        distributed = _import_distributed()
        if self.address is None:
            n = max(1, min(workers or memory_bound_workers(jobs, _usable_cores()), len(jobs)))
            with distributed.LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
            ) as cluster, distributed.Client(cluster) as client:
                return _run_on(client, distributed, fn, jobs, watch)
        import dask

        try:  # the connect timeout is Dask's own setting (DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT)
            client = distributed.Client(self.address, timeout=dask.config.get("distributed.comm.timeouts.connect"))
        except (OSError, TimeoutError) as err:
            raise AiprofError(
                f"--executor: cannot reach the Dask scheduler at {self.address} ({err}); start one "
                "(`dask scheduler`) or pass --executor dask for a cluster on this machine"
            ) from None
        with client:
            return _run_on(client, distributed, fn, jobs, watch)


def _run_on(client: Any, distributed: Any, fn: Callable[[J], O], jobs: Sequence[J], watch: Watch[J, O] | None) -> list[O]:
    """Submit every job (one task each, retried when its worker dies) and gather the results in job order. A
    task whose workers died on every retry is ``watch.lost``'s result for it (none: the run ends there)."""
    task = _OnWorker(fn)
    futures = client.map(task, list(jobs), pure=False, retries=TASK_RETRIES)
    index = {f.key: i for i, f in enumerate(futures)}
    results: list[Any] = [None] * len(futures)
    for done, future in enumerate(distributed.as_completed(futures), start=1):
        i = index[future.key]
        try:
            results[i] = future.result()
        except distributed.KilledWorker as err:
            if watch is None or watch.lost is None:
                raise
            results[i] = watch.lost(jobs[i], f"{Path(jobs[i][0]).name}: its Dask worker died each time it ran "
                                    f"({TASK_RETRIES} retries; {err})")
        if watch is not None:
            watch.done(jobs[i], results[i], done, len(futures))
    return results


class _OnWorker:
    """``fn`` as a Dask task (what the readers are told, ``--max-trace-mb`` / ``--max-events`` /
    ``--step-range``, travels in each job: no process setting to carry). On the worker, decode helpers and
    forked halves are off (the worker is one of several processes sharing the node's cores, and forking a
    process that runs an event loop in another thread is not safe)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, job: Any) -> Any:
        from aiprof.trace.cores import share_cores

        share_cores(1)
        return self.fn(job)


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise AiprofError(
            "--executor dask needs Dask's distributed scheduler: pip install 'aiprof[dask]'"
        ) from None
    return distributed


def _usable_cores() -> int:
    from aiprof.trace.cores import usable_cores

    return usable_cores()


def executor_for(choice: str | None) -> Executor:
    """The executor a ``--executor`` value names (None or ``local``: the local pool)."""
    text = (choice or "local").strip()
    if text == "local":
        return LocalExecutor()
    if text == "dask":
        address = os.environ.get(DASK_ENV, "").strip()
        return DaskExecutor(address or None)
    for prefix in ("dask://", "tcp://", "tls://"):
        if text.startswith(prefix) and len(text) > len(prefix):
            scheme = "tcp://" if prefix == "dask://" else prefix
            return DaskExecutor(scheme + text[len(prefix):])
    raise AiprofError(f"--executor {text!r}: expected local, dask, or dask://HOST:PORT")


__all__ = ["DASK_ENV", "DaskExecutor", "Executor", "LocalExecutor", "Watch", "executor_for", "local_map",
           "memory_bound_workers"]
