"""Rules on communication: ``exposed_communication``, ``comm_bandwidth`` (per rank) and ``straggler``
(across ranks)."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any

from aiprof.analysis.arrival import CrossRank, RankArrival
from aiprof.analysis.run import RunAnalysis
from aiprof.rules.context import RankContext
from aiprof.rules.finding import Evidence, Finding
from aiprof.rules.evidence import ms_text
from aiprof.rules.options import RuleOptions
from aiprof.rules.spec import Saving, rank_rule, run_rule
from aiprof.trace.model import Kind

# Achievable NCCL bus bandwidth inside one node (GB/s), from NCCL-tests' published all_reduce results on
# these systems (DGX-1 V100 NVLink, DGX A100 NVLink3/NVSwitch, DGX H100 NVLink4, MI300X Infinity Fabric).
# Matched as substrings of the device name. Unknown devices get no bandwidth finding.
LINK_BUSBW_GB_PER_S: tuple[tuple[str, float], ...] = (
    ("V100", 130.0),
    ("A100", 230.0),
    ("H100", 360.0),
    ("H200", 360.0),
    ("H800", 180.0),
    ("B200", 700.0),
    ("MI300X", 300.0),
    ("MI250", 150.0),
)
_MIN_MESSAGE_BYTES = 8 << 20  # smaller collectives are latency-bound: their bandwidth says little


class CollectiveRow(Evidence, kw_only=True):
    """A kind of collective (one kind, group size and message size) in the evidence: calls, time, bus bandwidth."""

    collective: str
    group_size: int | None
    message_bytes: int | None
    count: int
    total_ns: int
    busbw_gb_per_s: float | None


class CpuCollectiveRow(Evidence, kw_only=True):
    """A CPU-side collective by name in the evidence: calls and time per steady step."""

    collective: str
    calls_per_step: float
    ns_per_step: int


def _top_collectives(ctx: RankContext, limit: int = 3) -> list[CollectiveRow]:
    return [
        CollectiveRow(collective=s.collective, group_size=s.group_size, message_bytes=s.message_bytes, count=s.count,
                      total_ns=s.total_ns, busbw_gb_per_s=None if s.busbw_gb_per_s is None else round(s.busbw_gb_per_s, 1))
        for s in sorted(ctx.views.comm.summary, key=lambda s: -s.total_ns)[:limit]
    ]


# ---------------------------------------------------------------------------------------------------
# exposed_communication
# ---------------------------------------------------------------------------------------------------
_GPU_FIX = (
    "Overlap collectives with compute: DDP(model, bucket_cap_mb=25-100, gradient_as_bucket_view=True) "
    "so buckets all-reduce during backward; FSDP with forward/backward prefetch; gradient accumulation "
    "with no_sync() to communicate less often; for tensor parallelism, async TP / sequence parallelism; "
    "for expert parallelism (all-to-all dispatch/combine), overlap it with the shared expert or the next "
    "micro-batch."
)
_CPU_FIX = (
    "On CPU (gloo) the step waits for the all-reduce: let DDP overlap it with backward (its gradient buckets "
    "all-reduce asynchronously; bucket_cap_mb=25-100 for fewer, larger all-reduces), or issue "
    "dist.all_reduce(t, async_op=True) early and wait() on the work handle only when the result is needed; "
    "flatten many small tensors into one all-reduce; with gradient accumulation, wrap the inner steps in "
    "model.no_sync() so only the last one communicates; and check the slowest rank: every all-reduce ends "
    "when the last rank joins (a wait that long is often another rank's extra work)."
)


@rank_rule(saving=Saving.TIME, options=("comm_exposed_share",), needs=("steps", "comm", "cpu_ops", "trace"))
def exposed_communication(ctx: RankContext) -> list[Finding]:
    """Collectives that no compute hides: the step waits for the network (GPU kernels, or on CPU-only
    runs the gloo / c10d collectives while no CPU op computes)."""
    exposed = ctx.per_step("breakdown_ns", "communication")
    if ctx.share(exposed) < ctx.options.comm_exposed_share:
        return []
    if ctx.is_gpu:
        overlap = [o for o in ctx.views.comm.overlap if o.device == ctx.device.device_index]
        evidence: dict[str, Any] = {
            "exposed_comm_ns_per_step": int(exposed),
            "overlap_pct": round(overlap[0].overlap_pct, 1) if overlap else None,
            "top_collectives": _top_collectives(ctx),
        }
    else:
        evidence = {"exposed_comm_ns_per_step": int(exposed), "top_collectives": _cpu_collectives(ctx)}
    # Overlap alone can hide communication only under compute that exists: the rest needs less communication
    # (fewer / larger / less frequent collectives) or a faster network.
    evidence["hideable_by_overlap_ns_per_step"] = int(min(exposed, ctx.per_step("breakdown_ns", "compute")))
    where = "compute kernel" if ctx.is_gpu else "CPU op"
    backend = ctx.trace.distributed.get("backend")
    return [
        ctx.finding(
            "exposed_communication",
            f"Communication not hidden by compute: {ms_text(exposed)} per step"
            + ("" if ctx.is_gpu else f" waiting in CPU collectives{f' ({backend})' if backend else ''}"),
            exposed,
            evidence=evidence,
            fix=_GPU_FIX if ctx.is_gpu else _CPU_FIX,
            formula=f"mean over steady steps of collective time during which no {where} ran "
            "(upper bound: interference would slow overlapped compute by 20-35 %; overlap alone hides at most "
            "the step's compute time, evidence hideable_by_overlap_ns_per_step; part of the wait may be "
            "another rank's lateness, see straggler)",
            confidence="medium",
        )
    ]


def _cpu_collectives(ctx: RankContext, limit: int = 3) -> list[CpuCollectiveRow]:
    """The CPU-side collectives of the steady steps by total time: name, calls and time per step."""
    from aiprof.analysis.timeline import COLLECTIVE_OP

    rows = ctx.in_window(ctx.trace.rows_of(Kind.CPU_OP, Kind.USER_ANNOTATION))
    rows = rows[ctx.trace.name_matches(rows, COLLECTIVE_OP.pattern)]
    totals: dict[str, list[int]] = {}
    dur = ctx.trace.columns.dur
    for name, d in zip(ctx.names(rows), dur[rows].tolist()):
        entry = totals.setdefault(name, [0, 0])
        entry[0] += 1
        entry[1] += int(d)
    top = sorted(totals.items(), key=lambda kv: -kv[1][1])[:limit]
    return [CpuCollectiveRow(collective=name, calls_per_step=round(n / ctx.step_count, 1),
                             ns_per_step=int(t / ctx.step_count)) for name, (n, t) in top]


# ---------------------------------------------------------------------------------------------------
# comm_bandwidth
# ---------------------------------------------------------------------------------------------------
def link_busbw(device_name: str) -> float | None:
    for key, value in LINK_BUSBW_GB_PER_S:
        if key.lower() in device_name.lower():
            return value
    return None


@rank_rule(saving=Saving.TIME, options=("comm_bandwidth_fraction", "eta", "min_share"), needs=("steps", "comm"))
def comm_bandwidth(ctx: RankContext) -> list[Finding]:
    """Large collectives whose bus bandwidth is far below what the node's links deliver."""
    if not ctx.is_gpu:
        return []
    peak = link_busbw(ctx.trace.device_info(ctx.device.device_index).name)
    lo, hi = ctx.window
    big = [c for c in ctx.views.comm.collectives if c.busbw_gb_per_s is not None and c.message_bytes
           and c.message_bytes >= _MIN_MESSAGE_BYTES and lo <= c.start_ns < hi]
    if peak is None or not big:
        return []
    total_ns = sum(c.dur_ns for c in big)
    busbw = sum((c.busbw_gb_per_s or 0.0) * c.dur_ns for c in big) / total_ns  # none is None (filtered above)
    if busbw >= ctx.options.comm_bandwidth_fraction * peak:
        return []
    comm_ns = ctx.per_step("breakdown_ns", "communication")  # only exposed time costs step time
    target = ctx.options.eta * peak
    saving = comm_ns * max(1.0 - busbw / target, 0.0) * min(total_ns / ctx.step_count / max(comm_ns, 1), 1.0)
    if ctx.share(saving) < ctx.options.min_share:
        return []
    evidence = {
        "busbw_gb_per_s": round(busbw, 1),
        "link_busbw_gb_per_s": peak,
        "large_collectives_per_step": round(len(big) / ctx.step_count, 1),
        "min_message_bytes": _MIN_MESSAGE_BYTES,
        "top_collectives": _top_collectives(ctx),
    }
    return [
        ctx.finding(
            "comm_bandwidth",
            f"Collectives reach {busbw:.0f} GB/s bus bandwidth, {busbw / peak:.0%} of the links' ~{peak:.0f} GB/s",
            saving,
            evidence=evidence,
            fix=(
                "Check the topology and NCCL setup: nvidia-smi topo -m, NCCL_DEBUG=INFO (transport: NVLink vs "
                "PCIe/socket), NCCL_P2P_DISABLE / NCCL_IB_* not forcing a slow path, all GPUs on the same "
                "NVSwitch; bucket gradients into larger messages (bucket_cap_mb) so collectives are not "
                "latency-bound."
            ),
            formula="exposed communication per step × (1 − busbw / (eta × link busbw)), busbw by NCCL-tests' "
            "convention over collectives ≥ 8 MiB, link busbw from a per-GPU table of NCCL-tests results",
            kind="estimate",
            confidence="low",
        )
    ]


# ---------------------------------------------------------------------------------------------------
# straggler (run rule)
# ---------------------------------------------------------------------------------------------------
Rows = list[tuple[int, float, float, float]]  # per rank: (rank, step, wait, own work) in ns per step


@run_rule(saving=Saving.TIME, options=("straggler_share",), needs=("ranks", "findings"))
def straggler(run: RunAnalysis, findings: list[Finding], options: RuleOptions) -> list[Finding]:
    """A rank the others wait for, claimed once by one of two measures, arrival order first.

    - **Arrival order** (:func:`_by_arrival`), when the collectives are matched across ranks: the ranks that
      arrive last, clearly more than the others. Under DDP the all-reduce equalises step time, so this finds
      a straggler that wall-time comparisons miss.
    - **Own work** (:func:`_by_work`) otherwise: step time minus time waiting in collectives is longer on the
      straggler, so the others' collectives start late and they idle.

    Either measure only says *who* and *how much*; :func:`_straggler_finding` builds the one finding (or
    hands the wait to the straggler's own finding that explains it), so a slow rank is never claimed twice."""
    if len(run.ranks) < 2 or any(f.id == "graph_capture" and not f.evidence.get("steady_state", True) for f in findings):
        return []  # one rank, or a graph capture: no steady state to compare
    rows: Rows = []
    for r in run.ranks:
        steps = r.primary.steps[1:] if len(r.primary.steps) >= 3 else r.primary.steps
        if not steps:
            return []
        n = len(steps)
        step = sum(s.duration_ns for s in steps) / n
        wait = sum(s.idle_causes_ns["collective_wait"] + s.breakdown_ns["communication"] for s in steps) / n
        rows.append((r.rank, step, wait, step - wait))
    mean_step = statistics.fmean(s for _, s, _, _ in rows)
    late = run.cross_rank.culprits(options.straggler_share * mean_step) if run.cross_rank is not None else []
    claim = _by_arrival(run.cross_rank, rows, late) if late and run.cross_rank is not None else _by_work(rows, mean_step, options)
    if claim is None:
        return []
    return _straggler_finding(run, findings, rows, claim, mean_step, options)


@dataclass(frozen=True)
class StragglerClaim:
    """Who the straggler is and what waiting for it costs, by one measure (arrival order or own work):
    everything :func:`_straggler_finding` needs to build the one straggler finding."""

    rank: int  # the culprit: the latest arrival, or the most own work
    slow: list[int]  # every straggler, worst first (``rank`` first)
    waiting: list[int]  # the ranks that wait for them, sorted
    saving_ns: float  # what every rank gains per step if the stragglers were like the others
    reason: str  # the title after "Rank N is a straggler: " (one straggler) / "Ranks … are stragglers: "
    measure: dict[str, Any]  # the measure's own evidence, between waiting_ranks and per_rank
    saving_kind: str
    saving_formula: str
    confidence: str
    transfer_ns: int | None = None  # the collectives' time once every rank is there (arrival order)


def _by_arrival(x: CrossRank, rows: Rows, late: list[RankArrival]) -> StragglerClaim:
    """The stragglers by arrival order (:mod:`aiprof.analysis.arrival`): the ranks that arrive late at the
    collectives, clearly more than the others (``CrossRank.straggler_ranks``); the saving is what every rank
    gains per step if they came as early as the latest of the others (``straggler_saving_ns_per_step``). The
    others' waits are their evidence, not savings of their own."""
    culprit = late[0]
    saving = float(x.straggler_saving_ns_per_step)
    culprits = {c.rank for c in late}
    victims = sorted((r for r in x.per_rank if r.rank not in culprits and r.waited_ns > 0), key=lambda r: r.rank)
    waiting = [r.rank for r in victims]
    others = f"{len(waiting)} rank{'s' if len(waiting) != 1 else ''}"
    if len(late) == 1:
        reason = (f"last to arrive at {culprit.last_arrivals} of {culprit.collectives} collectives, the other "
                  f"{others} wait {ms_text(saving)} per step for it")
    else:
        reason = (f"they arrive late at the collectives (rank {culprit.rank} last at {culprit.last_arrivals} of "
                  f"{culprit.collectives}), the other {others} wait {ms_text(saving)} per step for them")
    return StragglerClaim(
        rank=culprit.rank,
        slow=[c.rank for c in late],
        waiting=waiting,
        saving_ns=saving,
        reason=reason,
        measure={
            "waiting_ranks_wait_ns": int(statistics.median(r.waited_ns_per_step for r in victims)) if victims else 0,
            "by": "arrival order",
            "arrival": {
                "source": x.source,
                "last_arrivals": culprit.last_arrivals,
                "collectives": culprit.collectives,
                "caused_ns_per_step": culprit.caused_ns_per_step,
                "per_rank": [{"rank": c.rank, "last_arrivals": c.last_arrivals, "late_ns_per_step": c.late_ns_per_step,
                              "caused_ns_per_step": c.caused_ns_per_step} for c in late[:8]],
                "median_skew_ns": x.median_skew_ns,
            },
        },
        saving_kind="estimate",
        saving_formula="Σ over the collectives of (last arrival − the latest arrival of the other ranks) when a "
        "straggler is last, per step: the wait that goes away for every rank if the stragglers came as early as "
        "the latest of the others (stragglers: ranks whose lateness vs each collective's median arrival stands "
        "out; arrival = the communication kernel's start, or the collective op's on a CPU run; "
        "docs/numbers.md, arrival order)",
        confidence="high",
        transfer_ns=x.transfer_ns_per_step,
    )


def _by_work(rows: Rows, mean_step: float, options: RuleOptions) -> StragglerClaim | None:
    """The stragglers by own work (step − collective wait − exposed communication), when no arrival order is
    known. The saving is measured against the ranks that *wait*, not the median rank: with 2 ranks the median
    is the midpoint and would promise half of what removing the stall gives. Ranks are split where the sorted
    own-work values jump clearly (:func:`waiting_ranks`); those below the jump are the waiting ranks, and
    their median work is what the stragglers' would be if they worked alike. None below ``straggler_share``."""
    waiting, reference = waiting_ranks([(r, w) for r, _, _, w in rows])
    rank, _, _, own = max(rows, key=lambda x: x[3])
    saving = own - reference
    if (saving / mean_step if mean_step else 0.0) < options.straggler_share:
        return None
    slow = sorted((x for x in rows if x[0] not in waiting and x[3] - reference >= options.straggler_share * mean_step),
                  key=lambda x: -x[3])
    waits = [w for r, _, w, _ in rows if r in waiting]
    many = len(waiting) > 1
    return StragglerClaim(
        rank=rank,
        slow=[x[0] for x in slow],
        waiting=sorted(waiting),
        saving_ns=saving,
        reason=f"up to {saving / 1e6:.1f} ms more work per step than the {len(waiting)} rank"
        + ("s that wait" if many else " that waits"),
        measure={
            "straggler_work_ns": int(own),
            "waiting_ranks_work_ns": int(reference),
            "waiting_ranks_wait_ns": int(statistics.median(waits)) if waits else 0,
            "median_work_ns": int(statistics.median(w for _, _, _, w in rows)),
        },
        saving_kind="upper_bound",
        saving_formula="(step − collective wait − exposed communication) of the slowest rank minus the "
        "median of that over the ranks that wait for it (the ranks below the largest jump in sorted work, "
        "when that jump is ≥ 2× the next; else the median rank): what every rank would save if the "
        "stragglers worked like the waiting ones",
        confidence="medium",
    )


def _straggler_finding(
    run: RunAnalysis, findings: list[Finding], rows: Rows, claim: StragglerClaim, mean_step: float,
    options: RuleOptions,
) -> list[Finding]:
    """The one straggler finding of a claim, whichever measure made it: the ranks' exposed communication is
    made net of the wait for the stragglers (:func:`_net_of_straggler_wait`), then, with one straggler whose
    own finding explains its extra work, that finding carries the claim (:func:`_blame_culprit`) and no
    straggler finding is made; else one ``straggler`` finding, same title, evidence, fix and saving
    structure for both measures."""
    slow = claim.slow
    names = ", ".join(str(r) for r in slow[:4]) + (" …" if len(slow) > 4 else "")
    evidence: dict[str, Any] = {"straggler_rank": claim.rank, "slow_ranks": slow, "waiting_ranks": claim.waiting,
                                **claim.measure,
                                "per_rank": [{"rank": r, "step_ns": int(s), "wait_ns": int(w), "work_ns": int(o)}
                                             for r, s, w, o in rows]}
    own = next((o for r, _, _, o in rows if r == claim.rank), 0.0)
    label = None if claim.transfer_ns is None else f"rank{'s' if len(slow) > 1 else ''} {names}"
    _net_of_straggler_wait(findings, rows, claim.rank, own, options, transfer_ns=claim.transfer_ns, label=label)
    if len(slow) == 1 and _blame_culprit(findings, claim.rank, claim.waiting, claim.saving_ns, evidence, options):
        return []  # the straggler's own finding says why, with the others' wait as its evidence
    share = claim.saving_ns / mean_step if mean_step else 0.0
    cpu = all(r.primary.kind == "cpu" for r in run.ranks)
    who = f"Rank {claim.rank} is a straggler" if len(slow) == 1 else f"Ranks {names} are stragglers"
    return [
        Finding(
            id="straggler",
            title=f"{who}: {claim.reason}",
            severity=options.severity(share),
            est_saving_ns_per_step=int(claim.saving_ns),
            share_of_step=min(share, 1.0),
            saving_kind=claim.saving_kind,
            saving_formula=claim.saving_formula,
            confidence=claim.confidence,
            evidence=evidence,
            fix=_straggler_fix(claim.rank, cpu),
            ranks=tuple(r for r, _, _, _ in rows),
            device="",
        )
    ]


def _straggler_fix(rank: int, cpu: bool) -> str:
    """Where to look for a straggler's extra work; no GPU tools on a CPU run."""
    hardware = ("a slower or busier CPU (other processes on its cores: top -H; pin ranks to cores with "
                "taskset/numactl, torchrun --local-ranks-filter to see its output)" if cpu else
                "a slower GPU or throttling (nvidia-smi -q -d PERFORMANCE), CPU affinity / NUMA "
                "(torchrun --local-ranks-filter, numactl)")
    return (f"Find why rank {rank} works longer: uneven data (sequence lengths per rank: bucket or pack them), "
            f"{hardware}, or extra work on that rank (logging, eval, checkpoint, Python run only on rank {rank}).")


# A straggler's own finding that explains its extra work must save on it at least this share of that work
CULPRIT_SHARE = 0.5
_NOT_CULPRITS = frozenset({"exposed_communication", "comm_bandwidth", "straggler"})


def _blame_culprit(findings: list[Finding], rank: int, waiting: list[int], extra: float,
                   straggler: dict[str, Any], options: RuleOptions) -> bool:
    """One problem, one finding: when a finding of the straggler rank (its own Python, its host overhead…)
    saves on it at least :data:`CULPRIT_SHARE` of its extra work more than on the waiting ranks, that finding
    is the culprit. It is rewritten in place to name the rank, with the others' wait in its evidence, and no
    separate straggler finding is made (the wait is what the culprit costs the others, not a second saving).
    Returns whether one was found."""
    best, best_excess = -1, 0.0
    for i, f in enumerate(findings):
        if f.id in _NOT_CULPRITS or f.id.startswith("mem_") or f.severity == "info" or f.ranks == ():
            continue
        per = {int(k): float(v) for k, v in (f.evidence.get("per_rank_saving_ns") or {}).items()}
        per = per or {f.ranks[0]: float(f.est_saving_ns_per_step)}
        if f.evidence.get("worst_rank", rank) != rank or rank not in per:
            continue  # its numbers are another rank's
        excess = per[rank] - (statistics.median(per.get(r, 0.0) for r in waiting) if waiting else 0.0)
        if excess >= CULPRIT_SHARE * extra and excess > best_excess:
            best, best_excess = i, excess
    if best < 0:
        return False
    f = findings[best]
    who = ", ".join(str(r) for r in waiting)
    wait = straggler.get("waiting_ranks_wait_ns", 0)
    findings[best] = dataclasses.replace(
        f,
        title=f"Rank {rank}: {f.title} (rank{'s' if len(waiting) > 1 else ''} {who} wait{'' if len(waiting) > 1 else 's'} "
        "for it)",
        ranks=(rank,),
        evidence={**f.evidence, "worst_rank": rank, "straggler": {**straggler, "extra_work_ns": int(extra)}},
        fix=f"{f.fix} Rank {rank} is the straggler: rank{'s' if len(waiting) > 1 else ''} {who} wait "
        f"{ms_text(wait)} per step for it in the collectives, and that wait goes with this fix (it is not a saving "
        "of its own).",
        notes=(*f.notes, f"rank {rank} works {ms_text(extra)} per step longer than the ranks that wait for it "
               "(the straggler rule's measure); this finding explains it"),
    )
    return True


def _net_of_straggler_wait(
    findings: list[Finding], rows: list[tuple[int, float, float, float]], straggler: int, own: float,
    options: RuleOptions, transfer_ns: int | None = None, label: str | None = None,
) -> None:
    """A rank that waits for a straggler shows that wait as exposed communication (its collective kernel
    runs, idle, until the straggler joins). That time is the straggler's finding, not the network's: replace
    ``exposed_communication`` (in place) by its value net of each rank's lateness wait (straggler's own work
    − the rank's), the largest over ranks, so the two findings do not claim the same time twice. ``transfer_ns``
    (the collectives' time once every rank is there, from arrival order) caps it when known; ``label`` names
    the stragglers in the title (default: rank ``straggler``)."""
    at = next((i for i, f in enumerate(findings) if f.id == "exposed_communication"), None)
    if at is None:
        return
    f = findings[at]
    per_rank = f.evidence.get("per_rank_saving_ns") or {str(f.ranks[0]) if f.ranks else "0": f.est_saving_ns_per_step}
    work = {r: w for r, _, _, w in rows}
    # The straggler waits for nobody: its time in collectives is the transfer itself, what any rank's exposed
    # communication can be once the wait for it is gone
    transfer = transfer_ns if transfer_ns is not None and transfer_ns >= 0 else next(
        (int(w) for r, _, w, _ in rows if r == straggler), None)
    net = {r: max(int(v) - max(int(own - work.get(int(r), own)), 0), 0) for r, v in per_rank.items()}
    if transfer is not None:
        net = {r: min(v, transfer) for r, v in net.items()}
    saving = max(net.values(), default=0)
    if saving >= f.est_saving_ns_per_step:
        return
    share = f.share_of_step * saving / f.est_saving_ns_per_step
    evidence = {**f.evidence, "per_rank_saving_ns": net, "straggler_wait_excluded": True,
                "exposed_comm_ns_per_step_with_wait": f.est_saving_ns_per_step}
    ratio = saving / f.est_saving_ns_per_step
    for i, g in enumerate(findings):
        if g.id == "comm_bandwidth":  # its saving is a fraction of the exposed time: the same fraction of less
            findings[i] = dataclasses.replace(
                g, est_saving_ns_per_step=int(g.est_saving_ns_per_step * ratio), share_of_step=g.share_of_step * ratio,
                severity=options.severity(g.share_of_step * ratio),
                evidence={**g.evidence, "straggler_wait_excluded": True},
                saving_formula=g.saving_formula + "; net of waiting for the straggler (busbw on a waiting rank "
                "is low partly because its collective kernels include the wait)",
            )
    findings[at] = dataclasses.replace(
        f,
        title=f"Communication not hidden by compute: {ms_text(saving)} per step, besides waiting for "
        f"{label or f'rank {straggler}'}",
        est_saving_ns_per_step=saving,
        share_of_step=share,
        severity=options.severity(share),
        evidence=evidence,
        saving_formula=f.saving_formula + "; net of each rank's wait for the straggler (its own work − the rank's)",
    )


def waiting_ranks(work: list[tuple[int, float]]) -> tuple[set[int], float]:
    """Ranks that wait for the others, and their median own work. ``work`` is (rank, own work) per rank.

    Sorted by work, the ranks split at the largest jump between neighbours when it stands out (at least
    twice the next largest; always with 2 ranks): the ranks below it wait, and the stragglers would work like
    them. Without a clear jump (work spread evenly: imbalance, not stragglers) the reference is the median
    rank, what balancing the same total work would give, and the waiting ranks are those at or below it."""
    ordered = sorted(work, key=lambda x: x[1])
    if len(ordered) < 2:
        return {r for r, _ in ordered}, ordered[0][1] if ordered else 0.0
    gaps = [ordered[i + 1][1] - ordered[i][1] for i in range(len(ordered) - 1)]
    largest = max(gaps)
    rest = sorted(gaps)[:-1]
    if not rest or largest >= 2 * rest[-1]:
        below = ordered[: gaps.index(largest) + 1]
        return {r for r, _ in below}, float(statistics.median(w for _, w in below))
    median = float(statistics.median(w for _, w in ordered))
    return {r for r, w in ordered if w <= median}, median
