"""Run part of a rank's analysis in a forked copy of this process while this one does the rest.

Once a trace is loaded, its analyses are independent computations over the same read-only columns.
On a machine with a spare core, :func:`start` forks: the child sees the loaded trace as it is (copy on
write: nothing is copied or re-read), computes what it was given and sends back only the result, a few
kB of plain data (pickled); the parent computes the other part meanwhile. Results are the ones the
parent would have computed: the same code over the same data. If the child fails or dies,
:meth:`Pending.result` returns None and the caller computes that part itself.
"""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Callable
from typing import Generic, TypeVar

from aiprof.interrupts import ignore_in_child

T = TypeVar("T")


class Pending(Generic[T]):
    """A computation running in a forked child."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self.fd = fd

    def result(self) -> T | None:
        """Wait for the child; its result, or None if it failed (the caller then computes it itself)."""
        chunks: list[bytes] = []
        try:
            while chunk := os.read(self.fd, 1 << 20):
                chunks.append(chunk)
        finally:
            self.close()
        try:
            status, value = pickle.loads(b"".join(chunks))
        except Exception:  # the child died before sending everything
            return None
        return value if status == "ok" else None

    def close(self) -> None:
        """Stop waiting: close the pipe and reap the child (killed if it is still running)."""
        if self.fd < 0:
            return
        os.close(self.fd)
        self.fd = -1
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
            if pid == 0:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def start(fn: Callable[[], T]) -> Pending[T] | None:
    """Start ``fn()`` in a forked child; None where that is not worth it or not possible (no fork, no
    spare core, or decode helpers turned off with ``AIPROF_DECODE_WORKERS=0``). Call it inside
    :func:`aiprof.interrupts.interrupts_held` and record the result before the block ends, so that
    Ctrl-C cannot leave a child nobody closes."""
    from aiprof.trace.cores import worker_count

    if not hasattr(os, "fork") or worker_count() <= 0:
        return None
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid == 0:  # the child: compute, send, and leave without running any of the parent's exit code
        try:
            os.close(read_fd)
            ignore_in_child()  # Ctrl-C is the parent's to handle
            try:
                payload = pickle.dumps(("ok", fn()), protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException as err:  # noqa: BLE001 - reported; the parent computes it itself
                payload = pickle.dumps(("error", f"{type(err).__name__}: {err}"))
            view = memoryview(payload)
            while view:
                view = view[os.write(write_fd, view) :]
        finally:
            os._exit(0)
    os.close(write_fd)
    return Pending(pid, read_fd)


__all__ = ["Pending", "start"]
