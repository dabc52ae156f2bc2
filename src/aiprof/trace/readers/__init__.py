"""Trace readers: each turns a file into the trace model (:mod:`aiprof.trace.model`). The reader is
picked by the file's content (its first bytes), not its name: Nsight Systems SQLite exports start with
``SQLite format 3\\0``, Kineto traces with ``{`` / ``[`` or the gzip magic. A file no reader claims goes
to the Kineto loader, whose messages say what is wrong with it.

``READERS`` is the list tried, in order (a list users can edit). A read is given its
:class:`ReaderOptions` (the step range, the load limits) as an argument; none: the defaults.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from aiprof.errors import TraceError
from aiprof.trace.model import Trace
from aiprof.trace.readers.base import Reader, ReaderOptions
from aiprof.trace.readers.kineto import KinetoReader

SQLITE_MAGIC = b"SQLite format 3\x00"


class _Nsys:
    """Nsight Systems reports (:class:`aiprof.trace.readers.nsys.NsysReader`), its module (sqlite3,
    subprocess, the native column reader) imported only when a file is one: a Kineto trace never pays it."""

    name = "nsys"

    def sniff(self, head: bytes, path: Path) -> bool:
        return head.startswith(SQLITE_MAGIC) or path.name.lower().endswith(".nsys-rep")

    def read(self, path: Path, options: ReaderOptions) -> list[Trace]:
        from aiprof.trace.readers.nsys import NsysReader

        return NsysReader().read(path, options)


READERS: list[Reader] = [_Nsys(), KinetoReader()]
FALLBACK: Reader = READERS[-1]
HEAD_BYTES = 64


def reader_for(path: Path) -> Reader:
    """The reader whose ``sniff`` accepts the file's first bytes; the Kineto loader when none does (or the
    file cannot be opened: the loader's messages explain that). Anything but a regular file, and a loop
    of symbolic links, is a one-line :class:`TraceError` here."""
    try:  # O_NONBLOCK: a FIFO is refused below, never waited on
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise TraceError(f"{path}: a loop of symbolic links (it never reaches a file)") from None
        return FALLBACK
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TraceError(f"{path}: not a regular file (a FIFO, socket or device is not read as a trace)")
        head = os.read(fd, HEAD_BYTES)
    except OSError:
        return FALLBACK
    finally:
        os.close(fd)
    for reader in READERS:
        if reader.sniff(head, path):
            return reader
    return FALLBACK


def load_ranks(path: Path, options: ReaderOptions | None = None) -> list[Trace]:
    """Every rank a file holds (most formats: one), read by the reader its content asks for."""
    traces = reader_for(path).read(path, options or ReaderOptions())
    if not traces:
        raise TraceError(f"{path}: the file holds no trace")
    return traces


def load_file(path: Path, rank: int = 0, rank_source: str = "file order", options: ReaderOptions | None = None) -> Trace:
    """One file's trace (its first rank, for a file holding several). Same contract as
    :func:`aiprof.trace.kineto.loader.load_file`."""
    trace = load_ranks(path, options)[0]
    if trace.rank == 0 and rank:
        trace.rank, trace.rank_source = rank, rank_source
    return trace


def program_of(trace: Trace) -> str:
    """The program a trace records, as far as the file says (nsys: the process's executable name)."""
    if trace.metadata.get("source") != "nsys":
        return "kineto"
    names = sorted(set(trace.process_names.values()))
    return f"nsys:{names[0]}" if names else "nsys"


__all__ = ["READERS", "Reader", "ReaderOptions", "load_file", "load_ranks", "program_of", "reader_for"]
