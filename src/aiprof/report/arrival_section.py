"""The arrival-order section (``Report.cross_rank``, :class:`aiprof.analysis.arrival.CrossRank`) in each format:
who arrives last at the collectives, how much waiting that causes, the most skewed groups and any slow group.
Readable at 1,024 ranks: the text names the top ranks only, and the HTML shows two rank × step heatmaps (wait
caused, wait endured: one pixel column per rank) instead of a table of every rank. Group names come from the
trace: they are escaped per format here.
"""

from __future__ import annotations

from aiprof.analysis.arrival import CrossRank, RankStepGrid
from aiprof.report.common import fmt_bytes, fmt_ms
from aiprof.report.escape import html as esc
from aiprof.report.escape import markdown as md
from aiprof.report.model import Report

TOP_RANKS = 5


def _section(doc: Report) -> CrossRank | None:
    return doc.cross_rank if isinstance(doc.cross_rank, CrossRank) else None


def summary_lines(x: CrossRank) -> list[str]:
    """The section as plain sentences (every format starts from these)."""
    where = "communication kernels' start on the device" if x.source == "kernel" else "collective ops' start on the host"
    lines = [
        f"{x.matched_instances} collective instance(s) matched across {x.ranks} ranks over {x.steps} step(s) "
        f"(by step, group, collective and order; arrival = the {where}); "
        f"arrival skew median {fmt_ms(x.median_skew_ns)}, p90 {fmt_ms(x.p90_skew_ns)}"
    ]
    if x.clock_corrected:
        worst = max(x.per_rank, key=lambda r: abs(r.clock_offset_ns))
        lines.append(f"rank clocks disagreed (up to {fmt_ms(abs(worst.clock_offset_ns))}, rank {worst.rank}): "
                     "corrected from the ends of synchronising collectives")
    late = sorted((r for r in x.per_rank if r.caused_ns > 0), key=lambda r: -r.caused_ns)[:TOP_RANKS]
    if late:
        lines.append("last to arrive: " + "; ".join(
            f"rank {r.rank} at {r.last_arrivals} of {r.collectives}, making the others wait "
            f"{fmt_ms(r.caused_ns_per_step)}/step" for r in late))
    else:
        lines.append("no rank arrives last by more than the noise floor: the ranks reach their collectives together")
    waiting = sorted(x.per_rank, key=lambda r: -r.waited_ns)[:3]
    lines.append("most waiting: " + ", ".join(f"rank {r.rank} {fmt_ms(r.waited_ns_per_step)}/step" for r in waiting))
    for g in x.slow_groups[:3]:
        lines.append(f"slow group {g.group}: {g.collective} of {_size(g.message_bytes)} takes "
                     f"{fmt_ms(g.median_transfer_ns)} once every rank is there, {g.ratio:g}× the other groups' "
                     f"{fmt_ms(g.others_median_transfer_ns)} (a slow link or a slow member's network)")
    return lines


def _size(nbytes: int) -> str:
    return fmt_bytes(nbytes) if nbytes >= 0 else "unknown size"


def terminal_lines(doc: Report) -> list[str]:
    x = _section(doc)
    if x is None:
        return []
    return ["Arrival order across ranks (who the collectives wait for)"] + [f"  {line}" for line in summary_lines(x)]


def markdown_lines(doc: Report) -> list[str]:
    x = _section(doc)
    if x is None:
        return []
    lines = ["", "### Arrival order across ranks", "", *(f"- {md(line)}" for line in summary_lines(x))]
    if x.groups:
        lines += ["", "| group | collective | size | instances | median skew /call | p90 skew /call | transfer /call | top culprit |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for g in x.groups[:8]:
            transfer = fmt_ms(g.median_transfer_ns) if g.median_transfer_ns >= 0 else "—"
            culprit = str(g.top_culprit) if g.top_culprit >= 0 else "—"
            lines.append(f"| {md(g.group)} | {md(g.collective)} | {_size(g.message_bytes)} | {g.instances} | "
                         f"{fmt_ms(g.median_skew_ns)} | {fmt_ms(g.p90_skew_ns)} | {transfer} | {culprit} |")
    return lines


def html_section(doc: Report) -> str:
    """Sentences, the two heatmaps and the most skewed groups; empty without the section."""
    x = _section(doc)
    if x is None:
        return ""
    items = "".join(f"<li>{esc(line)}</li>" for line in summary_lines(x))
    rows = "".join(
        f"<tr><td>{esc(g.group)}</td><td>{esc(g.collective)}</td><td class=num>{esc(_size(g.message_bytes))}</td>"
        f"<td class=num>{g.instances}</td><td class=num>{esc(fmt_ms(g.median_skew_ns))}</td>"
        f"<td class=num>{esc(fmt_ms(g.p90_skew_ns))}</td>"
        f"<td class=num>{esc(fmt_ms(g.median_transfer_ns)) if g.median_transfer_ns >= 0 else '—'}</td>"
        f"<td class=num>{g.top_culprit if g.top_culprit >= 0 else '—'}</td></tr>"
        for g in x.groups[:10]
    )
    table = ("<table><thead><tr><th>group</th><th>collective</th><th>size</th><th>instances</th><th>median skew /call</th>"
             f"<th>p90 skew /call</th><th>transfer /call</th><th>top culprit</th></tr></thead><tbody>{rows}</tbody></table>")
    return (f"<ul>{items}</ul>"
            + heatmap(x.grid, "caused", "wait caused (last to arrive)")
            + heatmap(x.grid, "waited", "wait endured (arrived before the last)")
            + table)


def heatmap(grid: RankStepGrid, which: str, label: str, width: int = 760, row_h: int = 14) -> str:
    """Rank (x) × step (y): one cell per rank and step, darker for more wait; a rank's cell says its numbers."""
    values = grid.caused_ns if which == "caused" else grid.waited_ns
    if not grid.ranks or not grid.steps:
        return ""
    left, top, bottom = 64, 18, 24
    cell_w = (width - left - 8) / len(grid.ranks)
    height = top + row_h * len(grid.steps) + bottom
    peak = max((v for row in values for v in row), default=0) or 1
    out = [f'<svg class="chart heatmap {which}" viewBox="0 0 {width} {height}" role="img" width="100%" '
           f'aria-label="{esc(label)} per rank and step">',
           f'<text x="{left}" y="12" class="lbl">{esc(label)}, per rank (x) and step (y); darkest {esc(fmt_ms(peak))}</text>']
    titled = len(grid.ranks) <= 256  # per-cell tooltips for readable sizes; at scale the picture is the point
    for i, step in enumerate(grid.steps):
        y = top + i * row_h
        out.append(f'<text x="{left - 6}" y="{y + row_h - 3}" text-anchor="end" class="lbl mute">{step}</text>')
        for j, rank in enumerate(grid.ranks):
            v = values[i][j]
            if v <= 0:
                continue
            x = left + j * cell_w
            tip = f"<title>rank {rank}, step {step}: {esc(fmt_ms(v))}</title>" if titled else ""
            out.append(f'<rect x="{x:.2f}" y="{y}" width="{max(cell_w, 0.6):.2f}" height="{row_h - 1}" '
                       f'class="b-{"host" if which == "caused" else "communication"}" '
                       f'fill-opacity="{0.15 + 0.85 * v / peak:.2f}">{tip}</rect>')
    first, last = grid.ranks[0], grid.ranks[-1]
    base = top + row_h * len(grid.steps) + 14
    out.append(f'<text x="{left}" y="{base}" class="lbl mute">rank {first}</text>')
    out.append(f'<text x="{width - 8}" y="{base}" text-anchor="end" class="lbl mute">rank {last}</text>')
    out.append("</svg>")
    return "".join(out)
