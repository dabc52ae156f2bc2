"""Read Kineto ``[memory]`` instant events (``profile_memory=True``) into a :class:`MemoryData`.

Each event carries ``Bytes`` (negative for a free), ``Addr``, ``Device Type`` (0 CPU, 1 CUDA),
``Device Id`` and, in newer traces, ``Total Allocated`` / ``Total Reserved``. Memory that existed before
the profiler started is the first event's ``Total Allocated`` minus its ``Bytes``; it is added as
allocations at the first instant (one per pre-existing address that the trace frees, one for the rest), so
the replayed running total equals the profiler's own ``Total Allocated`` at every event. Traces without
totals (the 2021 TensorBoard-plugin ones) are replayed from ``Bytes`` alone, with a warning.

Each event is attributed to the CPU op and the Python frames (``with_stack=True``) that enclose it on its
thread; ``ProfilerStep#N`` spans give the steps, autograd ops the backward, ``Optimizer.step#`` the
optimizer step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from aiprof.memory.model import CPU_DEVICE, Action, EventTable, Frame, MemoryData, MemoryInputError, Window, pair_rows
from aiprof.memory.units import binary

_STEP = re.compile(r"ProfilerStep#(\d+)")
_PYFRAME = re.compile(r"(.*)\((\d+)\): (.*)")
_BACKWARD = ("autograd::engine::evaluate_function", "torch::autograd::AccumulateGrad")
_OPTIMIZER = "Optimizer.step#"
MAX_PY_FRAMES = 16


class _Ev(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = float("nan")
    dur: float = 0.0
    args: msgspec.Raw = msgspec.Raw(b"{}")


class _MemArgs(msgspec.Struct, gc=False):
    nbytes: int | float = msgspec.field(name="Bytes", default=0)
    total_allocated: int | float = msgspec.field(name="Total Allocated", default=-1)
    total_reserved: int | float = msgspec.field(name="Total Reserved", default=-1)
    addr: int | float = msgspec.field(name="Addr", default=-1)
    device_id: int | float = msgspec.field(name="Device Id", default=-1)
    device_type: int | float = msgspec.field(name="Device Type", default=0)


class _Doc(msgspec.Struct):
    traceEvents: list[_Ev] = []
    deviceProperties: list[dict[str, Any]] | None = None


_DOC = msgspec.json.Decoder(_Doc)
_LIST = msgspec.json.Decoder(list[_Ev])
_ARGS = msgspec.json.Decoder(_MemArgs)


@dataclass
class _Span:
    start: int
    end: int
    kind: str  # "op" or "py"
    name: str
    frame: Frame | None


def read_kineto(path: Path, data: bytes) -> MemoryData:
    """The ``[memory]`` events of a Kineto trace (its JSON bytes, already gunzipped)."""
    what = str(path)
    try:
        doc = _LIST.decode(data) if data.lstrip()[:1] == b"[" else _DOC.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise MemoryInputError(f"{what}: not a Kineto trace ({str(err)[:120]})") from None
    events = doc if isinstance(doc, list) else doc.traceEvents
    capacity: dict[int, int] = {}
    if isinstance(doc, _Doc):
        for prop in doc.deviceProperties or []:
            if isinstance(prop.get("id"), int) and isinstance(prop.get("totalGlobalMem"), int):
                capacity[int(prop["id"])] = int(prop["totalGlobalMem"])
    mem = [e for e in events if e.name == "[memory]" and e.ts == e.ts]
    if not mem:
        raise MemoryInputError(
            f"{what}: the trace has no [memory] events; record with torch.profiler.profile(profile_memory=True)"
        )
    warnings: list[str] = []
    spans: dict[tuple[Any, Any], list[_Span]] = {}
    steps: list[Window] = []
    backward: list[tuple[int, int]] = []
    optimizer: list[tuple[int, int]] = []
    for e in events:
        if e.ph != "X" or e.ts != e.ts:
            continue
        start = int(round(e.ts * 1000))
        end = start + int(round(max(e.dur, 0.0) * 1000))
        match = _STEP.fullmatch(e.name)
        if match and e.cat != "gpu_user_annotation":
            steps.append(Window("step", int(match.group(1)), start, end))
            continue
        if e.name.startswith(_OPTIMIZER):
            optimizer.append((start, end))
        if e.cat == "cpu_op":
            if e.name.startswith(_BACKWARD):
                backward.append((start, end))
            spans.setdefault((e.pid, e.tid), []).append(_Span(start, end, "op", e.name, None))
        elif e.cat == "python_function":
            m = _PYFRAME.fullmatch(e.name)
            frame = Frame(m.group(1), int(m.group(2)), m.group(3)) if m else Frame("", 0, e.name)
            spans.setdefault((e.pid, e.tid), []).append(_Span(start, end, "py", e.name, frame))
    table, stacks, totals = _table(mem, spans, warnings, what)
    result = MemoryData(
        source="kineto", path=what, events=table, stacks=stacks, capacity_bytes=capacity,
        reserved_known=bool(np.any(totals[1] >= 0)), reserved_ns=totals[1], allocated_ns=totals[0],
        warnings=warnings,
    )
    result.steps = sorted(steps, key=lambda w: w.start_ns)
    result.phases = _phases(result.steps, backward, optimizer)
    _seed(result, what)
    return result


def _table(
    mem: list[_Ev], spans: dict[tuple[Any, Any], list[_Span]], warnings: list[str], what: str
) -> tuple[EventTable, list[tuple[Frame, ...]], tuple[Any, Any]]:
    mem.sort(key=lambda e: e.ts)
    n = len(mem)
    t = np.empty(n, np.int64)
    dev = np.empty(n, np.int32)
    addr = np.empty(n, np.int64)
    size = np.empty(n, np.int64)
    action = np.empty(n, np.int8)
    alloc_total = np.empty(n, np.int64)
    res_total = np.empty(n, np.int64)
    stack = np.full(n, -1, np.int32)
    op = np.full(n, -1, np.int32)
    by_thread: dict[tuple[Any, Any], list[int]] = {}
    bad = 0
    for i, e in enumerate(mem):
        try:
            a = _ARGS.decode(e.args)
        except (msgspec.DecodeError, msgspec.ValidationError):
            a = _MemArgs()
            bad += 1
        nbytes = int(a.nbytes)
        t[i] = int(round(e.ts * 1000))
        dev[i] = CPU_DEVICE if int(a.device_type) == 0 else max(int(a.device_id), 0)
        addr[i] = int(a.addr)
        size[i] = abs(nbytes)
        action[i] = int(Action.ALLOC) if nbytes >= 0 else int(Action.FREE)
        alloc_total[i] = int(a.total_allocated)
        res_total[i] = int(a.total_reserved)
        by_thread.setdefault((e.pid, e.tid), []).append(i)
    if bad:
        warnings.append(f"{what}: {bad} [memory] events with unreadable args were read as 0 bytes")
    stacks: list[tuple[Frame, ...]] = []
    ids: dict[tuple[Frame, ...], int] = {}
    op_counter = 0
    for key, rows in by_thread.items():
        op_counter = _attribute(rows, t, spans.get(key, []), stack, op, stacks, ids, op_counter)
    table = EventTable.build(t, dev, addr, size, action, stack=stack, op=op)
    return table, stacks, (alloc_total, res_total)


def _attribute(
    rows: list[int], t: Any, spans: list[_Span], stack: Any, op: Any, stacks: list[tuple[Frame, ...]],
    ids: dict[tuple[Frame, ...], int], op_counter: int,
) -> int:
    """Give each row of one thread the stack of spans enclosing it (innermost op, then Python frames) and the
    instance number of its outermost CPU op. A sweep: spans sorted by start (longest first), rows by time."""
    spans = sorted(spans, key=lambda s: (s.start, -s.end))
    open_: list[tuple[_Span, int]] = []
    j = 0
    for row in rows:
        now = int(t[row])
        while j < len(spans) and spans[j].start <= now:
            span = spans[j]
            while open_ and open_[-1][0].end <= span.start:
                open_.pop()
            instance = -1
            if span.kind == "op" and not any(s.kind == "op" for s, _ in open_):
                instance = op_counter
                op_counter += 1
            open_.append((span, instance))
            j += 1
        while open_ and open_[-1][0].end < now:
            open_.pop()
        enclosing = [s for s, _ in open_ if s.end >= now]
        ops = [s for s in enclosing if s.kind == "op"]
        py = [s.frame for s in reversed(enclosing) if s.frame is not None][:MAX_PY_FRAMES]
        frames = tuple(([Frame("", 0, ops[-1].name)] if ops else []) + py)
        if frames:
            sid = ids.get(frames)
            if sid is None:
                sid = ids[frames] = len(stacks)
                stacks.append(frames)
            stack[row] = sid
        outer = [inst for s, inst in open_ if s.kind == "op" and inst >= 0 and s.end >= now]
        op[row] = outer[0] if outer else -1
    return op_counter


def _phases(steps: list[Window], backward: list[tuple[int, int]], optimizer: list[tuple[int, int]]) -> list[Window]:
    """Forward, backward and optimizer windows of each step (forward: step start to the first backward op)."""
    phases: list[Window] = []
    back = np.asarray(sorted(backward), dtype=np.int64).reshape(-1, 2)
    for step in steps:
        inside = back[(back[:, 0] >= step.start_ns) & (back[:, 0] < step.end_ns)] if back.size else back
        opt = [(s, e) for s, e in optimizer if step.start_ns <= s < step.end_ns]
        b_start = int(inside[:, 0].min()) if inside.size else None
        b_end = int(inside[:, 1].max()) if inside.size else None
        o_start = min((s for s, _ in opt), default=None)
        f_end = b_start if b_start is not None else (o_start if o_start is not None else step.end_ns)
        phases.append(Window("forward", step.index, step.start_ns, f_end))
        if b_start is not None and b_end is not None:
            phases.append(Window("backward", step.index, b_start, b_end))
        for s, e in opt:
            phases.append(Window("optimizer", step.index, s, e))
    return phases


def _carried_over_warning(what: str, before: int, freed: int, rest: int) -> str:
    held = f" ({binary(freed)} that it frees counts as held at its start)" if freed else ""
    return (
        f"{what}: cpu: the profiler's Total Allocated starts at {binary(before)}, counted by earlier profiler "
        f"sessions in this process{held}; {binary(rest)} never freed here is left out (the CPU counter keeps "
        "blocks freed between sessions, which cannot be told from blocks still held)"
    )


def _seed(data: MemoryData, what: str) -> None:
    """Add memory allocated before the profiler started, per device, and rebuild missing totals.

    A GPU's ``Total Allocated`` is the caching allocator's own figure: what it held before the first event is
    seeded as one block (plus one per pre-existing block the trace frees). On CPU it is a counter that only
    moves while a profiler session records memory, so it starts at 0 in a process's first session and, in a
    later one, at what earlier sessions counted and did not see freed: blocks still held, and blocks freed
    while no session ran (which it never subtracts). Only what the trace proves was held (the blocks it frees
    without having seen them allocated) is seeded there; the rest is ``carried_over_bytes``, left out."""
    ev = data.events
    totals = data.allocated_ns
    assert totals is not None
    seeds: list[tuple[int, int, int]] = []  # device, addr, bytes
    pre_freed: dict[int, int] = {}
    _, alloc_of = pair_rows(ev.device, ev.addr, ev.action)
    unseen = np.flatnonzero((ev.action == int(Action.FREE)) & (ev.addr >= 0) & (alloc_of < 0))
    for device, addr, size in zip(ev.device[unseen].tolist(), ev.addr[unseen].tolist(), ev.size[unseen].tolist()):
        seeds.append((device, addr, size))  # freed, never seen allocated: allocated before the profiler
        pre_freed[device] = pre_freed.get(device, 0) + size
    known = totals >= 0
    missing = 0
    for device in np.unique(ev.device).tolist():
        rows = np.flatnonzero((ev.device == device) & known)
        if rows.size == 0 or device == CPU_DEVICE:
            data.seed_unknown.add(device)
        if rows.size == 0:
            missing += 1
            on = ev.device == device
            signed = np.where(ev.action[on] == Action.ALLOC, ev.size[on], -ev.size[on])
            lowest = int(np.cumsum(signed).min()) + pre_freed.get(device, 0) if signed.size else 0
            if lowest < 0:  # frees of blocks the trace never saw allocated (and has no address for)
                seeds.append((device, -1, -lowest))
            continue
        first = int(rows[0])
        signed = int(ev.size[first]) if ev.action[first] == Action.ALLOC else -int(ev.size[first])
        before = int(totals[first]) - signed - int(np.sum(np.where(
            ev.action[: first] == Action.ALLOC, ev.size[: first], -ev.size[: first])[ev.device[: first] == device]))
        rest = before - pre_freed.get(device, 0)
        if rest > 0 and device == CPU_DEVICE:
            data.carried_over_bytes[device] = rest
            data.warnings.append(_carried_over_warning(what, before, pre_freed.get(device, 0), rest))
        elif rest > 0:
            seeds.append((device, -1, rest))
    if missing:
        data.warnings.append(
            f"{what}: the [memory] events carry no Total Allocated: totals are rebuilt from Bytes, and memory "
            "allocated before the profiler started is counted only as far as the trace frees it"
        )
    if seeds:
        t0 = int(ev.t_ns.min()) - 1
        seeded = EventTable.build(
            [t0] * len(seeds), [s[0] for s in seeds], [s[1] for s in seeds], [s[2] for s in seeds],
            [int(Action.ALLOC)] * len(seeds),
        )
        data.events = EventTable(**{
            name: np.concatenate([getattr(seeded, name), getattr(ev, name)]) for name in ev.__dataclass_fields__
        })
        pad = np.full(len(seeds), -1, np.int64)
        data.allocated_ns = np.concatenate([pad, totals])
        if data.reserved_ns is not None:
            data.reserved_ns = np.concatenate([pad, data.reserved_ns])
    data.seeded_blocks = len(seeds)
