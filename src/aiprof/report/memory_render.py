"""Render a :class:`MemoryReport` (and its findings) as terminal text, JSON, Markdown or offline HTML.

Every string that came from the input (paths, frames, settings) is escaped for its target: control
characters stripped for the terminal, ``| [ ] ( ) * _ ` < >`` and backslashes escaped in Markdown, HTML
escaped in HTML. The HTML has no script and no external resource: an inline SVG timeline stacked by category
with the peak marked, and an icicle of what is live at the peak.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from aiprof.fsutil import HTML_GENERATOR, JSON_GENERATOR
from aiprof.memory.report import DeviceMemory, MemoryReport
from aiprof.memory.units import binary
from aiprof.rules.finding import Finding

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#|!~])")
_MD_AUTOLINK = re.compile(r"(?i)(://|www\.)")
COLORS = {
    "parameter": "#2e7d32", "optimizer_state": "#c9a227", "input": "#444444", "temporary": "#9575cd",
    "activation": "#d32f2f", "gradient": "#1e50c8", "autograd_detail": "#5c8ee6", "unknown": "#9e9e9e",
}


def term(text: object) -> str:
    """Text for a terminal: control and bidi characters removed, newlines flattened."""
    return _CONTROL.sub("", str(text).replace("\n", " ").replace("\r", " "))


def md(text: object) -> str:
    """Text for a Markdown table cell or line, shown literally: Markdown's specials escaped, and no
    ``@mention`` or bare link (a zero-width space after ``@`` and inside ``://``), as the report's
    Markdown does (:func:`aiprof.report.escape.markdown`)."""
    escaped = _MD_SPECIAL.sub(r"\\\1", term(text)).replace("@", "@&#8203;")
    return _MD_AUTOLINK.sub(lambda m: m.group(1)[0] + "&#8203;" + m.group(1)[1:], escaped)


def esc(text: object) -> str:
    return html.escape(term(text), quote=True)


# ---------------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------------
def to_json(report: MemoryReport, findings: Sequence[Finding]) -> bytes:
    doc = {"generator": JSON_GENERATOR, "memory": msgspec.to_builtins(report), "findings": [f.to_dict() for f in findings]}
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


def saving_text(f: Finding | Any) -> str:
    """``frees ≈ 704.0 KiB of the peak``: a memory finding's bytes and what they are bytes of (the rule's
    ``saving_scope``), "" when it frees nothing. Takes a :class:`Finding` or a report's ``FindingRecord``."""
    value = f.evidence.get("est_saving_bytes")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        return ""
    scope = f.evidence.get("saving_scope")
    return f"frees ≈ {binary(int(value))}" + (f" {scope}" if isinstance(scope, str) and scope else "")


def step_table(dev: DeviceMemory) -> tuple[list[str], list[list[str]]]:
    """The per-step table's header and rows (sizes in binary units); the reserved and retries columns only
    where the source has them."""
    reserved = any(s.peak_reserved_bytes is not None for s in dev.steps)
    retries = any(s.alloc_retries is not None for s in dev.steps)
    head = ["step", "peak allocated", "allocated at end", "allocations", "bytes allocated"]
    head += ["peak reserved", "reserved − allocated at peak"] if reserved else []
    head += ["retries"] if retries else []
    rows = []
    for s in dev.steps:
        row = [str(s.index), binary(s.peak_allocated_bytes), binary(s.end_allocated_bytes), f"{s.allocations:,}",
               binary(s.allocated_bytes)]
        if reserved:
            row += [binary(s.peak_reserved_bytes) if s.peak_reserved_bytes is not None else "-",
                    binary(s.fragmentation_at_peak_bytes) if s.fragmentation_at_peak_bytes is not None else "-"]
        if retries:
            row.append(str(s.alloc_retries) if s.alloc_retries is not None else "-")
        rows.append(row)
    return head, rows


# ---------------------------------------------------------------------------------------------------
# Terminal and Markdown share one list of lines
# ---------------------------------------------------------------------------------------------------
def seed_text(dev: DeviceMemory) -> str:
    """What was held before recording started: a number, or "unknown" (with the proven part) where the
    source cannot say (the CPU profiler counts only what it saw allocated)."""
    if dev.seed_known:
        return binary(dev.seed_bytes)
    proven = f", at least {binary(dev.seed_bytes)} freed here" if dev.seed_bytes else ""
    return f"unknown (the trace sees only what it allocated{proven})"


def _device_rows(dev: DeviceMemory) -> list[tuple[str, str]]:
    rows = [("peak allocated", binary(dev.peak_allocated_bytes) + (f" (step {dev.peak_step})" if dev.peak_step is not None else ""))]
    rows.append(("  held when recording started", seed_text(dev)))
    rows.append(("  peak of the recorded events alone", binary(dev.unseeded_peak_bytes)))
    if dev.carried_over_bytes:
        rows.append(("  left out: CPU counter carried over", binary(dev.carried_over_bytes)))
    if dev.peak_reserved_bytes is not None:
        rows.append(("peak reserved", binary(dev.peak_reserved_bytes)))
    if dev.fragmentation_at_peak_bytes is not None:
        rows.append(("reserved − allocated at the peak", binary(dev.fragmentation_at_peak_bytes)))
    if dev.rounding_loss_at_peak_bytes is not None:
        rows.append(("rounding loss at the peak", binary(dev.rounding_loss_at_peak_bytes)))
    if dev.capacity_bytes:
        rows.append(("device memory", binary(dev.capacity_bytes)))
    rows.append(("allocations, whole recording", f"{dev.allocations:,} ({binary(dev.allocated_bytes_total)} in all)"))
    if dev.snapshot or dev.segment_allocs or dev.segment_frees:  # Kineto records no segment events
        rows.append(("segment allocs / frees, whole recording", f"{dev.segment_allocs:,} / {dev.segment_frees:,}"))
    if dev.snapshot:
        s = dev.snapshot
        rows.append(("segments at dump", f"{s.segments} ({s.large_segments} large, {s.small_segments} small)"))
        rows.append(("  at dump: reserved = requested + rounding + cached free",
                     f"{binary(s.reserved_bytes)} = {binary(s.requested_bytes)} + {binary(s.rounding_loss_bytes)} + {binary(s.cached_free_bytes)}"))
    return rows


def render_terminal(report: MemoryReport, findings: Sequence[Finding]) -> str:
    out = [f"aiprof memory: {term(report.path)} ({report.source}, categories {report.categories_from})"]
    for w in report.warnings:
        out.append(f"  warning: {term(w)}")
    for dev in report.devices:
        out.append("")
        out.append(f"{dev.device}")
        width = max(len(k) for k, _ in _device_rows(dev))
        out += [f"  {k.ljust(width)}  {v}" for k, v in _device_rows(dev)]
        if dev.live_at_peak_by_category:
            out.append("  live at the peak, by category:")
            out += [f"    {c.category:<16} {binary(c.bytes):>11}  {c.bytes / max(dev.peak_allocated_bytes, 1):6.1%}"
                    for c in dev.live_at_peak_by_category]
        if dev.live_at_peak_by_site:
            out.append("  live at the peak, by site:")
            out += [f"    {binary(s.bytes):>11}  {term(s.site)} ({s.count} block{'' if s.count == 1 else 's'})"
                    for s in dev.live_at_peak_by_site[:8]]
        if dev.steps:
            head, rows = step_table(dev)
            widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
            out.append("  per step:  " + "  ".join(h.rjust(w) for h, w in zip(head, widths)))
            out += ["            " + "  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
        for oom in dev.ooms:
            out.append(f"  OOM ({oom.verdict}): {term(oom.explanation)}")
    if findings:
        out.append("")
        out.append("findings:")
        for f in findings:
            out.append(f"  [{f.severity}] {f.id}: {term(f.title)}")
            out.append(f"      {saving_text(f) or 'no bytes freed'}; fix: {term(f.fix)}")
    return "\n".join(out) + "\n"


def render_markdown(report: MemoryReport, findings: Sequence[Finding]) -> str:
    out = [f"# Memory: {md(report.path)}", "", f"Source: {report.source}; categories: {report.categories_from}.", ""]
    for w in report.warnings:
        out.append(f"> warning: {md(w)}")
    for dev in report.devices:
        out += ["", f"## {md(dev.device)}", "", "| measure | value |", "|---|---|"]
        out += [f"| {md(k.strip())} | {md(v)} |" for k, v in _device_rows(dev)]
        if dev.live_at_peak:
            out += ["", "### Live at the peak", "", "| category | site | bytes |", "|---|---|---:|"]
            out += [f"| {md(g.category)} | {md(g.site)} | {md(binary(g.bytes))} |" for g in dev.live_at_peak[:20]]
        if dev.steps:
            head, rows = step_table(dev)
            out += ["", "### Per step", "", "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
            out += ["| " + " | ".join(r) + " |" for r in rows]
        for oom in dev.ooms:
            out += ["", f"**OOM: {md(oom.verdict)}**: {md(oom.explanation)}"]
    if findings:
        out += ["", "## Findings", ""]
        out += [f"- **{md(f.id)}** ({f.severity}): {md(f.title)}; {md(saving_text(f) or 'no bytes freed')}. "
                f"Fix: {md(f.fix)}" for f in findings]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------------
W, H, PAD = 900, 300, 50


def _timeline_svg(dev: DeviceMemory) -> str:
    tl = dev.timeline
    if not tl.t_ns:
        return "<p>No allocation events.</p>"
    t0, t1 = tl.t_ns[0], max(tl.t_ns[-1], tl.t_ns[0] + 1)
    totals = [sum(s[i] for s in tl.bytes) for i in range(len(tl.t_ns))]
    top = max(max(totals), dev.peak_allocated_bytes, max(tl.reserved_bytes or [0]), 1)

    def x(t: int) -> float:
        return PAD + (t - t0) / (t1 - t0) * (W - 2 * PAD)

    def y(b: float) -> float:
        return H - PAD + 10 - b / top * (H - PAD - 20)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img" '
             f'aria-label="memory over time">']
    base = [0.0] * len(tl.t_ns)
    for name, series in zip(tl.categories, tl.bytes):
        upper = [b + max(v, 0) for b, v in zip(base, series)]
        pts = [f"{x(t):.1f},{y(u):.1f}" for t, u in zip(tl.t_ns, upper)]
        pts += [f"{x(t):.1f},{y(b):.1f}" for t, b in reversed(list(zip(tl.t_ns, base)))]
        parts.append(f'<polygon points="{" ".join(pts)}" fill="{COLORS.get(name, "#999")}" opacity="0.85">'
                     f"<title>{esc(name)}</title></polygon>")
        base = upper
    if tl.reserved_bytes:
        line = " ".join(f"{x(t):.1f},{y(r):.1f}" for t, r in zip(tl.t_ns, tl.reserved_bytes))
        parts.append(f'<polyline points="{line}" fill="none" stroke="#000" stroke-dasharray="4 3"><title>reserved</title></polyline>')
    px = x(dev.peak_t_ns)
    parts.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="10" y2="{H - PAD + 10}" stroke="#000"/>')
    parts.append(f'<text x="{px + 4:.1f}" y="20" font-size="12">peak {esc(binary(dev.peak_allocated_bytes))}</text>')
    # axes: time from the first event (0 at the left, the span at the right), bytes from 0 to the top
    parts.append(f'<line x1="{PAD}" x2="{W - PAD}" y1="{H - PAD + 10}" y2="{H - PAD + 10}" stroke="#888"/>')
    parts.append(f'<text x="{PAD}" y="{H - 24}" font-size="11">0 ms</text>')
    parts.append(f'<text x="{W - PAD}" y="{H - 24}" font-size="11" text-anchor="end">{(t1 - t0) / 1e6:.1f} ms</text>')
    parts.append(f'<text x="2" y="{y(top) + 4:.1f}" font-size="11">{esc(binary(top))}</text>')
    parts.append(f'<text x="2" y="{H - PAD + 14}" font-size="11">0 B</text>')
    legend_x = PAD
    for name in tl.categories:
        parts.append(f'<rect x="{legend_x}" y="{H - 12}" width="10" height="10" fill="{COLORS.get(name, "#999")}"/>'
                     f'<text x="{legend_x + 13}" y="{H - 3}" font-size="11">{esc(name)}</text>')
        legend_x += 16 + 7 * len(name)
    if tl.reserved_bytes:
        parts.append(f'<line x1="{legend_x}" x2="{legend_x + 14}" y1="{H - 7}" y2="{H - 7}" stroke="#000" '
                     f'stroke-dasharray="4 3"/><text x="{legend_x + 17}" y="{H - 3}" font-size="11">reserved</text>')
    parts.append("</svg>")
    return "".join(parts)


def _icicle_svg(dev: DeviceMemory) -> str:
    """Two rows: categories, then sites within each category, widths proportional to bytes live at the peak."""
    total = sum(c.bytes for c in dev.live_at_peak_by_category) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="90" role="img" aria-label="live at the peak">']
    x0 = 0.0
    for c in dev.live_at_peak_by_category:
        w = c.bytes / total * W
        color = COLORS.get(c.category, "#999")
        parts.append(f'<rect x="{x0:.1f}" y="0" width="{w:.1f}" height="40" fill="{color}" stroke="#fff">'
                     f"<title>{esc(c.category)}: {esc(binary(c.bytes))}</title></rect>")
        if w > 60:
            parts.append(f'<text x="{x0 + 3:.1f}" y="25" font-size="12" fill="#fff">{esc(c.category)}</text>')
        sx = x0
        for g in (g for g in dev.live_at_peak if g.category == c.category):
            gw = g.bytes / total * W
            parts.append(f'<rect x="{sx:.1f}" y="42" width="{gw:.1f}" height="40" fill="{color}" opacity="0.6" '
                         f'stroke="#fff"><title>{esc(g.site)}: {esc(binary(g.bytes))}</title></rect>')
            if gw > 90:
                parts.append(f'<text x="{sx + 3:.1f}" y="66" font-size="10">{esc(g.site[: int(gw / 6)])}</text>')
            sx += gw
        x0 += w
    parts.append("</svg>")
    return "".join(parts)


def render_html(report: MemoryReport, findings: Sequence[Finding]) -> str:
    body = [f"<h1>Memory: {esc(report.path)}</h1>",
            f"<p>Source: {esc(report.source)}; categories {esc(report.categories_from)}.</p>"]
    body += [f'<p class="warn">warning: {esc(w)}</p>' for w in report.warnings]
    for dev in report.devices:
        body.append(f"<h2>{esc(dev.device)}</h2><table>")
        body += [f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in _device_rows(dev)]
        body.append("</table><h3>Allocated over time, by category (the whole recording)</h3>")
        body.append(_timeline_svg(dev))
        body.append("<h3>Live at the peak</h3>")
        body.append(_icicle_svg(dev))
        body.append("<table><tr><th>category</th><th>site</th><th>bytes</th></tr>")
        body += [f"<tr><td>{esc(g.category)}</td><td>{esc(g.site)}</td><td>{esc(binary(g.bytes))}</td></tr>"
                 for g in dev.live_at_peak[:20]]
        body.append("</table>")
        if dev.steps:
            head, rows = step_table(dev)
            body.append("<h3>Per step</h3><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>")
            body += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows]
            body.append("</table>")
        body += [f"<p><b>OOM: {esc(o.verdict)}</b>: {esc(o.explanation)}</p>" for o in dev.ooms]
    if findings:
        body.append("<h2>Findings</h2><ul>")
        body += [f"<li><b>{esc(f.id)}</b> ({esc(f.severity)}): {esc(f.title)}; {esc(saving_text(f) or 'no bytes freed')}. "
                 f"Fix: {esc(f.fix)}</li>" for f in findings]
        body.append("</ul>")
    style = ("body{font-family:sans-serif;max-width:960px;margin:1em auto}table{border-collapse:collapse}"
             "th,td{border:1px solid #ccc;padding:2px 6px;text-align:left}.warn{color:#a60}")
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8">{HTML_GENERATOR}<title>aiprof memory</title>'
            f"<style>{style}</style></head><body>" + "\n".join(body) + "</body></html>\n")


RENDERERS: dict[str, Callable[[MemoryReport, Sequence[Finding]], str]] = {"terminal": render_terminal, "md": render_markdown, "html": render_html}


# The charts, for other reports that show a device's memory (``aiprof analyze``'s memory section).
timeline_svg = _timeline_svg
icicle_svg = _icicle_svg
