"""What every renderer needs from the document: number formats and the views they all show.

Renderers differ in layout only; picking *which* rank, kernels, ops and findings to show happens here,
once, so the terminal, Markdown and HTML reports always agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from msgspec import UnsetType

from aiprof.analysis.kernels import KernelNameStats
from aiprof.analysis.ops import OpGroupStats
from aiprof.analysis.timeline import BUCKETS
from aiprof.analysis.whatif.results import FixPrediction
from aiprof.memory.units import binary
from aiprof.report.model import RankReport, Report, Step, Totals
from aiprof.rules.finding import FindingRecord

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}
# Human-facing tables (terminal, Markdown, HTML) show at most the first and last rows of a long list
# (ranks, steps) and one aggregate line for the rest; the JSON keeps every row.
ROW_CAP_FIRST = 16
ROW_CAP_LAST = 4


def fmt_ms(ns: float) -> str:
    """A duration for people: ms above 1 ms, else µs."""
    ms = ns / 1e6
    if abs(ms) >= 100:
        return f"{ms:,.0f} ms"
    if abs(ms) >= 1:
        return f"{ms:.1f} ms"
    return f"{ns / 1e3:.1f} µs"


def fmt_pct(fraction: float, digits: int = 1) -> str:
    return f"{100 * fraction:.{digits}f}%"


def fmt_bytes(n: float) -> str:
    """An amount of bytes (memory, a message, a file) in binary units: ``1536`` → ``1.50 KiB`` (docs/numbers.md
    "Units"); rates are :func:`fmt_rate`'s."""
    return binary(n)


def fmt_rate(bytes_per_s: float) -> str:
    """A rate in decimal units, as spec sheets and NCCL-tests give bandwidth: ``2.5e9`` → ``2.5 GB/s``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(bytes_per_s) >= scale:
            return f"{bytes_per_s / scale:.1f} {unit}/s"
    return f"{bytes_per_s:.0f} B/s"


def util_label(doc_or_rank: Report | RankReport) -> str:
    """CPU-only traces are accounted on the CPU: say "CPU busy" (in ops or in collectives: the share of
    the step not between ops), not "GPU utilization"."""
    return "CPU busy" if is_cpu(doc_or_rank) else "GPU utilization"


def is_cpu(doc_or_rank: Report | RankReport) -> bool:
    """A CPU-only report (or rank): accounted on the CPU, so no device words (copies, memsets, GPU)."""
    if isinstance(doc_or_rank, Report):
        return doc_or_rank.summary.device_kind == "cpu"
    return doc_or_rank.primary_device == "cpu"


def buckets(doc_or_rank: Report | RankReport) -> tuple[str, ...]:
    """The buckets worth a row: a CPU has no copy engines, so ``memcpy`` and ``memset`` (always 0 there)
    are left out of CPU-only reports, and so is ``communication`` when no rank communicated (a
    single-process CPU run), and ``compile`` when no rank compiled (no torch.compile work in the steps):
    no row or column that can only read 0."""
    ranks = doc_or_rank.ranks if isinstance(doc_or_rank, Report) else [doc_or_rank]
    compiled = any(r.totals.breakdown_ns.get("compile", 0) > 0 for r in ranks)
    shown = tuple(b for b in BUCKETS if compiled or b != "compile")
    if not is_cpu(doc_or_rank):
        return shown
    communicated = any(r.totals.breakdown_ns.get("communication", 0) > 0 for r in ranks)
    return tuple(b for b in shown if b not in ("memcpy", "memset") and (communicated or b != "communication"))


# What the buckets mean when the CPU is the device (docs/numbers.md, "CPU-only traces"): ``compute`` is
# time inside CPU ops, ``idle`` the time between them (Python, data loading); "idle" alone would read as
# an idle machine, and "utilization" as a GPU's.
_CPU_BUCKET_LABELS = {"compute": "CPU busy in ops", "compile": "compiling", "idle": "between ops"}
_CPU_SHORT_LABELS = {"compute": "in ops", "compile": "compiling", "idle": "between ops"}


def bucket_label(doc_or_rank: Report | RankReport, bucket: str, short: bool = False) -> str:
    """The name a report shows for a bucket: the bucket itself on a GPU, what it means on a CPU."""
    if not is_cpu(doc_or_rank):
        return bucket
    return (_CPU_SHORT_LABELS if short else _CPU_BUCKET_LABELS).get(bucket, bucket)


def idle_title(doc_or_rank: Report | RankReport) -> str:
    """The heading of the idle-cause breakdown."""
    return "Between ops, by cause" if is_cpu(doc_or_rank) else "Idle by cause"


def top_cause_label(doc_or_rank: Report | RankReport) -> str:
    """The column of a rank's largest idle cause."""
    return "top cause between ops" if is_cpu(doc_or_rank) else "top idle cause"


def idle_share_label(doc_or_rank: Report | RankReport, cause: str) -> str:
    """The words after "15.1%" for the largest idle cause: "of a step idle on data_loading"."""
    return f"of a step between ops in {cause}" if is_cpu(doc_or_rank) else f"of a step idle on {cause}"


def per_step(label: str) -> str:
    """A column of mean per-step durations: "compute /step"."""
    return f"{label} /step"


def total(label: str) -> str:
    """A column of durations summed over the whole trace: "self CPU, total"."""
    return f"{label}, total"


def partial_note(doc: Report) -> str | None:
    """The summary's sentence for a partial run (None when the run is whole), with the steps left out."""
    note = doc.summary.partial_note
    if not note:
        return None
    names = [s.name for r in doc.ranks for s in r.incomplete_steps]
    if names:
        note += " Left out: " + ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "") + "."
    return note


def failed_note(doc: Report) -> str | None:
    """The summary's sentence for rank files that failed (None when none did): how many of how many, which."""
    from aiprof.analysis.failures import failed_note as note

    failed = doc.summary.failed_ranks
    return note(failed, doc.summary.rank_count) if isinstance(failed, list) else None


def capture_note(doc: Report) -> str | None:
    """The summary's sentence for a graph-capture trace (None for any other trace): what kind of trace it is."""
    note = doc.summary.capture_note
    return note if isinstance(note, str) and note else None


def notes(doc: Report, focus: RankReport | None = None) -> list[str]:
    """The run's warnings, then the rank notes (the focus rank's only when given), each once: a load
    warning is both a rank note and a run warning."""
    ranks = [focus] if focus is not None else doc.ranks
    multi = focus is None and len(ranks) > 1
    out: list[str] = []
    seen: set[str] = set()
    for note in doc.warnings:
        if note not in seen:
            seen.add(note)
            out.append(note)
    for r in ranks:
        for note in r.notes:
            if note not in seen:
                seen.add(note)
                out.append(f"rank {r.rank}: {note}" if multi else note)
    return out


def focus_rank(doc: Report) -> RankReport:
    """The rank the detail sections describe: the slowest (the one the others wait for)."""
    slowest = doc.summary.slowest_rank
    return next((r for r in doc.ranks if r.rank == slowest), doc.ranks[0])


MEMORY_PREFIX = "mem_"  # memory findings save bytes, not time (pipeline.memory_last)


def findings(doc: Report) -> list[FindingRecord]:
    """Findings in the one order every format shows (the JSON's, the README's): highest saving per step
    first (the saving the finding claims from its replayed fix where it has one, else its formula's:
    docs/whatif.md 'Claims'); notes with no saving (``info``) after every finding that saves time; ties by the
    formula's saving, then severity, then id; the memory findings (``mem_*``, they save bytes) last, most
    bytes first. The
    pipeline ranks findings this way already (``rules.registry.rank_findings``, ``pipeline.memory_last``):
    sorting again here only matters for a document assembled elsewhere, and keeps the terminal,
    Markdown and HTML reports in the JSON's order."""
    return sorted(doc.findings, key=finding_order)


def finding_order(f: FindingRecord) -> tuple[bool, bool, int, float, float, int, str]:
    """The sort key of :func:`findings` (memory findings: a leak or an OOM first, then by bytes)."""
    from aiprof.rules.memory_findings import memory_rank

    memory = f.id.startswith(MEMORY_PREFIX)
    saving = -_num(f.evidence.get("est_saving_bytes")) if memory else -float(ranking_saving_ns(f))
    first = memory_rank(f.id) if memory else 0
    return (memory, f.severity == "info" and not memory, first, saving,
            0.0 if memory else -float(f.est_saving_ns_per_step), SEVERITY_ORDER.get(f.severity, 9),
            "" if memory else f.id)


def ranking_saving_ns(f: FindingRecord) -> int:
    """The saving a finding is ranked by: its claimed replayed saving, else its formula's (as
    ``rules.registry.ranking_saving_ns``)."""
    fix = FixPrediction.of(f.evidence)
    if fix is not None and fix.claimed_saving_ns_per_step is not None:
        return fix.claimed_saving_ns_per_step
    return int(f.est_saving_ns_per_step)


def rank_text(f: FindingRecord, rank_count: int) -> str:
    """Which ranks a finding is about, on a multi-rank run ("rank 1", "ranks 0, 6", "all 8 ranks (worst:
    rank 3)"); "" on one rank or for a finding without ranks."""
    if rank_count <= 1 or not f.ranks:
        return ""
    if len(f.ranks) >= rank_count:
        worst = f.evidence.get("worst_rank")
        return f"all {rank_count} ranks" + (f" (numbers of rank {worst})" if isinstance(worst, int) else "")
    shown = ", ".join(str(r) for r in f.ranks[:16]) + (" …" if len(f.ranks) > 16 else "")
    return ("ranks " if len(f.ranks) > 1 else "rank ") + shown


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def primary_index(rank: RankReport) -> int | None:
    """The device index of the rank's primary device (``gpu:3`` → 3), None for the CPU."""
    device = rank.primary_device
    if device.startswith("gpu:"):
        try:
            return int(device[4:])
        except ValueError:
            return None
    return None


def top_kernels(rank: RankReport, n: int = 10) -> list[KernelNameStats]:
    """The primary device's kernels by total time (the ``kernels`` section), longest first."""
    section = rank.kernels
    if isinstance(section, UnsetType) or not section.devices:
        return []
    index = primary_index(rank)
    device = next((d for d in section.devices if d.device == index), section.devices[0])
    return sorted(device.kernels, key=lambda k: -k.total_ns)[:n]


def top_ops(rank: RankReport, n: int = 10) -> tuple[list[OpGroupStats], str]:
    """Ops by GPU time when the trace has GPU work, else by self CPU time; and the key used."""
    section = rank.ops
    if isinstance(section, UnsetType):
        return [], ""
    rows = section.groups
    key = "gpu_total_ns" if any(r.gpu_total_ns > 0 for r in rows) else "cpu_self_ns"
    return sorted(rows, key=lambda r: -getattr(r, key))[:n], key


def mean_step_ns(totals: Totals) -> float:
    return totals.duration_ns / max(totals.steps, 1)


def saving_text(f: FindingRecord) -> str:
    """"saves ≈ 58.7 ms/step (33.1% of step)", or "" when the finding has no saving."""
    saving = f.est_saving_ns_per_step
    if saving <= 0:
        return ""
    share = f.share_of_step
    bound = "up to " if f.saving_kind == "upper_bound" else "≈ "
    text = f"saves {bound}{fmt_ms(saving)}/step" + (f" ({fmt_pct(share)} of step)" if share > 0 else "")
    return text + replayed_text(f)


def replayed_text(f: FindingRecord) -> str:
    """"; replayed fix: 59.1 ms/step (step → 118.6 ms)" when the finding carries its fix replayed on the
    dependency graph (docs/whatif.md), else "". With the fixes of one cause (docs/whatif.md 'Claims'): the
    lead says whose fixes it replayed with its own, each other one which finding counts its time; a claim below
    the replayed saving (fixes ranked above take part of it) is said."""
    fix = FixPrediction.of(f.evidence)
    if fix is None:
        return ""
    if fix.claimed_by:
        return f"; replayed fix: the same time as {fix.claimed_by}'s fix, counted there"
    text = f"; replayed fix: {fmt_ms(fix.predicted_saving_ns_per_step)}/step (step → {fmt_ms(fix.predicted_step_ns)})"
    if fix.claimed_with:
        text += f", with {', '.join(fix.claimed_with)}'s fix (one cause, counted here)"
    claimed = fix.claimed_saving_ns_per_step
    if claimed is not None and claimed < fix.predicted_saving_ns_per_step - max(fix.predicted_saving_ns_per_step // 20, 1000):
        text += f"; {fmt_ms(claimed)}/step once the fixes ranked above it are made"
    return text


RowT = TypeVar("RowT")


@dataclass(frozen=True)
class Capped(Generic[RowT]):
    """The rows a human-facing table shows (the first and last few) and those left out between them."""

    head: list[RowT]
    tail: list[RowT]
    hidden: list[RowT]


def cap_rows(rows: Sequence[RowT], first: int = ROW_CAP_FIRST, last: int = ROW_CAP_LAST) -> Capped[RowT]:
    """``rows`` when there are at most ``first + last`` (+1: one hidden row is shown rather than summed),
    else the first ``first``, the last ``last`` and the rows in between (for one aggregate line)."""
    if len(rows) <= first + last + 1:
        return Capped(list(rows), [], [])
    return Capped(list(rows[:first]), list(rows[len(rows) - last:]), list(rows[first:len(rows) - last]))


def cap_ranks(doc: Report) -> Capped[RankReport]:
    """The ranks a human-facing table shows (:func:`cap_rows`), the slowest always among them: when the
    cap would hide it, it comes first (it is the rank the others wait for)."""
    capped = cap_rows(doc.ranks)
    slowest = doc.summary.slowest_rank
    if any(r.rank == slowest for r in capped.hidden):
        return cap_rows([r for r in doc.ranks if r.rank == slowest] + [r for r in doc.ranks if r.rank != slowest])
    return capped


def hidden_ranks_text(hidden: Sequence[RankReport]) -> str:
    """"… 5,980 more ranks: median step 12.1 ms (max 14.0 ms), utilization median 71.2%"."""
    steps = sorted(r.totals.median_step_ns for r in hidden)
    utils = sorted(r.totals.gpu_utilization for r in hidden)
    return (
        f"… {len(hidden):,} more ranks: median step {fmt_ms(steps[len(steps) // 2])} (max {fmt_ms(steps[-1])}), "
        f"utilization median {fmt_pct(utils[len(utils) // 2])}"
    )


def hidden_steps_text(hidden: Sequence[Step]) -> str:
    """"… 940 more steps: median 12.1 ms, max 14.0 ms"."""
    durations = sorted(s.duration_ns for s in hidden)
    return f"… {len(hidden):,} more steps: median {fmt_ms(durations[len(durations) // 2])}, max {fmt_ms(durations[-1])}"
