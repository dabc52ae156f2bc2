"""The run directory: where a capture writes, how it is named, and how writers share it safely.

Rules: a run never overwrites another run; every file a reader may mistake for a result is written to
a temporary name and renamed into place, so a crash leaves no half-written file under a final name;
``meta.json`` is updated under a file lock because several ranks (and the ``aiprof run`` parent)
write their part of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from aiprof.errors import AiprofError

META = "meta.json"
TELEMETRY = "telemetry.csv"
LOCK = ".aiprof.lock"
TRACE_SUFFIX = ".pt.trace.json.gz"
# One profiler cycle, not yet combined; readers skip it (not *.json*). Uncompressed on purpose:
# torch's gzip export writes line by line in Python (~0.8 s per cycle of a small model, inside a
# training step); plain export is C++ and fast, and the combine step compresses anyway.
PART_SUFFIX = ".part"

RunMeta = dict[str, Any]


class RunDirError(AiprofError):
    """The run directory cannot be created or written."""


def default_run_dir(script: str | None, now: float | None = None, root: Path | None = None) -> Path:
    """``./aiprof-runs/<YYYYmmdd-HHMMSS>-<script>/``: sorts by time, says what ran."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    stem = Path(script).stem if script else "python"
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem)[:40] or "run"
    return (root or Path.cwd() / "aiprof-runs") / f"{stamp}-{stem}"


def create_new(path: Path, *, explicit: bool) -> Path:
    """Create a fresh run directory. An explicit ``--out`` that exists and is not empty is an error;
    a default name that exists (two runs in the same second) gets a numeric suffix."""
    candidates = [path] if explicit else [path] + [path.with_name(f"{path.name}-{i}") for i in range(2, 100)]
    for candidate in candidates:
        if candidate.is_dir() and not any(candidate.iterdir()):
            check_writable(candidate)
            return candidate
        try:
            candidate.mkdir(parents=True)
        except FileExistsError:
            continue
        except OSError as err:
            raise RunDirError(f"{candidate}: cannot create the run directory ({err.strerror}); pass --out to a writable folder") from None
        return candidate
    if explicit:
        raise RunDirError(f"{path}: already exists and is not empty; aiprof never overwrites a run, choose another --out")
    raise RunDirError(f"{path}: too many runs with this name; pass --out")


def check_writable(path: Path) -> None:
    """Fail early, before the script runs for minutes, when the folder cannot take files."""
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".aiprof-probe-"):
            pass
    except OSError as err:
        raise RunDirError(f"{path}: not writable ({err.strerror}); pass --out to a writable folder") from None


@contextlib.contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """An exclusive lock over the run directory's shared files (``meta.json``)."""
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def atomic_write(path: Path, data: bytes) -> None:
    """Write to a temporary sibling, then rename: readers see the old file or the whole new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are as shareable as any file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    """The process umask, read without changing it (os.umask would race with other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def read_meta(run_dir: Path) -> RunMeta:
    try:
        data = json.loads((run_dir / META).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def update_meta(run_dir: Path, change: Callable[[RunMeta], None]) -> RunMeta:
    """Read ``meta.json``, apply ``change`` in place, write it back, all under the lock."""
    with locked(run_dir):
        meta = read_meta(run_dir)
        change(meta)
        atomic_write(run_dir / META, (json.dumps(meta, indent=2, sort_keys=False, default=str) + "\n").encode())
        return meta


def trace_path(run_dir: Path, rank: int, pid: int) -> Path:
    """``rank<N>.pt.trace.json.gz``; a second process claiming the same rank gets its pid appended."""
    path = run_dir / f"rank{rank}{TRACE_SUFFIX}"
    if path.exists():
        path = run_dir / f"rank{rank}-pid{pid}{TRACE_SUFFIX}"
    return path


def part_path(run_dir: Path, pid: int, cycle: int) -> Path:
    return run_dir / f".pid{pid}.cycle{cycle}{PART_SUFFIX}"


def parts_of(run_dir: Path, pid: int) -> list[Path]:
    """This process's cycle files, in cycle order."""
    found = list(run_dir.glob(f".pid{pid}.cycle*{PART_SUFFIX}"))
    return sorted(found, key=lambda p: int(re.findall(r"cycle(\d+)", p.name)[0]))


def dataloader_path(run_dir: Path, rank: int, pid: int) -> Path:
    path = run_dir / f"dataloader.rank{rank}.csv"
    if path.exists():
        path = run_dir / f"dataloader.rank{rank}-pid{pid}.csv"
    return path
