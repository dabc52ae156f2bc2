"""Forking child processes that Ctrl-C cannot orphan.

aiprof forks helpers (decoding, part of an analysis) and stops them itself when the command ends,
Ctrl-C included. Python raises ``KeyboardInterrupt`` between any two bytecodes, so one that falls
between ``os.fork()`` and the line recording the child's pid would leave a child that nobody stops or
reaps. :func:`interrupts_held` closes that window: around the fork *and* the bookkeeping, a Ctrl-C is
only noted, and acted on when the block ends, once the child is recorded. A child forked in the block
calls :func:`ignore_in_child` first: Ctrl-C is the parent's to handle.

Python runs signal handlers in the main thread only (whichever thread the kernel hands the signal to),
so swapping the handler there is enough; a signal *mask* would not be, as another thread (a progress
timer, a BLAS pool) could take the signal instead.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Note SIGINT instead of acting on it for the block; act on it (the handler that was in place, or the
    default action) when the block ends. Outside the main thread nothing can interrupt the block; a
    handler not installed from Python (an embedding application's) is left alone."""
    previous = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if previous is None:
        yield
        return
    held: list[FrameType | None] = []

    def note(signum: int, frame: FrameType | None) -> None:
        held.append(frame)

    signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            if callable(previous):
                previous(signal.SIGINT, held[0])
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)


def ignore_in_child() -> None:
    """In a forked child: ignore SIGINT (the parent stops its children when interrupted)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
