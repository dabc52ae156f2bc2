"""A trace file's text, read safely: sniffed, decompressed a piece at a time, and bounded.

Every reader of trace JSON gets its bytes from :func:`pieces` (the streaming reader, its helper
processes, and the whole-file path through :func:`read_all`), so no path inflates a file before it is
known to look like a trace or past the limits:

* **Sniff.** The first non-whitespace byte must open a JSON object or list (``{`` or ``[``); otherwise
  the file is rejected at once with "not a Kineto trace: does not start with a JSON object or list".
  The message says what the file is not, never what it holds (its first bytes could be anything).
* **Encoding.** The text is UTF-8. A UTF-8 byte-order mark at its very start (what Windows editors and
  some exporters write; JSON has none) is dropped, in a plain file and inside gzip alike, so every reader
  (streaming, helpers, whole-file) sees the same text at the same offsets. UTF-16 or UTF-32 text, with
  its byte-order mark or without (a NUL beside the opening ``{``), and a mark anywhere else get one line
  saying so and to save the file as UTF-8.
* **Size.** The decompressed text may grow to :meth:`LoadLimits.allowed_bytes`: at most ``max_bytes``,
  and at most ``max_ratio`` times the file's own size once past ``ratio_floor_bytes`` (a gzip bomb
  inflates 200x or more; Kineto JSON compresses 10-40x). Past it, a one-line :class:`TraceError` names
  the limit and the option that raises it (``--max-trace-mb``).

The limits (:class:`LoadLimits`, an argument: the defaults when none is given) are those of every reader
(:mod:`aiprof.trace.limits`, re-exported here).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiprof.errors import TraceError
from aiprof.trace.limits import LoadLimits, too_large, too_many_events

BLOCK_BYTES = 1 << 18  # compressed bytes read at a time
PIECE_BYTES = 1 << 20  # decompressed bytes produced at a time
_NON_SPACE = re.compile(rb"[^ \t\r\n]")
GZIP_TRUNCATED = "gzip stream is truncated"  # the words of the salvage note (``loader.is_cut_off``)


class Truncated(Exception):
    """The gzip stream ended before its end marker (a file cut off mid-copy)."""


class TrailingData(Exception):
    """Bytes follow the gzip stream's end (concatenated members)."""


def decompressor() -> Any:
    """A gzip stream decompressor: ISA-L's inflate when installed (about twice as fast as zlib's: 0.038
    against 0.075 s for an 82 MB trace), else zlib's. Same interface."""
    try:
        from isal import isal_zlib
    except ImportError:  # isal is a dependency; a platform without its wheels still works
        return zlib.decompressobj(wbits=31)
    return isal_zlib.decompressobj(wbits=31)


def inflate_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a corrupt gzip stream raises (zlib's, and ISA-L's where installed)."""
    try:
        from isal import isal_zlib
    except ImportError:
        return (zlib.error,)
    isal_error: type[BaseException] = getattr(isal_zlib, "error")  # typed as an instance in its stubs
    return (zlib.error, isal_error)


UTF8_BOM = b"\xef\xbb\xbf"  # dropped where the text starts with it
# Byte-order marks by their first two bytes (the sniff may see only two), UTF-32's before UTF-16's.
_MARKS = {b"\xef\xbb": "a UTF-8 byte-order mark after its first bytes (save the file as UTF-8 without BOM)",
          b"\xff\xfe\x00\x00": "UTF-32 text (its byte-order mark); save the file as UTF-8",
          b"\x00\x00\xfe\xff": "UTF-32 text (its byte-order mark); save the file as UTF-8",
          b"\xff\xfe": "UTF-16 text (its byte-order mark); save the file as UTF-8",
          b"\xfe\xff": "UTF-16 text (its byte-order mark); save the file as UTF-8"}
_WIDE = "UTF-16 or UTF-32 text (NUL bytes beside the first characters); save the file as UTF-8"
_OPENERS = b"{[ \t\r\n"


def not_a_trace(path: Path, head: bytes = b"") -> TraceError:
    """The one-line error for a file whose text does not open a JSON object or list; text in another
    encoding than UTF-8 (``head``: its first non-blank bytes, up to 4) is named so."""
    for mark, why in _MARKS.items():
        if head.startswith(mark):
            return TraceError(f"{path}: the file holds {why}")
    if wide(head):
        return TraceError(f"{path}: the file holds {_WIDE}")
    return TraceError(f"{path}: not a Kineto trace: does not start with a JSON object or list")


def wide(head: bytes) -> bool:
    """Whether the first non-blank bytes look like UTF-16/32 JSON without a mark (``{\\x00"\\x00``,
    ``\\x00{``): a NUL, which JSON text never holds, beside an opening character. Zeros alone (a
    preallocated file never written) are not text of any encoding."""
    core = head.replace(b"\x00", b"")
    return len(core) < len(head) and core[:1] != b"" and core[0] in _OPENERS


def pieces(
    path: Path, limits: LoadLimits | None = None, piece_bytes: int = PIECE_BYTES, block_bytes: int = BLOCK_BYTES
) -> Iterator[bytes]:
    """The file's decompressed text, ``piece_bytes`` at a time, sniffed and bounded (see module doc).

    Raises OSError as ``open`` does, :class:`TraceError` for a file that is not JSON, empty, or too large,
    :class:`Truncated` / :class:`TrailingData` after the last piece for a gzip stream cut short or
    followed by more data, and the decompressor's error for corrupt data."""
    limits = limits or LoadLimits()
    with open(path, "rb") as fh:
        size = _file_size(fh)
        sniff = _Sniff(path, limits, size)
        head = fh.read(2)
        if head != b"\x1f\x8b":
            yield sniff(head + fh.read(max(piece_bytes - len(head), 2)))  # 4 bytes or more to sniff
            while block := fh.read(piece_bytes):
                yield sniff(block)
            sniff.finish()
            return
        decomp = decompressor()
        pending = head
        while True:
            # Bounded output per call: a compressed block can expand a lot (a bomb: 1000x).
            out = decomp.decompress(pending, piece_bytes)
            if out:
                yield sniff(out)
            pending = decomp.unconsumed_tail
            if decomp.eof:
                sniff.finish()
                if decomp.unused_data.strip(b"\x00") or fh.read(1):
                    raise TrailingData
                return
            if not pending:
                pending = fh.read(block_bytes)
                if not pending:
                    raise Truncated


class Fallback(Exception):
    """The text is not for the streaming reader (not a plain, complete Kineto object): the whole-file
    path reads it, and salvages and explains."""


def stream_pieces(path: Path, limits: LoadLimits | None = None) -> Iterator[bytes]:
    """The text as the streaming reader and its helper processes read it: :func:`pieces`, ``PIECE_BYTES``
    at a time; raises :class:`Fallback` if a gzip stream is incomplete or followed by more data."""
    try:
        yield from pieces(path, limits, PIECE_BYTES, BLOCK_BYTES)
    except Truncated:
        raise Fallback from None  # the whole-file path salvages it with a warning
    except TrailingData:
        raise Fallback from None  # concatenated gzip members: the whole-file path decides




class _Sniff:
    """Checks each piece as it passes: the first non-whitespace byte, and the running size."""

    def __init__(self, path: Path, limits: LoadLimits, file_bytes: int) -> None:
        self.path = path
        self.limits = limits
        self.allowed = limits.allowed_bytes(file_bytes)
        self.file_bytes = file_bytes
        self.total = 0
        self.started = False
        self.head: bytes | None = b""  # the first bytes while a byte-order mark could still be there

    def __call__(self, piece: bytes) -> bytes:
        if self.head is not None:  # the text's first bytes: a UTF-8 byte-order mark there is dropped
            piece, self.head = self.head + piece, None
            if len(piece) < len(UTF8_BOM) and UTF8_BOM.startswith(piece):
                self.head = piece  # a piece of 1-2 bytes (gzip output can be so small): wait for more
                return b""
            if piece.startswith(UTF8_BOM):
                piece = piece[len(UTF8_BOM):]
        self.total += len(piece)
        if self.total > self.allowed:
            raise too_large(self.path, self.limits, self.file_bytes)
        if not self.started:
            match = _NON_SPACE.search(piece)
            if match is not None:
                head = piece[match.start():match.start() + 4]
                if head[0] not in b"{[" or wide(head):
                    raise not_a_trace(self.path, head)
                self.started = True
        return piece

    def finish(self) -> None:
        if self.head:  # the whole text is one or two bytes of a byte-order mark: not text
            raise not_a_trace(self.path)
        if not self.started:
            raise TraceError(f"{self.path}: the file is empty; re-record the trace")


def _file_size(fh: Any) -> int:
    import os

    try:
        return os.fstat(fh.fileno()).st_size
    except OSError:
        return 0


def read_all(path: Path, limits: LoadLimits | None = None) -> tuple[bytes, list[str]]:
    """The whole decompressed text, for the whole-file path, and notes: a truncated gzip stream yields
    what it holds (with a note); bytes after the first gzip member are ignored, as zlib does."""
    parts: list[bytes] = []
    notes: list[str] = []
    try:
        for piece in pieces(path, limits):
            parts.append(piece)
    except (Truncated, TrailingData) as err:
        if isinstance(err, Truncated):
            if not parts:
                raise TraceError(
                    f"{path}: the gzip file is truncated before any data; re-copy or re-record the trace"
                ) from None
            notes.append(f"{path.name}: the {GZIP_TRUNCATED} ({_size(path):,} compressed bytes); salvaging what it holds")
    except inflate_errors() as err:
        raise TraceError(f"{path}: corrupt gzip data ({err}); re-copy or re-record the trace") from None
    data = b"".join(parts)
    del parts
    return data, notes


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


__all__ = [
    "GZIP_TRUNCATED", "Fallback", "LoadLimits", "Truncated", "TrailingData", "not_a_trace",
    "pieces", "read_all", "stream_pieces", "too_large", "too_many_events",
]  # fmt: skip
