"""The torch.profiler wrapper: one profiler per process, driven by a schedule, one file per cycle.

torch is imported only when a recorder starts. CUDA activities are added when
``torch.cuda.is_available()``; everything else is the same code path on the CPU.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from aiprof.capture.options import CaptureOptions
from aiprof.capture.rundir import cut_cycle_message, part_path


@contextlib.contextmanager
def _no_idle_inductor_import() -> Iterator[None]:
    """Keep torch.profiler from importing torch._inductor (2-3 s cold) when the script has not.

    ``profile.prepare_trace`` runs ``hasattr(torch, "_inductor")`` only to read inductor's cudagraphs
    setting, which matters only when inductor is in use, i.e. already imported. Hiding the lazy
    module for the duration of the call keeps the answer the same and saves the import. (Creating a
    torch.optim optimizer imports torch._dynamo and with it inductor, so this helps inference
    scripts.) Should anything inside the call import inductor for real, the guard puts the lazy
    module back first, so that import sees torch exactly as usual.
    """
    torch = sys.modules.get("torch")
    lazy = getattr(torch, "_lazy_modules", None)
    if "torch._inductor" in sys.modules or not isinstance(lazy, set) or "_inductor" not in lazy:
        yield
        return
    guard = _RestoreOnImport(lazy)
    lazy.discard("_inductor")
    sys.meta_path.insert(0, guard)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(guard)
        lazy.add("_inductor")


class _RestoreOnImport:
    """A meta-path finder that finds nothing: it only restores torch's lazy ``_inductor`` entry when
    an import of torch._inductor or torch._dynamo starts."""

    def __init__(self, lazy: set[str]) -> None:
        self.lazy = lazy

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname.startswith(("torch._inductor", "torch._dynamo")):
            self.lazy.add("_inductor")
        return None


CAPTURE_LOG = "capture.log"


@contextlib.contextmanager
def output_to(path: Path | None) -> Iterator[None]:
    """Send what is written to the process's standard error (file descriptor 2: C++ and Python alike)
    inside the block to ``path``, appended. torch.profiler prints ``USDT: profiler_start``,
    ``STAGE: Completed Stage ...`` and allocator warnings when a cycle starts and stops; that is
    aiprof's doing, not the script's, so it belongs in the run directory, not on the user's terminal.
    Anything another thread writes to standard error during the block goes there too."""
    if path is None:
        yield
        return
    try:
        _flush_stderr()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        yield
        return
    try:
        saved = os.dup(2)  # fails when the process has no standard error at all
    except OSError:
        os.close(fd)
        yield
        return
    try:
        os.dup2(fd, 2)
        yield
    finally:
        _flush_stderr()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def discard_empty_log(run_dir: Path) -> None:
    """The profiler's log stays only when the profiler said something."""
    path = run_dir / CAPTURE_LOG
    with contextlib.suppress(OSError):
        if path.stat().st_size == 0:
            path.unlink()


def _flush_stderr() -> None:
    with contextlib.suppress(AttributeError, OSError, ValueError):
        sys.stderr.flush()


class Recorder:
    """Owns the torch.profiler instance of this process; exports every finished cycle to a part file."""

    def __init__(self, options: CaptureOptions, run_dir: Path, on_cycle: Callable[[Path], None] | None = None) -> None:
        self.options = options
        self.run_dir = run_dir
        self.log_path: Path | None = run_dir / CAPTURE_LOG  # where torch.profiler's own chatter goes
        self._stale: Any = None
        self.on_cycle = on_cycle
        self.pid = os.getpid()
        self.cycles: list[Path] = []  # the cycle files written whole
        self.partial: list[Path] = []  # cycle files torch.profiler could not finish (a full disk): cut off, kept
        self._exports = 0  # cycles handed to us, written or not (each gets its own file name)
        self.steps = 0  # profiler steps taken since start (== the N of ProfilerStep#N now running)
        self.recorded: list[int] = []
        self.export_errors: list[str] = []
        self._prof: Any = None
        self._stopped = False
        self.cuda = False
        self._idle_until = -1.0  # steps below this are idle in the schedule (see step())
        # Kineto's on-demand tracing (dynolog) counts steps through torch.profiler's step(): keep calling it
        self._fast_steps = not (os.environ.get("KINETO_USE_DAEMON") or os.environ.get("KINETO_FORCE_STEP_HOOK"))

    @property
    def started(self) -> bool:
        return self._prof is not None

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        # We export every cycle ourselves, so torch's advice to keep events across cycles does not apply.
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events at the end of each cycle")
        s = self.options.schedule
        activities = [ProfilerActivity.CPU]
        self.cuda = bool(torch.cuda.is_available())
        if self.cuda:
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(
            activities=activities,
            schedule=schedule(wait=s.wait, warmup=s.warmup, active=s.active, repeat=s.repeat, skip_first=s.skip_first),
            on_trace_ready=self._trace_ready,
            record_shapes=self.options.record_shapes,
            profile_memory=self.options.profile_memory,
            with_stack=self.options.with_stack,
        )
        # A block allocated before recording and freed during it makes the CPU allocator log "Memory
        # block of unknown size ..." on the first such free (then every 1000th), usually in the
        # script's own code. Free one on purpose inside the logged window, so that line goes there.
        self._stale = torch.empty(16) if self.options.profile_memory else None
        with _no_idle_inductor_import(), output_to(self.log_path):
            self._prof.start()
            self._free_stale()
        self._note_action()

    def step(self) -> None:
        """End the current step. Cheap when the schedule is waiting or done: while the next step stays idle
        (``Schedule.idle_until``), torch.profiler's ``step()`` would only close and reopen its (unrecorded)
        ``ProfilerStep`` range and count, so only its step counter is advanced (a few attribute writes instead
        of ~10-20 µs of Python and two dispatcher calls per step); the first step that warms up or records
        goes through ``torch.profiler``'s own ``step()``, which closes the stale range and opens the right one."""
        if self._prof is None or self._stopped:
            return
        prof = self._prof
        if prof.step_num + 1 < self._idle_until:
            prof.step_num += 1
            self.steps += 1
            return
        with _no_idle_inductor_import(), output_to(self.log_path if self._changes_state() else None):
            prof.step()
            self._free_stale()
        self.steps += 1
        self._note_action()

    def _changes_state(self) -> bool:
        """Whether the coming ``step()`` starts, stops or saves a cycle (when torch.profiler talks)."""
        from torch.profiler import ProfilerAction

        schedule = getattr(self._prof, "schedule", None)
        current = self._prof.current_action
        if schedule is None or current == ProfilerAction.RECORD_AND_SAVE:
            return True
        return bool(schedule(self._prof.step_num + 1) != current)

    def _free_stale(self) -> None:
        from torch.profiler import ProfilerAction

        if self._stale is not None and self._prof.current_action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            self._stale = None

    def _note_action(self) -> None:
        from torch.profiler import ProfilerAction

        action = self._prof.current_action
        if action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            self.recorded.append(self.steps)
        self._idle_until = -1.0
        if action == ProfilerAction.NONE and self._fast_steps:
            self._idle_until = self.options.schedule.idle_until(int(self._prof.step_num) + 1)

    def stop(self) -> None:
        """Stop the profiler; a cycle cut short by an exit is still exported with its steps so far."""
        if self._prof is None or self._stopped:
            return
        self._stopped = True
        with _no_idle_inductor_import(), output_to(self.log_path):
            self._prof.stop()

    def _trace_ready(self, prof: Any) -> None:
        cycle, self._exports = self._exports, self._exports + 1
        path = part_path(self.run_dir, self.pid, cycle)
        try:
            prof.export_chrome_trace(str(path))
        except Exception as err:  # noqa: BLE001 - a failed export must not kill the training run
            self.export_errors.append(f"cycle {cycle}: {err}")
            return
        if not path.is_file():  # torch.profiler's own write failed: it logs that and returns (a full disk)
            cut = path.with_name(path.name + ".tmp")  # what it had written, under its temporary name
            self.export_errors.append(f"cycle {cycle}: {cut_cycle_message(path, cut)}")
            if cut.is_file():
                self.partial.append(cut)
            return
        self.cycles.append(path)
        if self.on_cycle is not None:
            self.on_cycle(path)
