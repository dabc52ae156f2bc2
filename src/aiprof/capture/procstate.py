"""What each process of an ``aiprof run`` got to, told to the parent through a small file per process.

A process that is SIGKILLed, killed by the OOM killer or ends with ``os._exit`` never runs its flush,
so it cannot say in ``meta.json`` what it did. Instead, it appends one word to
``.pid<P>.state`` at each milestone: ``torch`` (it imported torch), ``profiling`` (its profiler
started: it ran a step), ``flushing`` and ``flushed`` (its end-of-run write began / finished), and
``unsaved`` when that write could not add its entry to ``meta.json`` (a full disk). The
parent reads these after the script ends, says what happened to a process that never flushed, and
waits for a process that is still flushing before it escalates to SIGKILL. The files are hidden
(readers skip dot files) and removed when the run directory is settled.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

SUFFIX = ".state"
TORCH = "torch"
PROFILING = "profiling"
FLUSHING = "flushing"
FLUSHED = "flushed"
UNSAVED = "unsaved"  # its flush could not write its entry into meta.json (a full disk)
_NAME = re.compile(r"^\.pid(\d+)\.state$")


def state_path(run_dir: Path, pid: int) -> Path:
    return run_dir / f".pid{pid}{SUFFIX}"


def note(run_dir: Path, state: str, pid: int | None = None) -> None:
    """Append ``state`` for this process; never raises (a full disk must not stop the script)."""
    path = state_path(run_dir, os.getpid() if pid is None else pid)
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (state + "\n").encode("ascii"))
        finally:
            os.close(fd)


@dataclass
class ProcessState:
    """The milestones one process reached."""

    pid: int
    states: list[str] = field(default_factory=list)

    @property
    def imported_torch(self) -> bool:
        return TORCH in self.states

    @property
    def profiling(self) -> bool:
        return PROFILING in self.states

    @property
    def flushed(self) -> bool:
        return FLUSHED in self.states

    @property
    def unsaved(self) -> bool:
        return UNSAVED in self.states

    @property
    def flushing(self) -> bool:
        return FLUSHING in self.states and not self.flushed


def read_all(run_dir: Path) -> dict[int, ProcessState]:
    """Every process's milestones, by pid."""
    found: dict[int, ProcessState] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(run_dir):
            match = _NAME.match(entry.name)
            if match is None:
                continue
            try:
                text = Path(entry.path).read_text(encoding="ascii", errors="replace")[:4096]
            except OSError:
                continue
            pid = int(match.group(1))
            found[pid] = ProcessState(pid, [line for line in text.split() if line])
    return found


def any_flushing(run_dir: Path) -> bool:
    """Whether some process of the run has begun its flush and not finished it."""
    return any(state.flushing for state in read_all(run_dir).values())


def remove_all(run_dir: Path) -> None:
    for pid in read_all(run_dir):
        with contextlib.suppress(OSError):
            state_path(run_dir, pid).unlink()
