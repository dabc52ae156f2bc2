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


def worker_count() -> int:
    """How many helper processes to use for one file (0: decode in this process only)."""
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


__all__ = ["MAX_WORKERS", "share_cores", "usable_cores", "worker_count"]
