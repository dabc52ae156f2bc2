"""Who arrives last: collectives matched across ranks, their arrival skew, and the rank that makes the others wait.

Under data parallelism the all-reduce equalises step time: the rank with extra work finishes its step as late
as the ranks that waited for it, so wall-time comparisons miss it (traceml#252). What does not equalise is the
order in which ranks *arrive* at each collective. The map side (:func:`arrival_table`, in the worker that
holds the trace) reduces a rank to one small row per collective: its process group, collective kind, step,
ordinal, arrival time (the communication kernel's start on the device: when the rank's stream reached it; on a
CPU run the collective op's start on the host), end and message size. The reduce side (:func:`cross_rank`)
matches instances across ranks by (step number, group, collective, ordinal within the step), never by wall
time, and per instance computes

- ``skew_ns`` = last arrival − first arrival, and each rank's ``wait_ns`` = last arrival − its own;
- the culprit = the last rank to arrive, credited with ``last − second-last arrival`` (``caused_ns``): what
  every rank of the group would gain had the culprit come as early as the next-latest rank. Waits are the
  victims' evidence, never savings of their own, so one late rank is counted once;
- ``transfer_ns`` = end − last arrival (when ends are known): the time the collective took once everyone was
  there, per group, which exposes a slow link (one group's transfers much slower than other groups' of the same
  collective and size).

Clocks: ranks on different hosts need not share a clock. When ends are known, the ends of synchronising
collectives (all-reduce, all-gather, reduce-scatter, broadcast, barrier) coincide in reality, so each rank's
offset is the median of (its end − the instance's median end); offsets above :data:`CLOCK_TOLERANCE_NS` are
corrected and reported. Everything is vectorised over ranks × instances (NumPy), so the reduce of 1,024 ranks
with hundreds of collectives each is a fraction of a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np
import numpy.typing as npt

from aiprof.analysis.steps import StepWindow
from aiprof.trace.model import Kind, Trace

I64 = npt.NDArray[np.int64]

CLOCK_TOLERANCE_NS = 200_000  # rank clocks that disagree by more than this (from collective ends) are corrected
NOISE_FLOOR_NS = 20_000  # an arrival gap below this is noise: nobody is credited with it
_SYNCHRONISING = frozenset({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier", "reduce"})
TOP_INSTANCES = 20
# The host-side collective ops of a CPU run (gloo, MPI, UCC, functional collectives): their start is the arrival.
_CPU_COMM_OP = r"^(c10d::|c10d_functional::|_c10d_functional::|gloo:|nccl:|rccl:|mpi:|ucc:)"


# ---------------------------------------------------------------------------------------------------
# Map: one rank's collectives
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ArrivalTable:
    """One rank's collectives inside its step windows, in arrival order (a few kB: it crosses processes)."""

    source: str  # "kernel" (communication kernels' device start) or "cpu op" (collective ops' host start)
    labels: tuple[str, ...]  # the strings ``group`` and ``collective`` index
    group: I64  # process group name, "ranks a,b,…", or "default" when the trace names none (into labels)
    collective: I64  # all_reduce, all_gather, … (into labels)
    step: I64  # the step's number (ProfilerStep#N's N; -1: the whole trace)
    ordinal: I64  # n-th collective of (step, group, collective) on this rank
    arrive_ns: I64
    end_ns: I64  # -1 when unknown
    message_bytes: I64  # -1 when unknown

    def __len__(self) -> int:
        return int(self.arrive_ns.shape[0])

    @classmethod
    def of(cls, source: str, groups: list[str], collectives: list[str], step: I64, ordinal: I64, arrive_ns: I64,
           end_ns: I64, message_bytes: I64) -> ArrivalTable:
        """A table from per-row strings (interned here)."""
        labels: dict[str, int] = {}
        g = np.fromiter((labels.setdefault(x, len(labels)) for x in groups), dtype=np.int64, count=len(groups))
        c = np.fromiter((labels.setdefault(x, len(labels)) for x in collectives), dtype=np.int64, count=len(collectives))
        return cls(source, tuple(labels), g, c, step, ordinal, arrive_ns, end_ns, message_bytes)

    def group_names(self) -> list[str]:
        return [self.labels[i] for i in self.group.tolist()]


def arrival_table(trace: Trace, windows: list[StepWindow]) -> ArrivalTable:
    """The rank's collectives: communication kernels when the trace has them, else the outermost collective
    CPU ops (a gloo / CPU run)."""
    from aiprof.analysis.comm import is_comm_kernel

    rows = np.flatnonzero(is_comm_kernel(trace))
    if rows.size:
        return _table(trace, windows, "kernel", rows, _kernel_rows(trace, rows))[0]
    rows = _outer_cpu_collectives(trace)
    return _table(trace, windows, "cpu op", rows, _cpu_rows(trace, rows))[0]


# The spans in which a CPU backend moves the data (gloo's worker threads: ``gloo:all_reduce``, an annotation):
# they start when the rank's worker reaches the collective and end when it is done on every rank.
_CPU_TRANSPORT = r"^(gloo|mpi|ucc):"


def transport_table(trace: Trace, windows: list[StepWindow]) -> tuple[ArrivalTable, I64]:
    """The spans that carry each collective (communication kernels; on a CPU run the backend's transport
    spans, ``gloo:all_reduce``, else the outermost collective CPU ops) as an :class:`ArrivalTable` whose ends
    are known, and the trace row of each of its rows: what the what-if replay joins across ranks
    (:mod:`aiprof.analysis.whatif.ranks`)."""
    from aiprof.analysis.comm import canonical_collective, is_comm_kernel

    rows = np.flatnonzero(is_comm_kernel(trace))
    if rows.size:
        return _table(trace, windows, "kernel", rows, _kernel_rows(trace, rows))
    c = trace.columns
    host = np.flatnonzero(np.isin(c.kind, [int(Kind.CPU_OP), int(Kind.USER_ANNOTATION)]))
    rows = host[trace.name_matches(host, _CPU_TRANSPORT)]
    rows = rows[[canonical_collective(trace.name_of(int(r))) is not None for r in rows.tolist()]]
    if not rows.size:
        rows = _outer_cpu_collectives(trace)
    return _table(trace, windows, "kernel", rows, _cpu_rows(trace, rows))


def _kernel_rows(trace: Trace, rows: I64) -> list[tuple[str, str, int]]:
    from aiprof.analysis.comm import _collective

    out = []
    for row in rows.tolist():
        c = _collective(trace, int(row))
        out.append((_group_key(c.process_group_name, c.process_group_ranks), c.collective, c.message_bytes or -1))
    return out


def _group_key(name: str | None, ranks: tuple[int, ...] | None) -> str:
    if name:
        return name
    if ranks:
        return "ranks " + ",".join(str(r) for r in ranks)
    return "default"


def _outer_cpu_collectives(trace: Trace) -> I64:
    """CPU collective ops not nested in another collective op of the same thread."""
    from aiprof.analysis.comm import canonical_collective

    c = trace.columns
    rows = np.flatnonzero(c.kind == int(Kind.CPU_OP))
    if not rows.size:
        return rows
    rows = rows[trace.name_matches(rows, _CPU_COMM_OP)]
    rows = rows[[canonical_collective(trace.name_of(int(r))) is not None for r in rows.tolist()]]
    order = np.lexsort((-c.dur[rows], c.ts[rows], c.tid[rows]))
    rows = rows[order]
    keep: list[int] = []
    end_by_tid: dict[int, int] = {}
    for row, tid, ts, dur in zip(rows.tolist(), c.tid[rows].tolist(), c.ts[rows].tolist(), c.dur[rows].tolist()):
        if ts < end_by_tid.get(tid, -1):
            continue  # inside an outer collective op of this thread
        end_by_tid[tid] = ts + dur
        keep.append(row)
    kept = np.asarray(keep, dtype=np.int64)
    return kept[np.argsort(c.ts[kept], kind="stable")]


def _cpu_rows(trace: Trace, rows: I64) -> list[tuple[str, str, int]]:
    from aiprof.analysis.comm import canonical_collective

    return [("default", canonical_collective(trace.name_of(int(r))) or "unknown", -1) for r in rows.tolist()]


def _table(
    trace: Trace, windows: list[StepWindow], source: str, rows: I64, meta: list[tuple[str, str, int]]
) -> tuple[ArrivalTable, I64]:
    """The table of ``rows`` (``source`` "kernel": their ends are the collectives' ends) and its rows' trace rows."""
    c = trace.columns
    start = c.ts[rows].astype(np.int64)
    # A communication kernel ends when the collective does, on every rank; a host collective op may return
    # before that (an async work handle): its end says nothing, and is unknown.
    end = (c.ts[rows] + c.dur[rows]).astype(np.int64) if source == "kernel" else np.full(rows.shape[0], -1, np.int64)
    step = np.full(rows.shape[0], -2, dtype=np.int64)
    for w in windows:
        inside = (start >= w.start_ns) & (start < w.end_ns)
        step[inside] = w.number
    keep = step > -2
    order = np.flatnonzero(keep)
    order = order[np.argsort(start[order], kind="stable")]
    groups = tuple(meta[i][0] for i in order.tolist())
    colls = tuple(meta[i][1] for i in order.tolist())
    nbytes = np.asarray([meta[i][2] for i in order.tolist()], dtype=np.int64)
    steps = step[order]
    ordinal = np.zeros(order.shape[0], dtype=np.int64)
    seen: dict[tuple[int, str, str], int] = {}
    for i, key in enumerate(zip(steps.tolist(), groups, colls)):
        ordinal[i] = seen.get(key, 0)
        seen[key] = ordinal[i] + 1
    table = ArrivalTable.of(source, list(groups), list(colls), steps, ordinal, start[order], end[order], nbytes)
    return table, rows[order]


# ---------------------------------------------------------------------------------------------------
# Reduce: the ranks together
# ---------------------------------------------------------------------------------------------------
class RankArrival(msgspec.Struct, kw_only=True):
    """One rank at the collectives it shares with others."""

    rank: int
    collectives: int  # matched instances it took part in
    last_arrivals: int  # instances where it arrived last, by more than the noise floor
    caused_ns: int  # Σ (last − second-last arrival) over those: the wait it alone caused
    caused_ns_per_step: int
    waited_ns: int  # Σ (last arrival − own arrival): time it waited for others
    waited_ns_per_step: int
    late_ns_per_step: int = 0  # Σ (own arrival − the instance's median arrival, when positive) per step
    clock_offset_ns: int = 0  # subtracted from its timestamps (0: its clock agrees with the others')


class GroupSkew(msgspec.Struct, kw_only=True):
    """One (process group, collective, message size) across the ranks that share it."""

    group: str
    collective: str
    message_bytes: int  # -1: unknown
    ranks: int
    instances: int
    median_skew_ns: int
    p90_skew_ns: int
    median_transfer_ns: int  # end − last arrival (-1: ends unknown)
    top_culprit: int  # the rank credited with most of this group's caused wait (-1: none)
    top_culprit_caused_ns: int


class SkewedInstance(msgspec.Struct, kw_only=True):
    """One of the most skewed collective instances."""

    step: int
    group: str
    collective: str
    ordinal: int
    skew_ns: int
    culprit: int
    culprit_lead_ns: int  # last − second-last arrival
    message_bytes: int


class SlowGroup(msgspec.Struct, kw_only=True):
    """A group whose collectives take longer, once every rank is there, than other groups' of the same kind
    and size: a slow link (or a slow member's network)."""

    group: str
    collective: str
    message_bytes: int
    median_transfer_ns: int
    others_median_transfer_ns: int
    ratio: float


class RankStepGrid(msgspec.Struct, kw_only=True):
    """Rank × step: the wait each rank caused (as the last to arrive) and the wait it sat through, per step;
    rows follow ``steps``, columns ``ranks`` (the HTML report's heatmap, readable at 1,024 ranks)."""

    ranks: list[int]
    steps: list[int]
    caused_ns: list[list[int]]
    waited_ns: list[list[int]]


class CrossRank(msgspec.Struct, kw_only=True):
    """The run's collectives matched across ranks (docs/numbers.md, "Arrival order across ranks")."""

    source: str  # "kernel" or "cpu op"
    ranks: int
    steps: int
    matched_instances: int
    unmatched_rows: int  # collective rows no other rank had (edges of the recording, different groups)
    clock_corrected: bool
    median_skew_ns: int
    p90_skew_ns: int
    per_rank: list[RankArrival]
    groups: list[GroupSkew]
    slow_groups: list[SlowGroup]
    top_instances: list[SkewedInstance]
    grid: RankStepGrid
    # The late ranks (robust outliers in late_ns_per_step, latest first) and what fixing all of them saves per
    # step: Σ over instances of (last arrival − the latest arrival of the other ranks), when a late rank is last.
    straggler_ranks: list[int] = msgspec.field(default_factory=list)
    straggler_saving_ns_per_step: int = 0
    # Σ (end − last arrival) over the matched instances per step: the communication left once every rank is
    # there (-1: ends unknown, a CPU run)
    transfer_ns_per_step: int = -1

    def culprits(self, min_saving_ns_per_step: float) -> list[RankArrival]:
        """The late ranks, latest first, when fixing them saves at least ``min_saving_ns_per_step``; else none."""
        if self.straggler_saving_ns_per_step < max(min_saving_ns_per_step, 1):
            return []
        by_rank = {r.rank: r for r in self.per_rank}
        return [by_rank[r] for r in self.straggler_ranks if r in by_rank]


@dataclass(frozen=True)
class _Stacked:
    rank: I64
    inst: I64  # instance id per row
    arrive: I64
    end: I64
    keys: list[tuple[int, str, str, int]]  # per instance: step, group, collective, ordinal
    nbytes: I64  # per instance
    unmatched: int


def cross_rank(tables: list[tuple[int, ArrivalTable]]) -> CrossRank | None:
    """The cross-rank arrival analysis of ``(rank, table)`` pairs; None with fewer than two ranks that have
    collectives, or when no instance is shared by two ranks."""
    tables = [(r, t) for r, t in tables if len(t)]
    if len(tables) < 2:
        return None
    stacked = _stack(tables)
    if stacked is None:
        return None
    offsets = _clock_offsets(stacked, tables)
    corrected = bool(np.any(np.abs(list(offsets.values())) > CLOCK_TOLERANCE_NS)) if offsets else False
    arrive, end = stacked.arrive, stacked.end
    if corrected:
        shift = np.asarray([offsets.get(int(r), 0) for r in stacked.rank.tolist()], dtype=np.int64)
        arrive = arrive - shift
        end = np.where(end >= 0, end - shift, end)
    return _summarise(stacked, arrive, end, tables, offsets if corrected else {})


def _stack(tables: list[tuple[int, ArrivalTable]]) -> _Stacked | None:
    """All ranks' rows in one set of columns, each row numbered by its instance (step, group, collective,
    ordinal); rows of an instance only one rank has are dropped (counted in ``unmatched``)."""
    labels: dict[str, int] = {}
    group, coll, ranks = [], [], []
    for rank, t in tables:
        local = np.fromiter((labels.setdefault(x, len(labels)) for x in t.labels), dtype=np.int64, count=len(t.labels))
        group.append(local[t.group] if len(t) else t.group)
        coll.append(local[t.collective] if len(t) else t.collective)
        ranks.append(np.full(len(t), rank, dtype=np.int64))
    columns = [np.concatenate([t.step for _, t in tables]), np.concatenate(group), np.concatenate(coll),
               np.concatenate([t.ordinal for _, t in tables])]
    code = np.zeros(columns[0].shape[0], dtype=np.int64)
    values = []
    for column in columns:  # one int64 per (step, group, collective, ordinal), mixed-radix over dense codes
        uniq_col, dense = np.unique(column, return_inverse=True)
        code = code * max(len(uniq_col), 1) + dense.reshape(-1)
        values.append(uniq_col)
    uniq, inst, counts = np.unique(code, return_inverse=True, return_counts=True)
    inst = inst.reshape(-1)
    shared = counts[inst] >= 2
    if not shared.any():
        return None
    kept, new_inst = np.unique(inst[shared], return_inverse=True)
    names = list(labels)
    keys = [(int(a), names[int(b)], names[int(c)], int(d)) for a, b, c, d in zip(*_decode(uniq[kept], values))]
    flat_bytes = np.concatenate([t.message_bytes for _, t in tables])[shared]
    inst_bytes = np.full(kept.shape[0], -1, dtype=np.int64)
    np.maximum.at(inst_bytes, new_inst, flat_bytes)
    return _Stacked(
        rank=np.concatenate(ranks)[shared],
        inst=new_inst.reshape(-1).astype(np.int64),
        arrive=np.concatenate([t.arrive_ns for _, t in tables])[shared],
        end=np.concatenate([t.end_ns for _, t in tables])[shared],
        keys=keys,
        nbytes=inst_bytes,
        unmatched=int((~shared).sum()),
    )


def _decode(codes: I64, values: list[I64]) -> list[list[int]]:
    """The columns' values of mixed-radix codes (the inverse of the encoding in :func:`_stack`)."""
    out: list[list[int]] = []
    rest = codes.copy()
    for uniq_col in reversed(values):
        radix = max(len(uniq_col), 1)
        out.append(uniq_col[rest % radix].tolist())
        rest //= radix
    return out[::-1]


def _clock_offsets(s: _Stacked, tables: list[tuple[int, ArrivalTable]]) -> dict[int, int]:
    """Per rank, the median of (its end − the instance's median end) over the synchronising collectives whose
    ends disagree by more than :data:`CLOCK_TOLERANCE_NS` (empty: the clocks agree)."""
    sync = np.asarray([k[2] in _SYNCHRONISING for k in s.keys], dtype=bool)
    use = sync[s.inst] & (s.end >= 0)
    if not use.any():
        return {}
    inst, end, rank = s.inst[use], s.end[use], s.rank[use]
    n = len(s.keys)
    lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, inst, end)
    np.maximum.at(hi, inst, end)
    # Only instances whose ends disagree say anything about clocks: the ranks of a group inside one host end
    # together whatever that host's offset, and would vote "no offset" for every rank.
    informative = (hi - lo)[inst] > CLOCK_TOLERANCE_NS
    if not informative.any():
        return {}
    inst, end, rank = inst[informative], end[informative], rank[informative]
    median_end = _group_median(inst, end, n)
    delta = end - median_end[inst]
    order = np.asarray(sorted(int(r) for r, _ in tables), dtype=np.int64)
    col = np.searchsorted(order, rank)
    present = np.bincount(col, minlength=order.size) > 0
    per_rank = _group_median(col, delta, order.size)
    return {int(r): int(v) for r, v, p in zip(order.tolist(), per_rank.tolist(), present.tolist()) if p}


def _group_median(group: I64, values: I64, n: int) -> I64:
    """The median of ``values`` per group id 0..n-1 (lower middle and upper middle averaged)."""
    order = np.lexsort((values, group))
    g, v = group[order], values[order]
    ids = np.arange(n)
    starts = np.searchsorted(g, ids, side="left")
    count = np.searchsorted(g, ids, side="right") - starts
    low = np.clip(starts + (count - 1) // 2, 0, len(v) - 1)
    high = np.clip(starts + count // 2, 0, len(v) - 1)
    out: I64 = ((v[low] + v[high]) // 2).astype(np.int64)
    return out


@dataclass(frozen=True)
class _Instances:
    """Per instance: its culprit (last rank), the culprit's lead over the next-latest, whether the lead is
    credited (above the noise floor); per row: the rank's wait."""

    culprit: I64
    lead: I64
    credited: npt.NDArray[np.bool_]
    wait: I64
    ranks: I64  # the ranks with collectives, sorted


def _summarise(
    s: _Stacked, arrive: I64, end: I64, tables: list[tuple[int, ArrivalTable]], offsets: dict[int, int]
) -> CrossRank:
    n = len(s.keys)
    order = np.lexsort((arrive, s.inst))
    inst_o, arrive_o, rank_o = s.inst[order], arrive[order], s.rank[order]
    stops = np.searchsorted(inst_o, np.arange(n), side="right") - 1
    starts = np.searchsorted(inst_o, np.arange(n), side="left")
    last = arrive_o[stops]
    first = arrive_o[starts]
    second = arrive_o[np.maximum(stops - 1, starts)]
    culprit = rank_o[stops]
    lead = last - second
    skew = last - first
    credited = lead > NOISE_FLOOR_NS
    wait = last[s.inst] - arrive
    end_max = np.full(n, -1, dtype=np.int64)
    np.maximum.at(end_max, s.inst, end)
    transfer = np.where(end_max >= 0, np.maximum(end_max - last, 0), -1)
    steps = max(len({k[0] for k in s.keys}), 1)
    ranks = np.asarray(sorted(int(r) for r, _ in tables), dtype=np.int64)
    inst = _Instances(culprit, lead, credited, wait, ranks)
    late = np.maximum(arrive - _group_median(s.inst, arrive, n)[s.inst], 0)
    late_per_rank = np.bincount(np.searchsorted(ranks, s.rank), weights=late, minlength=ranks.size) // steps
    stragglers = _late_ranks(ranks, late_per_rank.astype(np.int64))
    joint = _joint_saving(s, arrive, last, stragglers) // steps
    per_rank = _per_rank(s, inst, steps, offsets, late_per_rank.astype(np.int64))
    groups = _groups(s, skew, transfer, culprit, lead, credited)
    return CrossRank(
        source=tables[0][1].source,
        ranks=len(tables),
        steps=steps,
        matched_instances=n,
        unmatched_rows=s.unmatched,
        clock_corrected=bool(offsets),
        median_skew_ns=int(np.median(skew)),
        p90_skew_ns=int(np.percentile(skew, 90)),
        per_rank=per_rank,
        groups=groups,
        slow_groups=_slow_groups(groups),
        top_instances=_top_instances(s, skew, culprit, lead),
        grid=_grid(s, inst),
        straggler_ranks=stragglers,
        straggler_saving_ns_per_step=int(joint),
        transfer_ns_per_step=int(transfer[transfer >= 0].sum()) // steps if (transfer >= 0).any() else -1,
    )


def _late_ranks(ranks: I64, late: I64) -> list[int]:
    """Ranks whose lateness per step stands out, latest first: above median + 5 × MAD over ranks, 3 × the
    median (jitter alone spreads lateness a little) and the noise floor. With two ranks, whose median is
    their midpoint, the later one when it is late by more than the floor and twice the other."""
    values = late.tolist()
    if len(values) == 2:
        hi = int(np.argmax(late))
        other = values[1 - hi]
        return [int(ranks[hi])] if values[hi] > max(NOISE_FLOOR_NS, 2 * other) else []
    median = float(np.median(late))
    mad = float(np.median(np.abs(late - median)))
    bar = max(median + 5.0 * mad, 3.0 * median, float(NOISE_FLOOR_NS))
    out = [(int(v), int(r)) for r, v in zip(ranks.tolist(), values) if v > bar]
    return [r for _, r in sorted(out, reverse=True)]


def _joint_saving(s: _Stacked, arrive: I64, last: I64, stragglers: list[int]) -> int:
    """Σ over instances of (last arrival − the latest arrival of the ranks not in ``stragglers``): the wait
    every rank loses if the stragglers came as early as the latest of the others (instances whose other ranks
    all are stragglers, or with no straggler, count 0)."""
    if not stragglers:
        return 0
    n = len(s.keys)
    others = ~np.isin(s.rank, np.asarray(stragglers, dtype=np.int64))
    latest_other = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(latest_other, s.inst[others], arrive[others])
    has_other = latest_other > np.iinfo(np.int64).min
    gain = np.where(has_other, np.maximum(last - latest_other, 0), 0)
    return int(gain.sum())


def _grid(s: _Stacked, x: _Instances) -> RankStepGrid:
    ranks = x.ranks.tolist()
    steps = sorted({k[0] for k in s.keys})
    rank_index = x.ranks
    row = {st: i for i, st in enumerate(steps)}
    inst_step = np.asarray([row[k[0]] for k in s.keys], dtype=np.int64)
    caused = np.zeros((len(steps), len(ranks)), dtype=np.int64)
    waited = np.zeros_like(caused)
    blamed = np.flatnonzero(x.credited)
    if blamed.size:
        cols = np.searchsorted(rank_index, x.culprit[blamed])
        np.add.at(caused, (inst_step[blamed], cols), x.lead[blamed])
    rank_cols = np.searchsorted(rank_index, s.rank)
    np.add.at(waited, (inst_step[s.inst], rank_cols), x.wait)
    return RankStepGrid(ranks=ranks, steps=steps, caused_ns=caused.tolist(), waited_ns=waited.tolist())


def _per_rank(s: _Stacked, x: _Instances, steps: int, offsets: dict[int, int], late: I64) -> list[RankArrival]:
    order = x.ranks
    n = order.size
    col = np.searchsorted(order, s.rank)
    blamed = np.flatnonzero(x.credited)
    blamed_col = np.searchsorted(order, x.culprit[blamed])
    taken = np.bincount(col, minlength=n)
    last = np.bincount(blamed_col, minlength=n)
    caused = np.bincount(blamed_col, weights=x.lead[blamed], minlength=n).astype(np.int64)
    waited = np.bincount(col, weights=x.wait, minlength=n).astype(np.int64)
    return [
        RankArrival(
            rank=int(order[i]),
            collectives=int(taken[i]),
            last_arrivals=int(last[i]),
            caused_ns=int(caused[i]),
            caused_ns_per_step=int(caused[i]) // steps,
            waited_ns=int(waited[i]),
            waited_ns_per_step=int(waited[i]) // steps,
            late_ns_per_step=int(late[i]),
            clock_offset_ns=offsets.get(int(order[i]), 0),
        )
        for i in range(n)
    ]


def _groups(
    s: _Stacked, skew: I64, transfer: I64, culprit: I64, lead: I64, credited: npt.NDArray[np.bool_]
) -> list[GroupSkew]:
    by_key: dict[tuple[str, str, int], list[int]] = {}
    for i, (_, group, coll, _) in enumerate(s.keys):
        by_key.setdefault((group, coll, int(s.nbytes[i])), []).append(i)
    ranks_per_inst = np.bincount(s.inst, minlength=len(s.keys))
    out = []
    for (group, coll, nbytes), idx_list in by_key.items():
        idx = np.asarray(idx_list, dtype=np.int64)
        sk = skew[idx]
        tr = transfer[idx]
        blame = idx[credited[idx]]
        top, top_caused = -1, 0
        if blame.size:
            totals = np.bincount(culprit[blame], weights=lead[blame])
            top = int(np.argmax(totals))
            top_caused = int(totals[top])
        known = tr[tr >= 0]
        out.append(GroupSkew(
            group=group, collective=coll, message_bytes=nbytes, ranks=int(ranks_per_inst[idx].max()),
            instances=int(idx.size), median_skew_ns=int(np.median(sk)), p90_skew_ns=int(np.percentile(sk, 90)),
            median_transfer_ns=int(np.median(known)) if known.size else -1,
            top_culprit=top, top_culprit_caused_ns=top_caused,
        ))
    return sorted(out, key=lambda g: -(g.median_skew_ns * g.instances))


SLOW_LINK_RATIO = 1.5  # a group's median transfer this many times other groups' (same collective, size) is slow


def _slow_groups(groups: list[GroupSkew]) -> list[SlowGroup]:
    """Groups whose transfers are much slower than the median of the other groups of the same collective
    and message size (at least three groups compared, so one slow group cannot hide in the median)."""
    by_kind: dict[tuple[str, int], list[GroupSkew]] = {}
    for g in groups:
        if g.median_transfer_ns > 0 and g.message_bytes >= 0:
            by_kind.setdefault((g.collective, g.message_bytes), []).append(g)
    out = []
    for (coll, nbytes), members in by_kind.items():
        if len(members) < 3:
            continue
        for g in members:
            others = [m.median_transfer_ns for m in members if m is not g]
            ref = float(np.median(others))
            if ref > 0 and g.median_transfer_ns >= SLOW_LINK_RATIO * ref:
                out.append(SlowGroup(group=g.group, collective=coll, message_bytes=nbytes,
                                     median_transfer_ns=g.median_transfer_ns, others_median_transfer_ns=int(ref),
                                     ratio=round(g.median_transfer_ns / ref, 2)))
    return sorted(out, key=lambda g: -g.ratio)


def _top_instances(s: _Stacked, skew: I64, culprit: I64, lead: I64) -> list[SkewedInstance]:
    top = np.argsort(-skew, kind="stable")[:TOP_INSTANCES]
    out = []
    for i in top.tolist():
        step, group, coll, ordinal = s.keys[i]
        out.append(SkewedInstance(step=step, group=group, collective=coll, ordinal=ordinal, skew_ns=int(skew[i]),
                                  culprit=int(culprit[i]), culprit_lead_ns=int(lead[i]),
                                  message_bytes=int(s.nbytes[i])))
    return out


__all__ = ["ArrivalTable", "CrossRank", "GroupSkew", "RankArrival", "RankStepGrid", "SkewedInstance", "SlowGroup",
           "arrival_table", "cross_rank"]
