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
        from aiprof.trace.kineto.loader import is_cut_off, load_file  # here: imported on the first Kineto file only

        trace = load_file(path, limits=options.limits)
        from aiprof.rundir import is_cycle_file, why_uncombined

        if is_cycle_file(path.name):  # a cycle aiprof run left uncombined (killed, a full disk): say so, and how much
            what = "what its cut-off write holds (below)" if is_cut_off(trace.warnings) else f"{len(trace):,} events recovered"
            trace.warnings.insert(0, f"{path.name}: a profiler cycle that aiprof run did not combine into a trace "
                                     f"({why_uncombined(path.parent)}); read from the cycle file as it is: {what}")
        return [trace]


__all__ = ["KinetoReader"]
