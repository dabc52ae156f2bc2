"""The memory section of ``aiprof analyze``'s report, in each format (terminal, Markdown, HTML).

A rank has a memory section when its trace holds ``[memory]`` events (``profile_memory=True``) or its run
directory holds its allocator snapshot (``RankReport.memory``, a :class:`~aiprof.memory.report.MemoryReport`).
The section shows the focus rank's memory (the first rank that has some, when the focus rank has none): per
device the peak allocated and reserved, the fragmentation at the peak, what dominates the peak (category
and site), the per-step peaks and the leak trend, the OOM verdicts, and the memory findings (the ``mem_*``
rules, which save bytes, plus ``allocator_churn`` and ``memory_pressure``, the memory family's time-side
rules). The HTML draws the timeline stacked by category and the icicle of what is live at the peak with
:mod:`aiprof.report.memory_render`'s charts (inline SVG, no script). Every string from the input passes through
:mod:`aiprof.report.escape` for its sink; sizes are in binary units (KiB, MiB, GiB).
"""

from __future__ import annotations

from collections.abc import Sequence

from aiprof.memory.report import DeviceMemory, MemoryReport
from aiprof.memory.units import binary
from aiprof.report import common
from aiprof.report.escape import html as _html
from aiprof.report.escape import markdown, terminal
from aiprof.report.model import RankReport, Report
from aiprof.rules.finding import FindingRecord

# The memory family's time-side rules (rules/memory.py): they save time, and their subject is memory.
TIME_SIDE_RULES = ("allocator_churn", "memory_pressure")
TOP_SITES = 5
MAX_WARNINGS = 3  # the memory reader's warnings shown in the section (all are in the JSON)


def html(text: object) -> str:
    """Text for HTML: control and bidi characters made visible (as in a terminal), then HTML-escaped."""
    return _html(terminal(text))


def memory_rank(doc: Report) -> RankReport | None:
    """The rank whose memory the report shows: the focus rank when it has memory data, else the first
    rank that has some, else None (no memory section)."""
    focus = common.focus_rank(doc)
    if not isinstance(focus.memory, MemoryReport):
        focus = next((r for r in doc.ranks if isinstance(r.memory, MemoryReport)), focus)
    return focus if isinstance(focus.memory, MemoryReport) else None


def is_memory_finding(f: FindingRecord) -> bool:
    """Whether ``f`` is one of the memory family (a ``mem_*`` rule or a time-side memory rule)."""
    return f.id.startswith("mem_") or f.id in TIME_SIDE_RULES


def memory_findings(doc: Report) -> list[FindingRecord]:
    """The memory family's findings, in the report's order (time savings first, then bytes saved)."""
    return [f for f in doc.findings if is_memory_finding(f)]


def _freed_text(f: FindingRecord) -> str:
    """``frees ≈ 704.0 KiB of the peak`` (what the bytes are bytes of: the rule's ``saving_scope``)."""
    from aiprof.report.memory_render import saving_text as memory_saving_text

    return memory_saving_text(f)


def saving_bytes(f: FindingRecord) -> int:
    """The bytes a memory finding's fix would free (``evidence['est_saving_bytes']``), 0 when it has none."""
    value = f.evidence.get("est_saving_bytes")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0


def _warnings(mem: MemoryReport) -> list[str]:
    """The memory reader's first warnings, without the input's path in front (the report names it)."""
    prefix = f"{mem.path}: "
    return [w[len(prefix):] if w.startswith(prefix) else w for w in mem.warnings[:MAX_WARNINGS]]


def _dominant(dev: DeviceMemory) -> tuple[str, int] | None:
    cats = sorted(dev.live_at_peak_by_category, key=lambda c: -c.bytes)
    return (cats[0].category, cats[0].bytes) if cats and cats[0].bytes > 0 else None


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


def _peak_line(dev: DeviceMemory) -> str:
    """``peak allocated 3.00 MiB (step 2), reserved 4.00 MiB, reserved − allocated at the peak 1.00 MiB``."""
    parts = [f"peak allocated {binary(dev.peak_allocated_bytes)}" + (f" (step {dev.peak_step})" if dev.peak_step is not None else "")]
    if dev.peak_reserved_bytes is not None:
        parts.append(f"peak reserved {binary(dev.peak_reserved_bytes)}")
    if dev.fragmentation_at_peak_bytes is not None:
        parts.append(f"reserved − allocated at the peak {binary(dev.fragmentation_at_peak_bytes)}")
    if dev.capacity_bytes:
        parts.append(f"of {binary(dev.capacity_bytes)} ({_share(max(dev.peak_reserved_bytes or 0, dev.peak_allocated_bytes), dev.capacity_bytes)})")
    return ", ".join(parts)


def _dominant_text(dev: DeviceMemory) -> str:
    top = _dominant(dev)
    text = f"{top[0]} {binary(top[1])} ({_share(top[1], dev.peak_allocated_bytes)})" if top else "-"
    if dev.live_at_peak_by_site:
        site = dev.live_at_peak_by_site[0]
        text += f"; top site {site.site} {binary(site.bytes)}"
    return text


def _leak_text(dev: DeviceMemory) -> str:
    leak = dev.leak
    if leak is None or leak.growth_bytes_per_step <= 0:
        return ""
    return (f"grows {binary(leak.growth_bytes_per_step)} per step (longest growing run {leak.longest_growth_run} steps)"
            + (f", from {leak.sites[0].site}" if leak.sites else ""))


def _finding_text(f: FindingRecord) -> str:
    saved = saving_bytes(f)
    saving = common.saving_text(f) or (_freed_text(f) if saved else "")
    return f"{f.id}: {f.title}" + (f" ({saving})" if saving else "")


# ---------------------------------------------------------------------------------------------------
# Terminal: a few summary lines
# ---------------------------------------------------------------------------------------------------
def terminal_lines(doc: Report) -> list[str]:
    """The terminal summary: per device the peak and what dominates it, OOM verdicts, the top memory
    finding. Empty when no rank has memory data. Every string is escaped for a terminal; lines are kept
    short (one fact each) so they fit 80 columns."""
    rank = memory_rank(doc)
    if rank is None or not isinstance(rank.memory, MemoryReport):
        return []
    mem = rank.memory
    who = f"rank {rank.rank}, " if len(doc.ranks) > 1 else ""
    lines = [f"Memory ({who}{mem.source}, categories {mem.categories_from})"]
    lines += [f"  warning: {w}" for w in _warnings(mem)]
    for dev in mem.devices:
        lines.append(f"  {dev.device}: peak allocated {binary(dev.peak_allocated_bytes)}"
                     + (f" (step {dev.peak_step})" if dev.peak_step is not None else "")
                     + (f" of {binary(dev.capacity_bytes)}" if dev.capacity_bytes else ""))
        if dev.carried_over_bytes:
            lines.append(f"    left out: {binary(dev.carried_over_bytes)} carried over by the CPU profiler's counter")
        if dev.peak_reserved_bytes is not None:
            lines.append(f"    peak reserved {binary(dev.peak_reserved_bytes)}"
                         + (f"; reserved − allocated at the peak {binary(dev.fragmentation_at_peak_bytes)}"
                            if dev.fragmentation_at_peak_bytes is not None else ""))
        top = _dominant(dev)
        if top is not None:
            lines.append(f"    at the peak: {top[0]} {binary(top[1])} ({_share(top[1], dev.peak_allocated_bytes)})")
        if dev.live_at_peak_by_site:
            site = dev.live_at_peak_by_site[0]
            lines.append(f"    top site: {site.site} ({binary(site.bytes)})")
        leak = _leak_text(dev)
        if leak:
            lines.append(f"    across steps: {leak}")
        lines += [f"    OOM ({oom.verdict}): {oom.explanation}" for oom in dev.ooms[:3]]
    found = memory_findings(doc)
    if found:
        first = found[0]
        saved = saving_bytes(first)
        extra = common.saving_text(first) or (_freed_text(first) if saved else "")
        lines.append(f"  top memory finding: {first.id}" + (f" ({extra})" if extra else "")
                     + (f", +{len(found) - 1} more" if len(found) > 1 else ""))
        lines.append(f"    {first.title}")
    return [terminal(line) for line in lines]


# ---------------------------------------------------------------------------------------------------
# Markdown: one table per rank shown, one row per device
# ---------------------------------------------------------------------------------------------------
def markdown_lines(doc: Report) -> list[str]:
    """A ``### Memory`` heading, a table (one row per device), OOM verdicts and the memory findings."""
    rank = memory_rank(doc)
    if rank is None or not isinstance(rank.memory, MemoryReport):
        return []
    mem = rank.memory
    who = f" (rank {rank.rank})" if len(doc.ranks) > 1 else ""
    out = ["", f"### Memory{who}", "",
           f"Source: {markdown(mem.source)}; categories {markdown(mem.categories_from)}.", "",
           *(line for w in _warnings(mem) for line in (f"> warning: {markdown(w)}", "")),
           "| device | peak allocated | peak reserved | reserved − allocated at peak | dominant at peak | top site |",
           "|---|---:|---:|---:|---|---|"]
    for dev in mem.devices:
        top = _dominant(dev)
        site = dev.live_at_peak_by_site[0] if dev.live_at_peak_by_site else None
        cells = [
            markdown(dev.device),
            binary(dev.peak_allocated_bytes) + (f" (step {dev.peak_step})" if dev.peak_step is not None else ""),
            binary(dev.peak_reserved_bytes) if dev.peak_reserved_bytes is not None else "-",
            binary(dev.fragmentation_at_peak_bytes) if dev.fragmentation_at_peak_bytes is not None else "-",
            f"{markdown(top[0])} {binary(top[1])} ({_share(top[1], dev.peak_allocated_bytes)})" if top else "-",
            f"{markdown(site.site)} {binary(site.bytes)}" if site else "-",
        ]
        out.append("| " + " | ".join(cells) + " |")
    for dev in mem.devices:
        leak = _leak_text(dev)
        if leak:
            out += ["", f"{markdown(dev.device)}: {markdown(leak)}."]
        out += ["", *(f"**OOM ({markdown(o.verdict)})**: {markdown(o.explanation)}" for o in dev.ooms[:3])] if dev.ooms else []
    found = memory_findings(doc)
    if found:
        out += ["", "Memory findings:", ""] + [f"- {markdown(_finding_text(f))}" for f in found]
    return out


# ---------------------------------------------------------------------------------------------------
# HTML: tables, the timeline stacked by category, the icicle of what is live at the peak
# ---------------------------------------------------------------------------------------------------
def html_section(doc: Report) -> str:
    """The body of the HTML report's memory section ("" when no rank has memory data)."""
    rank = memory_rank(doc)
    if rank is None or not isinstance(rank.memory, MemoryReport):
        return ""
    from aiprof.report.memory_render import icicle_svg, step_table, timeline_svg

    mem = rank.memory
    who = f"Rank {rank.rank}: " if len(doc.ranks) > 1 else ""
    parts = [f"<p>{html(who)}source {html(mem.source)}, categories {html(mem.categories_from)}; "
             "binary units (1 GiB = 2<sup>30</sup> bytes).</p>"]
    parts += [f"<p>warning: {html(w)}</p>" for w in _warnings(mem)]
    for dev in mem.devices:
        parts.append(f"<h3>{html(dev.device)}</h3>")
        rows = [("peak", _peak_line(dev)), ("at the peak", _dominant_text(dev))]
        if dev.carried_over_bytes:
            rows.append(("left out", f"{binary(dev.carried_over_bytes)} carried over by the CPU profiler's counter "
                                     "from earlier sessions (see the warning)"))
        leak = _leak_text(dev)
        if leak:
            rows.append(("across steps", leak))
        rows += [(f"OOM ({o.verdict})", o.explanation) for o in dev.ooms[:3]]
        parts.append(_table(("measure", "value"), rows))
        parts.append("<h4>Allocated over time, by category (the whole recording)</h4>" + timeline_svg(dev))
        parts.append("<h4>Live at the peak</h4>" + icicle_svg(dev))
        parts.append(_table(("category", "site", "live at the peak"),
                            [(g.category, g.site, binary(g.bytes)) for g in dev.live_at_peak[:TOP_SITES * 2]]))
        if dev.steps:
            head, step_rows = step_table(dev)
            parts.append("<h4>Per step</h4>" + _table(tuple(head), [tuple(r) for r in step_rows[: common.ROW_CAP_FIRST]]))
    found = memory_findings(doc)
    if found:
        parts.append("<p>Memory findings (the <code>mem_*</code> rules save bytes; <code>allocator_churn</code> and "
                     "<code>memory_pressure</code> save time):</p><ul>"
                     + "".join(f"<li>{html(_finding_text(f))}</li>" for f in found) + "</ul>")
    return "".join(parts)


def _table(head: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    if not rows:
        return ""
    thead = "".join(f"<th>{html(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{thead}</tr></thead><tbody>{body}</tbody></table>"
