"""Streaming reader for well-formed Kineto files: decompress and decode in ~1 MB runs of events, so the
whole decompressed text (87 MB for a 455k-event trace) never sits in memory at once.

How a run of events is cut: Kineto's ``traceEvents`` is one JSON array of objects. A candidate cut is a
``}`` followed by ``,`` and ``{`` (whitespace allowed). A cut inside an event (a nested list of objects,
or a string that happens to hold ``},{``) leaves a bracket or a string open, so the run fails to decode
and an earlier candidate is tried: a run that decodes always ends on a real event boundary.

Anything unusual — not an object with ``traceEvents``, a truncated or corrupt file, NaN literals,
concatenated gzip members — makes :func:`stream_load` return None, and the caller uses the whole-file
path, which salvages and explains. A file that is no trace at all, or past the load limits, stops here
with a one-line TraceError (:mod:`aiprof.trace.kineto.source`).

Work is linear in the text: a buffer with no decodable cut (one huge event, a run of whitespace) is
looked at again only once it has doubled, and the last run is decoded in place.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import msgspec

from aiprof.trace.cores import fork_safe, worker_count
from aiprof.trace.model import Trace
from aiprof.trace.kineto import source
from aiprof.trace.kineto.builder import HEADER_DECODER, Builder, RawTrace, typed_header
from aiprof.trace.kineto.parallel import Helper, Helpers, WorkerError, absorb
from aiprof.trace.kineto.schema import TraceFile
from aiprof.trace.kineto.source import Fallback, LoadLimits, too_many_events

CHUNK_BYTES = 1 << 20  # decompressed text decoded at a time (small: less memory per process, finer sharing)
MAX_PREFIX_BYTES = 64 << 20  # give up streaming if "traceEvents" is not found within this
MAX_CANDIDATES = 32
RETRY_CANDIDATES = 4  # cuts tried again once a buffer with no decodable cut has doubled

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*+,\s*+(?=\{)")
_ARRAY_END = re.compile(rb"\}\s*+\]")
# A cut's "}", "," and "{" lie at most this far apart: whitespace between two events beyond it (a
# hostile run of spaces) is no cut, and is not rescanned at every attempt; a later cut takes it along.
MAX_CUT_GAP = 4096
_NON_SPACE = re.compile(rb"[^ \t\r\n]")
_RUN_CHECK = msgspec.json.Decoder(list[msgspec.Raw])  # a run handed to a helper must be whole events


# Runs handed to the helpers by prime(), ~15 ms of their work while the reader imports (3, 6 and 10
# measured alike on 2 cores; more would leave the reader waiting at the end when the imports are quick).
PRIME_RUNS = 3


def _fallback_errors() -> tuple[type[BaseException], ...]:
    return (Fallback, OSError, msgspec.MsgspecError, BufferError, WorkerError, *source.inflate_errors())


_primed: dict[str, _Stream] = {}  # path → a load started by prime()


def prime(path: Path, runs: int = PRIME_RUNS, limits: LoadLimits | None = None) -> None:
    """Start loading ``path`` now, in the helpers only: fork them and hand them the first ``runs`` runs,
    then return. The load that :func:`stream_load` later does of the same path continues from there,
    so the helpers decode while this process does other work first (the CLI imports its analyses).
    Does nothing without helpers; anything unusual is left to the later load."""
    stream = _Stream(path, None, limits)
    try:
        stream.prime(runs)
    except _fallback_errors():
        stream.close()
        return
    except BaseException:  # Ctrl-C: stop the helpers too
        stream.close()
        raise
    if stream.helpers is None:
        stream.close()
        return
    _primed[os.path.realpath(path)] = stream  # taken over by a load of the same path under the same limits


def discard_primed() -> None:
    """Stop the helpers of every primed load that no load took over (the command ended first: an error,
    Ctrl-C during the imports): they are killed and reaped here, not left to outlive this process."""
    while _primed:
        _, stream = _primed.popitem()
        stream.close()


def stream_load(path: Path, rank: int = 0, rank_source: str = "file order", workers: int | None = None,
                limits: LoadLimits | None = None) -> Trace | None:
    """Load ``path`` by streaming, or return None when the whole-file path must handle it. ``workers``
    helper processes decode runs in parallel (default: :func:`aiprof.trace.cores.worker_count`); ``limits``:
    the load limits (None: the defaults)."""
    limits = limits or LoadLimits()
    stream = _primed.pop(os.path.realpath(path), None) if workers is None else None
    if stream is not None and stream.limits != limits:  # primed under other limits: start again under these
        stream.close()
        stream = None
    if stream is None:
        stream = _Stream(path, workers, limits)
    try:
        return stream.load(rank, rank_source)
    except _fallback_errors():
        return None
    finally:
        stream.close()


def _last_cuts(buf: bytearray, lo: int, limit: int) -> list[int]:
    """Positions of the last ``limit`` candidate cuts (``}`` then ``,`` then ``{``) at or after ``lo``,
    last first: a backward scan over ``}`` that stops as soon as it has enough (a forward regex scan of
    the window found thousands per call)."""
    found: list[int] = []
    end = len(buf)
    while len(found) < limit:
        pos = buf.rfind(b"}", lo, end)
        if pos < 0:
            break
        if _CUT.match(buf, pos, min(len(buf), pos + MAX_CUT_GAP)):
            found.append(pos)
        end = pos
    return found


class _Stream:
    def __init__(self, path: Path, workers: int | None = 0, limits: LoadLimits | None = None) -> None:
        self.path = path
        self.limits = limits or LoadLimits()
        self.buf = bytearray()
        self.builder = Builder(RawTrace([], TraceFile(), []), path)
        self.count = 0
        self.offset = 0  # where buf[0] is in the decompressed text
        self.run = 0  # runs of events handed out so far
        self.workers = workers  # None: as many as worker_count() says
        self.helpers: Helpers | None = None
        self.pieces: Iterator[bytes] | None = None
        self.prefix = b""
        self.priming = False
        self.opened = False  # the text's first non-whitespace byte has been seen (and is "{")
        self.retry_at = 0  # after a failed cut, the buffer length at which to try again
        self.work = 0  # bytes of buffer the scans faced, summed (linear in the text: see tests)

    def _start(self) -> Iterator[bytes]:
        if self.pieces is None:
            self.pieces = source.stream_pieces(self.path, self.limits)
            self.prefix = self._find_events(self.pieces)
        return self.pieces

    def prime(self, runs: int) -> None:
        """Hand the first ``runs`` runs to the helpers (none to this process)."""
        pieces = self._start()
        self.priming = True
        try:
            while self.run < runs:
                piece = next(pieces, None)
                if piece is None:
                    break
                self.buf += piece
                if len(self.buf) >= CHUNK_BYTES:
                    self._decode_complete_events()
        finally:
            self.priming = False

    def load(self, rank: int, rank_source: str) -> Trace:
        for piece in self._start():
            self.buf += piece
            if len(self.buf) >= CHUNK_BYTES:
                self._decode_complete_events()
        self._finish_array(self.prefix)
        if self.helpers is not None:
            absorb(self.builder, self.helpers.results())
        return self.builder.finish(rank, rank_source, self.count)

    def close(self) -> None:
        if self.helpers is not None:
            self.helpers.close()
            self.helpers = None

    def _owner(self) -> Helper | None:
        """Who decodes the next run: a helper process, or None for this one. Helpers start with the
        second run (a file of one run is not worth a process)."""
        if self.run == 0 and not self.priming:
            return None
        if self.workers is None:  # decided only for a file of more than one run
            self.workers = worker_count()
        if self.workers <= 0 or not fork_safe():  # an explicit count too: never fork under a sanitizer
            return None
        if self.helpers is None:
            self.helpers = Helpers(self.path, self.workers)
        return self.helpers.owner(self.run, helpers_only=self.priming)

    def _find_events(self, pieces: Iterator[bytes]) -> bytes:
        """Read until ``"traceEvents": [``; return the header text before it (ending in ``:``).

        Linear in the text read: the key is searched again only once the buffer has doubled since the
        last search (a header of megabytes of whitespace, or a huge field, is not rescanned per piece)."""
        search_at = 0  # buffer length at which to search again
        for piece in pieces:
            self.buf += piece
            if not self.opened:
                first = _NON_SPACE.search(self.buf, len(self.buf) - len(piece))
                if first is not None:
                    if self.buf[first.start()] != ord("{"):
                        raise Fallback  # a bare list: the whole-file path reads it
                    self.opened = True
            if len(self.buf) > MAX_PREFIX_BYTES:
                raise Fallback
            if len(self.buf) >= search_at:
                prefix = self._split_header()
                if prefix is not None:
                    return prefix
                search_at = 2 * len(self.buf)
        prefix = self._split_header() if search_at else None  # the text ended before the buffer doubled
        if prefix is None:
            raise Fallback
        return prefix

    def _split_header(self) -> bytes | None:
        """The header text before ``"traceEvents": [`` (dropped from the buffer), or None if not there."""
        self.work += len(self.buf)
        match = _EVENTS_KEY.search(self.buf)
        if match is None:
            return None
        prefix = bytes(self.buf[: match.end() - 1])
        del self.buf[: match.end() - 1]  # keep the "[": runs are decoded in place
        self.offset += match.end() - 1
        return prefix

    def _decode_complete_events(self) -> None:
        """Decode the longest decodable run of whole events at the front of the buffer.

        The buffer always starts with ``[``; the byte after the cut's ``}`` is overwritten with ``]`` for
        the decode and restored after, so the run is decoded in place, without a copy.

        Linear in the text: when no cut decodes (one huge event, a long run of whitespace), the buffer
        is not looked at again until it has doubled, so the work of all attempts sums to a few times the
        text, not the square of it (``work`` counts the bytes each attempt faces)."""
        if len(self.buf) < self.retry_at:
            return
        self.work += len(self.buf)
        limit = MAX_CANDIDATES if self.retry_at == 0 else RETRY_CANDIDATES
        for cut in _last_cuts(self.buf, 1, limit):
            if self._decode_in_place(cut + 1):
                comma = self.buf.index(b",", cut)
                # Drop the decoded run: deleting from the front is O(1) for a bytearray (a slice
                # after the "[" would move and shrink the buffer every time); the comma becomes "[".
                del self.buf[:comma]
                self.offset += comma
                self.buf[0] = ord("[")
                self.retry_at = 0
                self._check_count()
                return
        # No usable cut (one giant event, a run of whitespace): keep reading; the end of the array is
        # handled anyway.
        self.retry_at = 2 * len(self.buf)

    def _check_count(self) -> None:
        limit = self.limits.max_events
        if limit and self.count > limit:
            raise too_many_events(self.path, limit)

    def _decode_in_place(self, close_at: int) -> bool:
        saved = self.buf[close_at]
        self.buf[close_at] = ord("]")
        view = memoryview(self.buf)
        part = view[: close_at + 1]
        try:
            owner = self._owner()
            if owner is None:
                self.builder.run_index = self.run
                self.count += self.builder.feed_array(part)
            else:  # check the cut here (syntax only, fast); the helper does the real work
                self.count += len(_RUN_CHECK.decode(part))
                owner.submit(self.run, self.offset, self.offset + close_at + 1)
            self.run += 1
            return True
        except msgspec.DecodeError:
            return False
        finally:
            try:
                part.release()
                view.release()
            except BufferError:  # an interrupted decode (Ctrl-C) left events pointing into the run:
                pass  # let the interrupt through rather than this (the views go with those events)
            self.buf[close_at] = saved

    def _finish_array(self, prefix: bytes) -> None:
        """The buffer holds ``[``, the last events, ``]``, and the rest of the top-level object. The
        events are decoded in place (no copy of what may be a large buffer: one huge event)."""
        buf = self.buf
        # The array ends with "}" then "]" (or is empty: "]" first). Later header fields may hold many
        # other "]" (Kineto's INFO log lines): only the last of these candidates are tried, last first.
        ends = list(deque((m.end() - 1 for m in _ARRAY_END.finditer(buf, 1)), maxlen=4 * MAX_CANDIDATES))
        first = _NON_SPACE.search(buf, 1)
        if first is not None and buf[first.start()] == ord("]"):
            ends.insert(0, first.start())
        for end in reversed(ends[-4 * MAX_CANDIDATES :]):
            # Both sides must decode: a "]" that closes some other list (a later header field, an
            # event's "grid") leaves one side malformed. feed_array adds nothing unless it decodes.
            try:
                header = HEADER_DECODER.decode(prefix + b"[]" + bytes(buf[end + 1 :]))
                if _NON_SPACE.search(buf, 1, end) is not None:
                    self.builder.run_index = self.run
                    self.count += self._feed_until(end)
            except msgspec.MsgspecError:
                continue
            self.buf = bytearray()
            typed, notes = typed_header(header, self.path)
            self.builder.header = typed
            self.builder.warnings.extend(notes)
            self._check_count()
            return
        raise Fallback

    def _feed_until(self, end: int) -> int:
        """Decode ``buf[: end + 1]`` (``[``, events, ``]``) in place; return how many events."""
        view = memoryview(self.buf)
        part = view[: end + 1]
        try:
            return self.builder.feed_array(part)
        finally:
            try:
                part.release()
                view.release()
            except BufferError:  # an interrupted decode left events pointing into the buffer
                pass
