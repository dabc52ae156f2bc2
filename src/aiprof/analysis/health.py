"""Trace health: what a trace cannot show, measured from the trace, stated before anything it shows.

A report is only as good as its trace. A trace whose CUDA graphs replay kernels the profiler did not
attribute to ops, that has no CUDA sync events, whose last steps were cut by the end of the recording,
whose host and device clocks disagree, that recorded no input shapes or no Python stacks, or that was
captured while other processes shared the machine, limits what any number built on it can mean. Each
such limit is a :class:`HealthItem` of the report's ``health`` section (docs/numbers.md, "Trace health"):

========================  ==============================================================================
``graph_replays``          kernels replayed by CUDA/HIP graph launches run without an op of their own (their
                           time is in no op's row); ``missing`` when the replays' kernels are not in the trace
``sync_events``            a GPU trace without ``cuda_sync`` events (``enable_cuda_sync_events``): the device
                           side of a synchronisation (which stream or event it waited for) is not recorded
``cut_steps``              steps cut by the end of the recording (their device side is missing), or a file
                           cut off mid-write
``profiler_overhead``      the profiler's own share of the recorded host time: its overhead events, its own
                           Python frames, and ~:data:`PROFILER_NS_PER_EVENT` per recorded host event
``clock_skew``             device activity that starts before the call that launched it (host and device
                           clocks disagree), or rank clocks that disagree (``analysis.arrival`` offsets)
``shapes``                 CPU ops without recorded input shapes (``record_shapes``)
``stacks``                 no Python stacks (``with_stack``); or, with stacks, what recording them cost: the
                           steps' ``python_function`` events x :data:`~aiprof.analysis.stacks.WITH_STACK_NS_PER_CALL`
                           over the steps' time (``limited`` from :data:`OVERHEAD_LIMITED_SHARE`: host time is
                           inflated by it)
``shared_machine``         other processes used the machine's CPUs while the run was recorded
``profiler_cycles``        the trace holds several profiler cycles: the time between them was not recorded
                           (``analysis.recording``), so it is in no number, and the cycles are named
========================  ==============================================================================

The per-rank facts (:class:`RankHealth`) are measured in :func:`rank_health` while the trace is loaded;
:func:`run_health` turns the ranks' facts (and run-level facts: rank clocks, a shared machine) into the
items. Findings that depend on something absent are dropped or downgraded by the diagnosis, each change
listed with its reason in :attr:`Health.findings` (``aiprof.rules.health``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import msgspec
import numpy as np

from aiprof.analysis import intervals as iv
from aiprof.analysis.arrival import CrossRank
from aiprof.analysis.recording import ProfilerCycle, gaps_ns, profiler_cycles, recorded_set
from aiprof.analysis.stacks import WITH_STACK_NS_PER_CALL
from aiprof.trace import links
from aiprof.trace.model import GPU_WORK_KINDS, I64, Kind, Trace

if TYPE_CHECKING:
    from aiprof.analysis.steps import StepWindow

ItemId = Literal["graph_replays", "sync_events", "cut_steps", "profiler_overhead", "clock_skew", "shapes", "stacks",
                 "shared_machine", "profiler_cycles"]
Status = Literal["ok", "limited", "missing"]
Action = Literal["dropped", "downgraded", "not_run"]

ITEM_IDS: tuple[ItemId, ...] = ("graph_replays", "sync_events", "cut_steps", "profiler_overhead", "clock_skew",
                                "shapes", "stacks", "shared_machine", "profiler_cycles")

# Frames of torch.profiler itself (``torch/profiler/profiler.py(747): __exit__``, the autograd profiler's
# export): their time is the profiler's overhead, never the user's Python.
PROFILER_FRAME = r"(^|/)torch/(profiler/|autograd/profiler)[^(]*\.py\("
GRAPH_LAUNCH = r"^(cudaGraphLaunch|hipGraphLaunch|cuGraphLaunch)"
# What torch.profiler costs per recorded host event (an op, a runtime call, an annotation, a memory event):
# 0.3-1.2 µs measured on a shared 2-core EPYC with torch 2.13, record_shapes + profile_memory (the rules'
# ``profiler_ns_per_op`` default is this number).
PROFILER_NS_PER_EVENT = 400
# The profiler's share of the recorded host time from which the item says host-side times are inflated.
OVERHEAD_LIMITED_SHARE = 0.05
# A device activity that starts this much before its launch call started: the clocks disagree (a kernel
# cannot start before it is launched; sub-µs differences are the clock conversion's rounding).
SKEW_TOLERANCE_NS = 1_000
SKEW_LIMITED_SHARE = 0.01  # of linked device activities
SHAPES_MIN_SHARE = 0.5  # of aten ops: below it, shapes are missing
RANK_CLOCK_LIMITED_NS = 1_000_000  # rank clocks further apart than this are worth saying (they are corrected)

_HOST_EVENT_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON, Kind.RUNTIME, Kind.DRIVER, Kind.MEMORY)


class RankHealth(msgspec.Struct, kw_only=True):
    """What one rank's trace holds and lacks, measured (the items are built from these numbers)."""

    rank: int = 0
    gpu: bool = False  # the trace has device activity
    graph_launches: int = 0  # CUDA/HIP graph launch calls
    replayed_activities: int = 0  # device activities correlated with a graph launch (no op issued them)
    replayed_ns: int = 0  # their summed duration
    device_ns: int = 0  # summed duration of every kernel, copy and memset
    # Analysed with its graph capture trace (analysis.graphs.attach_capture): the capture file's name and the
    # share of replayed kernel time attributed to the captured ops; both absent otherwise.
    replay_capture: str | msgspec.UnsetType = msgspec.UNSET
    replay_attributed_share: float | msgspec.UnsetType = msgspec.UNSET
    sync_events: int = 0  # cuda_sync rows
    recorded_steps: int = 0
    cut_steps: int = 0  # steps left out: no device record (analysis.coverage)
    cut_off: bool = False  # the file was cut off mid-write
    host_span_ns: int = 0  # first to last host event, within the profiler cycles' recorded time
    profiler_measured_ns: int = 0  # the profiler's overhead events and its own Python frames (union)
    host_events: int = 0  # recorded host events (each costs the profiler ~PROFILER_NS_PER_EVENT)
    linked_activities: int = 0  # device activities linked to their launch call
    early_activities: int = 0  # of those, starting more than SKEW_TOLERANCE_NS before the call
    max_early_ns: int = 0
    aten_ops: int = 0
    aten_ops_with_shapes: int = 0
    python_events: int = 0
    op_stacks: int = 0  # ops with a recorded "Call stack"
    python_events_in_steps: int = 0  # python_function events that start inside a step window
    steps_ns: int = 0  # the step windows' summed duration
    cycles: list[ProfilerCycle] = msgspec.field(default_factory=list)  # two or more profiler cycles, else empty

    @property
    def profiler_ns(self) -> int:
        """The profiler's own host time: measured spans plus the per-event estimate."""
        return self.profiler_measured_ns + self.host_events * PROFILER_NS_PER_EVENT

    @property
    def profiler_share(self) -> float:
        return min(self.profiler_ns / self.host_span_ns, 1.0) if self.host_span_ns > 0 else 0.0

    @property
    def shapes_share(self) -> float:
        return self.aten_ops_with_shapes / self.aten_ops if self.aten_ops else 1.0

    @property
    def has_stacks(self) -> bool:
        return self.python_events > 0 or self.op_stacks > 0

    @property
    def stack_cost_ns(self) -> int:
        """What recording the steps' Python stacks cost (the tracer's CPU per call x their events)."""
        return self.python_events_in_steps * WITH_STACK_NS_PER_CALL

    @property
    def stack_cost_share(self) -> float:
        """That cost over the steps' time, in [0, 1]."""
        return min(self.stack_cost_ns / self.steps_ns, 1.0) if self.steps_ns > 0 else 0.0


class HealthItem(msgspec.Struct, kw_only=True):
    """One thing the trace cannot show (or, ``ok``, a check that passed), with the measured number behind it."""

    id: ItemId
    status: Status
    text: str  # one sentence for every renderer
    ranks: list[int] = msgspec.field(default_factory=list)  # the ranks it is about (empty: the run as a whole)
    value: float = 0.0  # the measured number (a share, ns, a count: ``unit`` says which)
    unit: str = ""


class FindingChange(msgspec.Struct, kw_only=True):
    """A finding (or a rule's findings) dropped, downgraded or not run because the trace lacks what it needs."""

    id: str  # the finding id (for ``not_run``: an id the rule would emit)
    action: Action
    item: ItemId  # the health item that caused it
    reason: str


class Health(msgspec.Struct, kw_only=True):
    """The report's ``health`` section: every item checked (``ok`` ones included), the per-rank facts, and
    the findings changed because of what is missing."""

    items: list[HealthItem]
    ranks: list[RankHealth] = msgspec.field(default_factory=list)
    findings: list[FindingChange] = msgspec.field(default_factory=list)

    @property
    def limits(self) -> list[HealthItem]:
        """The items that limit the report (not ``ok``), most serious first."""
        return [i for i in self.items if i.status == "missing"] + [i for i in self.items if i.status == "limited"]

    def item(self, item_id: str) -> HealthItem | None:
        return next((i for i in self.items if i.id == item_id), None)


# ---------------------------------------------------------------------------------------------------
# Per rank, from the loaded trace
# ---------------------------------------------------------------------------------------------------
ATTRIBUTED_OK = 0.95  # replayed kernel time attributed to ops with the capture, for the graph_replays item to be ok


def rank_health(trace: Trace, recorded_steps: int = 0, cut_steps: int = 0, cut_off: bool = False,
                windows: Sequence[StepWindow] = ()) -> RankHealth:
    """The rank's facts (``recorded_steps`` / ``cut_steps`` / ``cut_off`` from its coverage; ``windows``: the
    steps the stack-recording cost is measured over)."""
    c = trace.columns
    gpu = trace.rows_of(*GPU_WORK_KINDS)
    replayed, replayed_ns, launches = _replays(trace, gpu)
    linked, early, max_early = _early_activities(trace, gpu)
    aten, shaped = _shapes(trace)
    cycles = profiler_cycles(trace)
    span_ns, measured, events = _profiler_time(trace, cycles)
    in_steps, steps_ns = _python_in_steps(trace, windows)
    capture, attributed = _paired(trace)
    return RankHealth(
        rank=trace.rank,
        gpu=bool(gpu.size),
        graph_launches=launches,
        replayed_activities=replayed,
        replayed_ns=replayed_ns,
        device_ns=int(c.dur[gpu].sum()),
        replay_capture=capture,
        replay_attributed_share=attributed,
        sync_events=int(trace.rows_of(Kind.SYNC).size),
        recorded_steps=recorded_steps,
        cut_steps=cut_steps,
        cut_off=cut_off,
        host_span_ns=span_ns,
        profiler_measured_ns=measured,
        host_events=events,
        linked_activities=linked,
        early_activities=early,
        max_early_ns=max_early,
        aten_ops=aten,
        aten_ops_with_shapes=shaped,
        python_events=int(trace.rows_of(Kind.PYTHON).size),
        op_stacks=len(trace.stacks),
        python_events_in_steps=in_steps,
        steps_ns=steps_ns,
        cycles=cycles,
    )


def _python_in_steps(trace: Trace, windows: Sequence[StepWindow]) -> tuple[int, int]:
    """``python_function`` events starting inside the (disjoint) step windows, and the windows' summed time."""
    py = trace.rows_of(Kind.PYTHON)
    if not windows:
        return 0, 0
    starts = np.array([w.start_ns for w in windows], dtype=np.int64)
    ends = np.array([w.end_ns for w in windows], dtype=np.int64)
    ts = trace.columns.ts[py]
    idx = np.searchsorted(starts, ts, side="right") - 1
    inside = (idx >= 0) & (ts < ends[np.maximum(idx, 0)])
    return int(inside.sum()), int((ends - starts).sum())


def _replays(trace: Trace, gpu: I64) -> tuple[int, int, int]:
    """Device activities correlated with a graph launch, their summed time, and the graph launches."""
    calls = trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    graphs = calls[trace.name_matches(calls, GRAPH_LAUNCH)] if calls.size else calls
    if graphs.size == 0 or gpu.size == 0:
        return 0, 0, int(graphs.size)
    c = trace.columns
    launcher = links.launcher(trace)[gpu]
    is_graph = np.zeros(len(c), dtype=bool)
    is_graph[graphs] = True
    hit = (launcher >= 0) & is_graph[np.maximum(launcher, 0)]
    return int(hit.sum()), int(c.dur[gpu[hit]].sum()), int(graphs.size)


def _early_activities(trace: Trace, gpu: I64) -> tuple[int, int, int]:
    """Device activities linked to a launch call; those that start over SKEW_TOLERANCE_NS before it; by how much
    at most."""
    if gpu.size == 0:
        return 0, 0, 0
    c = trace.columns
    launcher = links.launcher(trace)[gpu]
    ok = launcher >= 0
    lead = c.ts[launcher[ok]] - c.ts[gpu[ok]]  # > 0: the activity starts before its launch call
    early = lead > SKEW_TOLERANCE_NS
    return int(ok.sum()), int(early.sum()), int(lead[early].max()) if early.any() else 0


def _shapes(trace: Trace) -> tuple[int, int]:
    """ATen ops, and those with recorded input shapes (``record_shapes``)."""
    ops = trace.rows_of(Kind.CPU_OP)
    aten = ops[trace.name_matches(ops, r"^aten::")] if ops.size else ops
    if aten.size == 0:
        return 0, 0
    return int(aten.size), int(np.isin(aten, trace.op_args.rows).sum())


def _profiler_time(trace: Trace, cycles: list[ProfilerCycle] | None = None) -> tuple[int, int, int]:
    """The host span (within the ``cycles``' recorded time: never the unrecorded time between cycles), the
    union of the profiler's overhead events and own frames in it, and host events."""
    c = trace.columns
    host = trace.rows_of(*_HOST_EVENT_KINDS)
    if host.size == 0:
        return 0, 0, 0
    span_start, span_end = int(c.ts[host].min()), int((c.ts[host] + c.dur[host]).max())
    spans = trace.rows_of(Kind.SPAN)
    overhead = spans[trace.name_matches(spans, r"(?i)overhead|buffer")] if spans.size else spans
    py = trace.rows_of(Kind.PYTHON)
    own = py[trace.name_matches(py, PROFILER_FRAME)] if py.size else py
    rows = np.concatenate((overhead, own))
    span = iv.as_set([span_start], [span_end])
    if cycles:
        span = iv.intersect(span, recorded_set(cycles))
    covered = iv.intersect(iv.merge(c.ts[rows], c.ts[rows] + c.dur[rows]), span)
    events = int(host.size) - int(own.size)
    return iv.total(span), iv.total(covered), events


# ---------------------------------------------------------------------------------------------------
# The run: items from the ranks' facts
# ---------------------------------------------------------------------------------------------------
def run_health(
    ranks: list[RankHealth],
    rank_clock_offsets_ns: dict[int, int] | None = None,
    shared_cores: float | None = None,
    shared_source: str = "",
) -> Health:
    """Every item, in the fixed order of :data:`ITEM_IDS`; ``rank_clock_offsets_ns`` are the clock offsets the
    arrival analysis corrected (rank → ns), ``shared_cores`` the cores other processes used (None: not shared,
    or not known) and ``shared_source`` where that number comes from."""
    items = [
        _graph_item(ranks),
        _sync_item(ranks),
        _cut_item(ranks),
        _overhead_item(ranks),
        _skew_item(ranks, rank_clock_offsets_ns or {}),
        _shapes_item(ranks),
        _stacks_item(ranks),
        shared_item(shared_cores, shared_source),
        _cycles_item(ranks),
    ]
    return Health(items=items, ranks=list(ranks))


def _who(ranks: list[RankHealth], hit: list[RankHealth]) -> tuple[str, list[int]]:
    """' on rank(s) …' when the run has several ranks and only some are hit, and their numbers."""
    numbers = [r.rank for r in hit]
    if len(ranks) <= 1 or len(hit) == len(ranks):
        return "", numbers if len(ranks) > 1 else []
    shown = ", ".join(str(n) for n in numbers[:8]) + (" …" if len(numbers) > 8 else "")
    return f" on rank(s) {shown}", numbers


def _graph_item(ranks: list[RankHealth]) -> HealthItem:
    hit = [r for r in ranks if r.graph_launches]
    if not hit:
        return HealthItem(id="graph_replays", status="ok", text="no CUDA/HIP graph replays")
    where, numbers = _who(ranks, hit)
    launches = sum(r.graph_launches for r in hit)
    replayed = sum(r.replayed_activities for r in hit)
    if replayed < launches:  # under one attributed activity per replay: the replays' kernels are not in the trace
        return HealthItem(
            id="graph_replays", status="missing", ranks=numbers, value=float(launches), unit="graph launches",
            text=f"{launches:,} CUDA/HIP graph replays{where} without their kernels in the trace (no graph-node "
            "tracing): device time is under-counted, the idle it seems to leave is not real",
        )
    ns = sum(r.replayed_ns for r in hit)
    share = ns / max(sum(r.device_ns for r in hit), 1)
    shares = [r.replay_attributed_share for r in hit]
    if all(isinstance(x, float) for x in shares):  # each replay analysed with its capture: the ops are known
        attributed = min(float(x) for x in shares if isinstance(x, float))
        status: Literal["ok", "limited"] = "ok" if attributed >= ATTRIBUTED_OK else "limited"
        return HealthItem(
            id="graph_replays", status=status, ranks=numbers, value=round(attributed, 4),
            unit="share of replayed kernel time attributed",
            text=f"{replayed:,} kernels from {launches:,} CUDA/HIP graph replays{where} ({100 * share:.0f} % of device "
            f"time) attributed to the captured ops with the capture trace: {100 * attributed:.1f} % of their time"
            + ("" if status == "ok" else "; the rest is in no op's row (its graph matches no captured one)"),
        )
    return HealthItem(
        id="graph_replays", status="limited", ranks=numbers, value=round(share, 4), unit="share of device time",
        text=f"{replayed:,} kernels from {launches:,} CUDA/HIP graph replays{where} ({100 * share:.0f} % of device "
        "time) have no op: their time is in no op's row (the capture's ops issued them)",
    )


def _paired(trace: Trace) -> tuple[str | msgspec.UnsetType, float | msgspec.UnsetType]:
    """``replay_capture`` and ``replay_attributed_share`` of a replay analysed with its capture, else UNSET."""
    from aiprof.analysis.graphs import paired_capture

    found = paired_capture(trace)
    if found is None:
        return msgspec.UNSET, msgspec.UNSET
    return found[0], found[1].attributed_share


def _sync_item(ranks: list[RankHealth]) -> HealthItem:
    hit = [r for r in ranks if r.gpu and r.sync_events == 0]
    if not any(r.gpu for r in ranks):
        return HealthItem(id="sync_events", status="ok", text="no device activity: no device synchronisation to record")
    if not hit:
        return HealthItem(id="sync_events", status="ok", text="CUDA sync events recorded",
                          value=float(sum(r.sync_events for r in ranks)), unit="events")
    where, numbers = _who(ranks, hit)
    return HealthItem(
        id="sync_events", status="limited", ranks=numbers,
        text=f"no CUDA sync events{where} (torch.profiler experimental_config enable_cuda_sync_events): the sync "
        "idle cause comes from the host's synchronising calls; cross-stream waits are not seen",
    )


def _cut_item(ranks: list[RankHealth]) -> HealthItem:
    hit = [r for r in ranks if r.cut_steps or r.cut_off]
    if not hit:
        return HealthItem(id="cut_steps", status="ok", text="no step cut by the end of the recording")
    where, numbers = _who(ranks, hit)
    cut = sum(r.cut_steps for r in hit)
    recorded = sum(r.recorded_steps for r in hit)
    if cut:
        text = (f"{cut} of {recorded} recorded steps{where} cut by the end of the recording (no device record): "
                "left out of every number and finding")
    else:
        text = f"the trace file{where} is cut off mid-write: events after the cut are missing"
    return HealthItem(id="cut_steps", status="missing", ranks=numbers, value=float(cut), unit="steps", text=text)


def _overhead_item(ranks: list[RankHealth]) -> HealthItem:
    worst = max(ranks, key=lambda r: r.profiler_share, default=None)
    if worst is None or worst.host_span_ns <= 0:
        return HealthItem(id="profiler_overhead", status="ok", text="no host events recorded")
    share = worst.profiler_share
    who = f" (rank {worst.rank})" if len(ranks) > 1 else ""
    measured = worst.profiler_measured_ns / worst.host_span_ns
    text = (f"the profiler's own work is ~{100 * share:.1f} % of the recorded host time{who} ({100 * measured:.1f} % "
            f"measured in its overhead events and own frames, ~{PROFILER_NS_PER_EVENT} ns x {worst.host_events:,} "
            "recorded events)")
    if share < OVERHEAD_LIMITED_SHARE:
        return HealthItem(id="profiler_overhead", status="ok", value=round(share, 4), unit="share of host time",
                          text=text)
    return HealthItem(id="profiler_overhead", status="limited", ranks=[worst.rank] if len(ranks) > 1 else [],
                      value=round(share, 4), unit="share of host time",
                      text=text + ": host-side times are inflated by it")


def _skew_item(ranks: list[RankHealth], offsets: dict[int, int]) -> HealthItem:
    hit = [r for r in ranks if r.early_activities and r.early_activities >= SKEW_LIMITED_SHARE * r.linked_activities]
    parts: list[str] = []
    value = 0.0
    if hit:
        where, numbers = _who(ranks, hit)
        early = sum(r.early_activities for r in hit)
        linked = sum(r.linked_activities for r in hit)
        lead = max(r.max_early_ns for r in hit)
        value = float(lead)
        parts.append(f"{early:,} of {linked:,} device activities{where} start before the call that launched them "
                     f"(up to {lead / 1e3:,.1f} µs): host and device clocks disagree, so launch latency and the idle "
                     "causes next to launches are unreliable")
    else:
        numbers = []
    far = {r: o for r, o in offsets.items() if abs(o) >= RANK_CLOCK_LIMITED_NS}
    if far:
        rank, off = max(far.items(), key=lambda kv: abs(kv[1]))
        parts.append(f"rank clocks disagree by up to {abs(off) / 1e6:,.1f} ms (rank {rank}; corrected from the ends "
                     "of synchronising collectives)")
        numbers = sorted(set(numbers) | set(far))
    if not parts:
        return HealthItem(id="clock_skew", status="ok", text="host and device clocks agree")
    return HealthItem(id="clock_skew", status="limited", ranks=numbers, value=value, unit="ns", text="; ".join(parts))


def _shapes_item(ranks: list[RankHealth]) -> HealthItem:
    with_ops = [r for r in ranks if r.aten_ops]
    hit = [r for r in with_ops if r.shapes_share < SHAPES_MIN_SHARE]
    if not with_ops:
        return HealthItem(id="shapes", status="ok", text="no ATen op recorded: nothing to take shapes from")
    if not hit:
        return HealthItem(id="shapes", status="ok", text="input shapes recorded",
                          value=round(min(r.shapes_share for r in with_ops), 4), unit="share of ATen ops")
    where, numbers = _who(ranks, hit)
    share = min(r.shapes_share for r in hit)
    return HealthItem(
        id="shapes", status="missing", ranks=numbers, value=round(share, 4), unit="share of ATen ops",
        text=f"no input shapes{where} (record_shapes=False; {100 * share:.0f} % of ATen ops have them): no FLOPs or "
        "bytes per op, so no roofline, MFU, precision or shape-based kernel-efficiency verdict",
    )


def _stacks_item(ranks: list[RankHealth]) -> HealthItem:
    hit = [r for r in ranks if not r.has_stacks]
    if not hit:
        return _stack_cost_item(ranks)
    where, numbers = _who(ranks, hit)
    return HealthItem(id="stacks", status="missing", ranks=numbers,
                      text=f"no Python stacks{where} (with_stack=False): findings name ops, not your source lines")


def _stack_cost_item(ranks: list[RankHealth]) -> HealthItem:
    """Stacks recorded: what recording them cost the steps (the worst rank), ``limited`` from
    OVERHEAD_LIMITED_SHARE of the step time."""
    worst = max(ranks, key=lambda r: r.stack_cost_share, default=None)
    if worst is None or worst.python_events_in_steps == 0 or worst.steps_ns <= 0:
        return HealthItem(id="stacks", status="ok", text="Python stacks recorded")
    share = worst.stack_cost_share
    steps = max(worst.recorded_steps - worst.cut_steps, 1)
    who = f" (rank {worst.rank})" if len(ranks) > 1 else ""
    text = (f"Python stacks recorded; recording them costs ~{worst.stack_cost_ns / steps / 1e6:,.2f} ms per step"
            f"{who} (~{100 * share:.1f} % of the step time: {worst.python_events_in_steps / steps:,.0f} Python calls "
            f"per step x ~{WITH_STACK_NS_PER_CALL} ns each, measured by bench/with_stack_overhead.py)")
    if share < OVERHEAD_LIMITED_SHARE:
        return HealthItem(id="stacks", status="ok", value=round(share, 4), unit="share of step time", text=text)
    return HealthItem(id="stacks", status="limited", ranks=[worst.rank] if len(ranks) > 1 else [],
                      value=round(share, 4), unit="share of step time",
                      text=text + ": host-side times (Python outside ops, host-bound gaps, source lines) include it")


def _cycles_item(ranks: list[RankHealth]) -> HealthItem:
    hit = [r for r in ranks if len(r.cycles) > 1]
    if not hit:
        return HealthItem(id="profiler_cycles", status="ok", text="one profiler cycle: the recording is continuous")
    where, numbers = _who(ranks, hit)
    first = hit[0]
    unrecorded = sum(gaps_ns(first.cycles))
    named = "; ".join(_cycle_text(c) for c in first.cycles[:6]) + (" …" if len(first.cycles) > 6 else "")
    return HealthItem(
        id="profiler_cycles", status="limited", ranks=numbers, value=float(unrecorded), unit="ns",
        text=f"{len(first.cycles)} profiler cycles{where} ({named}): the {_duration(unrecorded)} between them was "
        "not recorded and is in no number (not idle, not step time)",
    )


def _cycle_text(cycle: ProfilerCycle) -> str:
    steps = (f"steps {cycle.first_step}–{cycle.last_step}" if cycle.last_step > cycle.first_step
             else f"step {cycle.first_step}" if cycle.first_step >= 0 else "no steps")
    return f"cycle {cycle.index}: {steps}, {_duration(cycle.duration_ns)}"


def _duration(ns: int) -> str:
    return f"{ns / 1e9:,.1f} s" if ns >= 10**9 else f"{ns / 1e6:,.1f} ms"


def shared_item(cores: float | None, source: str = "") -> HealthItem:
    """The ``shared_machine`` item: ``cores`` other processes used on average (None: not shared or unknown)."""
    if cores is None:
        return HealthItem(id="shared_machine", status="ok",
                          text="no sign of a shared machine" + (f" ({source})" if source else ""))
    where = f" ({source})" if source else ""
    return HealthItem(
        id="shared_machine", status="limited", value=round(float(cores), 2), unit="cores",
        text=f"the machine was shared: other processes used {cores:.1f} cores on average{where}; step times and "
        "host-side findings include their load",
    )


def clock_offsets(cross: CrossRank | None) -> dict[int, int]:
    """The rank clock offsets the arrival analysis corrected (rank → ns; empty when none was needed)."""
    if cross is None or not cross.clock_corrected:
        return {}
    return {r.rank: r.clock_offset_ns for r in cross.per_rank if r.clock_offset_ns}


def with_item(health: Health, item: HealthItem) -> Health:
    """``health`` with ``item`` replacing the item of the same id."""
    return msgspec.structs.replace(health, items=[item if i.id == item.id else i for i in health.items])


__all__ = ["clock_offsets", "FindingChange", "Health", "HealthItem", "ITEM_IDS", "PROFILER_FRAME", "PROFILER_NS_PER_EVENT", "RankHealth",
           "rank_health", "run_health", "shared_item", "with_item"]
