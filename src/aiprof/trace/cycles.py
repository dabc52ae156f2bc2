"""Profiler cycles are not ranks: files that one process wrote, one per profiler cycle, are one rank.

``torch.profiler.profile(schedule=schedule(..., repeat=N), on_trace_ready=tensorboard_trace_handler(dir))``
writes one trace file per cycle into one folder. Read as a folder of files, they would look like N ranks
(and feed the cross-rank rules: stragglers, imbalance). The rule that tells them apart, applied to every
set of files loaded together:

* same process: the same main pid (the pid with the most CPU ops and annotations) and, when the traces
  record a host name (Kineto's top-level ``host_name``), the same host;
* not ranks of a job: no ``distributedInfo`` rank, or the same rank in every file;
* one after the other: their time spans (``base_time_ns`` + first start … last end, every span row) do
  not overlap. Ranks of one job run at the same time; cycles of one process cannot.

Files that meet all three are *cycles of one process*: :func:`merge_cycles` concatenates them (in time
order) into one :class:`Trace`, so the run has one rank whose steps are the union of the cycles' steps.
The time between cycles is in no step window. Real multi-rank sets (distinct pids, or a ``distributedInfo``
rank each, or spans that overlap) are never grouped.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from aiprof.trace.model import ArgsStore, Columns, Flows, Kind, Trace

# Columns holding ids that link rows within one trace; -1 means "none". Offset per cycle so that ids of
# two cycles never collide (a later cycle's launch must not link to an earlier cycle's kernel).
_ID_COLUMNS = ("correlation", "external_id", "python_id", "python_parent_id")


@dataclass(frozen=True)
class Identity:
    """What decides whether files are cycles of one process: host, main pid, distributed rank, span."""

    host: str | None
    pid: int | None
    rank: int | None
    start_unix_ns: int
    end_unix_ns: int


def identity(trace: Trace) -> Identity:
    """The trace's process identity and time span (spans on the trace's clock plus ``base_time_ns``)."""
    rows = trace.rows_of(Kind.CPU_OP, Kind.USER_ANNOTATION)
    pid: int | None = None
    if rows.size:
        values, counts = np.unique(trace.columns.pid[rows], return_counts=True)
        pid = int(values[int(np.argmax(counts))])
    host = trace.metadata.get("host_name")
    rank = trace.distributed.get("rank")
    start, end = trace.time_range_ns
    return Identity(
        host=str(host) if host else None,
        pid=pid,
        rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
        start_unix_ns=start + trace.base_time_ns,
        end_unix_ns=end + trace.base_time_ns,
    )


def cycle_groups(identities: Sequence[Identity]) -> list[list[int]]:
    """Indices of the files that are cycles of one process (module text), each group in time order; only
    groups of two or more. A group with any overlap in time, or two different ranks, is not cycles."""
    by_process: dict[tuple[str | None, int], list[int]] = {}
    for i, ident in enumerate(identities):
        if ident.pid is not None and ident.end_unix_ns > ident.start_unix_ns:
            by_process.setdefault((ident.host, ident.pid), []).append(i)
    groups: list[list[int]] = []
    for members in by_process.values():
        if len(members) < 2:
            continue
        if len({identities[i].rank for i in members}) > 1:
            continue  # a rank each: ranks of a job (pids repeat across hosts and containers)
        ordered = sorted(members, key=lambda i: identities[i].start_unix_ns)
        spans = [(identities[i].start_unix_ns, identities[i].end_unix_ns) for i in ordered]
        if all(spans[k][1] <= spans[k + 1][0] for k in range(len(spans) - 1)):
            groups.append(ordered)
    return sorted(groups)


def merge_cycles(traces: Sequence[Trace]) -> Trace:
    """One trace of the cycles (given in time order): rows concatenated, strings re-interned, link ids
    offset so cycles never link to each other, times on the first cycle's clock. Path, rank, devices and
    metadata are the first cycle's; a warning names the cycles."""
    first = traces[0]
    if len(traces) == 1:
        return first
    strings = list(first.strings)
    index = {s: i for i, s in enumerate(strings)}
    parts: list[dict[str, npt.NDArray[Any]]] = []
    flows: list[Flows] = []
    op_args: list[tuple[ArgsStore, int]] = []
    comm_args: list[tuple[ArgsStore, int]] = []
    stacks: dict[int, str] = {}
    id_offset = {name: 0 for name in _ID_COLUMNS}
    flow_offset = 0
    row_offset = 0
    for trace in traces:
        for text in trace.strings:
            if text not in index:
                index[text] = len(strings)
                strings.append(text)
        remap = np.fromiter((index[s] for s in trace.strings), dtype=np.int64, count=len(trace.strings))
        cols = {f.name: getattr(trace.columns, f.name) for f in dataclasses.fields(Columns)}
        shift = trace.base_time_ns - first.base_time_ns
        cols["ts"] = cols["ts"] + shift
        for key in ("name", "cat"):
            values = cols[key]
            cols[key] = np.where(values >= 0, remap[np.maximum(values, 0)], values).astype(values.dtype)
        for name in _ID_COLUMNS:
            values = cols[name]
            cols[name] = np.where(values >= 0, values + id_offset[name], values)
            if values.size and values.max() >= 0:
                id_offset[name] = int(cols[name].max()) + 1
        parts.append(cols)
        f = trace.flows
        fid = np.where(f.flow_id >= 0, f.flow_id + flow_offset, f.flow_id)
        flows.append(Flows(fid, f.is_start, f.is_fwdbwd, f.pid, f.tid, f.ts + shift))
        if fid.size and fid.max() >= 0:
            flow_offset = int(fid.max()) + 1
        op_args.append((trace.op_args, row_offset))
        comm_args.append((trace.comm_args_raw, row_offset))
        stacks.update({row + row_offset: text for row, text in trace.stacks.items()})
        row_offset += len(trace)
    columns = Columns(**{f.name: np.concatenate([p[f.name] for p in parts]) for f in dataclasses.fields(Columns)})
    process_names: dict[int, str] = {}
    thread_names: dict[tuple[int, int], str] = {}
    for trace in traces:
        process_names.update(trace.process_names)
        thread_names.update(trace.thread_names)
    merged = dataclasses.replace(
        first,
        columns=columns,
        strings=strings,
        flows=Flows(*(np.concatenate([getattr(f, k.name) for f in flows]) for k in dataclasses.fields(Flows))),
        process_names=process_names,
        thread_names=thread_names,
        op_args=_merge_args(op_args),
        comm_args_raw=_merge_args(comm_args),
        stacks=stacks,
        warnings=[w for t in traces for w in t.warnings],
        event_count=sum(t.event_count for t in traces),
        cache={},
    )
    spans = []
    for trace in traces:  # each cycle's span on the merged clock: the time between them was not recorded
        lo, hi = trace.time_range_ns
        shift = trace.base_time_ns - first.base_time_ns
        spans.append([lo + shift, hi + shift])
    merged.metadata = {**first.metadata, "profiler_cycles": [t.path.name for t in traces], "profiler_cycle_spans": spans}
    return merged


def _merge_args(stores: list[tuple[ArgsStore, int]]) -> ArgsStore:
    """Args stores of consecutive row blocks as one (rows offset by their block's start)."""
    rows, keys, starts, ends, data = [], [], [], [], []
    text_offset = data_offset = 0
    for store, row_offset in stores:
        rows.append(store.rows + row_offset)
        keys.append(store.keys + text_offset)
        starts.append(store.starts + data_offset)
        ends.append(store.ends + data_offset)
        data.append(store.data)
        text_offset += store.distinct
        data_offset += len(store.data)
    return ArgsStore(np.concatenate(rows), np.concatenate(keys), np.concatenate(starts), np.concatenate(ends),
                     b"".join(data))


def describe(traces: Sequence[Trace], pid: int | None) -> str:
    """The note a merged trace carries: which files, which steps."""
    parts = []
    for n, trace in enumerate(traces, 1):
        steps = trace.steps()
        numbers = sorted(int(m.group(1)) for name in steps.names if (m := re.match(r"ProfilerStep#(\d+)", name)))
        span = f"steps {numbers[0]}–{numbers[-1]}" if numbers else "no steps"
        parts.append(f"cycle {n}: {trace.path.name} ({span})")
    who = f"pid {pid}" if pid is not None else "one process"
    return (
        f"{len(traces)} files are profiler cycles of one process ({who}: same host and pid, no distinct "
        f"distributedInfo rank, one after the other in time), analysed as one rank, not {len(traces)} ranks: "
        + "; ".join(parts)
    )


def merge_cycle_sets(traces: list[Trace]) -> tuple[list[Trace], list[str]]:
    """``traces`` with each set of cycles of one process merged into one trace (in the place of its first
    cycle), and one note per merged set."""
    out, notes, _ = merge_cycle_sets_at(traces)
    return out, notes


MergeRanks = Callable[[list[Trace]], tuple[list[Trace], list[str]]]
"""How loaded traces become ranks (:func:`aiprof.trace.runset.load_paths`' ``merge``): the traces of the ranks
and one note per file set joined into one rank. The trace layer's own is :func:`merge_cycle_sets`."""


def merge_cycle_sets_at(traces: list[Trace]) -> tuple[list[Trace], list[str], list[int]]:
    """:func:`merge_cycle_sets`, and where each input trace went: ``where[i]`` is the index in the output of
    the trace that holds ``traces[i]`` (itself, or its cycles merged)."""
    idents = [identity(t) for t in traces]
    groups = cycle_groups(idents)
    if not groups:
        return traces, [], list(range(len(traces)))
    notes: list[str] = []
    merged_at: dict[int, Trace] = {}
    dropped: set[int] = set()
    for group in groups:
        members = [traces[i] for i in group]
        note = describe(members, idents[group[0]].pid)
        merged = merge_cycles(members)
        merged.warnings.append(note)
        merged_at[min(group)] = merged
        dropped.update(group)
        notes.append(note)
    kept = [i for i in range(len(traces)) if i not in dropped or i in merged_at]
    out = [merged_at[i] if i in merged_at else traces[i] for i in kept]
    position = {i: k for k, i in enumerate(kept)}
    first_of = {i: min(g) for g in groups for i in g}
    where = [position[first_of.get(i, i)] for i in range(len(traces))]
    return out, notes, where
