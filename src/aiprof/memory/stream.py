"""Read an allocator snapshot's pickle without building a dict per trace entry.

A snapshot of 1 GiB holds millions of ``device_traces`` entries; :func:`pickle.load` builds every one as a
dict (about 6 GiB of Python objects) before aiprof sees the first. This module walks the pickle's opcodes
itself and fills NumPy columns straight from the bytes:

* a small pickle machine (:class:`_Machine`, plain Python) runs everything but the trace entries (segments,
  settings, annotations) and the entries of an unusual shape; it knows only plain-data opcodes of protocols
  4 and 5 (dicts, lists, tuples, strings, numbers, ``None``, booleans, the memo and frames), never resolves a
  class, and gives up (:class:`Unsupported`) on anything else;
* where a device's list of entries starts an element, :class:`_Scanner` parses a window of the pickle with
  NumPy: every position that starts like an entry (``EMPTY_DICT MEMOIZE MARK``) is parsed as a run of
  ``key value`` pairs (keys are memo references, values are integers, memo references, short strings,
  ``None`` or a list of memo references, the frames) until ``SETITEMS``. Consecutive entries that chain
  exactly (one ends where the next starts, inside the current pickle frame) and whose references resolve
  (keys, the action string, frame dicts) become a :class:`Run` of columns in place of the dicts.

Anything else (another protocol, ``PUT`` opcodes, a reference to an object only a run created, a value of an
unexpected type, truncation) raises :class:`Unsupported`, and the caller reads the file with the plain
no-classes unpickler instead, so the answer never differs. Stacks keep the pickle's frame dicts: a run
holds, per entry, a row of frame memo indices, resolved to the same dict objects the unpickler would share.
"""

from __future__ import annotations

import bisect
import mmap
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from aiprof.memory.model import SNAPSHOT_ACTIONS, Action

WINDOW = 8 << 20  # bytes parsed by NumPy at once
MAX_KEYS = 16  # an entry with more keys than this is left to the machine
MAX_FRAMES = 256  # a frames list longer than this is left to the machine
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


class _Window:
    """Entries parsed from every ``}\\x94(`` position in ``[start, start + WINDOW)``, structure only."""

    def __init__(self, buf: Any, start: int, size: int) -> None:
        stop = min(size, start + WINDOW + (1 << 20))
        self.start = start
        self.limit = min(size, start + WINDOW)
        a = np.frombuffer(buf, dtype=np.uint8, count=stop - start, offset=start)
        n = a.size
        cand = np.flatnonzero((a[:-2] == 0x7D) & (a[1:-1] == 0x94) & (a[2:] == 0x28)) if n > 3 else np.zeros(0, np.int64)
        cand = cand[cand < self.limit - start]
        self.starts = cand + start
        m = cand.size
        ok = np.ones(m, dtype=bool)
        end = np.zeros(m, dtype=np.int64)
        p = cand + 3
        alive = np.ones(m, dtype=bool)
        last = n - 1

        def at(q: npt.NDArray[np.int64], k: int = 0) -> npt.NDArray[np.int64]:
            return a[np.minimum(q + k, last)].astype(np.int64)

        def word(q: npt.NDArray[np.int64], width: int) -> npt.NDArray[np.int64]:
            v = np.zeros(q.size, dtype=np.int64)
            for k in range(width):
                v |= at(q, k) << (8 * k)
            return v

        def ref(q: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
            op = at(q)
            short = op == 0x68
            long_ = op == 0x6A
            idx = np.where(short, at(q, 1), word(q + 1, 4))
            return idx, np.where(short, 2, 5), short | long_

        self.keys = np.full((MAX_KEYS, m), -1, dtype=np.int64)
        self.kind = np.zeros((MAX_KEYS, m), dtype=np.int8)
        self.ival = np.zeros((MAX_KEYS, m), dtype=np.int64)
        self.memo_inc = np.ones(m, dtype=np.int64)  # the entry dict's MEMOIZE
        self.frames = np.full((m, 0), -1, dtype=np.int64)
        seen_list = np.zeros(m, dtype=bool)
        self.list_off = np.zeros(m, dtype=np.int64)  # the frames list's memo slot, from the entry's first
        for step in range(MAX_KEYS):
            if not alive.any():
                break
            op = at(p)
            done = alive & (op == 0x75)  # SETITEMS closes the entry
            end[done] = p[done] + 1
            alive &= ~done
            kidx, klen, kok = ref(p)
            ok &= ~alive | kok
            alive &= kok
            self.keys[step] = np.where(alive, kidx, -1)
            p = np.where(alive, p + klen, p)
            op = at(p)
            kind = np.zeros(m, dtype=np.int8)
            length = np.zeros(m, dtype=np.int64)
            val = np.zeros(m, dtype=np.int64)
            # integers
            k1, k2, k4, kl = op == 0x4B, op == 0x4D, op == 0x4A, op == 0x8A
            nl = at(p, 1)
            kl &= (nl >= 1) & (nl <= 8)
            val = np.where(k1, at(p, 1), val)
            val = np.where(k2, word(p + 1, 2), val)
            j4 = word(p + 1, 4)
            val = np.where(k4, np.where(j4 >= 1 << 31, j4 - (1 << 32), j4), val)
            if kl.any():
                lv = np.zeros(m, dtype=np.uint64)
                for k in range(8):
                    lv |= np.where(k < nl, at(p, 2 + k), 0).astype(np.uint64) << np.uint64(8 * k)
                bits = (8 * np.clip(nl, 1, 8)).astype(np.uint64)
                neg = (lv >> (bits - np.uint64(1))) & np.uint64(1)
                full = bits == 64
                shifted = np.where(full, np.uint64(0), np.uint64(1) << np.where(full, np.uint64(0), bits))
                signed = np.where((neg == 1) & ~full, lv - shifted, lv).view(np.int64)
                val = np.where(kl, signed, val)
            length = np.where(k1, 2, np.where(k2, 3, np.where(k4, 5, np.where(kl, 2 + nl, 0))))
            kind[k1 | k2 | k4 | kl] = _K_INT
            # a memo reference
            ridx, rlen, rok = ref(p)
            val = np.where(rok, ridx, val)
            length = np.where(rok, rlen, length)
            kind[rok] = _K_REF
            # a short string, memoized (skipped: the keys that matter never hold one)
            sstr = (op == 0x8C) & (at(p, 2 + at(p, 1)) == 0x94) & alive
            length = np.where(sstr, 3 + at(p, 1), length)
            kind[sstr] = _K_STR
            self.memo_inc += sstr
            none = op == 0x4E
            length = np.where(none, 1, length)
            kind[none] = _K_NONE
            # a new list of memo references (the frames): ] \x94 then nothing, ref a, or ( refs e
            lst = (op == 0x5D) & (at(p, 1) == 0x94) & alive
            if lst.any():
                rows_idx = np.flatnonzero(lst)
                q = p[rows_idx] + 2
                out = np.full((rows_idx.size, MAX_FRAMES), -1, dtype=np.int64)
                live = np.ones(rows_idx.size, dtype=bool)
                good = np.ones(rows_idx.size, dtype=bool)
                width = 0
                o = at(q)
                marked = o == 0x28
                si, sl, sk = ref(q)
                single = sk & (at(q + sl) == 0x61)  # one element: ref then APPEND (else "] \x94": empty)
                q = np.where(marked, q + 1, q)
                if single.any():
                    out[single, 0] = si[single]
                    q = np.where(single, q + sl + 1, q)
                    width = 1
                live = marked.copy()
                k = 0
                while live.any():
                    if k >= MAX_FRAMES:
                        good &= ~live
                        break
                    o = at(q)
                    fin = live & (o == 0x65)
                    q = np.where(fin, q + 1, q)
                    live &= ~fin
                    ri, rl, rk = ref(q)
                    good &= ~live | rk
                    live &= rk
                    out[live, k] = ri[live]
                    q = np.where(live, q + rl, q)
                    k += 1
                    width = max(width, k)
                good &= ~(marked & (out[:, 0] < 0))  # "( e": an empty batch the pickler never writes
                full_rows = np.full((m, max(width, 1)), -1, dtype=np.int64)
                full_rows[rows_idx] = out[:, : max(width, 1)]
                if self.frames.shape[1] == 0:
                    self.frames = full_rows
                else:
                    self.frames = np.where(lst[:, None], _widen(full_rows, self.frames.shape[1]), _widen(self.frames, full_rows.shape[1]))
                length[rows_idx] = q - p[rows_idx]
                bad_list = np.zeros(m, dtype=bool)
                bad_list[rows_idx] = ~good
                kind[lst & ~bad_list] = _K_LIST
                self.list_off = np.where(lst, self.memo_inc, self.list_off)
                self.memo_inc += lst
                ok &= ~(lst & seen_list)  # one list per entry (the frames)
                seen_list |= lst
            kind[~alive] = 0
            ok &= ~alive | (kind > 0)
            alive &= kind > 0
            self.kind[step] = kind
            self.ival[step] = val
            p = np.where(alive, p + length, p)
        ok &= ~alive  # still open after MAX_KEYS pairs
        ok &= end <= n  # not past the parsed bytes
        self.ends = end + start
        self.ok = ok
        # where a chain of entries must stop: a bad entry, or the next entry does not start where this ends
        chained = np.zeros(m, dtype=bool)
        if m > 1:
            chained[:-1] = self.ends[:-1] == self.starts[1:]
        self.chained = chained & ok

    def run_span(self, pos: int, frame_end: int) -> tuple[int, int]:
        """Entries ``[i, j)`` that chain from ``pos`` and end inside the frame; (0, 0) when none."""
        i = int(np.searchsorted(self.starts, pos))
        if i >= self.starts.size or self.starts[i] != pos or not self.ok[i]:
            return 0, 0
        breaks = np.flatnonzero(~self.chained[i:])  # a break after entry k ends the run with k, if k is ok
        j = i + (int(breaks[0]) + 1 if breaks.size else self.starts.size - i)
        j = i + int(np.argmin(self.ok[i:j])) if not self.ok[i:j].all() else j
        j = i + int(np.searchsorted(self.ends[i:j], frame_end, side="right"))
        return i, j


def _widen(rows: npt.NDArray[np.int64], width: int) -> npt.NDArray[np.int64]:
    if rows.shape[1] >= width:
        return rows
    out = np.full((rows.shape[0], width), -1, dtype=np.int64)
    out[:, : rows.shape[1]] = rows
    return out


class _Scanner:
    """Turns runs of well-formed entries into :class:`Run` columns, resolving references against the memo."""

    def __init__(self, buf: Any, size: int) -> None:
        self.buf = buf
        self.size = size
        self.window: _Window | None = None

    def run(self, pos: int, frame_end: int, memo: dict[int, Any], memo_len: int,
            lists: _Lists) -> tuple[Run, int, int] | None:
        """The run starting at ``pos``: (columns, end position, memo slots it filled), or None."""
        w = self.window
        if w is None or not (w.start <= pos < w.limit):
            self.window = None
            if hasattr(self.buf, "madvise") and pos > (1 << 24):  # the bytes behind are done with
                self.buf.madvise(mmap.MADV_DONTNEED, 0, (pos - (1 << 23)) & ~(mmap.PAGESIZE - 1))
            w = self.window = _Window(self.buf, pos, self.size)
        i, j = w.run_span(pos, frame_end)
        if j <= i:
            return None
        keys = w.keys[:, i:j]
        kind = w.kind[:, i:j]
        ival = w.ival[:, i:j]
        inc = w.memo_inc[i:j]
        memo_at = memo_len + np.concatenate([[0], np.cumsum(inc)[:-1]])  # memo size when each entry starts
        n = j - i
        cols_n = np.arange(n)
        bad = np.zeros(n, dtype=bool)
        # keys: every reference must name a string already in the memo
        code = np.full(keys.shape, -1, dtype=np.int64)
        present = keys >= 0
        for idx in np.unique(keys[present]).tolist():
            name = memo.get(idx, HOLE)
            if not isinstance(name, str):
                bad |= (keys == idx).any(axis=0)
                continue
            code[keys == idx] = _NEEDED.get(name, _OTHER_KEY)
        bad |= (present & (keys >= memo_at)).any(axis=0)
        cols: dict[int, npt.NDArray[np.int64]] = {}
        fkind = np.zeros(n, dtype=np.int8)
        for key in range(6):
            hit = code == key
            count = hit.sum(axis=0)
            bad |= count != 1
            step = np.argmax(hit, axis=0)
            knd = kind[step, cols_n]
            cols[key] = ival[step, cols_n]
            if key == _KEY_FRAMES:
                fkind = knd
                bad |= (knd != _K_LIST) & (knd != _K_REF)
            elif key == _KEY_ACTION:
                bad |= knd != _K_REF
            else:
                bad |= knd != _K_INT
        # other keys may hold anything the scanner parsed; their references must exist already
        other_ref = (code == _OTHER_KEY) & (kind == _K_REF)
        bad |= (other_ref & (ival >= memo_at)).any(axis=0)
        # the action: a memo reference to one of the known action strings (not "oom": it carries more)
        act_ref = cols[_KEY_ACTION]
        action = np.full(n, -1, dtype=np.int64)
        for idx in np.unique(act_ref).tolist():
            name = memo.get(int(idx), HOLE)
            known = SNAPSHOT_ACTIONS.get(name) if isinstance(name, str) else None
            if known is None or known == Action.OOM:
                continue
            action[act_ref == idx] = int(known)
        bad |= action < 0
        t = cols[_KEY_TIME]
        bad |= (t >= _TIME_LIMIT) | (t <= -_TIME_LIMIT)
        inline = fkind == _K_LIST
        # inline frames lists: references to frame dicts already in the memo
        frames = w.frames[i:j]
        used = (frames >= 0) & inline[:, None]
        bad |= (used & (frames >= memo_at[:, None])).any(axis=1)
        for idx in np.unique(frames[used]).tolist():
            if not isinstance(memo.get(idx, HOLE), dict):
                bad |= (frames == idx).any(axis=1)
        if bad[0]:
            return None
        if bad.any():
            n = int(np.argmax(bad))
        frames, inline, t, action, inc = frames[:n], inline[:n], t[:n], action[:n], inc[:n]
        fref = cols[_KEY_FRAMES][:n]
        # distinct inline lists, in order of first appearance
        rows_in = np.flatnonzero(inline)
        width = max(frames.shape[1], 1)
        view = np.ascontiguousarray(frames[rows_in]).view(np.dtype((np.void, 8 * width))).ravel()
        _, first_in, inv_in = np.unique(view, return_index=True, return_inverse=True)
        made = [[memo[f] for f in frames[rows_in[k]].tolist() if f >= 0] for k in first_in.tolist()]
        list_memo = (memo_at[:n] + w.list_off[i:i + n])[rows_in]
        # referenced lists: made by the machine, an earlier run, or this run
        rows_ref = np.flatnonzero(~inline)
        uref, first_ref, inv_ref = np.unique(fref[rows_ref], return_index=True, return_inverse=True)
        referred: list[Any] = []
        cut = n
        for k, idx in enumerate(uref.tolist()):
            got = memo.get(idx, HOLE)
            if got is HOLE:
                here = int(np.searchsorted(list_memo, idx))
                if here < list_memo.size and list_memo[here] == idx and rows_in[here] < rows_ref[first_ref[k]]:
                    got = made[int(inv_in.ravel()[here])]
                else:
                    got = lists.get(idx)
            if type(got) is not list:
                cut = min(cut, int(rows_ref[first_ref[k]]))
            referred.append(got)
        if cut < n:
            if cut == 0:
                return None
            return self._again(pos, frame_end, memo, memo_len, lists, cut)
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
        return run, int(w.ends[i + n - 1]), int(inc.sum())

    def _again(self, pos: int, frame_end: int, memo: dict[int, Any], memo_len: int, lists: _Lists,
               count: int) -> tuple[Run, int, int] | None:
        """The run from ``pos`` cut to its first ``count`` entries (parsed again: rare)."""
        w = self.window
        assert w is not None
        i, _ = w.run_span(pos, frame_end)
        saved = w.chained[i + count - 1]
        w.chained[i + count - 1] = False
        try:
            return self.run(pos, frame_end, memo, memo_len, lists)
        finally:
            w.chained[i + count - 1] = saved


class _Lists:
    """Frames lists that runs created (memo slot -> the list), for later references to them."""

    def __init__(self) -> None:
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
            if op == 0x7D:  # EMPTY_DICT
                if marks and device_lists and (len(stack) == marks[-1] or type(stack[-1]) in (dict, Run)) \
                        and marks[-1] > 0 and id(stack[marks[-1] - 1]) in device_lists:
                    got = scanner.run(pos - 1, frame_end, memo, memo_len, self.lists)
                    if got is not None:
                        run, pos, filled = got
                        memo_len += filled
                        stack.append(run)
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
                elif traces_outer is not None and stack and (stack[-1] is traces_outer or (
                        marks and marks[-1] >= 1 and stack[marks[-1] - 1] is traces_outer
                        and (len(stack) == marks[-1] or id(stack[-1]) in device_lists))):
                    device_lists.add(id(new))
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
        if got is HOLE:
            raise Unsupported("a reference to a run's object")
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
