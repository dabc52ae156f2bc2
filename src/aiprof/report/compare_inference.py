"""Inference in ``aiprof compare``: time to first token, inter-token latency and tokens per second, before → after.

Present in a :class:`~aiprof.report.compare.Comparison` (its ``inference`` field) only when both reports' slowest
ranks have requests (``ranks[].inference.requests``, an ``aiprof run`` of a ``generate()`` loop). The unit of
each statistic is the request, each side's warm-up left out (``analysis/inference.py``): its time to first
token, its median inter-token gap and its tokens per second (new tokens × batch over its duration); tokens of
one request are not independent samples of anything, requests are (the first 200 of each side: those the
report lists). Each metric's change is that of the median request with the step time's statistics
(``compare_stats.median_change``: a 95 % bootstrap interval, point estimate only under ``MIN_STEPS`` requests a
side) and the step time's verdict rule (``compare_stats.verdict_result``); for tokens per second higher is
better, so a drop is "slower". The section's own result: "slower" / "faster" when some metric is and none says
the opposite or is inconclusive, "unchanged" when every metric is, else "inconclusive" (also whenever a side
shared the machine).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from aiprof.analysis.inference import InferenceReport, RequestStats
from aiprof.report.common import fmt_ms
from aiprof.report.compare_stats import (MedianChange, VerdictResult, change_text, median_change, signed_pct,
                                         verdict_result)
from aiprof.report.escape import html as esc
from aiprof.report.escape import markdown, terminal
from aiprof.report.model import Report

Metric = Literal["ttft", "itl", "tokens_per_s"]
LABELS: dict[str, str] = {"ttft": "time to first token", "itl": "inter-token latency", "tokens_per_s": "tokens/s"}


class MetricChange(msgspec.Struct, kw_only=True):
    """One metric's median request before and after (``ns``; tokens per second for ``tokens_per_s``), its
    change in percent of BEFORE with its confidence interval, and its verdict (``slower``: AFTER is worse)."""

    metric: Metric
    before: float
    after: float
    change_pct: float
    ci_pct: list[float] | None
    significant: bool
    requests_before: int
    requests_after: int
    result: VerdictResult
    text: str


class InferenceComparison(msgspec.Struct, kw_only=True):
    """The requests' latency and throughput, before → after; ``warmup_left_out`` names each side's warm-up."""

    metrics: list[MetricChange]
    warmup_left_out: list[str]
    result: VerdictResult
    text: str


def _requests(doc: Report) -> RequestStats | None:
    rank = next((r for r in doc.ranks if r.rank == doc.summary.slowest_rank), doc.ranks[0] if doc.ranks else None)
    section = rank.inference if rank is not None else None
    if not isinstance(section, InferenceReport) or not section.detected or not section.requests:
        return None
    return section.requests


def samples(req: RequestStats, metric: Metric) -> list[float]:
    """Per request after the warm-up: TTFT, median inter-token gap (ns), or tokens per second."""
    warm = req.warmup.request if req.warmup is not None else None
    rows = [r for r in req.requests if r.request != warm]
    if metric == "ttft":
        return [float(r.ttft_ns) for r in rows if r.ttft_ns is not None]
    if metric == "itl":
        return [float(r.itl_median_ns) for r in rows if r.itl_median_ns is not None]
    return [r.new_tokens * max(r.batch, 1) / (r.duration_ns / 1e9) for r in rows if r.new_tokens and r.duration_ns > 0]


def _value(metric: Metric, value: float) -> str:
    return f"{value:,.1f}" if metric == "tokens_per_s" else fmt_ms(value)


def _metric(metric: Metric, b: list[float], a: list[float], noise_pct: float, shared: bool) -> MetricChange:
    stats: MedianChange = median_change(b, a)
    result = verdict_result(stats, noise_pct)
    if metric == "tokens_per_s":  # higher is better
        result = "slower" if result == "faster" else ("faster" if result == "slower" else result)
    if shared:
        result = "inconclusive"
    text = (f"{LABELS[metric]} {_value(metric, stats.before_median_ns)} → {_value(metric, stats.after_median_ns)}, "
            f"{change_text(stats.change_pct, stats)}")
    return MetricChange(
        metric=metric, before=round(stats.before_median_ns, 2), after=round(stats.after_median_ns, 2),
        change_pct=round(stats.change_pct, 4),
        ci_pct=None if stats.ci_pct is None else [round(stats.ci_pct[0], 4), round(stats.ci_pct[1], 4)],
        significant=stats.significant, requests_before=len(b), requests_after=len(a), result=result, text=text,
    )


def _overall(metrics: Sequence[MetricChange]) -> VerdictResult:
    results = {m.result for m in metrics}
    if results == {"unchanged"}:
        return "unchanged"
    pairs: tuple[tuple[VerdictResult, VerdictResult], ...] = (("slower", "faster"), ("faster", "slower"))
    for direction, opposite in pairs:
        if direction in results and opposite not in results and "inconclusive" not in results:
            return direction
    return "inconclusive"


def compare_inference(before: Report, after: Report, noise_pct: float, shared: Sequence[str] = ()) -> InferenceComparison | None:
    """The requests of both sides compared (None unless both have requests with tokens)."""
    rb, ra = _requests(before), _requests(after)
    if rb is None or ra is None:
        return None
    metrics = []
    names: tuple[Metric, ...] = ("ttft", "itl", "tokens_per_s")
    for metric in names:
        b, a = samples(rb, metric), samples(ra, metric)
        if any(v > 0 for v in b) and any(v > 0 for v in a):
            metrics.append(_metric(metric, b, a, noise_pct, bool(shared)))
    if not metrics:
        return None
    result = _overall(metrics)
    lead = {"slower": "AFTER serves requests slower", "faster": "AFTER serves requests faster",
            "unchanged": "Requests: no change beyond noise", "inconclusive": "Requests: inconclusive"}[result]
    worse = [m for m in metrics if m.result == ("faster" if result == "faster" else "slower")]
    named = worse if result in ("slower", "faster") else metrics
    warm = [f"{side}: request {req.warmup.request}" for side, req in (("before", rb), ("after", ra))
            if req.warmup is not None]
    said = ", ".join(f"{LABELS[m.metric]} {signed_pct(m.change_pct)} %" for m in named)
    return InferenceComparison(metrics=metrics, warmup_left_out=warm, result=result, text=f"{lead} ({said})")


def _rows(inf: InferenceComparison) -> list[tuple[str, str, str, str, str]]:
    """(metric, before, after, change, verdict) per metric."""
    out: list[tuple[str, str, str, str, str]] = []
    for m in inf.metrics:
        ci = f" [{m.ci_pct[0]:+.1f}, {m.ci_pct[1]:+.1f}]" if m.ci_pct else ""
        out.append((f"{LABELS[m.metric]} ({m.requests_before}+{m.requests_after} req.)",
                    _value(m.metric, m.before), _value(m.metric, m.after), f"{m.change_pct:+.1f}%{ci}", m.result))
    return out


def _warm_line(inf: InferenceComparison) -> str:
    return f"warm-up left out: {', '.join(inf.warmup_left_out)}" if inf.warmup_left_out else ""


def terminal_text(inf: InferenceComparison | None) -> str:
    """Lines to append to the terminal comparison ("" without requests on both sides)."""
    if inf is None:
        return ""
    lines = ["", "Inference requests (median request)", f"  {inf.text}"]
    lines += [f"  {w:<30} {b:>8} → {a:<8} {c}  {v}" for w, b, a, c, v in _rows(inf)]
    if inf.warmup_left_out:
        lines.append(f"  {_warm_line(inf)}")
    return "\n".join(terminal(line) for line in lines) + "\n"


def markdown_text(inf: InferenceComparison | None) -> str:
    """A ``### Inference requests`` table to append to the Markdown comparison."""
    if inf is None:
        return ""
    lines = ["", "### Inference requests", "", f"**{markdown(inf.text)}**", "",
             "| metric | before | after | change | verdict |", "|---|---:|---:|---:|---|"]
    lines += ["| " + " | ".join(markdown(x) for x in row) + " |" for row in _rows(inf)]
    if inf.warmup_left_out:
        lines += ["", markdown(_warm_line(inf))]
    return "\n".join(lines) + "\n"


def html_section(inf: InferenceComparison | None) -> str:
    """A ``<section id="inference">`` for the HTML comparison ("" without requests on both sides)."""
    if inf is None:
        return ""
    rows = "".join("<tr>" + "".join(f"<td>{esc(terminal(x))}</td>" for x in row) + "</tr>" for row in _rows(inf))
    warm = f"<p class=mute>{esc(terminal(_warm_line(inf)))}</p>" if inf.warmup_left_out else ""
    return (f'<section id="inference"><h2>Inference requests</h2><p>{esc(terminal(inf.text))}</p><table><thead><tr>'
            "<th>metric</th><th>before</th><th>after</th><th>change</th><th>verdict</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>{warm}</section>")


def with_html_section(page: str, inf: InferenceComparison | None) -> str:
    """``page`` with the inference section before its closing body tag."""
    section = html_section(inf)
    if not section:
        return page
    at = page.rfind("</body>")
    return page[:at] + section + page[at:] if at >= 0 else page + section
