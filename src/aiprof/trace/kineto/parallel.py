"""Decoding one large trace file on several cores.

The streaming reader (:mod:`aiprof.trace.kineto.stream`) cuts the decompressed text into runs of whole
events (~1 MB each). With helpers, it deals the runs round-robin to itself and to forked helper processes,
each of which turns its runs into columns with its own :class:`~aiprof.trace.kineto.builder.Builder`.
At the end the helpers send back what they built and :func:`absorb` merges it into the reader's builder
so that the trace is *identical* to the one a single process builds: pieces, flows and process names
are put back in file order (every piece carries the number of its run), and strings are renumbered in
the order a single reader would have met them (every string remembers the run it was first seen in).

No text crosses between the processes: each helper decompresses the file itself (ISA-L inflates a
1 MB run in a fraction of a millisecond) and the reader tells it only which stretch of the decompressed
text each of its runs is (a 24-byte frame). The reader checks every run it hands out with a cheap
syntax-only decode, so a cut that falls inside an event is caught before it leaves the reader. A
helper that fails or dies makes the whole load fall back to the single-process whole-file path.

Helpers are forked (Linux, macOS): nothing is re-imported, and start-up costs a few milliseconds. How
many (:func:`aiprof.trace.cores.worker_count`): they share the cores with the pool that loads several
files at once (with as many files in flight as cores, there are none), are not used inside daemonic
processes, or where ``fork`` does not exist. ``AIPROF_DECODE_WORKERS`` sets their number (0 turns them
off); by default, one fewer than the usable cores, at most 3.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aiprof.heap import release_free_memory
from aiprof.interrupts import ignore_in_child, interrupts_held
from aiprof.trace.kineto.builder import Builder, FlowPart, Piece, RawTrace
from aiprof.trace.kineto.schema import TraceFile
from aiprof.trace.kineto.source import stream_pieces

PIPE_BYTES = 1 << 20  # pipe buffer asked for the results (Linux allows 1 MB without privileges)
_FRAME = struct.Struct("<qqq")  # run number (-1: no more runs), start and end in the decompressed text
_PID_BASE = -1000  # Builder._id: a string pid/tid ``"Spans"`` is ``-1000 - its string id``


class WorkerError(Exception):
    """A helper failed or died; the caller falls back to loading in one process."""


@dataclass
class BuilderState:
    """What a helper's builder made, sent back to the reader (pickled)."""

    strings: list[str]
    string_runs: list[int]
    meta: list[tuple[tuple[str, int, int], int, bytes]]  # (key, run, raw args), in insertion order
    flow_parts: list[tuple[int, FlowPart]]
    pieces: list[Piece]
    op_texts: list[bytes]  # distinct canonical op inputs, by the builder's id
    rows: int
    skipped: int
    skip_reason: str
    negative: int
    bad_time: int


def export_state(builder: Builder) -> BuilderState:
    strings = [""] * len(builder.strings)
    for text, index in builder.strings.items():
        strings[index] = text
    return BuilderState(
        strings=strings,
        string_runs=list(builder.string_runs),
        meta=[(key, run, raw) for key, (run, raw) in builder.meta.items()],
        flow_parts=list(builder.flow_parts),
        pieces=list(builder.pieces),
        op_texts=list(builder.op_texts),
        rows=builder.rows,
        skipped=builder.skipped,
        skip_reason=builder.skip_reason,
        negative=builder.negative,
        bad_time=builder.bad_time,
    )


def absorb(builder: Builder, others: list[BuilderState]) -> None:
    """Merge the helpers' states into ``builder`` as if it had read every run itself, in file order."""
    states = [export_state(builder), *others]
    # Strings in the order one reader meets them: by the run each builder first saw them in.
    seen = sorted((run, i, local) for i, st in enumerate(states) for local, run in enumerate(st.string_runs))
    table: dict[str, int] = {}
    runs: list[int] = []
    for run, i, local in seen:
        text = states[i].strings[local]
        if text not in table:
            table[text] = len(table)
            runs.append(run)
    remaps = [np.array([table[t] for t in st.strings], dtype=np.int64) for st in states]
    meta: list[tuple[int, int, int, tuple[str, int, int], bytes]] = []
    pieces: list[tuple[Piece, int]] = []  # (piece, index of its state)
    flow_parts: list[tuple[int, FlowPart]] = []
    for i, (st, remap) in enumerate(zip(states, remaps, strict=True)):
        for piece in st.pieces:
            cols = piece.cols
            if len(remap):
                cols["name"] = remap[cols["name"]].astype(np.int32)
                cols["cat"] = remap[cols["cat"]].astype(np.int32)
            for column in ("pid", "tid"):
                cols[column] = _remap_ids(cols[column], remap)
            pieces.append((piece, i))
        for seq, ((kind, pid, tid), run, raw) in enumerate(st.meta):
            key = (kind, _remap_id(pid, remap), _remap_id(tid, remap))
            meta.append((run, i, seq, key, raw))
        flow_parts += st.flow_parts
    meta.sort(key=lambda m: (m[0], m[1], m[2]))
    merged_meta: dict[tuple[str, int, int], tuple[int, bytes]] = {}
    for run, _, _, key, raw in meta:
        merged_meta.setdefault(key, (run, raw))
    pieces.sort(key=lambda p: p[0].run)  # stable: a run's pieces keep their order
    op_texts = _merge_op_texts(pieces, states)
    flow_parts.sort(key=lambda part: part[0])
    builder.strings, builder.string_runs = table, runs
    builder.meta, builder.pieces, builder.flow_parts = merged_meta, [p for p, _ in pieces], flow_parts
    builder.op_texts = op_texts
    builder.rows = sum(st.rows for st in states)
    builder.skipped = sum(st.skipped for st in states)
    builder.negative = sum(st.negative for st in states)
    builder.bad_time = sum(st.bad_time for st in states)
    builder.skip_reason = next((st.skip_reason for st in states if st.skip_reason), "")


def _merge_op_texts(pieces: list[tuple[Piece, int]], states: list[BuilderState]) -> dict[bytes, int]:
    """Number the distinct op inputs of all states as one reader would (in the order the pieces, in file
    order, first use them) and rewrite every piece's keys to those numbers.

    Each builder numbered its texts as it met them in its own pieces, which it built in file order: the
    ids a piece uses for the first time are the next ones of its builder, in the order the piece first
    uses them. So only each builder's distinct texts are looked up, once, not every piece's."""
    table: dict[bytes, int] = {}
    add = table.setdefault
    maps = [np.full(len(st.op_texts), -1, dtype=np.int64) for st in states]
    known = [0] * len(states)  # per builder: its ids below this are mapped
    for piece, i in pieces:
        if len(piece.op_keys) == 0:
            continue
        keys = np.asarray(piece.op_keys, dtype=np.int64)
        top = int(keys.max()) + 1
        if top > known[i]:
            texts = states[i].op_texts
            maps[i][known[i] : top] = [add(texts[k], len(table)) for k in range(known[i], top)]
            known[i] = top
        piece.op_keys = maps[i][keys]
    return table


def _remap_id(value: int, remap: np.ndarray) -> int:
    local = _PID_BASE - value
    return _PID_BASE - int(remap[local]) if 0 <= local < len(remap) else value


def _remap_ids(values: np.ndarray, remap: np.ndarray) -> np.ndarray:
    local = _PID_BASE - values
    named = (local >= 0) & (local < len(remap))
    if not named.any():
        return values
    out = values.copy()
    out[named] = _PID_BASE - remap[local[named]]
    return out


# ---------------------------------------------------------------------------------------------------
# The helper processes
# ---------------------------------------------------------------------------------------------------
def _read_exact(fd: int, size: int) -> bytearray:
    out = bytearray(size)
    view = memoryview(out)
    got = 0
    while got < size:
        n = os.readv(fd, [view[got:]])
        if n == 0:
            raise EOFError("the reader closed the pipe")
        got += n
    return out


class _Replay:
    """The helper's own copy of the decompressed text, read forward as its runs ask for it."""

    def __init__(self, path: Path) -> None:
        self.pieces: Iterator[bytes] = stream_pieces(path)
        self.buf = bytearray()
        self.base = 0  # offset of buf[0] in the decompressed text

    def _more(self) -> None:
        piece = next(self.pieces, None)
        if piece is None:
            raise EOFError("the decompressed text ended before the run")
        self.buf += piece

    def feed(self, builder: Builder, start: int, end: int) -> None:
        """Decode the run at ``[start, end)``: ``,{…},…,{…}`` followed by one byte, turned into a JSON
        array in place (first byte ``[``, last ``]``) as the reader does."""
        while self.base + len(self.buf) <= start:  # everything held comes before the run
            self.base += len(self.buf)
            self.buf = bytearray()
            self._more()
        del self.buf[: start - self.base]
        self.base = start
        while len(self.buf) < end - start:
            self._more()
        close = end - start - 1
        saved = self.buf[0], self.buf[close]
        self.buf[0], self.buf[close] = ord("["), ord("]")
        view = memoryview(self.buf)
        try:
            builder.feed_array(view[: close + 1])
        finally:
            view.release()
            self.buf[0], self.buf[close] = saved


def _helper_main(runs_fd: int, out_fd: int, path: Path, inherited: list[Helper]) -> None:
    """In the helper: decode each run named on ``runs_fd`` (framed: run number, start, end) from its own
    decompression of the file; at run -1, send the state back on ``out_fd``. ``inherited``: the
    reader's side of the helpers started before (and its own pipe's write end), closed here: if the
    reader dies, the helper then sees the end of its pipe instead of waiting forever."""
    ignore_in_child()  # Ctrl-C is the reader's to handle: it stops the helpers
    for other in inherited:
        other.forget()
    builder = Builder(RawTrace([], TraceFile(), []), path)
    failure = ""
    text = _Replay(path)
    while True:
        run, start, end = _FRAME.unpack(_read_exact(runs_fd, _FRAME.size))
        if run < 0:
            break
        if failure:
            continue  # keep draining so the reader never blocks on a full pipe
        try:
            builder.run_index = run
            text.feed(builder, start, end)
        except Exception as err:  # reported to the reader, which falls back to one process
            failure = f"{type(err).__name__}: {err}"
    text.buf = bytearray()
    os.close(runs_fd)
    try:
        if failure:
            _send(out_fd, ("error", failure))
            return
        # The state goes back a piece at a time, each freed once sent: the helper never holds its
        # columns twice (built and pickled), and the heap it no longer needs goes back to the OS first.
        state = export_state(builder)
        state.flow_parts = [(run, _packed(part)) for run, part in state.flow_parts]
        pieces, state.pieces = state.pieces, []
        builder.pieces = []
        release_free_memory()
        _send(out_fd, ("ok", state, len(pieces)))
        pieces.reverse()
        while pieces:
            _send(out_fd, pieces.pop())
    finally:
        os.close(out_fd)


_LENGTH = struct.Struct("<Q")


def _send(fd: int, obj: object) -> None:
    """One pickled message: its length, then the pickle (written whole)."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _receive(fd: int) -> Any:
    (size,) = _LENGTH.unpack(_read_exact(fd, _LENGTH.size))
    return pickle.loads(_read_exact(fd, size))


def _packed(part: FlowPart) -> FlowPart:
    """A flow part as arrays (one buffer each to pickle instead of a list of Python objects). Id columns
    stay lists where the reader's ``Builder._ids`` would not take them as int64 as they are (string or
    out-of-range ids: the reader numbers those itself, in file order)."""
    ids, starts, fwdbwd, pids, tids, ts = part
    return (
        _int64_or_list(ids), np.array(starts, dtype=bool), np.array(fwdbwd, dtype=bool),
        _int64_or_list(pids), _int64_or_list(tids), np.array(ts, dtype=np.float64),
    )  # fmt: skip


def _int64_or_list(values: list[Any]) -> Any:
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):  # the same conversion, and failures, as Builder._ids
        return values


def _widen_pipe(fd: int) -> None:
    """Linux: a 1 MB pipe for the results (64 kB by default: 16× more round trips between the processes)."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass


class Helper:
    """One helper process, forked. The reader names each run it hands over in a 24-byte frame on a pipe
    (one atomic ``write``; the pipe holds thousands, so the reader never waits for a busy helper); the
    helper decompresses the text itself. Results come back, pickled, on a second pipe."""

    def __init__(self, path: Path, inherited: list[Helper]) -> None:
        runs_read, self.fd = os.pipe()
        self.results_fd, results_write = os.pipe()
        _widen_pipe(results_write)
        self.failed = ""
        self.finished = False
        self.pid = os.fork()
        if self.pid == 0:  # the helper: never returns into the reader's code
            code = 1
            try:
                os.close(self.fd)
                os.close(self.results_fd)
                _helper_main(runs_read, results_write, path, inherited)
                code = 0
            finally:
                os._exit(code)
        os.close(runs_read)
        os.close(results_write)

    def _write(self, frame: bytes) -> None:
        if self.failed:
            return
        try:
            os.write(self.fd, frame)  # shorter than PIPE_BUF: written whole or not at all
        except OSError as err:  # the helper died
            self.failed = f"helper process exited ({err})"

    def submit(self, run: int, start: int, end: int) -> None:
        """Hand over run ``run``, the decompressed text's bytes ``[start, end)``."""
        self._write(_FRAME.pack(run, start, end))

    def result(self) -> BuilderState:
        self._write(_FRAME.pack(-1, 0, 0))
        if self.failed:
            raise WorkerError(self.failed)
        try:
            status, payload, *count = _receive(self.results_fd)
            if status != "ok":
                raise WorkerError(str(payload))
            state: BuilderState = payload
            state.pieces = [_receive(self.results_fd) for _ in range(count[0])]
        except (EOFError, OSError, pickle.UnpicklingError) as err:
            raise WorkerError(f"helper process exited ({err or 'no result'})") from err
        self.finished = True  # all sent: the helper exits by itself
        return state

    def forget(self) -> None:
        """In a helper forked later: close the reader's ends of this helper's pipes (copies)."""
        os.close(self.fd)
        os.close(self.results_fd)

    def close(self) -> None:
        """Reap the helper (it exits after sending its state); kill it first unless its whole state was
        received (the load was abandoned, or interrupted while the helper still had results to send:
        waiting for it then would wait forever on a helper blocked writing into a full pipe)."""
        if not self.finished:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        os.close(self.fd)
        os.close(self.results_fd)


class Helpers:
    """The helper processes of one load: runs are dealt round-robin to the reader and the ``n`` helpers
    (the reader's extra work, cutting and checking every run, about matches what a helper spends on
    decompressing the text itself and sending its state back)."""

    def __init__(self, path: Path, count: int) -> None:
        self.helpers: list[Helper] = []
        try:
            for _ in range(count):
                with interrupts_held():  # no Ctrl-C between the fork and the list: every helper is stopped
                    self.helpers.append(Helper(path, list(self.helpers)))
        except BaseException:
            self.close()
            raise

    def owner(self, run: int, helpers_only: bool = False) -> Helper | None:
        """Who decodes run ``run``: a helper, or None for the reader itself (never with
        ``helpers_only``: the runs dealt while the reader is busy elsewhere, see ``stream.prime``)."""
        if helpers_only:
            return self.helpers[run % len(self.helpers)]
        slot = run % (len(self.helpers) + 1)
        return None if slot == 0 else self.helpers[slot - 1]

    def results(self) -> list[BuilderState]:
        return [helper.result() for helper in self.helpers]

    def close(self) -> None:
        for helper in self.helpers:
            helper.close()
