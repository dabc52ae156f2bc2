"""Links between rows of one trace, computed once per trace and cached on it.

- GPU activity → the runtime/driver call that launched it: same ``correlation`` (Kineto writes it on
  both sides; the ``ac2g`` flow carries the same id).
- Runtime/driver call → the CPU op that issued it: same ``External id`` when the launch has one, else the
  innermost CPU op (cpu_op / user annotation) on the same thread whose span contains the call.
- CPU span → its parent span on the same thread (nesting by time), used for self time and containment.
"""

from __future__ import annotations

import numpy as np

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
    launches = np.flatnonzero(np.isin(c.kind, [int(k) for k in LAUNCH_KINDS]) & (c.correlation >= 0))
    gpu = np.flatnonzero(np.isin(c.kind, [int(k) for k in GPU_LINKED_KINDS]) & (c.correlation >= 0))
    if launches.size == 0 or gpu.size == 0:
        return out
    order = np.argsort(c.correlation[launches], kind="stable")
    keys = c.correlation[launches][order]
    pos = np.searchsorted(keys, c.correlation[gpu])
    pos_ok = pos < keys.size
    hit = np.zeros(gpu.size, dtype=bool)
    hit[pos_ok] = keys[pos[pos_ok]] == c.correlation[gpu][pos_ok]
    out[gpu[hit]] = launches[order][pos[hit]]
    return out


def parent(trace: Trace) -> I64:
    """For every CPU span (ops, annotations, launches), the innermost span containing it on the same
    thread, else -1. Python-function spans are not part of this tree (see ``python_parent``)."""
    return _cached(trace, "links.parent", _build_parent)


def _build_parent(trace: Trace) -> I64:
    c = trace.columns
    out = np.full(len(c), -1, dtype=np.int64)
    rows = np.flatnonzero(np.isin(c.kind, [int(k) for k in NEST_KINDS]))
    if rows.size == 0:
        return out
    # Per thread, by start, longer spans first so that a parent precedes a child starting at the same ts.
    order = np.lexsort((-c.dur[rows], c.ts[rows], c.tid[rows], c.pid[rows]))
    rows = rows[order]
    pid, tid, ts = c.pid[rows].tolist(), c.tid[rows].tolist(), c.ts[rows].tolist()
    end = (c.ts[rows] + c.dur[rows]).tolist()
    parents = [-1] * len(rows)
    stack: list[int] = []  # positions into rows
    prev_thread = None
    for i in range(len(rows)):
        thread = (pid[i], tid[i])
        if thread != prev_thread:
            stack.clear()
            prev_thread = thread
        t = ts[i]
        while stack and end[stack[-1]] <= t and not (end[stack[-1]] == t and ts[stack[-1]] == t):
            stack.pop()
        if stack:
            parents[i] = stack[-1]
        stack.append(i)
    parent_pos = np.asarray(parents, dtype=np.int64)
    has = parent_pos >= 0
    out[rows[has]] = rows[parent_pos[has]]
    return out


def issuing_op(trace: Trace) -> I64:
    """For every runtime/driver row, the CPU op (cpu_op or user annotation) that issued it, else -1."""
    return _cached(trace, "links.issuing_op", _build_issuing_op)


def _build_issuing_op(trace: Trace) -> I64:
    c = trace.columns
    out = np.full(len(c), -1, dtype=np.int64)
    launches = np.flatnonzero(np.isin(c.kind, [int(k) for k in LAUNCH_KINDS]))
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
