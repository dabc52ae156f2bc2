"""The script as a supervised child of ``aiprof run``: started so that it cannot outlive aiprof,
sent the signals aiprof receives, and killed when it ignores them.

* **Process group.** When aiprof runs in the foreground of a terminal, the script shares aiprof's
  process group, so the terminal's Ctrl-C, Ctrl-Z and ``input()`` work as without aiprof; signals
  aiprof receives go to the script's process. Otherwise (a batch job, CI, ``nohup``, a pipe) the
  script leads a process group of its own, and signals go to the whole group (the script, its
  DataLoader workers, its helpers), as a terminal or a batch scheduler would send them.
* **Escalation.** After the first forwarded signal the script has ``grace_s`` seconds to exit; then
  aiprof sends SIGKILL (to the group, or to the script and its descendants) and says so. A script
  that is still writing its trace (``procstate``) gets more time, up to ``flush_cap_s``.
* **Parent death.** On Linux the script gets SIGKILL when aiprof dies (``PR_SET_PDEATHSIG``, set here
  before the exec), so a ``kill -9`` of aiprof does not leave it running unsupervised. A Python script
  switches that to SIGTERM as it starts (:func:`aiprof.capture.bootstrap.die_with_supervisor`): it
  flushes what it recorded and can end its own children (torchrun's ranks), and a watchdog SIGKILLs it
  (and its group, when it leads one) after the grace period if it is still there.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from aiprof.capture import procstate

FORWARDED: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DEFAULT_GRACE_S = 10.0
FLUSH_CAP_S = 300.0  # how long a script that is writing its trace may go past the grace period
_PR_SET_PDEATHSIG = 1


def foreground_terminal() -> bool:
    """aiprof runs in the foreground process group of a terminal on its standard input, output or error
    (``aiprof run ... | tee log`` typed at a prompt counts: Ctrl-C there reaches aiprof's group)."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return True
        except OSError:
            continue
    return False


def _prctl() -> Any:
    """libc's ``prctl`` on Linux, resolved before the fork (no loading of libraries in the child)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def child_setup(own_group: bool, parent_pid: int, prctl: Any) -> Callable[[], None]:
    """The ``preexec_fn``: a process group of its own if asked, and SIGKILL when aiprof dies."""

    def setup() -> None:
        if own_group:
            os.setpgid(0, 0)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != parent_pid:  # aiprof died between the fork and the prctl
                os.kill(os.getpid(), signal.SIGKILL)

    return setup


class Supervisor:
    """Starts one command, forwards signals to it, escalates to SIGKILL after a grace period."""

    def __init__(self, argv: list[str], env: dict[str, str], *, grace_s: float, run_dir: Path | None = None,
                 own_group: bool | None = None, flush_cap_s: float = FLUSH_CAP_S) -> None:
        self.argv = argv
        self.env = env
        self.grace_s = grace_s
        self.run_dir = run_dir
        self.own_group = not foreground_terminal() if own_group is None else own_group
        self.flush_cap_s = flush_cap_s
        self.child: subprocess.Popen[bytes] | None = None
        self.signals: list[int] = []
        self.escalated: str | None = None  # what aiprof did when the script ignored a signal
        self._deadline: float | None = None
        self._waited_for_flush = False
        self._flush_cap_at: float | None = None
        self._exit_grace_given = False

    def start(self) -> int:
        """Start the command; returns its pid. Raises OSError when it cannot be started."""
        setup = child_setup(self.own_group, os.getpid(), _prctl())
        self.child = subprocess.Popen(self.argv, env=self.env, preexec_fn=setup)  # noqa: PLW1509 - no threads yet
        return self.child.pid

    def wait(self) -> int:
        """Wait for the command, handling forwarded signals; its raw status (-N: killed by signal N)."""
        assert self.child is not None
        previous = {s: signal.signal(s, self.forward) for s in FORWARDED}
        try:
            while True:
                try:
                    return self.child.wait(timeout=self._poll_s())
                except subprocess.TimeoutExpired:
                    self._check_deadline()
                except KeyboardInterrupt:  # pragma: no cover - our handler replaces SIGINT's default
                    continue
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def forward(self, signum: int, frame: FrameType | None) -> None:
        """Pass the signal on; the first one starts the grace period."""
        self.signals.append(signum)
        self._send(signum)
        if self._deadline is None:
            self._deadline = time.monotonic() + self.grace_s

    def _poll_s(self) -> float:
        if self._deadline is None:
            return 1.0
        return max(0.05, min(0.5, self._deadline - time.monotonic()))

    def _check_deadline(self) -> None:
        if self._deadline is None or self.escalated is not None or time.monotonic() < self._deadline:
            return
        first = signal.Signals(self.signals[0]).name
        if self._still_flushing():
            if not self._waited_for_flush:
                self._waited_for_flush = True
                self._flush_cap_at = time.monotonic() + self.flush_cap_s
                print(f"aiprof: the script is still writing its trace {self.grace_s:g} s after {first}; "
                      f"waiting for it (up to {self.flush_cap_s:g} s more)", file=sys.stderr, flush=True)
            return
        if self._waited_for_flush and not self._exit_grace_given:
            self._exit_grace_given = True  # the write has ended: the usual grace to exit after it
            self._deadline = time.monotonic() + self.grace_s
            return
        self.escalated = f"did not exit within {self.grace_s:g} s of {first}; killed with SIGKILL"
        print(f"aiprof: the script {self.escalated}", file=sys.stderr, flush=True)
        self.kill()

    def _still_flushing(self) -> bool:
        if self.run_dir is None or (self._flush_cap_at is not None and time.monotonic() >= self._flush_cap_at):
            return False
        return procstate.any_flushing(self.run_dir)

    def _send(self, signum: int) -> None:
        assert self.child is not None
        if self.child.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.own_group:
                os.killpg(self.child.pid, signum)
            else:
                self.child.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL the script and everything it started (its group, or its descendants)."""
        assert self.child is not None
        if self.own_group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child.pid, signal.SIGKILL)
            return
        for pid in [*_descendants(self.child.pid), self.child.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _descendants(pid: int) -> list[int]:
    """Children, grandchildren, ... of ``pid`` (psutil when installed; else none)."""
    try:
        import psutil

        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except Exception:  # noqa: BLE001 - psutil missing, or the process is gone
        return []
