"""Profiling injected into the processes ``aiprof run`` starts (via its ``sitecustomize``).

Importing this module costs nothing noticeable and never imports torch: a post-import hook waits for
the script to import torch, then hooks the optimizer, the DataLoader and the step marker. The
profiler itself starts at the first step, so launchers (torchrun) and helper processes that import
torch but never train record nothing. At exit (normal, exception, Ctrl-C) or on SIGTERM the process
flushes its cycles, data-loader waits and metadata into the run directory.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType, ModuleType, TracebackType
from typing import NoReturn

ENV_OPTIONS = "AIPROF_CAPTURE"
ENV_RUN_DIR = "AIPROF_RUN_DIR"
# "<pid>:<grace s>": the ``aiprof run`` process that started this one, and its --kill-grace.
ENV_SUPERVISOR = "AIPROF_SUPERVISOR"
_PR_SET_PDEATHSIG = 1
_FLUSH_CAP_S = 300.0  # as supervise.FLUSH_CAP_S: a script still writing its trace gets this long

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
    die_with_supervisor(os.environ.pop(ENV_SUPERVISOR, ""))

    def on_torch(_module: ModuleType) -> None:
        from aiprof.capture import procstate

        procstate.note(Path(run_dir), procstate.TORCH)
        _start_session(options, Path(run_dir))

    _post_import_hooks().when_imported("torch", on_torch)
    return True


def die_with_supervisor(spec: str) -> bool:
    """In the process ``aiprof run`` started (``spec``: its pid and grace period), on Linux: end when
    aiprof run dies, even by ``kill -9``, the way a script can clean up after. The kernel sends SIGTERM
    when aiprof run dies (``PR_SET_PDEATHSIG``; it replaces the SIGKILL set before the exec, which covers
    the moments until this runs and commands that are not Python), so the capture flushes its cycles
    (kept as cycle files that ``aiprof analyze`` salvages) and torchrun or the script's own handler can stop
    its children. A watchdog thread, asleep on a pidfd of aiprof run, SIGKILLs the script after the grace
    period if it is still there (it ignores SIGTERM, or its handler does not exit): its process group when
    it leads one, which takes its workers and helpers along. Returns whether it is set up.

    Only the direct child: its children inherit the variable but not the parent (the kernel's parent-death
    signal follows the thread that forked, which for them is not aiprof run's)."""
    try:
        pid_text, grace_text = spec.split(":", 1)
        supervisor, grace = int(pid_text), float(grace_text)
    except ValueError:
        return False
    if not sys.platform.startswith("linux") or os.getppid() != supervisor:
        return False
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return False
    if os.getppid() != supervisor:  # aiprof run died before the prctl: the signal it would have sent
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=_watch_supervisor, args=(supervisor, grace), name="aiprof-parent-watch", daemon=True).start()
    return True


def _watch_supervisor(supervisor: int, grace: float) -> None:
    """Wait for ``aiprof run`` to end; if this process outlives it by ``grace`` seconds (more while its capture
    is still writing the trace), SIGKILL it (its group when it leads one)."""
    _wait_for_exit(supervisor)
    start = time.monotonic()
    time.sleep(grace)
    while _still_flushing() and time.monotonic() - start < _FLUSH_CAP_S:
        time.sleep(0.2)
    with contextlib.suppress(OSError):
        sys.stderr.write(f"aiprof: aiprof run ended; the script did not exit within {grace:g} s of SIGTERM; "
                         "killed with SIGKILL\n")
        sys.stderr.flush()
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _wait_for_exit(pid: int) -> None:
    """Block until process ``pid`` (this process's parent) has exited: on a pidfd (no polling), else by
    watching the parent pid change."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = -1  # no pidfd (old kernel, seccomp), or the process is gone already
    if fd >= 0:
        try:
            select.select([fd], [], [])
        except OSError:
            pass
        finally:
            os.close(fd)
        return
    while os.getppid() == pid:
        time.sleep(0.5)


def _still_flushing() -> bool:
    session = sys.modules.get("aiprof.capture.session")
    current = getattr(session, "_CURRENT", None)
    return bool(getattr(current, "_flushing", False))


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
