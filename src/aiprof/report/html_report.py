"""HTML renderer: one self-contained file that works offline and makes no network request.

No script is needed: charts are inline SVG drawn here, tables sort with CSS alone (radio buttons and the
``order`` property), themes follow ``prefers-color-scheme``. The one script a page may hold is the
interactive timeline's viewer (``report/timeline.py``, given a ``TimelineInput``); the Content-Security-Policy
allows exactly that script by its hash (none without it) and forbids every fetch, so even a string that
escaped escaping could not run or call out.
Every string that comes from a trace goes through ``esc`` (``html.escape``); the embedded JSON (the
same document the JSON renderer writes) escapes ``<`` so no kernel name can close its script element.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET, UnsetType

from aiprof.analysis.overview import TimelineOverview
from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES
from aiprof.fsutil import HTML_GENERATOR
from aiprof.report import common as c
from aiprof.report import svg
from aiprof.report.common import fmt_bytes, fmt_ms, fmt_pct
from aiprof.report.document import mean_per_step
from aiprof.report.escape import html as esc
from aiprof.report.json_report import encode
from aiprof.report.memory_section import html_section as memory_html
from aiprof.report.exposure_section import html_section as exposure_html
from aiprof.report.arrival_section import html_section as arrival_html
from aiprof.report.health_section import html_section as health_html
from aiprof.report.inference_section import html_section as inference_html
from aiprof.report.replay_section import html_section as replay_html
from aiprof.report.wholerun_section import html_section as whole_run_html
from aiprof.report.compile_section import html_section as compile_html
from aiprof.report.compile_section import mfu_details, mfu_line
from aiprof.report.attention_section import html_section as attention_html
from aiprof.report.modules_section import html_section as modules_html
from aiprof.report.stacks_section import html_section as stacks_html
from aiprof.report.roofline_chart import chart_svg
from aiprof.roofline.section import RooflineSection
from aiprof.report.model import SECTIONS, IncompleteStep, RankReport, Report
from aiprof.rules.finding import FindingRecord

if TYPE_CHECKING:
    from aiprof.report.timeline import TimelineInput

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

_CSS = """
:root{color-scheme:light dark;--fg:#1d1d1f;--bg:#fff;--card:#f6f7f9;--mute:#666;--line:#d8dbe0;
--compute:#2e9e44;--communication:#a03fb5;--memcpy:#1c8fb0;--memset:#3a5fcd;--compile:#c9a227;--idle:#e06060;--idlebg:#f3d6d6;
--high:#c62828;--medium:#d9822b;--low:#5b7fbf;--info:#777;--ln0:#1f77b4;--ln1:#d9822b;--ln2:#2e9e44;--ln3:#a03fb5}
@media (prefers-color-scheme:dark){:root{--fg:#e6e6e6;--bg:#15171b;--card:#1f2228;--mute:#9a9ea6;--line:#363a42;
--compute:#4cc266;--communication:#c372d6;--memcpy:#3bb3d6;--memset:#6f8ff0;--compile:#e0c050;--idle:#e57373;--idlebg:#4a2a2c;
--ln0:#5aa9e6;--ln1:#f0a050;--ln2:#5cd67a;--ln3:#c98ae0}}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);background:var(--bg);max-width:1180px;margin:0 auto;padding:1em 1.5em 3em}
h1{font-size:1.45em;margin:.4em 0}h2{font-size:1.15em;margin:2em 0 .6em;padding-bottom:.2em;border-bottom:1px solid var(--line)}
h3{font-size:1em;margin:.2em 0}
nav{font-size:.9em;color:var(--mute)}nav a{color:inherit;margin-right:.9em}
.kpis{display:flex;flex-wrap:wrap;gap:.8em;margin:1em 0}
.kpi{background:var(--card);border-radius:8px;padding:.6em 1em;min-width:10em}
.kpi b{display:block;font-size:1.35em}.kpi span{color:var(--mute);font-size:.85em}
.mute{color:var(--mute)}code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
code{overflow-wrap:anywhere}pre{background:var(--card);padding:.6em .8em;border-radius:6px;overflow-x:auto;white-space:pre-wrap}
.partial{border-left:4px solid var(--medium);background:var(--card);border-radius:6px;padding:.6em 1em;margin:.8em 0;font-weight:600}
.health{background:var(--card);border-radius:6px;padding:.4em 1em;margin:.8em 0}.health h2{font-size:1em;margin:.3em 0}.health li.missing b{color:var(--high)}.health li.limited b{color:var(--medium)}
.capture{border-left:4px solid var(--low);background:var(--card);border-radius:6px;padding:.6em 1em;margin:.8em 0}
.finding{background:var(--card);border-left:4px solid var(--info);border-radius:6px;padding:.7em 1em;margin:.8em 0}
.finding.high{border-color:var(--high)}.finding.medium{border-color:var(--medium)}.finding.low{border-color:var(--low)}
.sev{font-size:.75em;font-weight:700;text-transform:uppercase;letter-spacing:.05em;margin-right:.5em}
.high .sev{color:var(--high)}.medium .sev{color:var(--medium)}.low .sev{color:var(--low)}.info .sev{color:var(--info)}
.saving{font-weight:600}dl.ev{display:grid;grid-template-columns:max-content 1fr;gap:.1em 1em;margin:.4em 0}
dl.ev dt{color:var(--mute)}dl.ev dd{margin:0;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:.4em 0;width:100%}td,th{padding:3px 8px;border-bottom:1px solid var(--line);text-align:right;vertical-align:top}
td:first-child,th:first-child{text-align:left}th{font-weight:600;white-space:nowrap}
td.name{overflow-wrap:anywhere;max-width:40em}
.chart{display:block;max-width:100%;height:auto;font-size:11px}.chart .lbl{fill:var(--fg)}.chart .mute{fill:var(--mute)}
.b-compute{fill:var(--compute)}.b-communication{fill:var(--communication)}.b-memcpy{fill:var(--memcpy)}
.b-memset{fill:var(--memset)}.b-compile{fill:var(--compile)}.b-idle{fill:var(--idle)}.b-idle-bg{fill:var(--idlebg)}
.b-data_loading{fill:#d64545}.b-host{fill:#e08a3c}.b-sync{fill:#b5a030}.b-launch{fill:#7a7ad0}.b-collective_wait{fill:#a03fb5}.b-unknown{fill:#999}
.mark{stroke:var(--fg);stroke-opacity:.35;stroke-width:1}.plot-bg{fill:var(--card)}
.ln{fill:none;stroke-width:1.5}.ln0{stroke:var(--ln0)}.ln1{stroke:var(--ln1)}.ln2{stroke:var(--ln2)}.ln3{stroke:var(--ln3)}
.legend{font-size:.85em;color:var(--mute)}.legend span{display:inline-block;margin-right:1.1em}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px;vertical-align:-1px}
.sw.compute{background:var(--compute)}.sw.communication{background:var(--communication)}.sw.memcpy{background:var(--memcpy)}
.sw.memset{background:var(--memset)}.sw.compile{background:var(--compile)}.sw.idle{background:var(--idlebg);border:1px solid var(--idle)}
.sw.ln0{background:var(--ln0)}.sw.ln1{background:var(--ln1)}.sw.ln2{background:var(--ln2)}.sw.ln3{background:var(--ln3)}
.sort>input{position:absolute;opacity:0;pointer-events:none}
.sort table{display:block}.sort thead,.sort tbody{display:flex;flex-direction:column}
.sort tr{display:grid;grid-template-columns:var(--cols)}.sort th label{cursor:pointer;text-decoration:underline dotted}
.sort th label.asc{display:none}
.roof .grid{stroke:var(--line)}.roof .axis{stroke:var(--mute);fill:none}.roof .roofline{stroke:var(--fg);stroke-width:1.5;fill:none}
.roof .pt{fill-opacity:.55;stroke-width:1}.roof .compute-bound{fill:var(--ln0);stroke:var(--ln0)}
.roof .memory-bound{fill:var(--ln2);stroke:var(--ln2)}.roof .latency-bound{fill:var(--high);stroke:var(--high)}
.roof .other{fill:var(--mute);stroke:var(--mute)}
details summary{cursor:pointer;color:var(--mute)}footer{margin-top:3em;font-size:.85em;color:var(--mute)}
@media print{nav{display:none}}
"""

_LEGEND_BUCKETS = ("compute", "communication", "memcpy", "memset", "compile", "idle")


class HtmlRenderer:
    """``render(document) -> str``. ``top`` bounds the kernel and op tables."""

    def __init__(self, top: int = 25, timeline: TimelineInput | None = None) -> None:
        if top < 1:
            raise ValueError("top must be at least 1")
        self.top = top
        self._tables = 0
        self.timeline = timeline  # the interactive timeline's input (report.timeline); None: script-free page
        self._script: str | None = None

    def render(self, doc: Report) -> str:
        self._tables = 0
        self._script = None
        embedded, slimmed = _embedded(doc)
        data = encode(embedded).decode().replace("<", "\\u003c")
        focus = c.focus_rank(doc)
        multi = len(doc.ranks) > 1
        sections = [
            ("findings", "Findings", self._findings(doc)),
            ("steps", "Step breakdown", self._steps(focus, multi)),
            ("idle", "Between ops, by cause" if c.is_cpu(focus) else "Idle causes", self._idle(focus)),
            ("wholerun", "Whole run", whole_run_html(doc)),
            ("inference", "Inference", inference_html(doc)),
            ("graph-replays", "Graph replays", replay_html(doc)),
            ("timeline", "Timeline", self._timeline(doc, focus)),
            ("memory", "Memory", memory_html(doc)),
            ("mfu", "Model FLOPs utilisation", f"<p>{esc(mfu_line(doc))}</p>" + _mfu_list(doc) if mfu_line(doc) else ""),
            ("attention", "Attention", attention_html(doc)),
            ("compile", "torch.compile", compile_html(doc)),
            ("source-lines", "Source lines", stacks_html(doc)),
            ("modules", "Modules", modules_html(doc)),
            ("ranks", "Ranks", self._ranks(doc) if multi else ""),
            ("arrival", "Arrival order", arrival_html(doc)),
            ("collectives", "Collectives", self._collectives(doc)),
            ("roofline", "Roofline", self._roofline(focus)),
            ("kernels", "Top kernels", self._kernels(focus)),
            ("ops", "Top ops", self._ops(focus)),
            ("metadata", "Run metadata", self._metadata(doc, focus)),
            ("notes", "Notes", self._notes(doc)),
        ]
        present = [(key, title, body) for key, title, body in sections if body]
        nav = "<nav>" + "".join(f'<a href="#{key}">{esc(title)}</a>' for key, title, _ in present) + "</nav>"
        body = "".join(f'<section id="{key}"><h2>{esc(title)}</h2>{html}</section>' for key, title, html in present)
        return (
            f"<!doctype html><html lang=en><head><meta charset=utf-8>{HTML_GENERATOR}"
            '<meta name=viewport content="width=device-width,initial-scale=1">'
            f'<meta http-equiv="Content-Security-Policy" content="{self._csp()}">'
            f"<title>{esc(self._title(doc))}</title><style>{_CSS}{self._extra_css()}{self._sort_css()}</style></head><body>"
            + self._header(doc, focus)
            + nav
            + body
            + f'<script type="application/json" id="aiprof-data">{data}</script>'
            + f'<footer>{esc(doc.generator)} · report schema {esc(doc.schema_version)} · '
            + (
                "the full report is embedded as JSON (element <code>#aiprof-data</code>)"
                if not slimmed
                else f"the report is embedded as JSON (element <code>#aiprof-data</code>), the {slimmed:,} ranks not "
                "shown here with their totals only (the JSON report has their steps and sections)"
            )
            + "</footer>"
            + "</body></html>\n"
        )

    # -------------------------------------------------------------------------------------------
    # Header and findings
    # -------------------------------------------------------------------------------------------
    def _title(self, doc: Report) -> str:
        return f"aiprof report · {fmt_ms(doc.summary.median_step_ns)} median step"

    def _header(self, doc: Report, focus: RankReport) -> str:
        s = doc.summary
        names = [d.name for d in focus.devices if d.name]
        device = f"{names[0]} ({focus.primary_device})" if names else focus.primary_device
        causes = mean_per_step(focus.totals, "idle_causes_ns")
        top_cause = max(IDLE_CAUSES, key=lambda k: causes[k])
        mean = c.mean_step_ns(focus.totals)
        kpis = [
            (fmt_ms(s.median_step_ns), "median step"),
            (fmt_pct(s.gpu_utilization), c.util_label(doc)),
            (f"{s.step_count}", "steps analysed"),
        ]
        if s.rank_count > 1:
            kpis.append((f"{s.rank_count}", f"ranks · slowest is rank {s.slowest_rank}"))
        if causes[top_cause] > 0:
            kpis.append((fmt_pct(causes[top_cause] / max(mean, 1)), c.idle_share_label(doc, top_cause)))
        sources = "".join(f"<div><code>{esc(p)}</code></div>" for p in doc.sources[:4])
        if len(doc.sources) > 4:
            sources += f'<div class="mute">… and {len(doc.sources) - 4} more</div>'
        partial = c.partial_note(doc)
        failed = c.failed_note(doc)
        kind = c.capture_note(doc)
        return (
            f"<h1>aiprof · {esc(device)}</h1>"
            # A crashed or incomplete run says so first (report.runstatus).
            + (f'<div class="partial" role="alert">{esc(doc.run_status.banner)}</div>' if doc.run_status else "")
            + sources
            + (f'<div class="partial" role="alert">{esc(partial)}</div>' if partial else "")
            + (f'<div class="partial" role="alert">{esc(failed)}</div>' if failed else "")
            + (f'<div class="capture">{esc(kind)}</div>' if kind else "")
            + health_html(doc)  # what the trace cannot show, first (report.health_section)
            + "<div class=kpis>"
            + "".join(f"<div class=kpi><b>{esc(v)}</b><span>{esc(k)}</span></div>" for v, k in kpis)
            + "</div>"
        )

    def _findings(self, doc: Report) -> str:
        items = c.findings(doc)
        if not items:
            return ""
        return "".join(self._finding(f, doc.summary.rank_count) for f in items)

    def _finding(self, f: FindingRecord, rank_count: int = 1) -> str:
        sev = f.severity
        sev_class = sev if sev in c.SEVERITY_ORDER else "info"
        facts = [c.saving_text(f)]
        if f.confidence:
            facts.append(f"confidence {f.confidence}")
        facts.append(c.rank_text(f, rank_count))
        if f.device:
            facts.append(f.device)
        evidence = f.evidence
        fix = f.fix.strip()
        docs = f.docs
        notes = f.notes
        return (
            f'<article class="finding {sev_class}"><h3><span class=sev>{esc(sev)}</span>{esc(f.title or f.id)}'
            f' <span class=mute>({esc(f.id)})</span></h3>'
            f'<div class=saving>{esc(" · ".join(x for x in facts if x))}</div>'
            + (f"<details open><summary>Evidence</summary>{_evidence(evidence)}</details>" if evidence else "")
            + (f"<div><b>Fix</b><pre>{esc(fix)}</pre></div>" if fix else "")
            + (f'<div class="mute">how the saving is estimated: {esc(f.saving_formula)}</div>' if f.saving_formula else "")
            + "".join(f'<div class="mute">note: {esc(n)}</div>' for n in notes)
            + (f'<div class="mute">more: <code>{esc(docs)}</code></div>' if docs else "")
            + "</article>"
        )

    # -------------------------------------------------------------------------------------------
    # Steps, idle, timeline
    # -------------------------------------------------------------------------------------------
    def _steps(self, rank: RankReport, multi: bool) -> str:
        steps = rank.steps
        if not steps:
            return ""
        rows = [
            (s.name, {b: float(s.breakdown_ns.get(b, 0)) for b in BUCKETS}, float(s.duration_ns), fmt_ms(s.duration_ns))
            for s in steps[:60]
        ]
        per = mean_per_step(rank.totals, "breakdown_ns")
        mean = c.mean_step_ns(rank.totals)
        table = _table(
            ["bucket", "mean per step", "share of step"],
            [[esc(c.bucket_label(rank, b)), fmt_ms(per[b]), fmt_pct(per[b] / max(mean, 1))] for b in c.buckets(rank)],
        )
        who = f"rank {rank.rank}, " if multi else ""
        more = (
            f'<p class="mute">first 60 of {len(steps):,} steps; {esc(c.hidden_steps_text(steps[60:]))}</p>'
            if len(steps) > 60
            else ""
        )
        return (
            f'<p class="mute">{esc(who + rank.primary_device)}: every nanosecond of each step window in exactly one bucket.</p>'
            + _legend(rank, c.buckets(rank))
            + svg.stacked_rows(rows, BUCKETS, names={b: c.bucket_label(rank, b) for b in BUCKETS})
            + more
            + table
            + _incomplete(rank)
        )

    def _idle(self, rank: RankReport) -> str:
        causes = mean_per_step(rank.totals, "idle_causes_ns")
        mean = c.mean_step_ns(rank.totals)
        present = [k for k in sorted(IDLE_CAUSES, key=lambda k: -causes[k]) if causes[k] > 0]
        if not present:
            return ""
        rows = [(k, {k: causes[k]}, mean, f"{fmt_ms(causes[k])} · {fmt_pct(causes[k] / max(mean, 1))}") for k in present]
        what = (
            "What the process was doing outside CPU ops"
            if c.is_cpu(rank)
            else "What the host was doing while the device sat idle"
        )
        return (
            f'<p class="mute">{what} (mean per step; bars are to the scale of a whole step).</p>'
            + svg.stacked_rows([(k, p, mean, r) for k, p, _, r in rows], IDLE_CAUSES, value_w=150)
        )

    def _csp(self) -> str:
        """No script, or only the timeline viewer's inline script (by its hash) when the page has it."""
        from aiprof.report.timeline import csp

        return csp(CSP, self._script) if self._script is not None else CSP

    def _extra_css(self) -> str:
        if self.timeline is None:
            return ""
        from aiprof.report.timeline import TIMELINE_CSS

        return TIMELINE_CSS

    def _interactive(self, doc: Report) -> str:
        """The interactive timeline (report.timeline) when the renderer has its input, else ""."""
        if self.timeline is None:
            return ""
        from aiprof.report.timeline import script_text, section

        self._script = script_text()
        return section(doc, self.timeline)

    def _timeline(self, doc: Report, focus: RankReport) -> str:
        interactive = self._interactive(doc)
        static = self._static_timeline(doc, focus)
        return interactive + static

    def _static_timeline(self, doc: Report, focus: RankReport) -> str:
        multi = len(doc.ranks) > 1
        strips: list[str] = []
        span = None
        order = BUCKETS[:-1]
        capped = c.cap_ranks(doc) if multi else c.cap_rows([focus])
        for rank in capped.head + capped.tail:
            ov = rank.timeline_overview
            if isinstance(ov, UnsetType) or not ov.bins:
                continue
            span = span or ov
            marks = _step_marks(rank, ov)
            for dev in ov.devices:
                if multi and dev.device != rank.primary_device:
                    continue
                series = {b: dev.series(b) for b in order}
                label = f"rank {rank.rank}" if multi else dev.device
                strips.append(svg.occupancy_strip(series, order, ov.bin_ns, marks, label))
            if capped.hidden and rank is capped.head[-1]:
                strips.append(f'<p class="mute">… {len(capped.hidden):,} more ranks (every rank is in the JSON report)</p>')
        if not strips or span is None:
            return ""
        total = span.end_ns - span.start_ns
        where = "CPU" if c.is_cpu(doc) else "device"
        note = (
            f"Each rank's primary {where} over its own analysed span"
            if multi
            else ("The CPU over the analysed steps" if c.is_cpu(doc) else "Each device over the analysed steps")
        ) + "; bars show the share of each time bin; thin lines are step boundaries." + (
            f" The {len(span.segments)} profiler cycles are joined end to end (the first lines): the time between "
            "them was not recorded and is not shown." if not isinstance(span.segments, UnsetType) and span.segments else "")
        return (
            f'<p class="mute">{esc(note)}</p>'
            + _legend(doc, c.buckets(doc))
            + "".join(strips)
            + svg.time_axis(total)
            + self._telemetry(doc, focus)
        )

    def _telemetry(self, doc: Report, focus: RankReport) -> str:
        """The run directory's counters over the span the timeline shows (the focus rank's analysed
        span), one chart per unit: samples outside the span are left out, each chart's y-axis says its
        unit and scale, and a share of the machine never shares an axis with a share of one core."""
        tel = doc.telemetry
        ov = focus.timeline_overview
        if tel is None or isinstance(ov, UnsetType) or not ov.bins:
            return ""
        base = ov.base_time_ns
        total = max(ov.end_ns - ov.start_ns, 1)
        xs = [x if (x := _overview_x(ov, int(t) - base)) is not None else -1.0 for t in tel.t_unix_ns]
        inside = sum(1 for x in xs if 0 <= x <= 1)
        series = tel.series
        source = f"from <code>{esc(tel.path)}</code>"
        if inside < 2:
            return (
                f'<h3 style="margin-top:1em">Telemetry</h3><p class="mute">{inside} of {len(xs)} samples fall inside '
                f"the {esc(fmt_ms(total))} span: too few to chart ({source}; <code>aiprof run --telemetry-interval</code> "
                "samples more often).</p>"
            )
        charts = []
        for title, keys, fmt, axis, y_max in _telemetry_groups(series):
            chart = svg.line_chart(xs, {k: series[k] for k in keys}, title, fmt, axis=axis, y_max=y_max)
            if chart:
                legend = "".join(f'<span><i class="sw ln{i % 4}"></i>{esc(k)}</span>' for i, k in enumerate(keys))
                charts.append(chart + f'<div class="legend" style="margin-left:12%">{legend}</div>')
        if not charts:
            return ""
        return (
            f'<h3 style="margin-top:1em">Telemetry</h3><p class="mute">The {inside} of {len(xs)} samples that fall inside '
            f"the span above ({source}), on its time axis.</p>" + "".join(charts)
        )

    # -------------------------------------------------------------------------------------------
    # Ranks and collectives
    # -------------------------------------------------------------------------------------------
    def _ranks(self, doc: Report) -> str:
        """A bar and a row per rank; past ``c.ROW_CAP_FIRST + ROW_CAP_LAST`` ranks, the first and last
        ones (the slowest always among them) and one aggregate line for the rest."""
        slowest = doc.summary.slowest_rank
        bars = []
        rows = []
        capped = c.cap_ranks(doc)
        for r in capped.head + capped.tail:
            t = r.totals
            mean = c.mean_step_ns(t)
            per = mean_per_step(t, "breakdown_ns")
            causes = mean_per_step(t, "idle_causes_ns")
            top = max(IDLE_CAUSES, key=lambda k: causes[k])
            tag = " (slowest)" if r.rank == slowest else ""
            bars.append((f"rank {r.rank}{tag}", per, mean, f"median {fmt_ms(t.median_step_ns)}"))
            rows.append(
                [
                    (esc(f"{r.rank}{tag}"), r.rank),
                    (esc(r.primary_device), r.primary_device),
                    (fmt_ms(t.median_step_ns), t.median_step_ns),
                    (fmt_pct(t.gpu_utilization), t.gpu_utilization),
                    (fmt_ms(per["compute"]), per["compute"]),
                    (fmt_ms(per["communication"]), per["communication"]),
                    (fmt_ms(per["idle"]), per["idle"]),
                    (esc(f"{top} {fmt_ms(causes[top])}") if causes[top] > 0 else "-", causes[top]),
                ]
            )
        head = ["rank", "device", "median step", "busy" if c.is_cpu(doc) else "util"]
        head += [c.per_step(c.bucket_label(doc, b, short=True) if c.is_cpu(doc) else b[:4] if b == "communication" else b)
                 for b in ("compute", "communication", "idle")]
        head.append(c.per_step(c.top_cause_label(doc)))
        hidden = f'<p class="mute">{esc(c.hidden_ranks_text(capped.hidden))} (every rank is in the JSON report)</p>' if capped.hidden else ""
        return (
            '<p class="mute">Mean step per rank by bucket (the bars), median step on the right; the slowest rank '
            "sets the pace for the others.</p>"
            + _legend(doc, c.buckets(doc))
            + svg.stacked_rows(bars, BUCKETS, value_w=120, names={b: c.bucket_label(doc, b) for b in BUCKETS})
            + self._sortable(head, rows, "minmax(6em,1fr) " + _fixed_cols(head[1:-1]) + " minmax(9em,1.4fr)")
            + hidden
        )

    def _collectives(self, doc: Report) -> str:
        groups: dict[tuple[str, int | None, str | None, int | None], _CollectiveGroup] = {}
        overlap_rows: list[list[tuple[str, Any]]] = []
        hidden_overlap = 0
        for r in doc.ranks:
            comm = r.communication
            if not comm:
                continue
            for s in comm.summary:
                key = (s.collective, s.group_size, s.dtype, s.message_bytes)
                g = groups.setdefault(key, _CollectiveGroup())
                g.count += s.count
                g.total_ns += s.total_ns
                g.ranks.add(r.rank)
                if s.busbw_gb_per_s is not None:
                    g.busbw.append(float(s.busbw_gb_per_s))
            for o in comm.overlap:
                if o.comm_ns:
                    if len(overlap_rows) >= c.ROW_CAP_FIRST + c.ROW_CAP_LAST:
                        hidden_overlap += 1
                        continue
                    overlap_rows.append(
                        [
                            (str(r.rank), r.rank),
                            (esc(o.device), o.device),
                            (fmt_ms(o.comm_ns), o.comm_ns),
                            (fmt_ms(o.exposed_ns), o.exposed_ns),
                            (f"{o.overlap_pct:.1f}%", o.overlap_pct),
                        ]
                    )
        if not groups:
            return exposure_html(doc)  # a CPU run's host-side collectives have no kernel rows above
        rows = []
        for (name, size, dtype, nbytes), g in sorted(groups.items(), key=lambda kv: -kv[1].total_ns):
            bw = sum(g.busbw) / len(g.busbw) if g.busbw else None
            rows.append(
                [
                    (esc(name), str(name)),
                    (esc(size if size is not None else "?"), size or 0),
                    (esc(dtype or "?"), str(dtype)),
                    (fmt_bytes(nbytes) if isinstance(nbytes, (int, float)) else "?", nbytes or 0),
                    (f"{g.count:,}", g.count),
                    (fmt_ms(g.total_ns), g.total_ns),
                    (fmt_ms(g.total_ns / max(g.count, 1)), g.total_ns / max(g.count, 1)),
                    (f"{bw:.2f}" if bw is not None else "?", bw or 0),
                    (str(len(g.ranks)), len(g.ranks)),
                ]
            )
        head = ["collective", "group", "dtype", "message", "calls", c.total("time"), "mean /call", "busbw GB/s", "ranks"]
        out = '<p class="mute">All ranks together; bus bandwidth by the NCCL-tests convention.</p>' + self._sortable(
            head, rows, "minmax(8em,1.3fr) " + _fixed_cols(head[1:])
        )
        if overlap_rows:
            out += "<h3>Communication hidden behind compute</h3>" + self._sortable(
                ["rank", "device", c.total("communication"), c.total("exposed"), "overlapped"],
                overlap_rows,
                "minmax(4em,1fr) " + _fixed_cols(["device", c.total("communication"), c.total("exposed"), "overlapped"]),
            )
            if hidden_overlap:
                out += f'<p class="mute">… {hidden_overlap:,} more rows (every rank is in the JSON report)</p>'
        return out + exposure_html(doc)  # exposed vs hidden per phase and group (report.exposure_section)

    # -------------------------------------------------------------------------------------------
    # Roofline, kernels, ops
    # -------------------------------------------------------------------------------------------
    def _roofline(self, rank: RankReport) -> str:
        roof = rank.roofline
        if isinstance(roof, UnsetType):
            return ""
        chart = chart_svg(roof)
        rows = []
        for r in sorted(roof.rows, key=lambda r: -r.time_ns)[: self.top]:
            pct, ai = r.pct_of_roof, r.arithmetic_intensity_flops_per_byte
            rows.append(
                [
                    (_name_cell(r.name, r.input_dims), r.name),
                    (f"{r.count:,}", r.count),
                    (fmt_ms(r.time_ns), r.time_ns),
                    (esc(r.bound or "?"), r.bound),
                    (_num_text(ai, "{:.1f}"), ai or 0),
                    (f"{pct:.0f}%" if pct is not None else "?", pct or 0),
                    (fmt_ms(r.saving_ns), r.saving_ns),
                ]
            )
        note = roof.peaks_note
        head = ["op (shapes)", "calls", c.total("time"), "class", "FLOP/byte", "of roof", c.total("saving at roof")]
        table = self._sortable(
            head,
            rows,
            "minmax(14em,1fr) " + _fixed_cols(head[1:]),
        ) if rows else ""
        measured = self._roofline_measured(roof)
        if not chart and not table and not measured:
            return ""
        extra = "".join(f'<p class="mute">{esc(n)}</p>' for n in roof.notes)  # assumed dtypes, no-ops
        if measured and table:  # two kinds of numbers side by side: say which is which
            table = '<p class="mute">Ops: estimated from shapes.</p>' + table
        return (f'<p class="mute">{esc(note)}</p>' if note else "") + extra + chart + table + measured

    def _roofline_measured(self, roof: RooflineSection) -> str:
        """Nsight Compute's measured points (``analyze --ncu``): one row per profiled kernel, measured (ncu)
        beside the launching op's estimate from shapes."""
        points = [] if isinstance(roof.measured, UnsetType) else roof.measured
        if not points:
            return ""

        def num(value: float | None, scale: float, pattern: str) -> tuple[str, float]:
            return ("?", -1) if value is None else (pattern.format(value / scale), value)

        rows = []
        for p in points[: self.top]:
            est = p.est_flops
            rows.append([
                (f'<td class=name title="{esc(p.kernel)}">{esc(_short(p.kernel or "?"))}', p.kernel),
                (esc(p.op or ("(not on the timeline)" if p.row < 0 else "—")), p.op or ""),
                num(p.duration_ns, 1e3, "{:,.1f} µs"),
                num(p.achieved_flops_per_s, 1e9, "{:,.1f}"),
                num(p.achieved_bytes_per_s, 1e9, "{:,.1f}"),
                num(p.flop_per_byte, 1.0, "{:.2f}"),
                num(p.sm_sol_pct, 1.0, "{:.0f}%"),
                num(p.memory_sol_pct, 1.0, "{:.0f}%"),
                (f"{num(est, 1e9, '{:,.3f}')[0]} / {num(p.flops, 1e9, '{:,.3f}')[0]}", est if est is not None else -1),
            ])
        matched = sum(1 for p in points if p.row >= 0)
        source = roof.measured_source if isinstance(roof.measured_source, str) and roof.measured_source else "Nsight Compute"
        head = (f'<p class="mute">Kernels: measured (ncu) by {esc(source)}, '
                f"{matched:,} of {len(points):,} matched to the timeline by name, launch order, grid and block; "
                "FLOPs from the FP32/FP64/FP16 pipe counters (tensor-core FLOPs are not counted), bytes from "
                "DRAM.</p>")
        more = (f'<p class="mute">… {len(points) - self.top:,} more kernels (all are in the JSON report)</p>'
                if len(points) > self.top else "")
        return head + self._sortable(
            ["kernel", "op", "time", "GFLOP/s", "GB/s", "FLOP/byte", "SM SOL", "mem SOL", "GFLOP est. / measured"],
            rows,
            "minmax(14em,1fr) minmax(8em,auto) repeat(7,minmax(5em,auto))",
        ) + more

    def _kernels(self, rank: RankReport) -> str:
        rows = []
        for k in c.top_kernels(rank, self.top):
            rows.append(
                [
                    (f'<td class=name title="{esc(k.name)}">{esc(_short(k.name))}', k.name),
                    (f"{k.count:,}", k.count),
                    (fmt_ms(k.total_ns), k.total_ns),
                    (fmt_ms(k.mean_ns), k.mean_ns),
                    (f"{k.kernel_time_share_pct:.1f}%", k.kernel_time_share_pct),
                    (_num_text(k.sm_efficiency_pct, "{:.0f}%"), k.sm_efficiency_pct or 0),
                    (_num_text(k.achieved_occupancy_pct, "{:.0f}%"), k.achieved_occupancy_pct or 0),
                ]
            )
        if not rows:
            return ""
        head = ["kernel", "calls", c.total("time"), "mean /call", "share", "SM eff.", "occupancy"]
        return self._sortable(
            head,
            rows,
            "minmax(16em,1fr) " + _fixed_cols(head[1:]),
        )

    def _ops(self, rank: RankReport) -> str:
        ops, key = c.top_ops(rank, self.top)
        if not ops:
            return ""
        # A CPU-only trace launched no GPU work: its GPU columns could only read 0, so they are left out.
        cols = [("gpu_total_ns", "GPU incl."), ("gpu_self_ns", "GPU self")] if key == "gpu_total_ns" else []
        cols += [("cpu_total_ns", "CPU incl."), ("cpu_self_ns", "CPU self")]
        rows = []
        for o in ops:
            rows.append(
                [
                    (_name_cell(o.name, o.input_shapes), o.name),
                    (f"{o.count:,}", o.count),
                ]
                + [(fmt_ms(getattr(o, k)), getattr(o, k)) for k, _ in cols]
            )
        basis = "GPU time (kernels the op launched, its children's included)" if key == "gpu_total_ns" else "self CPU time"
        head = ["op", "calls"] + [c.total(label) for _, label in cols]
        note = f"By {basis}; every time is a total over the whole trace (incl.: the op's children included)."
        return f'<p class="mute">{esc(note)}</p>' + self._sortable(
            head, rows, "minmax(16em,1fr) " + _fixed_cols(head[1:])
        )

    # -------------------------------------------------------------------------------------------
    # Metadata and notes
    # -------------------------------------------------------------------------------------------
    def _metadata(self, doc: Report, focus: RankReport) -> str:
        pairs: list[tuple[str, Any]] = [("generator", doc.generator), ("report schema", doc.schema_version)]
        pairs.append(("rank numbering", focus.rank_source))
        pairs.append(("events (rank shown)", f"{focus.event_count:,}"))
        for k, v in focus.distributed.items():
            pairs.append((f"distributed.{k}", v))
        for k, v in focus.trace_metadata.items():
            pairs.append((f"trace.{k}", v))
        index = c.primary_index(focus)
        prop = next((p for p in focus.device_properties if p.index == index), None)
        for k, v in (msgspec.structs.asdict(prop) if prop is not None else {}).items():
            pairs.append((f"device.{k}", fmt_bytes(v) if k.endswith("_bytes") and isinstance(v, (int, float)) else v))
        if doc.run_metadata is not None:  # every field meta.json sets, as the JSON holds it
            for k, v in msgspec.to_builtins(doc.run_metadata).items():
                pairs.append((f"run.{k}", v))
        out = "<dl class=ev>" + "".join(f"<dt>{esc(k)}</dt><dd>{_value(v)}</dd>" for k, v in pairs if v not in (None, "", {}, [])) + "</dl>"
        # The generic block renderer reads plain data: the section as its JSON holds it.
        compat = None if isinstance(focus.compat, UnsetType) else msgspec.json.decode(encode(focus.compat))
        if isinstance(compat, dict) and c.is_cpu(focus):
            compat = _without_empty(compat)  # a CPU has no kernels, copies or device utilization: no 0 rows
        if isinstance(compat, dict) and compat:
            out += "<details><summary>Peer-convention numbers (HTA, TraceLens, TensorBoard plugin)</summary>"
            out += _evidence(compat) + "</details>"
        return out

    def _notes(self, doc: Report) -> str:
        notes = c.notes(doc)
        if not notes:
            return ""
        shown = notes[:50]
        return "<ul>" + "".join(f"<li>{esc(n)}</li>" for n in shown) + "</ul>" + (
            f'<p class="mute">… and {len(notes) - 50} more</p>' if len(notes) > 50 else ""
        )

    # -------------------------------------------------------------------------------------------
    # Sortable tables without script
    # -------------------------------------------------------------------------------------------
    def _sortable(self, head: Sequence[str], rows: list[list[tuple[str, Any]]], cols: str) -> str:
        """A table that sorts by any column with CSS alone: one radio pair (descending, ascending) per
        column; each row carries its rank under every column as ``--oN`` and the checked radio sets
        the rows' flex ``order`` to it (or to its negation for ascending)."""
        self._tables += 1
        tid = f"t{self._tables}"
        ranks = [_ranks([r[j][1] for r in rows]) for j in range(len(head))]
        radios = "".join(
            f'<input type=radio name="{tid}" id="{tid}-{j}-{d}" aria-label="sort by {esc(h)}">'
            for j, h in enumerate(head)
            for d in ("d", "a")
        )
        ths = "".join(
            f'<th><label for="{tid}-{j}-d" class=desc>{esc(h)}</label><label for="{tid}-{j}-a" class=asc>{esc(h)}</label></th>'
            for j, h in enumerate(head)
        )
        body = []
        for i, row in enumerate(rows):
            style = ";".join(f"--o{j}:{ranks[j][i]}" for j in range(len(head)))
            cells = "".join(cell if cell.startswith("<td") else f"<td>{cell}</td>" for cell, _ in row)
            body.append(f'<tr style="{style}">{cells}</tr>')
        return (
            f'<div class="sort" id="{tid}" style="--cols:{cols}">{radios}<table><thead><tr>{ths}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )

    def _sort_css(self) -> str:
        """Rules for every sortable table rendered (called after the body is built)."""
        rules = []
        for t in range(1, self._tables + 1):
            for j in range(12):
                tid = f"#t{t}-{j}"
                rules.append(
                    f"{tid}-d:checked~table tbody tr{{order:var(--o{j})}}"
                    f"{tid}-a:checked~table tbody tr{{order:calc(-1*var(--o{j}))}}"
                    f'{tid}-d:checked~table label[for="t{t}-{j}-d"]{{display:none}}'
                    f'{tid}-d:checked~table label[for="t{t}-{j}-a"]{{display:inline}}'
                    f'{tid}-d:checked~table label[for="t{t}-{j}-a"]::after{{content:" ▼"}}'
                    f'{tid}-a:checked~table label[for="t{t}-{j}-d"]::after{{content:" ▲"}}'
                )
        return "".join(rules)


# ---------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------
def _embedded(doc: Report) -> tuple[Report, int]:
    """The document the page embeds, and how many ranks were slimmed: every rank, but those the page
    does not show (``c.cap_ranks``) with their totals and notes only: no per-step lists and no detail
    sections (kernels, ops, roofline…), which make most of a rank's size. A run of thousands of ranks
    stays a page, not hundreds of MB; the JSON report keeps everything."""
    capped = c.cap_ranks(doc)
    if not capped.hidden:
        return doc, 0
    hidden = {id(r) for r in capped.hidden}
    ranks = [_slim(r) if id(r) in hidden else r for r in doc.ranks]
    return msgspec.structs.replace(doc, ranks=ranks), len(hidden)


def _slim(rank: RankReport) -> RankReport:
    devices = [msgspec.structs.replace(d, steps=[]) for d in rank.devices]
    return msgspec.structs.replace(rank, steps=[], devices=devices, memory=UNSET, **dict.fromkeys(SECTIONS, UNSET))


def _ranks(keys: list[Any]) -> list[int]:
    """Each row's position when sorted by this column, descending for numbers, A→Z for text."""
    numeric = all(isinstance(k, (int, float)) and not isinstance(k, bool) for k in keys)
    if numeric:
        order = sorted(range(len(keys)), key=lambda i: -float(keys[i]))
    else:
        order = sorted(range(len(keys)), key=lambda i: str(keys[i]).lower())
    out = [0] * len(keys)
    for pos, i in enumerate(order):
        out[i] = pos + 1
    return out


def _legend(doc_or_rank: Report | RankReport, shown: Sequence[str] | None = None) -> str:
    """The colour key of the buckets shown, each under the name the report gives it (``c.bucket_label``)."""
    kept = [b for b in _LEGEND_BUCKETS if shown is None or b in shown]
    return '<div class="legend">' + "".join(
        f'<span><i class="sw {b}"></i>{esc(c.bucket_label(doc_or_rank, b))}</span>' for b in kept
    ) + "</div>"


def _incomplete(rank: RankReport) -> str:
    """The steps of a partial trace left out of the numbers, each with the reason."""
    steps: list[IncompleteStep] = rank.incomplete_steps
    if not steps:
        return ""
    rows = [[esc(s.name), fmt_ms(s.duration_ns), esc(s.detail or s.reason)] for s in steps[:60]]
    return (
        f'<p class="mute">{len(steps)} incomplete step(s): the trace holds their CPU side but not their device side, '
        "so they are left out of every number above and of the findings.</p>"
        + _table(["incomplete step", "window", "why"], rows)
    )


def _step_marks(rank: RankReport, ov: TimelineOverview) -> list[float]:
    """Step starts (and, for several profiler cycles, the joins between them) as fractions of the strip."""
    marks = []
    for s in rank.steps:
        x = _overview_x(ov, s.start_ns)
        if x is not None and 0 < x < 1:
            marks.append(x)
    joins = [x for lo, _ in _segments(ov)[1:] if (x := _overview_x(ov, lo)) is not None]
    return joins + marks[: 200 - len(joins)]


def _segments(ov: TimelineOverview) -> list[list[int]]:
    """The pieces of the span the strip joins end to end (the profiler cycles; none with one cycle)."""
    return [] if isinstance(ov.segments, UnsetType) else ov.segments


def _overview_x(ov: TimelineOverview, t_ns: int) -> float | None:
    """Where ``t_ns`` (trace clock) falls on the overview strip, 0..1; with several profiler cycles the strip
    joins them end to end, and a time between two cycles (not recorded) falls nowhere (None)."""
    start, end = ov.start_ns, ov.end_ns
    length = max(end - start, 1)
    segments = _segments(ov) or [[start, end]]
    done = 0
    for lo, hi in segments:
        lo, hi = int(lo), int(hi)
        if t_ns < lo:
            return None if done else (t_ns - lo) / length
        if t_ns <= hi:
            return (done + t_ns - lo) / length
        done += hi - lo
    return (done + t_ns - int(segments[-1][1])) / length


def _telemetry_groups(series: dict[str, list[float | None]]) -> list[tuple[str, list[str], str, str, float | None]]:
    """Which counters share a chart, with the chart's unit (``svg`` formats), the y-axis label and a
    fixed top of scale (None: from the data): counters share a chart only when they share a unit and a
    meaning of 100 % (the machine's ``cpu_pct``, 100 = every core, and the process tree's
    ``proc_cpu_pct``, 100 = one core, are two charts)."""
    keys = list(series)
    gpu_util = [k for k in keys if k.endswith("_util_pct") and k.startswith("gpu") and "mem" not in k]
    groups: list[tuple[str, list[str], str, str, float | None]] = [
        ("CPU, whole machine", [k for k in ("cpu_pct",) if k in series], "pct", "% of all cores", 100.0),
        ("CPU, profiled processes", [k for k in ("proc_cpu_pct",) if k in series], "pct", "% of one core", None),
        ("GPU utilization", gpu_util[:4], "pct", "% of time a kernel ran", 100.0),
        ("memory", [k for k in ("mem_used_bytes", "tree_rss_bytes") if k in series], "bytes", "bytes", None),
        ("GPU memory", [k for k in keys if k.endswith("_mem_used_bytes") and k.startswith("gpu")][:4], "bytes", "bytes", None),
        ("disk", [k for k in ("disk_read_bytes_per_s", "disk_write_bytes_per_s") if k in series], "bytes_per_s", "bytes/s", None),
        ("network", [k for k in ("net_recv_bytes_per_s", "net_sent_bytes_per_s") if k in series], "bytes_per_s", "bytes/s", None),
    ]
    return [g for g in groups if g[1]]


def _fixed_cols(heads: Sequence[str]) -> str:
    """Fixed grid tracks for a sortable table's number columns, each as wide as its header (nowrap) or
    a formatted number, whichever is wider: every row of the CSS grid then lines up with the header."""
    return " ".join(f"{max(6.0, 0.6 * len(h) + 1.6):.1f}em" for h in heads)


def _empty(v: Any) -> bool:
    if v is None or v is False:
        return True
    if isinstance(v, (int, float)):
        return v == 0
    return isinstance(v, (str, dict, list)) and len(v) == 0


def _without_empty(value: Any) -> Any:
    """``value`` without the entries that say nothing: a peer's block it does not define
    (``defined: false``), keys whose value is 0 / None / empty, and table columns that are so in every row."""
    if isinstance(value, dict):
        if value.get("defined") is False:
            return {}
        out = {k: _without_empty(v) for k, v in value.items() if k != "defined"}
        return {k: v for k, v in out.items() if not _empty(v)}
    if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
        keep = [k for k in dict.fromkeys(k for r in value for k in r) if not all(_empty(r.get(k)) for r in value)]
        return [{k: r.get(k) for k in keep} for r in value]
    return value


@dataclass
class _CollectiveGroup:
    """One row of the collectives table: a collective, group size, dtype and size summed over the ranks."""

    count: int = 0
    total_ns: int = 0
    ranks: set[int] = field(default_factory=set)
    busbw: list[float] = field(default_factory=list)


def _short(name: str, n: int = 110) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def _name_cell(name: Any, shapes: Any) -> str:
    extra = f'<div class="mute"><code>{esc(_short(str(shapes), 160))}</code></div>' if shapes else ""
    return f'<td class=name title="{esc(name)}">{esc(_short(str(name)))}{extra}'


def _num_text(value: Any, pattern: str) -> str:
    return pattern.format(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"


def _value(v: Any) -> str:
    """A scalar, list or dict from the document, escaped; long structures folded into <details>."""
    if isinstance(v, (dict, list)):
        text = json.dumps(v, ensure_ascii=False, default=str)
        if len(text) <= 160:
            return f"<code>{esc(text)}</code>"
        return f"<details><summary>{len(v)} item(s)</summary><pre>{esc(json.dumps(v, indent=1, ensure_ascii=False, default=str))}</pre></details>"
    return esc(v)


def _evidence_value(key: str, v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return esc(v)
    if isinstance(v, (int, float)) and math.isfinite(float(v)):
        if key.endswith("_ns") or "_ns_per" in key or key == "ns_per_step":
            return esc(fmt_ms(float(v)))
        if key.endswith("_bytes") or "_bytes_per" in key:
            return esc(fmt_bytes(float(v)))
        if key.endswith("_pct"):
            return esc(f"{float(v):.1f}%")
        if key.startswith("share") or key.endswith("_share") or key.endswith("_fraction") or key == "utilization":
            return esc(fmt_pct(float(v)))
        return esc(f"{v:,}" if isinstance(v, int) else f"{v:,.4g}")
    if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
        return _evidence_table(v)
    if isinstance(v, dict):
        return _evidence(v)
    return _value(v)


def _evidence(ev: Any) -> str:
    if isinstance(ev, dict):
        return "<dl class=ev>" + "".join(f"<dt>{esc(k)}</dt><dd>{_evidence_value(str(k), v)}</dd>" for k, v in ev.items()) + "</dl>"
    if isinstance(ev, list) and ev and all(isinstance(x, dict) for x in ev):
        return _evidence_table(ev)
    return _value(ev)


def _evidence_table(rows: list[dict[str, Any]], limit: int = 10) -> str:
    keys: list[str] = []
    for r in rows[:limit]:
        keys += [k for k in r if k not in keys]
    head = "".join(f"<th>{esc(k)}</th>" for k in keys)
    body = "".join(
        "<tr>" + "".join(f"<td>{_evidence_value(k, r.get(k))}</td>" for k in keys) + "</tr>" for r in rows[:limit]
    )
    more = f'<div class="mute">… and {len(rows) - limit} more</div>' if len(rows) > limit else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return (
        "<table style='width:auto'><thead><tr>"
        + "".join(f"<th>{esc(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in r) + "</tr>" for r in rows)
        + "</tbody></table>"
    )


def _mfu_list(doc: Report) -> str:
    """The MFU per op class and per module as a list ('' when there is none)."""
    items = "".join(f"<li>{esc(d)}</li>" for d in mfu_details(doc))
    return f"<ul>{items}</ul>" if items else ""
