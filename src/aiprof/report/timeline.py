"""The HTML report's interactive timeline: the page payload and the section around the viewer script.

:func:`timeline_input` gathers what the page needs beyond the :class:`~aiprof.report.model.Report`: every
rank's :class:`~aiprof.analysis.explore.RankTimeline` (computed in the analysis workers, only when an
HTML report is written) and the run directory's telemetry at full resolution. It is not part of the report
document: the JSON report never carries it. :func:`payload` merges the ranks onto one clock (ns offsets
from the run's first event), interns every name into one string table, packs the events as columns of
little-endian typed arrays in base64 (start ``f64``, duration ``f32``, name ``u32``, category ``u8``), and
adds launch → activity flows, coverage bins of capped events, telemetry counters and, per finding, the
names and the step its "show in timeline" control zooms to. :func:`section` renders the page parts: the
payload as a JSON script block (every trace string is data there, ``<`` ``>`` ``&`` escaped, never markup),
a hidden container the viewer fills, and the viewer (``aiprof/data/timeline.js``, inlined; the page's
Content-Security-Policy allows exactly that script by its SHA-256, :func:`csp`).

Budgets (``docs/reports.md``): at most :data:`MAX_EVENTS` events embedded for the whole run (~23 bytes of
base64 per event, so ≤ ~9 MB of page), each rank capped in its worker first
(:data:`aiprof.analysis.explore.MAX_EVENTS_PER_RANK`).
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import msgspec
import numpy as np

from aiprof.analysis.explore import RUN_EVENTS, Category, RankTimeline, cap
from aiprof.report.escape import json_script
from aiprof.report.model import Report
from aiprof.rules.finding import FindingRecord
from aiprof.rundir import RunDir
from aiprof.runmeta import RunTelemetry

__all__ = ["MAX_EVENTS", "TIMELINE_CSS", "TimelineInput", "csp", "payload", "script_hash", "script_text", "section",
           "timeline_input"]

MAX_EVENTS = RUN_EVENTS  # events embedded for the whole run (page size: ~23 bytes each)
MAX_TELEMETRY_POINTS = 20_000  # samples per counter read for the timeline (before clipping to the span)
MAX_FINDING_NAMES = 24

CATEGORY_NAMES = {c.value: c.name.lower() for c in Category}


@dataclass
class TimelineInput:
    """What the HTML page's timeline is drawn from: each rank's events, and telemetry counters as
    ``runcontext.read_telemetry`` returns them (None without a run directory)."""

    ranks: list[RankTimeline]
    telemetry: RunTelemetry | None = None
    notes: list[str] = field(default_factory=list)


def timeline_input(ranks: list[RankTimeline | None], found: RunDir | None) -> TimelineInput | None:
    """The timeline input of a run (None when no rank has one): the ranks' timelines and the telemetry
    of ``found``, the run directory the traces belong to (``RunAnalysis.run_dir``), if any."""
    present = [r for r in ranks if r is not None and len(r)]
    if not present:
        return None
    from aiprof.report.runcontext import read_telemetry

    telemetry = None
    if found is not None and found.telemetry_path is not None:
        telemetry = read_telemetry(found.telemetry_path, max_points=MAX_TELEMETRY_POINTS)
    return TimelineInput(present, telemetry)


@cache
def script_text() -> str:
    """The viewer script, exactly as it is inlined (its hash is in the page's CSP)."""
    return resources.files("aiprof").joinpath("data/timeline.js").read_text(encoding="utf-8")


def script_hash(text: str) -> str:
    """The CSP source of an inline script: ``'sha256-<base64 digest>'`` of its exact text (UTF-8)."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def csp(base: str, script: str) -> str:
    """The page's Content-Security-Policy ``base`` (which allows no script) allowing ``script`` only, by hash."""
    return f"{base.rstrip('; ')}; script-src {script_hash(script)}"


def section(doc: Report, data: TimelineInput) -> str:
    """The interactive timeline's page parts: a hidden viewer container (the script shows it), the
    payload as JSON data and the viewer script. Without script the static strips around it stay."""
    body = json_script(json.dumps(msgspec.to_builtins(payload(doc, data)), separators=(",", ":")))
    return (
        '<div id="aiprof-tl" class="tl" hidden>'
        '<p class="mute">Interactive timeline: drag to pan, wheel or <kbd>+</kbd>/<kbd>-</kbd> to zoom, '
        "<kbd>shift</kbd>+drag to zoom to a range, ←/→ to pan, <kbd>shift</kbd>+wheel or ↑/↓ to scroll the tracks, "
        "<kbd>0</kbd> to reset; hover for details, click to select.</p></div>"
        f'<script type="application/json" id="aiprof-timeline">{body}</script>'
        f"<script>{script_text()}</script>"
    )


TIMELINE_CSS = (
    ".tl{margin:.8em 0}.tl canvas{display:block}.tl .tl-scroll{border:1px solid var(--line);border-radius:4px}"
    ".tl canvas:focus{outline:2px solid var(--ln0)}.tl .tl-bar{display:flex;gap:.5em;align-items:center;margin:.3em 0;flex-wrap:wrap}"
    ".tl .tl-scroll{overflow-y:auto;overflow-x:hidden}"
    ".tl .tl-tip{position:fixed;pointer-events:none;background:var(--card);border:1px solid var(--line);border-radius:4px;"
    "padding:.3em .5em;font-size:12px;max-width:40em;overflow-wrap:anywhere;white-space:pre-wrap;z-index:9}"
    ".tl .tl-sel{font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere;min-height:1.4em}"
    ".tl .tl-name{unicode-bidi:isolate;font-weight:600}"
    "button.tl-show{font-size:.8em;margin:.3em 0}"
)


# ---------------------------------------------------------------------------------------------------
# The payload: what ``data/timeline.js`` reads (field order is the JSON's key order)
# ---------------------------------------------------------------------------------------------------
class Track(msgspec.Struct, kw_only=True):
    """One track (a thread, a stream…) of a rank; ``rows``: per row (depth), its ``[first, end)`` event indices."""

    rank: int
    kind: str
    label: str
    rows: list[list[int]]


class PayloadRank(msgspec.Struct, kw_only=True):
    """A rank shown: the clock offset its times are relative to, and how many events it has (shown, total)."""

    rank: int
    origin_ns: int
    base_time_ns: int
    clock: str
    events: int
    total: int


class CoverageBins(msgspec.Struct, kw_only=True):
    """Busy ns per bin of one track row whose events were capped (``busy``: base64 ``f32``)."""

    track: int
    row: int
    t0: int
    bin: int
    events: int
    busy: str


class EventColumns(msgspec.Struct, kw_only=True):
    """The events as base64 little-endian columns: start ``t`` (f64), duration ``d`` (f32), name ``n`` (u32),
    category ``k`` (u8)."""

    count: int
    t: str
    d: str
    n: str
    k: str


class Flows(msgspec.Struct, kw_only=True):
    """Launch → activity pairs as event indices (base64 ``i4``)."""

    src: str
    dst: str


class Counter(msgspec.Struct, kw_only=True):
    """One telemetry counter over the shown span (times as offsets from the run's start)."""

    label: str
    unit: str
    t: list[int]
    v: list[float | None]


class FindingTarget(msgspec.Struct, kw_only=True):
    """What a finding's "show in timeline" control zooms to: the names its evidence gives (string ids) and
    its rank's slowest step ``[t0, t1, name]`` (offsets)."""

    id: str
    names: list[int]
    rank: int | None
    step: list[int | str] | None


class Payload(msgspec.Struct, kw_only=True):
    """The page's timeline data (see the module doc)."""

    v: int
    span_ns: int
    origin_ns: int | None
    clock: str
    categories: dict[int, str]
    strings: list[str]
    tracks: list[Track]
    ranks: list[PayloadRank]
    events: EventColumns
    flows: Flows
    coverage: list[CoverageBins]
    counters: list[Counter]
    findings: list[FindingTarget | None]
    total_events: int
    left_out: list[str]


def payload(doc: Report, data: TimelineInput, max_events: int = MAX_EVENTS) -> Payload:
    """The page's timeline data (see the module doc)."""
    ranks, left_out = _shown_ranks(doc, data, max_events)
    spans = [r.span_ns for r in ranks]
    one_clock = len({r.clock for r in ranks}) <= 1 and (len(ranks) <= 1 or ranks[0].clock == "unix")
    origin = min((s[0] for s in spans if s != (0, 0)), default=0)
    shifts = [origin if one_clock else s[0] for s in spans]
    pack = _Pack()
    for r, shift in zip(ranks, shifts):
        pack.add(r, shift)
        left_out += [f"rank {r.rank}: {line}" for line in r.left_out]
    if not one_clock:
        left_out.append("the ranks' traces are not on one clock (no unix base time): each rank starts at 0")
    end = max((s[1] - shift for s, shift in zip(spans, shifts) if s != (0, 0)), default=0)
    unix = one_clock and bool(ranks) and ranks[0].clock == "unix"
    return Payload(
        v=1,
        span_ns=int(end),
        origin_ns=int(origin) if one_clock else None,
        clock=(ranks[0].clock if ranks else "trace") if one_clock else "per-rank",
        categories=CATEGORY_NAMES,
        strings=list(pack.strings),
        tracks=pack.tracks,
        ranks=pack.ranks,
        events=pack.events(),
        flows=Flows(src=_b64(_cat(pack.flow_src, "<i4")), dst=_b64(_cat(pack.flow_dst, "<i4"))),
        coverage=pack.coverage,
        counters=_counters(data.telemetry, origin, end) if unix else [],
        findings=_finding_targets(doc, pack.strings, pack.ranks),
        total_events=sum(r.total_events for r in ranks),
        left_out=left_out,
    )


def _shown_ranks(doc: Report, data: TimelineInput, max_events: int) -> tuple[list[RankTimeline], list[str]]:
    """The ranks the page shows (those of the report's other rank tables: the first, the last and the
    slowest), fitted into ``max_events`` together, and what is left out."""
    from aiprof.report.common import cap_ranks

    left_out = list(data.notes)
    capped = cap_ranks(doc)
    ranks = data.ranks
    if capped.hidden:
        shown = {r.rank for r in capped.head + capped.tail}
        left_out.append(f"{len(capped.hidden):,} ranks not shown (the first {len(capped.head)}, the last "
                        f"{len(capped.tail)} and the slowest are)")
        ranks = [r for r in ranks if r.rank in shown]
    return _fit(ranks, max_events), left_out


class _Pack:
    """Ranks' timelines concatenated: one string table, global event indices, per-rank time shifts."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {}
        self.tracks: list[Track] = []
        self.ranks: list[PayloadRank] = []
        self.coverage: list[CoverageBins] = []
        self.columns: list[tuple[np.ndarray, ...]] = []  # (start offset, duration, name, category)
        self.flow_src: list[np.ndarray] = []
        self.flow_dst: list[np.ndarray] = []
        self.count = 0

    def add(self, r: RankTimeline, shift: int) -> None:
        """One rank, its times as offsets from ``shift`` (the run's start, or its own)."""
        offset, first_track = self.count, len(self.tracks)
        local = np.array([self.strings.setdefault(s, len(self.strings)) for s in r.strings], dtype=np.uint32)
        bounds = _row_bounds(r)
        for t, (kind, label) in enumerate(zip(r.track_kind, r.track_label)):
            rows = [[lo + offset, hi + offset] for lo, hi in bounds.get(t, [])]
            self.tracks.append(Track(rank=r.rank, kind=kind, label=label, rows=rows))
        names = local[r.name] if len(r) else np.zeros(0, dtype=np.uint32)
        self.columns.append(((r.start_ns - shift).astype("<f8"), r.dur_ns.astype("<f4"), names, r.cat.astype("u1")))
        self.flow_src.append(r.flow_src + offset)
        self.flow_dst.append(r.flow_dst + offset)
        for cov in r.coverage:
            self.coverage.append(CoverageBins(track=first_track + cov.track, row=cov.row, t0=cov.start_ns - shift,
                                              bin=cov.bin_ns, events=cov.events, busy=_b64(cov.busy_ns.astype("<f4"))))
        self.ranks.append(PayloadRank(rank=r.rank, origin_ns=int(shift), base_time_ns=r.base_time_ns, clock=r.clock,
                                      events=len(r), total=r.total_events))
        self.count += len(r)

    def events(self) -> EventColumns:
        """The event columns as base64 little-endian typed arrays."""
        cols = list(zip(*self.columns)) or [[], [], [], []]
        t, d, n, k = (_b64(_cat(list(parts), dtype)) for parts, dtype in zip(cols, ("<f8", "<f4", "<u4", "u1")))
        return EventColumns(count=self.count, t=t, d=d, n=n, k=k)


def _fit(ranks: list[RankTimeline], max_events: int) -> list[RankTimeline]:
    """Every rank within a share of ``max_events`` (water filling: small ranks keep everything)."""
    sizes = [len(r) for r in ranks]
    if sum(sizes) <= max_events:
        return ranks
    lo, hi = 0, max(sizes)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(s, mid) for s in sizes) <= max_events:
            lo = mid
        else:
            hi = mid - 1
    return [cap(r, lo) for r in ranks]


def _row_bounds(r: RankTimeline) -> dict[int, list[tuple[int, int]]]:
    """Per track, per row (0..max row), the event index range (events are sorted by track, row, start)."""
    out: dict[int, list[tuple[int, int]]] = {}
    if not len(r):
        return out
    key = r.track.astype(np.int64) * 65536 + r.row.astype(np.int64)
    change = np.flatnonzero(np.diff(key)) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [key.size]])
    for lo, hi in zip(starts.tolist(), ends.tolist()):
        track, row = int(r.track[lo]), int(r.row[lo])
        rows = out.setdefault(track, [])
        while len(rows) < row:
            rows.append((lo, lo))  # an empty row (no event at that depth)
        rows.append((lo, hi))
    return out


def _cat(parts: list[np.ndarray], dtype: str) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)


def _b64(values: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(values).tobytes()).decode("ascii")


def _counters(telemetry: RunTelemetry | None, origin: int, end: int) -> list[Counter]:
    """Telemetry series over the timeline's span (plus one sample either side), as offsets from the run's
    start."""
    if telemetry is None:
        return []
    t = np.array(telemetry.t_unix_ns, dtype=np.int64) - origin
    if not t.size:
        return []
    lo = max(int(np.searchsorted(t, 0, side="right")) - 1, 0)
    hi = min(int(np.searchsorted(t, end, side="left")) + 1, t.size)
    if hi - lo < 1:
        return []
    out = []
    for name, values in telemetry.series.items():
        window = list(values[lo:hi])
        if not any(v is not None for v in window):
            continue
        unit = "%" if name.endswith("_pct") else ("B/s" if name.endswith("_per_s") else
                                                  ("B" if name.endswith("_bytes") else ""))
        out.append(Counter(label=str(name), unit=unit, t=t[lo:hi].tolist(), v=window))
    return out


def _finding_targets(doc: Report, strings: dict[str, int], ranks: list[PayloadRank]) -> list[FindingTarget | None]:
    """Per finding (in the page's order): the names its evidence gives that are events of the timeline,
    and the slowest step of its rank (offsets), which the page zooms into; None when it names nothing
    and has no step."""
    from aiprof.report.common import findings

    shift = {r.rank: r.origin_ns for r in ranks}
    base_time = {r.rank: r.base_time_ns for r in ranks}
    by_rank = {r.rank: r for r in doc.ranks}
    out: list[FindingTarget | None] = []
    for f in findings(doc):
        names = sorted({strings[s] for s in _strings_in(f.evidence) if s in strings})[:MAX_FINDING_NAMES]
        rank_no = _rank_of(f)
        rank = by_rank.get(rank_no) if rank_no is not None else None
        if rank is None and doc.ranks:
            rank = doc.ranks[0]
        window: list[int | str] | None = None
        if rank is not None and rank.steps and rank.rank in shift:
            slowest = max(rank.steps, key=lambda s: s.duration_ns)
            t0 = slowest.start_ns + base_time.get(rank.rank, 0) - shift[rank.rank]
            window = [t0, t0 + slowest.duration_ns, slowest.name]
        if not names and window is None:
            out.append(None)
            continue
        out.append(FindingTarget(id=f.id, names=names, rank=rank.rank if rank is not None else None, step=window))
    return out


def _rank_of(f: FindingRecord) -> int | None:
    worst = f.evidence.get("worst_rank") if isinstance(f.evidence, dict) else None
    if isinstance(worst, int) and not isinstance(worst, bool):
        return worst
    return f.ranks[0] if f.ranks else None


def _strings_in(value: Any, depth: int = 0) -> list[str]:
    """Every string value in a finding's evidence (nested dicts and lists; a few levels deep)."""
    if depth > 4:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings_in(v, depth + 1)]
    if isinstance(value, (list, tuple)):
        return [s for v in value[:200] for s in _strings_in(v, depth + 1)]
    return []
