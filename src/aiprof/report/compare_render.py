"""Renderers for the comparison document (``report.compare.Comparison``): terminal, Markdown, HTML, JSON.
``report.render.render`` picks among them; strings from traces are escaped per sink (``report.escape``).

They say the verdict first (the median step's change over every step with its confidence interval:
"+3.1 % (95 % CI −2.0 … +8.4 %), not significant"), then whether the runs are different programs, then
what moved: step time, utilisation, breakdown and idle causes per step, findings resolved / new / grew /
shrank / unchanged (with both savings), and the ops and kernels that changed most.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES
from aiprof.fsutil import HTML_GENERATOR
from aiprof.report.common import fmt_ms
from aiprof.report import compare_inference, compare_memory, compare_mfu
from aiprof.report.compare import Comparison, DeltaRow, FindingBrief, Side
from aiprof.report.escape import html as esc
from aiprof.report.escape import markdown, terminal_text
from aiprof.report.json_report import JsonRenderer, encode

_RESULT_STYLE = {"faster": "bold green", "slower": "bold red", "unchanged": "bold", "inconclusive": "bold yellow"}


def _signed_ms(ns: float) -> str:
    return ("+" if ns > 0 else "−" if ns < 0 else "±") + fmt_ms(abs(ns))


def _pct_change(before: float, after: float) -> str:
    if not before:
        return "new" if after else "–"
    return f"{100 * (after - before) / before:+.1f}%"


def render_comparison(cmp: Comparison, fmt: str, width: int = 80, is_tty: bool = False) -> str:
    if fmt == "json":
        return JsonRenderer().render(cmp)
    if fmt == "md":
        return (_markdown(cmp) + compare_mfu.markdown_text(cmp.mfu_detail) + compare_memory.markdown_text(cmp.memory)
                + compare_inference.markdown_text(cmp.inference))
    if fmt == "html":
        page = compare_mfu.with_html_section(_html(cmp), cmp.mfu_detail)
        page = compare_memory.with_html_section(page, cmp.memory)
        return compare_inference.with_html_section(page, cmp.inference)
    return (_terminal(cmp, width, is_tty) + compare_mfu.terminal_text(cmp.mfu_detail)
            + compare_memory.terminal_text(cmp.memory) + compare_inference.terminal_text(cmp.inference))


def _rows(cmp: Comparison) -> list[tuple[str, str, str, str, str]]:
    """(what, before, after, change, percent) for the headline numbers and every bucket/cause."""
    s, m, u = cmp.step_time_ns, cmp.mean_step_time_ns, cmp.utilization
    cpu = True if all(side.summary.device_kind == "cpu" for side in (cmp.before, cmp.after)) else None  # CPU words
    out = []
    used = cmp.steps_used
    if used is not None and cmp.step_time_change_pct is not None:
        ci = cmp.step_time_ci_pct
        pct = f"{cmp.step_time_change_pct:+.1f}%" + (f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else "")
        what = (f"median step, {cmp.pairs} pairs of runs ({', '.join(f'{c:+.1f}%' for c in cmp.pair_changes_pct)})"
                if cmp.pairs > 1 else f"median step, {used.before}+{used.after} {used.source} steps")
        out.append((
            what, fmt_ms(used.before_median_ns),
            fmt_ms(used.after_median_ns), _signed_ms(used.after_median_ns - used.before_median_ns), pct,
        ))
    out += [
        ("median step" + (", recorded" if used is not None and used.source != "recorded" else ""),
         fmt_ms(s.before), fmt_ms(s.after), _signed_ms(s.delta), f"{s.delta_pct:+.1f}%"),
        ("mean step", fmt_ms(m.before), fmt_ms(m.after), _signed_ms(m.delta), f"{m.delta_pct:+.1f}%"),
        ("utilization" if cpu is None else "CPU busy", f"{100 * u.before:.1f}%", f"{100 * u.after:.1f}%", f"{100 * u.delta:+.1f} pt", ""),
    ]
    if cmp.mfu is not None:
        f = cmp.mfu
        out.append((f"MFU ({cmp.mfu_peak})", f"{100 * f.before:.2f}%", f"{100 * f.after:.2f}%", f"{100 * f.delta:+.2f} pt", ""))
    for title, table, names in (("", cmp.breakdown_ns_per_step, BUCKETS), ("idle: ", cmp.idle_causes_ns_per_step, IDLE_CAUSES)):
        for n in names:
            d = table.get(n)
            if d is not None and (d.before or d.after):
                out.append((f"{title}{n}", fmt_ms(d.before), fmt_ms(d.after), _signed_ms(d.delta), _pct_change(d.before, d.after)))
    return out


def _finding_lines(cmp: Comparison) -> list[tuple[str, str]]:
    """(status, text) per finding; one in both runs shows both savings per step."""
    fc = cmp.findings
    out = []
    for status, items in (("resolved", fc.resolved), ("new", fc.new), ("grew", fc.grew), ("shrank", fc.shrank), ("unchanged", fc.unchanged)):
        for f in items:
            out.append((status, f"{_savings(f)}{f.title or f.id} ({f.id})"))
    return out


def _savings(f: FindingBrief) -> str:
    b, a = f.before_saving_ns_per_step, f.after_saving_ns_per_step
    if isinstance(b, int) and isinstance(a, int):
        return f"[{fmt_ms(b)} → {fmt_ms(a)}/step] "
    return f"[{fmt_ms(f.est_saving_ns_per_step)}/step] " if f.est_saving_ns_per_step else ""


def _notes(cmp: Comparison) -> list[str]:
    """The warnings not already said at the top (program differences are)."""
    return [w for w in cmp.warnings if not w.startswith("different programs: ")]


def _terminal(cmp: Comparison, width: int, is_tty: bool) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=is_tty, no_color=not is_tty,
                      color_system="standard" if is_tty else None, highlight=False, emoji=False)
    v = cmp.verdict
    console.print(Text(v.text, style=_RESULT_STYLE.get(v.result, "bold")))
    if v.caveat:
        console.print(terminal_text(v.caveat, style="bold yellow"))
    for d in cmp.program_differences:
        console.print(terminal_text(f"different programs: {d}", style="bold yellow"))
    for name, side in (("before", cmp.before), ("after", cmp.after)):
        console.print(terminal_text(f"  {name + ':':<7} {_sources(side)}", style="dim"), no_wrap=True, overflow="ellipsis")
    console.print()
    table = Table(title="Per step (mean over ranks)", title_justify="left", box=None, pad_edge=False)
    for col in ("", "before", "after", "change", "%"):
        table.add_column(col, justify="left" if not col else "right")
    for row in _rows(cmp):
        table.add_row(*row)
    console.print(table)
    lines = _finding_lines(cmp)
    if lines:
        console.print()
        console.print(Text("Findings", style="bold"))
        for status, text in lines:
            style = {"resolved": "green", "new": "red", "grew": "red", "shrank": "green"}.get(status, "")
            console.print(Text(f"  {status:<9} ", style=style) + terminal_text(text), no_wrap=True, overflow="ellipsis")
    for title, changes in (("Ops that changed most (per step)", cmp.ops), ("Kernels that changed most (per step)", cmp.kernels)):
        rows = [r for r in changes.rows if r.delta_ns_per_step][:5]
        if not rows:
            continue
        console.print()
        t = Table(title=title, title_justify="left", box=None, pad_edge=False)
        t.add_column("name", overflow="ellipsis", no_wrap=True, max_width=width - 36)
        for col in ("before", "after", "change"):
            t.add_column(col, justify="right")
        for r in rows:
            t.add_row(terminal_text(_status_name(r)), fmt_ms(r.before_ns_per_step), fmt_ms(r.after_ns_per_step), _signed_ms(r.delta_ns_per_step))
        console.print(t)
    warnings = _notes(cmp)
    if warnings:
        console.print()
    for note in warnings:
        console.print(terminal_text(f"note: {note}", style="yellow"))
    return buf.getvalue()


def _status_name(r: DeltaRow) -> str:
    tag = {"added": " (new)", "removed": " (gone)"}.get(r.status, "")
    return f"{r.name}{tag}"


def _sources(side: Side) -> str:
    src = side.sources
    first = src[0] if src else "?"
    parts = first.split("/")
    if len(first) > 60 and len(parts) > 2:
        first = "…/" + "/".join(parts[-2:]) if len(parts[-1]) < 40 else "…/" + parts[-1]
    return first + (f" (+{len(src) - 1} more)" if len(src) > 1 else "")


_md_cell = markdown


def _markdown(cmp: Comparison) -> str:
    v = cmp.verdict
    lines = [f"## aiprof compare: {v.result}", "", f"**{_md_cell(v.text)}**", ""]
    if v.caveat:
        lines += [f"> **{_md_cell(v.caveat)}**", ""]
    for d in cmp.program_differences:
        lines += [f"> **different programs:** {_md_cell(d)}", ""]
    lines += ["| per step | before | after | change | % |", "|---|---:|---:|---:|---:|"]
    lines += ["| " + " | ".join(_md_cell(x) for x in row) + " |" for row in _rows(cmp)]
    finding_lines = _finding_lines(cmp)
    if finding_lines:
        lines += ["", "### Findings", ""]
        lines += [f"- **{status}**: {_md_cell(text)}" for status, text in finding_lines]
    rows = [r for r in cmp.ops.rows if r.delta_ns_per_step][:10]
    if rows:
        lines += ["", "### Ops that changed most (per step)", "", "| op | before | after | change |", "|---|---:|---:|---:|"]
        lines += [
            f"| {_md_cell(_status_name(r))} | {fmt_ms(r.before_ns_per_step)} | {fmt_ms(r.after_ns_per_step)} | {_signed_ms(r.delta_ns_per_step)} |"
            for r in rows
        ]
    if _notes(cmp):
        lines += ["", "Notes:", ""] + [f"- {_md_cell(n)}" for n in _notes(cmp)]
    lines += ["", f"<sub>before: {_md_cell(_sources(cmp.before))}; after: {_md_cell(_sources(cmp.after))}; {_md_cell(cmp.generator)}</sub>", ""]
    return "\n".join(lines)


def _html(cmp: Comparison) -> str:
    from aiprof.report import svg
    from aiprof.report.html_report import _CSS, CSP

    v = cmp.verdict
    data = encode(cmp).decode().replace("<", "\\u003c")
    table = "".join("<tr>" + "".join(f"<td>{esc(x)}</td>" for x in row) + "</tr>" for row in _rows(cmp))
    bars = svg.stacked_rows(
        [
            ("before", {b: float(d.before) for b, d in cmp.breakdown_ns_per_step.items()}, float(cmp.step_time_ns.before), fmt_ms(cmp.step_time_ns.before)),
            ("after", {b: float(d.after) for b, d in cmp.breakdown_ns_per_step.items()}, float(cmp.step_time_ns.after), fmt_ms(cmp.step_time_ns.after)),
        ],
        BUCKETS,
    )
    findings = "".join(f"<li><b>{esc(s)}</b>: {esc(t)}</li>" for s, t in _finding_lines(cmp))
    parts = [
        f"<h1>aiprof compare: {esc(v.result)}</h1><p class=saving>{esc(v.text)}</p>"
        + (f'<div class="partial" role="alert">{esc(v.caveat)}</div>' if v.caveat else "")
        + "".join(f'<div class="partial" role="alert">different programs: {esc(d)}</div>' for d in cmp.program_differences),
        f"<div class=mute>before: <code>{esc(_sources(cmp.before))}</code><br>after: <code>{esc(_sources(cmp.after))}</code></div>",
        "<h2>Mean step, before and after</h2>" + bars,
        "<h2>Per step</h2><table><thead><tr><th></th><th>before</th><th>after</th><th>change</th><th>%</th></tr></thead><tbody>" + table + "</tbody></table>",
    ]
    if findings:
        parts.append(f"<h2>Findings</h2><ul>{findings}</ul>")
    for heading, changes in (("Ops that changed most", cmp.ops), ("Kernels that changed most", cmp.kernels)):
        rows = [r for r in changes.rows if r.delta_ns_per_step]
        if rows:
            body = "".join(
                f"<tr><td class=name>{esc(_status_name(r))}</td><td>{fmt_ms(r.before_ns_per_step)}</td>"
                f"<td>{fmt_ms(r.after_ns_per_step)}</td><td>{esc(_signed_ms(r.delta_ns_per_step))}</td></tr>"
                for r in rows
            )
            parts.append(f"<h2>{esc(heading)} (per step)</h2><table><thead><tr><th>name</th><th>before</th><th>after</th><th>change</th></tr></thead><tbody>{body}</tbody></table>")
    if _notes(cmp):
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in _notes(cmp)) + "</ul>")
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8>{HTML_GENERATOR}"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>aiprof compare: {esc(v.result)}</title><style>{_CSS}</style></head><body>"
        + "".join(parts)
        + f'<script type="application/json" id="aiprof-comparison">{data}</script>'
        + f"<footer>{esc(cmp.generator)} · comparison schema {esc(cmp.comparison_schema_version)}</footer></body></html>\n"
    )
