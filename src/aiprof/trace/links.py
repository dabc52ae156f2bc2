"""Links between rows of one trace, computed once per trace and cached on it.

- GPU activity → the runtime/driver call that launched it: same ``correlation`` (Kineto writes it on
  both sides; the ``ac2g`` flow carries the same id).
- Runtime/driver call → the CPU op that issued it: same ``External id`` when the launch has one, else the
  innermost CPU op (cpu_op / user annotation) on the same thread whose span contains the call.
- CPU span → its parent span on the same thread (nesting by time), used for self time and containment.
"""

from __future__ import annotations

import numpy as np

from aiprof.arrays import unique, unique_pairs
from aiprof.trace.model import I64, Kind, Trace

LAUNCH_KINDS = (Kind.RUNTIME, Kind.DRIVER)
GPU_LINKED_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.GPU_OTHER)
NEST_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.RUNTIME, Kind.DRIVER)


def _cached(trace: Trace, key: str, build: object) -> I64:
    value = trace.cache.get(key)
    if value is None:
        value = build(trace)  # type: ignore[operator]
        trace.cache[key] = value
    return value  # type: ignore[no-any-return]


def launcher(trace: Trace) -> I64:
    """For every row, the row of the runtime/driver call that launched it (GPU rows only), else -1."""
    return _cached(trace, "links.launcher", _build_launcher)


def _build_launcher(trace: Trace) -> I64:
    c = trace.columns
    out = np.full(len(c), -1, dtype=np.int64)
    launches = np.flatnonzero(trace.kind_mask(*LAUNCH_KINDS) & (c.correlation >= 0))
    gpu = np.flatnonzero(trace.kind_mask(*GPU_LINKED_KINDS) & (c.correlation >= 0))
    if launches.size and gpu.size:
        order = np.argsort(c.correlation[launches], kind="stable")
        keys = c.correlation[launches][order]
        pos = np.searchsorted(keys, c.correlation[gpu])
        pos_ok = pos < keys.size
        hit = np.zeros(gpu.size, dtype=bool)
        hit[pos_ok] = keys[pos[pos_ok]] == c.correlation[gpu][pos_ok]
        out[gpu[hit]] = launches[order][pos[hit]]
    _link_by_flows(trace, out)
    return out


def _link_by_flows(trace: Trace, out: I64) -> None:
    """GPU rows the correlation join missed (no ``correlation`` arg on one side): follow the launch flow
    (``ac2g``; legacy ``async``/``launch``) from the runtime call that starts it to the GPU activity it
    ends on. Flow ends bind to events by process, thread and timestamp, as Chrome's trace viewer does."""
    c, f = trace.columns, trace.flows
    missing = np.flatnonzero(trace.kind_mask(*GPU_LINKED_KINDS) & (out < 0))
    launch_flow = ~f.is_fwdbwd
    if missing.size == 0 or not launch_flow.any():
        return
    start_of: dict[int, tuple[int, int, int]] = {}
    end_of: dict[tuple[int, int], int] = {}
    for fid, is_start, pid, tid, ts in zip(
        f.flow_id[launch_flow].tolist(), f.is_start[launch_flow].tolist(), f.pid[launch_flow].tolist(),
        f.tid[launch_flow].tolist(), f.ts[launch_flow].tolist(),
    ):
        if is_start:
            start_of[fid] = (pid, tid, ts)
        else:
            end_of[(pid, ts)] = fid
    launches = np.flatnonzero(trace.kind_mask(*LAUNCH_KINDS))
    launch_at = dict(zip(zip(c.pid[launches].tolist(), c.tid[launches].tolist(), c.ts[launches].tolist()),
                         launches.tolist()))
    for row, pid, ts in zip(missing.tolist(), c.pid[missing].tolist(), c.ts[missing].tolist()):
        fid = end_of.get((pid, ts))
        start = start_of.get(fid) if fid is not None else None
        launch = launch_at.get(start) if start is not None else None
        if launch is not None:
            out[row] = launch


def parent(trace: Trace) -> I64:
    """For every CPU span (ops, annotations, launches), the innermost span containing it on the same
    thread, else -1. Python-function spans are not part of this tree (see ``python_parent``)."""
    return _cached(trace, "links.parent", _build_parent)


def _build_parent(trace: Trace) -> I64:
    c = trace.columns
    out = np.full(len(c), -1, dtype=np.int64)
    rows = np.flatnonzero(trace.kind_mask(*NEST_KINDS))
    if rows.size == 0:
        return out
    # Per thread, by start, longer spans first so that a parent precedes a child starting at the same ts.
    rows = rows[_thread_time_order(c.pid[rows], c.tid[rows], c.ts[rows], c.dur[rows])]
    thread = _thread_index(c.pid[rows], c.tid[rows])
    start, end = c.ts[rows], c.ts[rows] + c.dur[rows]
    parent_pos = _parents_by_depth(thread, start, end)
    # Spans that are not properly nested (a child outliving its parent) break the depth shortcut:
    # redo those threads with the exact stack walk.
    parent_end = end[np.maximum(parent_pos, 0)]
    bad = (parent_pos == _ORPHAN) | ((parent_pos >= 0) & ((parent_end < end) | (parent_end <= start)))
    if bad.any():
        bounds = np.searchsorted(thread, unique(thread[bad]))  # rows are sorted by thread
        ends = np.searchsorted(thread, unique(thread[bad]), side="right")
        for lo, hi in zip(bounds.tolist(), ends.tolist(), strict=True):
            sel = np.arange(lo, hi)
            _restack_bad_segments(parent_pos, sel, start[sel], end[sel], bad[sel])
    has = parent_pos >= 0
    out[rows[has]] = rows[parent_pos[has]]
    return out


def _thread_time_order(pid: I64, tid: I64, ts: I64, dur: I64) -> I64:
    """``np.lexsort((-dur, ts, tid, pid))`` for rows already in time order (a trace's are), ~3x faster: a
    stable sort on a small thread code keeps each thread's rows in time order, and only rows that share
    a thread and a start are then ordered by duration."""
    if ts.size > 1 and bool((ts[1:] < ts[:-1]).any()):
        return np.lexsort((-dur, ts, tid, pid))
    _, pid_rank = np.unique(pid, return_inverse=True)
    tid_values, tid_rank = np.unique(tid, return_inverse=True)
    code = pid_rank.reshape(-1).astype(np.int64) * len(tid_values) + tid_rank.reshape(-1)
    small = code.size == 0 or int(code.max()) < 1 << 16  # radix sort for a 16-bit key
    order = np.argsort(code.astype(np.uint16) if small else code, kind="stable")
    code, start = code[order], ts[order]
    same = (code[1:] == code[:-1]) & (start[1:] == start[:-1])
    if same.any():
        tied = np.zeros(order.size, dtype=bool)
        tied[1:] |= same
        tied[:-1] |= same
        pos = np.flatnonzero(tied)
        group = np.cumsum(np.concatenate(([True], ~same[pos[1:] - 1])))
        order[pos] = order[pos][np.lexsort((-dur[order[pos]], group))]
    return order


def _thread_index(pid: I64, tid: I64) -> I64:
    """Dense thread numbers (rows are sorted by pid, tid)."""
    change = np.ones(pid.shape, dtype=bool)
    change[1:] = (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])
    return np.cumsum(change) - 1


_ORPHAN = -2  # a span whose depth says it has a parent, but none was found: not properly nested


def _parents_by_depth(thread: I64, start: I64, end: I64) -> I64:
    """Parent positions for properly nested spans, vectorised. Zero-length spans contain nothing, so
    they are never parents. A span's depth is how many non-zero spans of its thread are open at its
    start; its parent is the latest earlier non-zero span one level up."""
    nonzero = end > start
    # Keys that keep threads apart in one sorted array.
    span = int(max(end.max() - start.min(), 0)) + 2
    base = int(start.min())
    key_start = thread * span + (start - base)
    key_end = thread * span + (end - base)
    thread_floor = thread * span
    nz_before: I64 = np.cumsum(nonzero) - nonzero  # non-zero spans earlier in order (whole array)
    first = np.searchsorted(thread, thread, side="left")
    nz_before_in_thread: I64 = nz_before - nz_before[first]
    ends_nz = np.sort(key_end[nonzero])
    closed = np.searchsorted(ends_nz, key_start, side="right") - np.searchsorted(ends_nz, thread_floor, side="left")
    depth = nz_before_in_thread - closed
    return _latest_one_level_up(thread, depth, nonzero)


def _latest_one_level_up(thread: I64, depth: I64, nonzero: np.ndarray) -> I64:
    """For each span of depth d > 0, the latest earlier non-zero span of depth d - 1 on its thread
    (``_ORPHAN`` when there is none); -1 at depth 0. One sort of (thread, depth) groups and one binary
    search, O(n log n) at any nesting depth (a loop over depth levels was O(n x depth): 160k nested
    spans took 16-30 s)."""
    n = thread.shape[0]
    parent = np.where(depth > 0, _ORPHAN, -1).astype(np.int64)
    if n == 0 or int(depth.max()) <= 0:
        return parent
    levels = int(depth.max()) + 1
    group = thread * levels + np.maximum(depth, 0)  # (thread, depth) as one number; < n * (n + 1)
    cand = np.flatnonzero(nonzero & (depth >= 0))
    query = np.flatnonzero(depth > 0)
    if cand.size == 0 or query.size == 0:
        return parent
    # Dense group numbers, so that (group, position) fits one int64 key: group * n + position.
    groups = np.sort(group[cand])  # np.unique's hash table is slow on these keys (1.9 s for 160k)
    groups = groups[np.concatenate(([True], groups[1:] != groups[:-1]))]
    cand_key = np.searchsorted(groups, group[cand]) * n + cand  # ascending: cand is, within a group
    order = np.argsort(cand_key, kind="stable")
    cand_key, cand = cand_key[order], cand[order]
    wanted = group[query] - 1  # same thread, one level up
    slot = np.minimum(np.searchsorted(groups, wanted), groups.size - 1)
    present = groups[slot] == wanted
    found = np.searchsorted(cand_key, slot * n + query) - 1  # latest candidate key below the query's
    ok = present & (found >= 0)
    ok[ok] = cand_key[found[ok]] // n == slot[ok]
    parent[query[ok]] = cand[found[ok]]
    return parent


def _restack_bad_segments(parent_pos: I64, sel: I64, start: I64, end: I64, bad: np.ndarray) -> None:
    """Redo, with the exact stack walk, only the stretches of one thread that hold a misnested span. A
    stretch starts wherever every earlier span of the thread has ended (the stack is empty there), so
    the walk can start afresh at any stretch."""
    prev_max = np.maximum.accumulate(end)
    boundary = np.ones(start.shape, dtype=bool)
    boundary[1:] = prev_max[:-1] <= start[1:]
    segment = np.cumsum(boundary) - 1
    bounds = np.flatnonzero(boundary).tolist() + [int(start.shape[0])]
    for seg in unique(segment[bad]).tolist():
        lo, hi = bounds[seg], bounds[seg + 1]
        parent_pos[sel[lo:hi]] = _parents_by_stack(start[lo:hi], end[lo:hi], offset=int(sel[lo]))


def _parents_by_stack(start: I64, end: I64, offset: int) -> I64:
    """The exact stack walk for one thread (used where spans are not properly nested)."""
    ts, ends = start.tolist(), end.tolist()
    parents = [-1] * len(ts)
    stack: list[int] = []
    for i, t in enumerate(ts):
        while stack and ends[stack[-1]] <= t:
            stack.pop()
        if stack:
            parents[i] = stack[-1] + offset
        if ends[i] > t:
            stack.append(i)
    return np.asarray(parents, dtype=np.int64)


def issuing_op(trace: Trace) -> I64:
    """For every runtime/driver row, the CPU op (cpu_op or user annotation) that issued it, else -1."""
    return _cached(trace, "links.issuing_op", _build_issuing_op)


def _build_issuing_op(trace: Trace) -> I64:
    c = trace.columns
    out = np.full(len(c), -1, dtype=np.int64)
    launches = np.flatnonzero(trace.kind_mask(*LAUNCH_KINDS))
    if launches.size == 0:
        return out
    ops = np.flatnonzero((c.kind == int(Kind.CPU_OP)) & (c.external_id >= 0))
    if ops.size:
        order = np.argsort(c.external_id[ops], kind="stable")
        keys = c.external_id[ops][order]
        ext = c.external_id[launches]
        pos = np.minimum(np.searchsorted(keys, ext), keys.size - 1)
        hit = (ext >= 0) & (keys[pos] == ext)
        out[launches[hit]] = ops[order][pos[hit]]
    missing = launches[out[launches] < 0]
    if missing.size:
        par = parent(trace)
        out[missing] = _innermost_op(trace, missing, par)
    return out


def _innermost_op(trace: Trace, rows: I64, par: I64) -> I64:
    """Walk up the nesting tree until a cpu_op (or an annotation) is found."""
    kind = trace.columns.kind
    result = par[rows].copy()
    for _ in range(64):
        climbing = (result >= 0) & ~np.isin(kind[np.maximum(result, 0)], [int(Kind.CPU_OP)])
        if not climbing.any():
            break
        result[climbing] = par[result[climbing]]
    return result


def gpu_op(trace: Trace) -> I64:
    """For every GPU row, the CPU op that launched it (through its runtime call), else -1."""
    return _cached(trace, "links.gpu_op", _build_gpu_op)


def _build_gpu_op(trace: Trace) -> I64:
    launch = launcher(trace)
    op = issuing_op(trace)
    out = np.full(launch.shape, -1, dtype=np.int64)
    has = launch >= 0
    out[has] = op[launch[has]]
    return out


# ---------------------------------------------------------------------------------------------------
# Forward → backward (appended by the statistics work; used by op statistics and the roofline)
# ---------------------------------------------------------------------------------------------------
_KEY3 = np.dtype([("a", np.int64), ("b", np.int64), ("c", np.int64)])


def forward_of(trace: Trace) -> I64:
    """For every backward CPU op (``Fwd thread id`` > 0: autograd nodes such as ``MulBackward0`` and their
    ``autograd::engine::evaluate_function: MulBackward0`` wrappers), the row of the forward op that
    created its autograd node, else -1.

    Preferred link: the ``fwdbwd`` flow (Kineto's own pairing). Otherwise ``Sequence number`` plus
    ``Fwd thread id``: among forward ops with that sequence number on the forward thread, the one that
    started last (PyTorch's rule: ops that only *peek* the sequence number share it, and the op that
    creates the node is the last to start before the number is consumed). ``Fwd thread id`` is the
    profiler's own thread number, not the OS tid, so each value is mapped to the OS thread whose forward
    sequence numbers match its backward ops most often.
    """
    return _cached(trace, "links.forward_of", _build_forward_of)


def _build_forward_of(trace: Trace) -> I64:
    c = trace.columns
    out = np.full(len(c), -1, dtype=np.int64)
    ops = np.flatnonzero((c.kind == int(Kind.CPU_OP)) & (c.seq >= 0))
    bwd = ops[c.fwd_tid[ops] > 0]
    fwd = ops[c.fwd_tid[ops] <= 0]
    if bwd.size == 0:
        return out
    if fwd.size:
        out[bwd] = _forward_by_sequence(trace, fwd, bwd)
    by_flow = _forward_by_flow(trace, bwd)
    has_flow = by_flow >= 0
    out[bwd[has_flow]] = by_flow[has_flow]
    return out


def _forward_by_sequence(trace: Trace, fwd: I64, bwd: I64) -> I64:
    c = trace.columns
    # The creator of each (tid, seq): the forward op that starts last (ties: the innermost, shorter one).
    order = np.lexsort((-c.dur[fwd], c.ts[fwd], c.seq[fwd], c.tid[fwd], c.pid[fwd]))
    fwd = fwd[order]
    pid, tid, seq = c.pid[fwd], c.tid[fwd], c.seq[fwd]
    last = np.ones(fwd.size, dtype=bool)
    last[:-1] = (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1]) | (seq[1:] != seq[:-1])
    creators, pid, tid, seq = fwd[last], pid[last], tid[last], seq[last]  # sorted by (pid, tid, seq)
    result = np.full(bwd.size, -1, dtype=np.int64)
    for fwd_tid in unique(c.fwd_tid[bwd]).tolist():
        sel = np.flatnonzero(c.fwd_tid[bwd] == fwd_tid)
        wanted = c.seq[bwd[sel]]
        best = np.full(sel.size, -1, dtype=np.int64)
        best_hits = 0
        for p, t in _forward_threads(trace, creators):
            # This thread's creators are one block, in sequence-number order: a binary search finds each.
            block = np.flatnonzero((pid == p) & (tid == t))
            seqs = seq[block[0] : block[-1] + 1]
            pos = np.minimum(np.searchsorted(seqs, wanted), seqs.size - 1)
            found = seqs[pos] == wanted
            hits = int(found.sum())
            if hits > best_hits:
                best_hits, best = hits, np.where(found, creators[block[0] + pos], -1)
        result[sel] = best
    return result


def _forward_threads(trace: Trace, rows: I64) -> list[tuple[int, int]]:
    c = trace.columns
    return unique_pairs(c.pid[rows], c.tid[rows])


def _lookup(
    sorted_keys: np.ndarray[tuple[int, ...], np.dtype[np.void]], probe: np.ndarray[tuple[int, ...], np.dtype[np.void]]
) -> I64:
    """Index of each probe key in the sorted unique key array, else -1."""
    if sorted_keys.size == 0:
        return np.full(probe.size, -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(sorted_keys, probe), sorted_keys.size - 1)
    hit = sorted_keys[pos] == probe
    return np.where(hit, pos, -1).astype(np.int64)


def _flow_ops(trace: Trace, fb: I64) -> I64:
    """The CPU op each flow event is bound to (same pid, tid and start ns; preferring an op with a
    sequence number, then the outermost one, then the first row), else -1."""
    f, c = trace.flows, trace.columns
    ops = np.flatnonzero(c.kind == int(Kind.CPU_OP))
    # The ops starting at each flow's ns: rows are in time order, so two binary searches find them.
    lo = np.searchsorted(c.ts[ops], f.ts[fb], side="left")
    counts = np.searchsorted(c.ts[ops], f.ts[fb], side="right") - lo
    if int(counts.sum()) > 4 * (ops.size + fb.size):  # many flows on crowded instants: sort all ops once
        return _flow_ops_by_sort(trace, fb, ops)
    flow_of = np.repeat(np.arange(fb.size), counts)
    within = np.arange(flow_of.size) - np.repeat(np.cumsum(counts) - counts, counts)
    cand = ops[np.repeat(lo, counts) + within]
    same = (c.pid[cand] == f.pid[fb][flow_of]) & (c.tid[cand] == f.tid[fb][flow_of])
    flow_of, cand = flow_of[same], cand[same]
    order = np.lexsort((cand, -c.dur[cand], c.seq[cand] < 0, flow_of))
    flow_of, cand = flow_of[order], cand[order]
    first = np.ones(flow_of.size, dtype=bool)
    first[1:] = flow_of[1:] != flow_of[:-1]
    row = np.full(fb.size, -1, dtype=np.int64)
    row[flow_of[first]] = cand[first]
    return row


def _flow_ops_by_sort(trace: Trace, fb: I64, ops: I64) -> I64:
    """:func:`_flow_ops` by sorting every op by (pid, tid, ts, preference) and looking the flows up."""
    f, c = trace.flows, trace.columns
    order = np.lexsort((-c.dur[ops], c.seq[ops] < 0, c.ts[ops], c.tid[ops], c.pid[ops]))
    ops = ops[order]
    key = np.empty(ops.size, dtype=_KEY3)
    key["a"], key["b"], key["c"] = c.pid[ops], c.tid[ops], c.ts[ops]
    first = np.concatenate(([True], key[1:] != key[:-1]))
    ops, key = ops[first], key[first]
    probe = np.empty(fb.size, dtype=_KEY3)
    probe["a"], probe["b"], probe["c"] = f.pid[fb], f.tid[fb], f.ts[fb]
    found = _lookup(key, probe)
    return np.where(found >= 0, ops[np.maximum(found, 0)], -1)


def _forward_by_flow(trace: Trace, bwd: I64) -> I64:
    """Pair ``fwdbwd`` flow ends with the ops they are bound to (same pid, tid and start ns)."""
    f = trace.flows
    result = np.full(bwd.size, -1, dtype=np.int64)
    fb = np.flatnonzero(f.is_fwdbwd)
    if fb.size == 0:
        return result
    row = _flow_ops(trace, fb)
    starts, ends = f.is_start[fb] & (row >= 0), ~f.is_start[fb] & (row >= 0)
    s_order = np.argsort(f.flow_id[fb][starts], kind="stable")
    s_ids, s_rows = f.flow_id[fb][starts][s_order], row[starts][s_order]
    e_ids, e_rows = f.flow_id[fb][ends], row[ends]
    if s_ids.size == 0 or e_ids.size == 0:
        return result
    pos = np.minimum(np.searchsorted(s_ids, e_ids), s_ids.size - 1)
    ok = s_ids[pos] == e_ids
    bwd_pos = np.searchsorted(bwd, e_rows[ok])  # bwd is sorted (flatnonzero)
    inside = (bwd_pos < bwd.size) & (bwd[np.minimum(bwd_pos, bwd.size - 1)] == e_rows[ok])
    result[bwd_pos[inside]] = s_rows[pos[ok]][inside]
    return result
