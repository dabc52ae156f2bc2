"""Read an allocator snapshot's pickle without building a dict per trace entry.

A snapshot of 1 GiB holds millions of ``device_traces`` entries; :func:`pickle.load` builds every one as a
dict (about 6 GiB of Python objects) before aiprof sees the first. This module walks the pickle's opcodes
itself and fills NumPy columns straight from the bytes:

* a small pickle machine (:class:`_Machine`, plain Python) runs everything but the trace entries (segments,
  settings, annotations) and the entries of an unusual shape; it knows only plain-data opcodes of protocols
  4 and 5 (dicts, lists, tuples, strings, numbers, ``None``, booleans, the memo and frames), never resolves a
  class, and gives up (:class:`Unsupported`) on anything else;
* where a device's list of entries starts an element, :class:`_Scanner` reads a window (8 MiB) of the
  pickle with NumPy: every position that starts like an entry (``EMPTY_DICT MEMOIZE MARK``) is a
  candidate; the first candidate not yet explained is parsed in Python into a :class:`_Shape` (its byte
  layout: ``key value`` pairs whose keys are memo references and whose values are integers, memo
  references, memoized short strings, ``None`` or the frames list of memo references, up to
  ``SETITEMS``), and every candidate whose fixed bytes agree (compared 8 at a time) is that layout with
  other values, which are read from the same words. Consecutive entries that chain exactly (one ends where
  the next starts, or after ``APPENDS MARK`` or a ``FRAME`` that continues the frame chain) and whose
  references resolve (keys and the action to strings, frames to frame dicts already in the memo, or the
  frames value to a list) become a :class:`Run` of columns in place of their dicts.
* where it is built, the native scan (``_snapscan.c``, :func:`_native`) does the window's candidate finding,
  layout checking and value reading in one C pass, with the layouts still parsed here (and reused from window
  to window); it fills the same columns the NumPy loop would, which stays as the fallback (``AIPROF_NATIVE=0``).

Anything else (another protocol, ``PUT`` opcodes, a reference to an object only a run created, a value of an
unexpected type, an opcode that would edit a run, truncation) raises :class:`Unsupported`, and the caller
reads the file with the plain no-classes unpickler instead, so the answer never differs. Stacks keep the
pickle's frame dicts: a run holds its distinct frames lists as lists of the very dict objects the unpickler
would share, so stacks are interned exactly as before.
"""

from __future__ import annotations

import bisect
import mmap
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from aiprof.arrays import unique
from aiprof.memory.model import SNAPSHOT_ACTIONS, Action

WINDOW = 8 << 20  # bytes parsed by NumPy at once
MAX_KEYS = 16  # an entry with more keys than this is left to the machine
MAX_FRAMES = 256  # a frames list longer than this is left to the machine
MAX_SHAPES = 1024  # entry layouts tried per window (a layout that fails counts too)
MAX_KNOWN = 256  # layouts the native scan carries from window to window
_TIME_LIMIT = 1 << 53  # time_us * 1000 must fit in int64


class Unsupported(Exception):
    """The pickle holds something this reader does not handle: use the plain unpickler."""


@dataclass
class Run:
    """Consecutive well-formed trace entries of one device, as columns (stand-in for their dicts)."""

    t_ns: npt.NDArray[np.int64]
    addr: npt.NDArray[np.int64]
    size: npt.NDArray[np.int64]
    stream: npt.NDArray[np.int64]
    action: npt.NDArray[np.int8]
    rows: npt.NDArray[np.int64]  # per entry: row in ``stacks`` (first-appearance order)
    stacks: list[list[Any]]  # the distinct frame lists (frame dicts), in order of first appearance


class _Hole:
    """A memo slot filled by a run (an entry dict, its frames list, a skipped string): never readable."""


HOLE = _Hole()

# value kinds the scanner records
_K_INT, _K_REF, _K_STR, _K_NONE, _K_LIST = 1, 2, 3, 4, 5
_KEY_ACTION, _KEY_ADDR, _KEY_SIZE, _KEY_STREAM, _KEY_TIME, _KEY_FRAMES = range(6)
_NEEDED = {"action": _KEY_ACTION, "addr": _KEY_ADDR, "size": _KEY_SIZE, "stream": _KEY_STREAM,
           "time_us": _KEY_TIME, "frames": _KEY_FRAMES}
_OTHER_KEY = 6


class _Shape:
    """The byte layout of one entry: which bytes are fixed (opcodes, key references, lengths) and where
    each value lies. Every candidate whose fixed bytes agree is the same shape with other values."""

    def __init__(self, raw: bytes) -> None:
        """Parse the entry at the start of ``raw`` (:class:`ValueError` when it is not of the usual shape)."""
        fixed = bytearray(len(raw))  # 1 where the byte must match
        self.slots: list[tuple[int, int, int, int, bool]] = []  # (key memo index, kind, offset, width, signed)
        self.frames: list[tuple[int, int]] = []  # (offset, width) of each frames-list reference
        self.memo_inc = 1
        self.list_off = 0
        self.list_slot = -1
        self.frame_at = -1  # offset of a FRAME opcode inside the entry (before an object), -1 none
        if raw[:3] != b"}\x94(":
            raise ValueError("start")
        fixed[0:3] = b"\x01\x01\x01"
        p = 3
        while True:
            p = self._frame(raw, fixed, p)
            op = raw[p]
            if op == 0x75:
                fixed[p] = 1
                p += 1
                break
            if len(self.slots) >= MAX_KEYS:
                raise ValueError("keys")
            if op == 0x68:
                key, fixed[p:p + 2], p = raw[p + 1], b"\x01\x01", p + 2
            elif op == 0x6A:
                key, fixed[p:p + 5], p = int.from_bytes(raw[p + 1:p + 5], "little"), b"\x01" * 5, p + 5
            else:
                raise ValueError("key")
            p = self._frame(raw, fixed, p)
            op = raw[p]
            fixed[p] = 1
            if op == 0x4B:
                self.slots.append((key, _K_INT, p + 1, 1, False))
                p += 2
            elif op == 0x4D:
                self.slots.append((key, _K_INT, p + 1, 2, False))
                p += 3
            elif op == 0x4A:
                self.slots.append((key, _K_INT, p + 1, 4, True))
                p += 5
            elif op == 0x8A:
                n = raw[p + 1]
                if not 1 <= n <= 8:
                    raise ValueError("long")
                fixed[p + 1] = 1
                self.slots.append((key, _K_INT, p + 2, n, True))
                p += 2 + n
            elif op == 0x68:
                self.slots.append((key, _K_REF, p + 1, 1, False))
                p += 2
            elif op == 0x6A:
                self.slots.append((key, _K_REF, p + 1, 4, False))
                p += 5
            elif op == 0x8C:
                n = raw[p + 1]
                if raw[p + 2 + n] != 0x94:
                    raise ValueError("str")
                fixed[p + 1] = fixed[p + 2 + n] = 1
                self.slots.append((key, _K_STR, p, 0, False))
                self.memo_inc += 1
                p += 3 + n
            elif op == 0x4E:
                self.slots.append((key, _K_NONE, p, 0, False))
                p += 1
            elif op == 0x5D and raw[p + 1] == 0x94 and self.list_slot < 0:
                fixed[p + 1] = 1
                self.list_slot = len(self.slots)
                self.slots.append((key, _K_LIST, p, 0, False))
                self.list_off = self.memo_inc
                self.memo_inc += 1
                p += 2
                p = self._refs(raw, fixed, p)
            else:
                raise ValueError("value")
        self.length = p
        self.raw = raw[:p]
        self.fixed = bytes(fixed[:p])
        self._plan()

    def _plan(self) -> None:
        """Cover the fixed bytes and every value with 8-byte words, each value inside one word: a candidate
        is checked, and its values read, from those words alone. ``words``: (offset, mask, wanted bits);
        ``reads``: per slot, (word, byte shift) or None; ``first``: the word checked first (the last fixed
        byte's: layouts differ mostly in length, so it rejects the other layouts at once)."""
        spans = [(i, i + 1) for i, f in enumerate(self.fixed) if f]
        spans += [(off, off + width) for _, _, off, width, _ in self.slots if width]
        starts: list[int] = []
        for lo, hi in sorted(spans):
            if not (starts and starts[-1] <= lo and hi <= starts[-1] + 8):
                starts.append(lo)
        self.words: list[tuple[int, int, int]] = []
        for w in starts:
            mask = 0
            for k in range(8):
                if w + k < self.length and self.fixed[w + k]:
                    mask |= 0xFF << (8 * k)
            want = int.from_bytes(self.raw[w:w + 8].ljust(8, b"\0"), "little") & mask
            self.words.append((w, mask, want))
        self.reads: list[tuple[int, int] | None] = []
        for _, _, off, width, _ in self.slots:
            if not width:
                self.reads.append(None)
                continue
            k = max(i for i, w in enumerate(starts) if w <= off and off + width <= w + 8)
            self.reads.append((k, off - starts[k]))
        last_fixed = max(i for i, f in enumerate(self.fixed) if f)
        self.first = max(i for i, w in enumerate(starts) if w <= last_fixed < w + 8)

    def aligned(self, span: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
        """The fixed bytes as 8-byte words from the entry's start, padded to ``span``: (masks, values)."""
        mask = np.frombuffer(bytes(0xFF if f else 0 for f in self.fixed).ljust(span, b"\0"), dtype="<u8")
        want = np.frombuffer(self.raw.ljust(span, b"\0"), dtype="<u8") & mask
        return mask, want

    def _frame(self, raw: bytes, fixed: bytearray, p: int) -> int:
        """Past a FRAME opcode at ``p`` (the pickler commits frames before an object), if one stands there."""
        if raw[p] != 0x95:
            return p
        if self.frame_at >= 0:
            raise ValueError("two frames")
        self.frame_at = p
        fixed[p] = 1
        return p + 9

    def _refs(self, raw: bytes, fixed: bytearray, p: int) -> int:
        """The frames list's references after ``] \\x94``: none, ``ref a``, or ``( ref ... e``."""
        marked = raw[p] == 0x28
        if marked:
            fixed[p] = 1
            p += 1
        while True:
            p = self._frame(raw, fixed, p)
            op = raw[p]
            if op == 0x68:
                width = 1
            elif op == 0x6A:
                width = 4
            elif marked and op == 0x65 and self.frames:
                fixed[p] = 1
                return p + 1
            else:
                if marked or self.frames:
                    raise ValueError("list")
                return p  # "] \x94": an empty list
            fixed[p] = 1
            self.frames.append((p + 1, width))
            p += 1 + width
            if not marked:
                if raw[p] != 0x61:  # a single reference is followed by APPEND; else it was the next key
                    self.frames.pop()
                    return p - 1 - width
                fixed[p] = 1
                return p + 1
            if len(self.frames) > MAX_FRAMES:
                raise ValueError("frames")


class _Window:
    """Entries parsed from every ``}\\x94(`` position in ``[start, start + WINDOW)``, structure only.

    Candidates are grouped by :class:`_Shape` (taken from the first candidate not yet matched, checked on
    all with 8-byte words); per candidate and per ``key value`` slot: the key's memo index, the value's kind
    and integer (or memo index), and the frames list's memo indices. A ``FRAME`` opcode between two entries
    is recorded on the second (position and length: :meth:`_Scanner.run` checks that frames chain)."""

    def __init__(self, buf: Any, start: int, size: int,
                 known: list[tuple[_Shape, tuple[Any, ...]]] | None = None) -> None:
        """``known``: layouts learned in earlier windows, for the native scan (a fresh list when None)."""
        known = [] if known is None else known
        stop = min(size, start + WINDOW + (1 << 20))
        self.start = start
        self.limit = min(size, start + WINDOW)
        a = np.frombuffer(buf, dtype=np.uint8, count=stop - start, offset=start)
        n = a.size
        self.a = a
        self.last = n - 1
        words = np.ndarray((max(n - 7, 0),), dtype="<u8", buffer=a, strides=(1,)) if n >= 8 else np.zeros(0, "<u8")
        self.shapes: list[_Shape] = []
        native = _native()
        if native is not None:
            cand, ok, end, inner_pos, inner_len, shape_id, stack_of = self._match_native(native, buf, start, stop, known)
            m = cand.size
        else:
            if n > 3:
                hits = np.flatnonzero(a[: min(n, self.limit - start + 2)] == 0x7D)
                hits = hits[hits < n - 2]
                cand = hits[(a[hits + 1] == 0x94) & (a[hits + 2] == 0x28)]
            else:
                cand = np.zeros(0, np.int64)
            cand = cand[cand < self.limit - start].astype(np.int64)
            m = cand.size
            self.starts = cand + start
            self.ival = np.zeros((MAX_KEYS, m), dtype=np.int64)
            self.memo_inc = np.ones(m, dtype=np.int64)
            self.list_off = np.zeros(m, dtype=np.int64)
            ok = np.zeros(m, dtype=bool)
            end = np.zeros(m, dtype=np.int64)
            self._ids: dict[tuple[int, ...], int] = {}
            stack_of = np.full(m, -1, dtype=np.int64)  # the inline frames list, as an id into stack_refs
            blocks: dict[int, Any] = {}  # the window as overlapping records of N bytes, one per byte position
            inner_pos = np.full(m, -1, dtype=np.int64)
            inner_len = np.zeros(m, dtype=np.int64)
            shape_id = np.full(m, -1, dtype=np.int32)
            todo = np.arange(m)
            attempts = 0
            while todo.size and attempts < MAX_SHAPES:
                attempts += 1
                c = int(cand[todo[0]])
                try:
                    shape = _Shape(bytes(a[c:c + 4096]))
                except (ValueError, IndexError):
                    todo = todo[1:]
                    continue
                # check the word holding the last fixed byte on every candidate left, then the others on the few
                # that pass; the values are read from the same words
                live = np.flatnonzero(cand[todo] + shape.length + 8 <= n)
                w0, mask0, want0 = shape.words[shape.first]
                live = live[(words[cand[todo[live]] + w0] & np.uint64(mask0)) == np.uint64(want0)]
                if not live.size:
                    todo = todo[1:]
                    continue
                base = cand[todo[live]]
                span = (shape.length + 15) // 8 * 8  # every word of the layout lies inside
                live = live[base + span <= n]
                base = base[base + span <= n]
                if span not in blocks:
                    blocks[span] = np.ndarray((n - span + 1,), dtype=f"V{span}", buffer=a, strides=(1,))
                entry = blocks[span][base].view(np.uint8).reshape(-1, span)  # each candidate's bytes, one gather
                mask, want = shape.aligned(span)
                hit = ((entry.view("<u8") & mask) == want).all(axis=1)  # every fixed byte, 8 at a time
                if not hit.any():
                    todo = todo[1:]
                    continue
                if not hit.all():
                    live, base, entry = live[hit], base[hit], np.ascontiguousarray(entry[hit])
                got = [np.ndarray((base.size,), dtype="<u8", buffer=entry, offset=w, strides=(span,))
                       for w, _, _ in shape.words]
                rows = todo[live]
                keep_todo = np.ones(todo.size, dtype=bool)
                keep_todo[live] = False
                todo = todo[keep_todo]
                ok[rows] = True
                shape_id[rows] = len(self.shapes)
                self.shapes.append(shape)
                end[rows] = base + shape.length
                if shape.frame_at >= 0:
                    inner_pos[rows] = base + shape.frame_at
                    inner_len[rows] = _word(words, base + shape.frame_at + 1, 8, False)
                self.memo_inc[rows] = shape.memo_inc
                self.list_off[rows] = shape.list_off
                for step, (key, kind, off, width, signed) in enumerate(shape.slots):
                    read = shape.reads[step]
                    if read is not None:
                        self.ival[step, rows] = _bits(got[read[0]], read[1], width, signed)
                if shape.frames:
                    self._stacks_of(a, entry, shape, rows, base, stack_of)
                elif shape.list_slot >= 0:
                    stack_of[rows] = self._stack_id(())
            self.stack_refs = [refs for refs, _ in sorted(self._ids.items(), key=lambda kv: kv[1])]
        self.stack_max = np.array([max(r, default=-1) for r in self.stack_refs] + [-1], dtype=np.int64)
        # a candidate inside an entry that parsed is no entry (a string or number that looks like one)
        if m > 1:
            reach = np.maximum.accumulate(np.where(ok, end, 0))
            covered = np.zeros(m, dtype=bool)
            covered[1:] = cand[1:] < reach[:-1]
            keep = ~covered
            if not keep.all():
                cand, ok, end = cand[keep], ok[keep], end[keep]
                inner_pos, inner_len, shape_id = inner_pos[keep], inner_len[keep], shape_id[keep]
                self.starts = self.starts[keep]
                self.ival = self.ival[:, keep]
                self.memo_inc, self.list_off, stack_of = self.memo_inc[keep], self.list_off[keep], stack_of[keep]
                m = cand.size
        self.shape_id = shape_id
        self.stack_of = stack_of
        self.frame_pos = np.where(inner_pos >= 0, inner_pos + start, -1)
        self.frame_len = inner_len
        self.ends = end + start
        # entries chain when the next starts where one ends, or after "e (" (a new APPENDS batch), or after a
        # FRAME (then recorded on the next entry) before it or before the "("
        chained = np.zeros(m, dtype=bool)
        if m > 1:
            direct = end[:-1] == cand[1:]
            gap = np.flatnonzero(~direct)  # few: the batch ends and frames between entries
            e, s = end[:-1][gap], cand[1:][gap]
            batch = (e + 2 == s) & (self._at(e) == 0x65) & (self._at(e + 1) == 0x28)
            framed = (self._at(e) == 0x95) & (e + 9 == s)
            framed_batch = (self._at(e) == 0x65) & (self._at(e + 1) == 0x28) & (self._at(e + 2) == 0x95) & (e + 11 == s)
            fpos = np.where(framed, e, e + 2)
            either = framed | framed_batch
            either &= inner_pos[1:][gap] < 0  # one FRAME per entry at most
            rows = gap[either] + 1
            self.frame_pos[rows] = fpos[either] + start
            self.frame_len[rows] = _word(words, fpos[either] + 1, 8, False) if words.size else 0
            chained[:-1] = direct
            chained[gap] = batch | either
        self.ok = ok & (end + 8 <= n)
        self.chained = chained & self.ok
        del self.a

    def _match_native(self, native: Any, buf: Any, start: int, stop: int,
                      known: list[tuple[_Shape, tuple[Any, ...]]]) -> tuple[Any, ...]:
        """The NumPy loop's results from the native scan (``_snapscan.c``): the same candidates, layouts
        (in the same order), values and stack ids, per candidate in one pass over the bytes. ``known``: the
        layouts earlier windows learned (with their specs for the scan), which it reuses where they match
        (the same layout as a new parse would give, without parsing again); new ones are added to it."""
        a = self.a

        def learn(c: int) -> tuple[_Shape, tuple[Any, ...]] | None:
            try:
                shape = _Shape(bytes(a[c:c + 4096]))
            except (ValueError, IndexError):
                return None
            span = (shape.length + 15) // 8 * 8
            mask, want = shape.aligned(span)
            slots = [(off, width, signed) for _, _, off, width, signed in shape.slots]
            spec = (shape.length, mask.tobytes(), want.tobytes(), slots, list(shape.frames), shape.frame_at,
                    shape.memo_inc, shape.list_off, shape.list_slot >= 0)
            if len(known) < MAX_KNOWN:
                known.append((shape, spec))
            return shape, spec

        m = native.count(buf, start, stop, self.limit)
        cand, end, inner_len = np.zeros(m, np.int64), np.zeros(m, np.int64), np.zeros(m, np.int64)
        self.memo_inc, self.list_off = np.ones(m, np.int64), np.zeros(m, np.int64)
        inner_pos, stack_of = np.full(m, -1, np.int64), np.full(m, -1, np.int64)
        shape_id = np.full(m, -1, np.int32)
        self.ival = np.zeros((MAX_KEYS, m), np.int64)  # rows no layout uses are never touched
        flat, offs = native.scan(buf, start, stop, self.limit, learn, self.shapes, known, cand, end, self.memo_inc,
                                 self.list_off, inner_pos, inner_len, stack_of, shape_id, self.ival)
        self.starts = cand + start
        refs = np.frombuffer(flat, np.int64).tolist()
        bounds = np.frombuffer(offs, np.int64).tolist()
        self.stack_refs = [tuple(refs[bounds[k]:bounds[k + 1]]) for k in range(len(bounds) - 1)]
        return cand, shape_id >= 0, end, inner_pos, inner_len, shape_id, stack_of

    def _stack_id(self, refs: tuple[int, ...]) -> int:
        return self._ids.setdefault(refs, len(self._ids))

    def _stacks_of(self, a: Any, entry: Any, shape: _Shape, rows: Any, base: Any, stack_of: Any) -> None:
        """Each matched entry's frames list as a stack id: the lists' bytes are compared, and only the
        distinct ones are decoded."""
        lo = shape.frames[0][0] - 1
        hi = shape.frames[-1][0] + shape.frames[-1][1]
        width = (hi - lo + 7) // 8 * 8
        region = np.zeros((rows.size, width), dtype=np.uint8)
        region[:, : hi - lo] = entry[:, lo:hi]
        words = region.view("<u8")
        # one 64-bit hash per list, then a check that every list equals its group's first (else exact)
        mixed = np.zeros(rows.size, dtype=np.uint64)
        for k in range(words.shape[1]):
            mixed = (mixed ^ words[:, k]) * np.uint64(0x9E3779B97F4A7C15 - 2 * k)
            mixed ^= mixed >> np.uint64(29)
        _, first, inverse = np.unique(mixed, return_index=True, return_inverse=True)
        inverse = inverse.ravel()
        if not np.array_equal(words, words[first[inverse]]):
            _, first, inverse = np.unique(region.view(np.dtype((np.void, width))).ravel(),
                                          return_index=True, return_inverse=True)
        ids = np.empty(first.size, dtype=np.int64)
        for k, row in enumerate(first.tolist()):
            c = int(base[row])
            raw = bytes(a[c: c + hi])
            refs = tuple(int.from_bytes(raw[off:off + width], "little") for off, width in shape.frames)
            ids[k] = self._stack_id(refs)
        stack_of[rows] = ids[inverse.ravel()]

    def run_span(self, pos: int) -> tuple[int, int]:
        """Entries ``[i, j)`` that are well formed and chain from ``pos``; (0, 0) when none."""
        i = int(np.searchsorted(self.starts, pos))
        if i >= self.starts.size or self.starts[i] != pos or not self.ok[i]:
            return 0, 0
        breaks = np.flatnonzero(~self.chained[i:])  # a break after entry k ends the run with k, if k is ok
        j = i + (int(breaks[0]) + 1 if breaks.size else self.starts.size - i)
        return i, (i + int(np.argmin(self.ok[i:j])) if not self.ok[i:j].all() else j)

    def _at(self, q: Any) -> Any:
        return self.a[np.minimum(q, self.last)]


def _bits(word: Any, shift: int, width: int, signed: bool) -> Any:
    """Little-endian integers of ``width`` bytes starting ``shift`` bytes into each 8-byte ``word``."""
    v = word >> np.uint64(8 * shift) if shift else word
    if width < 8:
        v = v & np.uint64((1 << (8 * width)) - 1)
        if signed:
            top = np.uint64(1 << (8 * width - 1))
            return (v ^ top).view(np.int64) - np.int64(1 << (8 * width - 1))
    return v.view(np.int64)


def _word(words: Any, at: Any, width: int, signed: bool) -> Any:
    """Little-endian integers of ``width`` bytes at byte positions ``at`` (two's complement if ``signed``)."""
    v = words[np.minimum(at, words.size - 1)]
    if width < 8:
        v = v & np.uint64((1 << (8 * width)) - 1)
        if signed:
            top = np.uint64(1 << (8 * width - 1))
            return (v ^ top).view(np.int64) - np.int64(1 << (8 * width - 1))
    return v.view(np.int64)


def _native() -> Any:
    """The native window scan (``_snapscan.c``), or None: not built, or ``AIPROF_NATIVE=0``."""
    from aiprof.native import optional

    return optional("aiprof.memory._snapscan")


def _sort_key(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``values`` as a key that sorts the same: offsets from the minimum as uint16 when they fit (NumPy's
    stable sort of 16-bit keys is a radix sort), else the values."""
    if values.size and int(values.max()) - int(values.min()) < (1 << 16):
        key: npt.NDArray[Any] = (values - values.min()).astype(np.uint16)
        return key
    return values


def _distinct(values: npt.NDArray[Any]) -> list[int]:
    """Sorted distinct values of an integer array (``np.unique(values).tolist()``), by counting when their
    range is small (a run's action references and stack ids span a few values), else by sorting."""
    if values.size == 0:
        return []
    lo, hi = int(values.min()), int(values.max())
    if hi - lo <= 4 * values.size + 1024:
        counted: list[int] = (np.flatnonzero(np.bincount(values - lo)) + lo).tolist()
        return counted
    ordered: list[int] = unique(values).tolist()
    return ordered


def _distinct_first(values: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """``np.unique(values, return_index=True, return_inverse=True)`` for a 1-D integer array (the same stable
    order, so the same first indices), with a radix sort when the values span < 65536."""
    n = values.size
    perm = np.argsort(_sort_key(values), kind="stable")
    ordered = values[perm]
    change = np.empty(n, dtype=bool)
    if n:
        change[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=change[1:])
    inverse = np.empty(n, dtype=np.intp)
    inverse[perm] = np.cumsum(change) - 1
    return ordered[change], perm[change], inverse


class _Scanner:
    """Turns runs of well-formed entries into :class:`Run` columns, resolving references against the memo."""

    def __init__(self, buf: Any, size: int) -> None:
        self.buf = buf
        self.size = size
        self.window: _Window | None = None
        self.known: list[tuple[_Shape, tuple[Any, ...]]] = []  # layouts learned so far, for the native scan

    def run(self, pos: int, frame_end: int, memo: dict[int, Any], memo_len: int,
            lists: _Lists, cut: int | None = None) -> tuple[Run, int, int, int] | None:
        """The run starting at ``pos``: (columns, end position, memo slots it filled, the pickle frame's end
        after it), or None."""
        w = self.window
        if w is None or not (w.start <= pos < w.limit):
            self.window = None
            if hasattr(self.buf, "madvise") and pos > (1 << 24):  # the bytes behind are done with
                self.buf.madvise(mmap.MADV_DONTNEED, 0, (pos - (1 << 23)) & ~(mmap.PAGESIZE - 1))
            w = self.window = _Window(self.buf, pos, self.size, self.known)
        i, j = w.run_span(pos)
        if j <= i:
            return None
        if cut is not None:
            j = i + cut
        ival = w.ival[:, i:j]
        inc = w.memo_inc[i:j]
        memo_at = memo_len + np.concatenate([[0], np.cumsum(inc)[:-1]])  # memo size when each entry starts
        n = j - i
        bad = np.zeros(n, dtype=bool)
        cols = {key: np.zeros(n, dtype=np.int64) for key in range(6)}
        inline = np.zeros(n, dtype=bool)
        sid = w.shape_id[i:j]
        by_shape = np.argsort(_sort_key(sid), kind="stable")
        grouped = sid[by_shape]
        cuts = np.flatnonzero(np.concatenate([[True], grouped[1:] != grouped[:-1]])) if n else np.zeros(0, np.intp)
        present = grouped[cuts]
        cuts = np.append(cuts, n)
        for k, u in enumerate(present.tolist()):
            rows = by_shape[cuts[k]:cuts[k + 1]]
            slot_of = self._slots(w.shapes[u], memo)  # per needed key, its slot; None: not a trace entry
            if slot_of is None:
                bad[rows] = True
                continue
            shape = w.shapes[u]
            at = memo_at[rows]
            # every key, and every reference in a value of another key, names an object made before
            refs = [key for key, _, _, _, _ in shape.slots]
            late = np.zeros(rows.size, dtype=bool)
            if refs:
                late |= max(refs) >= at
            for slot, (key, kind, _, _, _) in enumerate(shape.slots):
                if kind == _K_REF and slot not in slot_of.values():
                    late |= ival[slot, rows] >= at
            bad[rows[late]] = True
            for key, slot in slot_of.items():
                cols[key][rows] = ival[slot, rows]
            inline[rows] = shape.slots[slot_of[_KEY_FRAMES]][1] == _K_LIST
        # the action: a memo reference to one of the known action strings (not "oom": it carries more)
        act_ref = cols[_KEY_ACTION]
        action = np.full(n, -1, dtype=np.int64)
        for idx in _distinct(act_ref):
            name = memo.get(int(idx), HOLE)
            known = SNAPSHOT_ACTIONS.get(name) if isinstance(name, str) else None
            if known is None or known == Action.OOM:
                continue
            action[act_ref == idx] = int(known)
        bad |= action < 0
        t = cols[_KEY_TIME]
        bad |= (t >= _TIME_LIMIT) | (t <= -_TIME_LIMIT)
        # inline frames lists: references to frame dicts already in the memo
        sids = w.stack_of[i:j]
        bad |= inline & (w.stack_max[sids] >= memo_at)
        for u in _distinct(sids[inline]):
            if not all(isinstance(memo.get(f, HOLE), dict) for f in w.stack_refs[u]):
                bad |= inline & (sids == u)
        # FRAME opcodes inside the run must chain: each at the end of the frame before, entries inside frames
        fpos = w.frame_pos[i:j]
        has = fpos >= pos
        at_f = np.flatnonzero(has)
        nxt = fpos[at_f] + 9 + w.frame_len[i:j][at_f]
        if at_f.size:
            expect = np.concatenate([[frame_end], nxt[:-1]])
            good_f = fpos[at_f] == expect
            if frame_end == self.size:  # outside any frame: the first FRAME may stand anywhere
                good_f[0] = True
            if not good_f.all():
                bad[int(at_f[int(np.argmin(good_f))]):] = True
        count = np.cumsum(has)
        fe_after = np.where(count == 0, frame_end, nxt[np.maximum(count - 1, 0)] if nxt.size else frame_end)
        ends = w.ends[i:j]
        bad |= ends > fe_after
        bad = np.logical_or.accumulate(bad)
        if bad[0]:
            return None
        if bad.any():
            n = int(np.argmax(bad))
        sids, inline, t, action, inc = sids[:n], inline[:n], t[:n], action[:n], inc[:n]
        fref = cols[_KEY_FRAMES][:n]
        # distinct inline lists, in order of first appearance
        rows_in = np.flatnonzero(inline)
        uniq_in, first_in, inv_in = _distinct_first(sids[rows_in])
        made = [[memo[f] for f in w.stack_refs[u]] for u in uniq_in.tolist()]
        list_memo = (memo_at[:n] + w.list_off[i:i + n])[rows_in]
        # referenced lists: made by the machine, an earlier run, or this run
        rows_ref = np.flatnonzero(~inline)
        uref, first_ref, inv_ref = _distinct_first(fref[rows_ref])
        referred: list[Any] = []
        stop = n
        for k, idx in enumerate(uref.tolist()):
            got = memo.get(idx, HOLE)
            if got is HOLE:
                here = int(np.searchsorted(list_memo, idx))
                if here < list_memo.size and list_memo[here] == idx and rows_in[here] < rows_ref[first_ref[k]]:
                    got = made[int(inv_in.ravel()[here])]
                else:
                    got = lists.get(idx)
            if type(got) is not list or id(got) in lists.forbidden:
                stop = min(stop, int(rows_ref[first_ref[k]]))
            referred.append(got)
        if stop < n:  # a reference to something that is not a list: parse again, shorter (rare)
            if stop == 0:
                return None
            return self.run(pos, frame_end, memo, memo_len, lists, stop)
        firsts = np.concatenate([rows_in[first_in], rows_ref[first_ref]])
        order = np.argsort(firsts, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        group = np.empty(n, dtype=np.int64)
        group[rows_in] = rank[inv_in.ravel()]
        group[rows_ref] = rank[first_in.size + inv_ref.ravel()]
        every = made + referred
        stacks = [every[o] for o in order.tolist()]
        run = Run(
            t_ns=t * 1000, addr=cols[_KEY_ADDR][:n].copy(), size=cols[_KEY_SIZE][:n].copy(),
            stream=cols[_KEY_STREAM][:n].copy(), action=action.astype(np.int8), rows=group, stacks=stacks,
        )
        lists.add(list_memo, group[rows_in], stacks)
        return run, int(ends[n - 1]), int(inc.sum()), int(fe_after[n - 1])


    @staticmethod
    def _slots(shape: _Shape, memo: dict[int, Any]) -> dict[int, int] | None:
        """Which slot of ``shape`` holds each needed key, when the keys are strings in the memo, each needed
        key comes once, and its value has the right kind (ints; the action a reference; the frames a list
        or a reference); else None."""
        slot_of: dict[int, int] = {}
        for slot, (key, kind, _, _, _) in enumerate(shape.slots):
            name = memo.get(key, HOLE)
            if not isinstance(name, str):
                return None
            need = _NEEDED.get(name)
            if need is None:
                continue
            if need in slot_of:
                return None
            want = (_K_LIST, _K_REF) if need == _KEY_FRAMES else (_K_REF,) if need == _KEY_ACTION else (_K_INT,)
            if kind not in want:
                return None
            slot_of[need] = slot
        return slot_of if len(slot_of) == len(_NEEDED) else None


class _Lists:
    """Frames lists that runs created (memo slot -> the list), for later references to them."""

    def __init__(self) -> None:
        self.forbidden: set[int] = set()  # the trace lists: a reference to one is never read (they hold runs)
        self.firsts: list[int] = []
        self.parts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], list[list[Any]]]] = []

    def add(self, slots: npt.NDArray[np.int64], groups: npt.NDArray[np.int64], stacks: list[list[Any]]) -> None:
        if slots.size:
            self.firsts.append(int(slots[0]))
            self.parts.append((slots, groups.astype(np.int32), stacks))

    def get(self, idx: int) -> Any:
        k = bisect.bisect_right(self.firsts, idx) - 1
        if k < 0:
            return HOLE
        slots, groups, stacks = self.parts[k]
        at = int(np.searchsorted(slots, idx))
        if at < slots.size and slots[at] == idx:
            return stacks[int(groups[at])]
        return HOLE


_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct(">d")


class _Machine:
    """A pickle machine for plain data (protocols 4 and 5), with trace entries read by :class:`_Scanner`."""

    def __init__(self, buf: Any, size: int) -> None:
        self.buf = buf
        self.size = size
        self.scanner = _Scanner(buf, size)
        self.lists = _Lists()

    def load(self) -> Any:
        buf, size = self.buf, self.size
        if size < 2 or buf[0] != 0x80 or buf[1] not in (4, 5):
            raise Unsupported("protocol")
        pos = 2
        frame_end = size
        stack: list[Any] = []
        marks: list[int] = []
        memo: dict[int, Any] = {}
        memo_len = 0
        traces_outer: list[Any] | None = None
        device_lists: set[int] = set()
        after_run = False
        scanner = self.scanner
        while True:
            if pos >= frame_end:
                if pos > frame_end:
                    raise Unsupported("an opcode crosses a frame")
                frame_end = size
            if pos >= size:
                raise Unsupported("truncated")
            op = buf[pos]
            pos += 1
            if after_run:  # a run stands for several entries: only another entry, the batch's end or a frame
                if op not in (0x7D, 0x65, 0x95):  # may follow (as pickle writes them), never a stack edit
                    raise Unsupported("an opcode that would edit a run")
                after_run = op == 0x95
            if op == 0x7D:  # EMPTY_DICT
                if marks and device_lists and (len(stack) == marks[-1] or type(stack[-1]) in (dict, Run)) \
                        and marks[-1] > 0 and id(stack[marks[-1] - 1]) in device_lists:
                    got = scanner.run(pos - 1, frame_end, memo, memo_len, self.lists)
                    if got is not None:
                        run, pos, filled, frame_end = got
                        memo_len += filled
                        stack.append(run)
                        after_run = True
                        continue
                stack.append({})
            elif op == 0x94:  # MEMOIZE
                if len(stack) <= (marks[-1] if marks else 0):
                    raise Unsupported("MEMOIZE of nothing")
                memo[memo_len] = stack[-1]
                memo_len += 1
            elif op == 0x28:  # MARK
                marks.append(len(stack))
            elif op == 0x68:  # BINGET
                stack.append(self._get(memo, buf[pos], memo_len))
                pos += 1
            elif op == 0x6A:  # LONG_BINGET
                stack.append(self._get(memo, _U32.unpack_from(buf, pos)[0], memo_len))
                pos += 4
            elif op == 0x8C:  # SHORT_BINUNICODE
                n = buf[pos]
                stack.append(str(buf[pos + 1:pos + 1 + n], "utf-8", "surrogatepass"))
                if pos + 1 + n > size:
                    raise Unsupported("truncated")
                pos += 1 + n
            elif op == 0x75:  # SETITEMS
                mark = marks.pop()
                items = stack[mark:]
                del stack[mark:]
                if mark - 1 < (marks[-1] if marks else 0):
                    raise Unsupported("SETITEMS without a dict")
                target = stack[-1]
                if type(target) is not dict or len(items) % 2:
                    raise Unsupported("SETITEMS")
                for k in range(0, len(items), 2):
                    target[items[k]] = items[k + 1]
            elif op == 0x73:  # SETITEM
                if len(stack) - (marks[-1] if marks else 0) < 3:
                    raise Unsupported("SETITEM")
                value = stack.pop()
                key = stack.pop()
                if type(stack[-1]) is not dict:
                    raise Unsupported("SETITEM")
                stack[-1][key] = value
            elif op == 0x5D:  # EMPTY_LIST
                new: list[Any] = []
                if traces_outer is None and marks == [1] and len(stack) % 2 == 0 and type(stack[0]) is dict \
                        and stack[-1] == "device_traces":
                    traces_outer = new
                    self.lists.forbidden.add(id(new))
                elif traces_outer is not None and stack and (stack[-1] is traces_outer or (
                        marks and marks[-1] >= 1 and stack[marks[-1] - 1] is traces_outer
                        and (len(stack) == marks[-1] or id(stack[-1]) in device_lists))):
                    device_lists.add(id(new))
                    self.lists.forbidden.add(id(new))
                stack.append(new)
            elif op == 0x65:  # APPENDS
                mark = marks.pop()
                items = stack[mark:]
                del stack[mark:]
                if mark - 1 < (marks[-1] if marks else 0) or type(stack[-1]) is not list:
                    raise Unsupported("APPENDS")
                stack[-1].extend(items)
            elif op == 0x61:  # APPEND
                if len(stack) - (marks[-1] if marks else 0) < 2:
                    raise Unsupported("APPEND")
                value = stack.pop()
                if type(stack[-1]) is not list:
                    raise Unsupported("APPEND")
                stack[-1].append(value)
            elif op == 0x4B:  # BININT1
                stack.append(buf[pos])
                pos += 1
            elif op == 0x4D:  # BININT2
                stack.append(buf[pos] | buf[pos + 1] << 8)
                pos += 2
            elif op == 0x4A:  # BININT
                stack.append(_I32.unpack_from(buf, pos)[0])
                pos += 4
            elif op == 0x8A:  # LONG1
                n = buf[pos]
                if pos + 1 + n > size:
                    raise Unsupported("truncated")
                stack.append(int.from_bytes(buf[pos + 1:pos + 1 + n], "little", signed=True))
                pos += 1 + n
            elif op == 0x95:  # FRAME
                if frame_end != size and pos - 1 != frame_end:
                    raise Unsupported("frame")
                n = _U64.unpack_from(buf, pos)[0]
                pos += 8
                frame_end = pos + n
                if frame_end > size:
                    raise Unsupported("truncated")
            elif op == 0x4E:  # NONE
                stack.append(None)
            elif op == 0x88:  # NEWTRUE
                stack.append(True)
            elif op == 0x89:  # NEWFALSE
                stack.append(False)
            elif op == 0x47:  # BINFLOAT
                stack.append(_F64.unpack_from(buf, pos)[0])
                pos += 8
            elif op == 0x58:  # BINUNICODE
                n = _U32.unpack_from(buf, pos)[0]
                if pos + 4 + n > size:
                    raise Unsupported("truncated")
                stack.append(str(buf[pos + 4:pos + 4 + n], "utf-8", "surrogatepass"))
                pos += 4 + n
            elif op == 0x29:  # EMPTY_TUPLE
                stack.append(())
            elif op in (0x85, 0x86, 0x87) and len(stack) - (marks[-1] if marks else 0) < op - 0x84:
                raise Unsupported("TUPLE of nothing")
            elif op == 0x85:  # TUPLE1
                stack[-1] = (stack[-1],)
            elif op == 0x86:  # TUPLE2
                stack[-2:] = [tuple(stack[-2:])]
            elif op == 0x87:  # TUPLE3
                stack[-3:] = [tuple(stack[-3:])]
            elif op == 0x74:  # TUPLE
                mark = marks.pop()
                items = stack[mark:]
                del stack[mark:]
                stack.append(tuple(items))
            elif op == 0x30:  # POP
                if len(stack) <= (marks[-1] if marks else 0):
                    raise Unsupported("POP of a mark")
                stack.pop()
            elif op == 0x2E:  # STOP
                if len(stack) != 1 or marks:
                    raise Unsupported("STOP")
                return stack[0]
            else:
                raise Unsupported(f"opcode {op:#x}")

    def _get(self, memo: dict[int, Any], idx: int, memo_len: int) -> Any:
        got = memo.get(idx, HOLE)
        if got is HOLE and idx < memo_len:
            got = self.lists.get(idx)
        if got is HOLE or id(got) in self.lists.forbidden:
            raise Unsupported("a reference to a run's object or to a trace list")
        return got


def load_streaming(path: Any) -> Any:
    """The snapshot object with each device's entries as dicts and :class:`Run` s (:class:`Unsupported` when
    the pickle is not one this reader handles)."""
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        if size < 2:
            raise Unsupported("empty")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            machine = _Machine(mm, size)
            try:
                return machine.load()
            except Unsupported:
                raise
            except (IndexError, struct.error, TypeError, ValueError, KeyError, UnicodeDecodeError, MemoryError,
                    RecursionError) as err:
                raise Unsupported(type(err).__name__) from None
            finally:
                machine.scanner.window = None
                del machine
