"""Writing a file so that readers see the old one or the whole new one, never half of it.

The one atomic-write helper of the project (reports, merged traces, peaks files, run-directory files).
The temporary file is created by :func:`tempfile.mkstemp` beside the target: a new name each time,
opened with ``O_CREAT | O_EXCL`` and mode 0600, so a file or symlink someone planted in the folder is
never opened, followed or overwritten. It is flushed to disk, given the permissions a plain ``open``
would give (the umask applied to 0666), renamed over the target with :func:`os.replace`, and removed
if anything fails on the way. A bottom module: the standard library only.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write(path: str | os.PathLike[str], data: bytes | str, *, fsync: bool = True) -> None:
    """Write ``data`` (text is encoded as UTF-8) to ``path`` atomically. Raises :class:`OSError`."""
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".", prefix=f".{target.name}.", suffix=".tmp")
    try:
        try:
            view = memoryview(payload)
            while view:  # os.write until all is written (a short write is not an error)
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600: results are as shareable as any file
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def current_umask() -> int:
    """The process umask, read without changing it where possible (``os.umask`` races with threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def writable_folder_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a file cannot be written at ``path`` (no such folder, not writable, a folder), or None."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        return f"{parent}: no such folder"
    if not os.access(parent, os.W_OK):
        return f"{parent}: not writable"
    if target.is_dir():
        return f"{target}: is a folder"
    return None
