"""How many cores a load may use: the helper processes that decode one large file (Kineto's
:mod:`aiprof.trace.kineto.parallel`, the Nsight Systems reader's pool) share the machine with the pool
that loads several files at once (:func:`share_cores`: with as many files in flight as cores, there
are none). ``AIPROF_DECODE_WORKERS`` sets their number (0 turns them off); by default, one fewer than
the usable cores, at most 3.
"""

from __future__ import annotations

import os
import sys

MAX_WORKERS = 3

_core_share: int | None = None  # set in a pool's worker: how many cores this process may use


def share_cores(cores: int) -> None:
    """Let this process use only ``cores`` cores for decoding (the initializer of a pool's workers:
    with one file per worker in flight, helpers would only compete with the other workers)."""
    global _core_share
    _core_share = max(1, cores)


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


# Symbols of a sanitizer runtime loaded into this process (``make sanitize`` preloads GCC's libasan).
_SANITIZERS = ("__asan_init", "__tsan_init", "__msan_init")
_fork_safe: bool | None = None


def fork_safe() -> bool:
    """Whether this process may fork helpers: not without ``fork``, and not under a sanitizer runtime.

    A child forked while another thread of the parent holds a lock of the runtime's allocator or thread
    registry waits for it forever at its first ``malloc``; glibc's malloc takes its locks around ``fork``
    (pthread_atfork), GCC 12's libasan (what ``make sanitize`` preloads) does not: LLVM added that in
    2023 (llvm/llvm-project#75290, "prevents deadlocks in forked process if parent had more than one
    running thread"), and CPython skips its fork tests under ASan for this (python/cpython#89363, #110656).
    Such a thread need not be visible: one of a ``ThreadPoolExecutor`` just joined (the Nsight reader's
    rowid ranges) still runs the runtime's thread teardown, which takes both locks. So under a sanitizer
    aiprof does the forked work in the process itself (decode helpers, the folder pool, the forked half of
    an analysis, the Nsight reader's helpers): the same code over the same data, all of it sanitized,
    none of it forked. Threads are unaffected. Cached."""
    global _fork_safe
    if _fork_safe is None:
        _fork_safe = hasattr(os, "fork") and not _sanitized()
    return _fork_safe


def _sanitized() -> bool:
    try:
        import ctypes

        process = ctypes.CDLL(None)
    except (ImportError, OSError):
        return False
    return any(hasattr(process, name) for name in _SANITIZERS)


def thread_count() -> int:
    """How many threads may read one file's parts at once (the Nsight reader's rowid ranges): as many as
    :func:`worker_count` would give helper processes, whether or not this process may fork."""
    return _wanted()


def worker_count() -> int:
    """How many helper processes to use for one file (0: decode in this process only; always 0 where
    forking is not safe, :func:`fork_safe`)."""
    return _wanted() if fork_safe() else 0


def _wanted() -> int:
    setting = os.environ.get("AIPROF_DECODE_WORKERS", "").strip()
    if setting:
        try:
            wanted = max(0, int(setting))
        except ValueError:
            wanted = 0
    else:
        wanted = min(usable_cores() - 1, MAX_WORKERS)
    if _core_share is not None:
        wanted = min(wanted, _core_share - 1)
    if wanted <= 0 or not hasattr(os, "fork"):
        return 0
    mp = sys.modules.get("multiprocessing")  # a daemonic process is one multiprocessing started
    if mp is not None and mp.current_process().daemon:
        return 0
    return wanted


__all__ = ["MAX_WORKERS", "fork_safe", "share_cores", "thread_count", "usable_cores", "worker_count"]
