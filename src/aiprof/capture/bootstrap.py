"""Profiling injected into the processes ``aiprof run`` starts (via its ``sitecustomize``).

Importing this module costs nothing noticeable and never imports torch: a post-import hook waits for
the script to import torch, then hooks the optimizer, the DataLoader and the step marker. The
profiler itself starts at the first step, so launchers (torchrun) and helper processes that import
torch but never train record nothing. At exit (normal, exception, Ctrl-C) or on SIGTERM the process
flushes its cycles, data-loader waits and metadata into the run directory.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType, ModuleType, TracebackType
from typing import NoReturn

ENV_OPTIONS = "AIPROF_CAPTURE"
ENV_RUN_DIR = "AIPROF_RUN_DIR"

_uncaught: list[str] = []


def install() -> bool:
    """Set up the injection when ``aiprof run`` asked for it; returns whether it did."""
    options_json = os.environ.get(ENV_OPTIONS)
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not options_json or not run_dir:
        return False
    from aiprof.capture.options import CaptureOptions
    from aiprof.capture.session import _post_import_hooks

    options = CaptureOptions.from_json(options_json)

    def on_torch(_module: ModuleType) -> None:
        from aiprof.capture import procstate

        procstate.note(Path(run_dir), procstate.TORCH)
        _start_session(options, Path(run_dir))

    _post_import_hooks().when_imported("torch", on_torch)
    return True


def _start_session(options: object, run_dir: Path) -> None:
    from aiprof.capture.options import CaptureOptions
    from aiprof.capture.session import CaptureSession, current, set_current

    assert isinstance(options, CaptureOptions)
    if current() is not None:
        return
    session = CaptureSession(options, run_dir, lazy_start=True, write_traces=False)
    session.install_torch_hooks()
    session.install_signal_handlers()
    _install_sigint_dedupe()
    _wrap_excepthook()
    _wrap_os_exit()
    set_current(session)
    atexit.register(_at_exit, session)


def _at_exit(session: object) -> None:
    from aiprof.capture.session import CaptureSession

    assert isinstance(session, CaptureSession)
    if _uncaught:
        session.finalize("incomplete", _uncaught[-1])
    else:
        session.finalize("complete")


def _wrap_os_exit() -> None:
    """``os._exit`` skips atexit: flush first, so a script that ends that way keeps what it recorded.

    Forked workers (``multiprocessing`` ends them with ``os._exit``) inherit the wrapper, but the
    session belongs to another pid there, so for them it does nothing.
    """
    real = os._exit
    if getattr(real, "_aiprof_wrapped", False):
        return

    def _exit(status: int) -> NoReturn:
        from aiprof.capture.session import current

        session = current()
        if session is not None:
            code = status if isinstance(status, int) else 1
            session.finalize("complete" if code == 0 else "incomplete", None if code == 0 else f"os._exit({code})")
        real(status)

    _exit._aiprof_wrapped = True  # type: ignore[attr-defined]
    os._exit = _exit


def _wrap_excepthook() -> None:
    """Remember an uncaught exception (its type) so the flush at exit can mark the run incomplete."""
    previous = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        label = "interrupted (KeyboardInterrupt)" if issubclass(exc_type, KeyboardInterrupt) else f"raised {exc_type.__name__}: {exc}"
        _uncaught.append(label[:300])
        previous(exc_type, exc, tb)

    sys.excepthook = hook


def _install_sigint_dedupe() -> None:
    """Ctrl-C reaches this process twice (from the terminal and forwarded by ``aiprof run``): count it once."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    last = [0.0]

    def handler(signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if now - last[0] < 0.5:
            return
        last[0] = now
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
