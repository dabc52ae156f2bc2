"""The C heap (glibc malloc) settings of a batch analysis: keep freed memory for reuse while loading,
hand it back to the OS once a trace is loaded.

Loading a trace allocates and frees buffers of 1-30 MB many times over (inflated text, decoded events,
numpy columns). By default glibc serves each of those from a fresh ``mmap`` and unmaps it on ``free``,
so every reuse faults its pages in again and the kernel zeroes them: ~15k page faults and ~5 % of the
run on a 450k-event trace. :func:`keep_freed_memory` makes such blocks come from the heap and stay
there when freed; :func:`release_free_memory` returns what is free at the points where the process
will not need it again. Both do nothing where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import functools

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 << 20  # glibc's ceiling for M_MMAP_THRESHOLD on 64-bit systems
_TRIM_THRESHOLD = 1 << 30


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # noqa: B018 - only glibc has it
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to do
        return None
    return libc


def keep_freed_memory() -> bool:
    """Serve blocks up to 32 MB from the heap and do not shrink it on every ``free``: for a process that
    loads and analyses traces and then exits (the read-only CLI commands). Returns whether it applied.
    The peak resident size does not change (freed blocks are reused, not added to); an explicit
    :func:`release_free_memory` still returns free memory."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


def release_free_memory() -> None:
    """Give the heap memory freed after loading (decode buffers, decoded events: ~30 MB for a 50 MB
    trace) back to the OS. glibc keeps freed blocks for reuse, so without this the process's resident
    size stays at the loading peak for the rest of the analysis."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


__all__ = ["keep_freed_memory", "release_free_memory"]
