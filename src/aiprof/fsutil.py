"""Writing a file so that readers see the old one or the whole new one, never half of it; and the one
rule for where a command may write (:func:`output_problem`).

The one atomic-write helper of the project (reports, merged traces, peaks files, run-directory files).
The temporary file is created by :func:`tempfile.mkstemp` beside the target: a new name each time,
opened with ``O_CREAT | O_EXCL`` and mode 0600, so a file or symlink someone planted in the folder is
never opened, followed or overwritten. It is flushed to disk, given the permissions a plain ``open``
would give (the umask applied to 0666), renamed over the target with :func:`os.replace`, and removed
if anything fails on the way. A bottom module: the standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path


def atomic_write(path: str | os.PathLike[str], data: bytes | str, *, fsync: bool = True) -> None:
    """Write ``data`` (text is encoded as UTF-8) to ``path`` atomically. Raises :class:`OSError`."""
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".", prefix=f".{target.name}.", suffix=".tmp")
    try:
        try:
            _write_all(fd, payload)
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


def mount_point(path: str | os.PathLike[str]) -> Path:
    """The mount point of the file system holding ``path`` (its nearest existing folder): the highest
    folder above it on the same device. What names "the disk" in a full-disk message."""
    current = Path(os.path.abspath(path))
    while not current.exists() and current != current.parent:
        current = current.parent
    try:
        device = current.stat().st_dev
        while current != current.parent and current.parent.stat().st_dev == device:
            current = current.parent
    except OSError:
        pass
    return current


# The marks the HTML and SVG renderers write, and Markdown files get (recognised below).
HTML_GENERATOR = '<meta name=generator content="aiprof">'
GENERATOR_COMMENT = "<!-- generator: aiprof -->"
JSON_GENERATOR = "aiprof"  # the value of a JSON output's top-level "generator" (reports: "aiprof VERSION")

# What every output of aiprof carries in its first bytes (JSON: the top object's ``generator``; HTML: a
# generator meta element; SVG: a generator comment), and the first line of its Markdown and terminal
# reports. A file with none of them is not ours.
GENERATOR_MARKS = (b'"generator": "aiprof', b'"generator":"aiprof', b'<meta name=generator content="aiprof',
                   b"<!-- generator: aiprof")
_TEXT_STARTS = (b"## aiprof", "aiprof \u00b7".encode())
_HEAD_BYTES = 64 << 10


def mark_text(text: str, fmt: str, what: str) -> str:
    """A Markdown or terminal output about to be written to a file, with a first line that marks it as
    aiprof's (an invisible ``<!-- generator: aiprof -->`` in Markdown, ``aiprof · <what>`` in text) unless
    its first line already does; other formats carry their mark already."""
    if fmt not in ("md", "terminal") or text.encode().startswith(_TEXT_STARTS):
        return text
    return f"{GENERATOR_COMMENT}\n{text}" if fmt == "md" else f"aiprof \u00b7 {what}\n{text}"


def is_aiprof_output(path: str | os.PathLike[str]) -> bool:
    """Whether the regular file at ``path`` is one aiprof wrote: its first 64 KiB (decompressed, for a gzip
    file) hold a generator mark (:data:`GENERATOR_MARKS`), or its first line starts a Markdown or
    terminal report (``## aiprof``, ``aiprof ·``). Anything unreadable is not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, _HEAD_BYTES)
    except OSError:
        return False
    finally:
        os.close(fd)
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(31).decompress(head, _HEAD_BYTES)
        except zlib.error:
            return False
    return head.startswith(_TEXT_STARTS) or any(mark in head for mark in GENERATOR_MARKS)


def output_problem(target: str | os.PathLike[str], inputs: Sequence[str | os.PathLike[str]] = (), *,
                   force: bool = False) -> str | None:
    """Why a command that reads ``inputs`` must not write ``target`` (its ``-o``), or None. The rule, for
    every verb: the folder must exist and be writable; ``target`` must not be a symbolic link (a link is
    never written through nor replaced) nor anything but a regular file, except a character device or a
    named pipe (``/dev/null``, ``/dev/stdout``: written in place); an existing ``target`` must not be
    an input (the same file as one, links resolved, or any file inside an input folder: a run directory's
    ``meta.json``, a trace of the folder), even with ``force``; and an existing file that is not an aiprof
    output (:func:`is_aiprof_output`) is replaced only with ``force``."""
    path = Path(target)
    try:
        info: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as err:
        return f"{path}: {err.strerror or err}"
    if info is not None and not stat.S_ISREG(info.st_mode):
        return _not_a_file_problem(path, info, inputs)
    problem = writable_folder_problem(path)
    if problem is not None or info is None:
        return problem
    if _an_input(path, info, inputs):
        return f"{path}: an input of this command; aiprof never writes over what it reads"
    if not force and not is_aiprof_output(path):
        return f"{path}: exists and is not an aiprof output; give --force to replace it"
    return None


def _not_a_file_problem(path: Path, info: os.stat_result, inputs: Sequence[str | os.PathLike[str]]) -> str | None:
    """An existing ``-o`` that is not a regular file (``info``: its own, not followed). A character device
    or a named pipe, links followed (``/dev/null``, ``/dev/stdout`` on a terminal or a pipe), is written in
    place (:func:`write_output`: it holds no file to lose, so no ``--force``); any other link is never
    written through, and anything else is refused, saying what it is."""
    link = stat.S_ISLNK(info.st_mode)
    try:
        seen = os.stat(path) if link else info
    except OSError:
        seen = None  # a dangling link, or a loop of links
    if seen is not None and is_stream(seen):
        return f"{path}: an input of this command; aiprof never writes over what it reads" if _an_input(
            path, seen, inputs) else None
    if link:
        return f"{path}: a symbolic link; aiprof never writes through one (give the path of a file or a new name)"
    if stat.S_ISDIR(info.st_mode):
        return f"{path}: is a folder"
    kind = "a block device" if stat.S_ISBLK(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode) else "not a regular file"
    return f"{path}: {kind}; aiprof writes a regular file, a character device (/dev/null) or a named pipe"


def is_stream(info: os.stat_result) -> bool:
    """A character device or a named pipe: written in place, never replaced (:func:`write_output`)."""
    return stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode)


def write_output(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Write an output the user named: atomically (:func:`atomic_write`) for a file; in place for an
    existing character device or named pipe, links followed (``-o /dev/null``; a device cannot be renamed
    over, and replacing ``/dev/null`` by a file would be wrong). The device is opened without ``O_CREAT``
    and checked to be one once open, so a path swapped for a file meanwhile is never written. A pipe's open
    waits for its reader, as any writer's does. Raises :class:`OSError`."""
    try:
        special = is_stream(os.stat(path))
    except OSError:
        special = False
    if not special:
        atomic_write(path, data)
        return
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not is_stream(os.fstat(fd)):  # swapped for a file since: never write it
            raise OSError(errno.EEXIST, "no longer a device or a pipe")
        _write_all(fd, payload)
    finally:
        os.close(fd)


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:  # os.write until all is written (a short write is not an error)
        view = view[os.write(fd, view):]


def _an_input(path: Path, info: os.stat_result, inputs: Sequence[str | os.PathLike[str]]) -> bool:
    return any(_reads(source, path, info) for source in inputs)


def _reads(source: str | os.PathLike[str], target: Path, info: os.stat_result) -> bool:
    """Whether reading ``source`` (a file or a folder) reads the existing file ``target`` (``info``)."""
    try:
        found = os.stat(source)
    except (OSError, ValueError):
        return False
    if (found.st_dev, found.st_ino) == (info.st_dev, info.st_ino):
        return True
    if not stat.S_ISDIR(found.st_mode):
        return False
    folder, file = Path(os.path.realpath(source)), Path(os.path.realpath(target))
    return folder in file.parents
