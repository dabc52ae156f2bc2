"""Kineto / Chrome-trace JSON (``.json``, ``.json.gz``, a bare event list): the Kineto loader
(:mod:`aiprof.trace.kineto`), seen through the reader interface."""

from __future__ import annotations

from pathlib import Path

from aiprof.trace.model import Trace
from aiprof.trace.readers.base import ReaderOptions

GZIP_MAGIC = b"\x1f\x8b"


class KinetoReader:
    """JSON traces: the text starts with ``{`` or ``[`` (after blanks), or the file is gzip."""

    name = "kineto"

    def sniff(self, head: bytes, path: Path) -> bool:
        if head.startswith(GZIP_MAGIC):
            return True
        text = head.lstrip(b" \t\r\n\xef\xbb\xbf")
        return text[:1] in (b"{", b"[")

    def read(self, path: Path, options: ReaderOptions) -> list[Trace]:
        from aiprof.trace.kineto.loader import load_file  # here: imported on the first Kineto file only

        return [load_file(path)]


def load_limits() -> object:
    """The process's Kineto load limits (``--max-trace-mb`` / ``--max-events``), to carry to another process."""
    from aiprof.trace.kineto import source

    return source.current()


def set_load_limits(limits: object) -> None:
    """Apply limits :func:`load_limits` returned in another process."""
    from aiprof.trace.kineto import source

    if isinstance(limits, source.LoadLimits):
        source.configure(limits)


__all__ = ["KinetoReader", "load_limits", "set_load_limits"]
