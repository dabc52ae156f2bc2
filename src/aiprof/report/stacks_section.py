"""The host-time-by-source-line section of ``aiprof analyze``'s report, in each format.

Shows the focus rank's :class:`~aiprof.analysis.stacks.StackProfile` (``RankReport.stacks``): the user
source lines that hold the most host time (``own``: the line's function and the library code it calls,
down to the next user frame; ``total``: everything under its calls), the findings' source lines
(``evidence.source_lines`` / ``source_line``), and in HTML an icicle of the busiest thread's Python call
tree (inline SVG, no script; each box's tooltip gives the frame and its time). Times are per step: the
sums over the recorded steps divided by their number. Without Python stacks the section is one line that
says how to record them. Every frame name is escaped for its sink (:mod:`aiprof.report.escape`).
"""

from __future__ import annotations

from aiprof.analysis.stacks import WITH_STACK_NS_PER_CALL, WITH_STACK_OVERHEAD_PCT, StackNode, StackProfile
from aiprof.report import common
from aiprof.report.common import fmt_ms
from aiprof.report.escape import html as _html
from aiprof.report.escape import markdown, terminal
from aiprof.report.model import RankReport, Report

TOP_LINES = 10
ICICLE_WIDTH = 1000
ICICLE_ROW = 18
ICICLE_MAX_DEPTH = 48
_FILL = {"user": "#8fd19e", "lib": "#c9ccd1", "mod": "#9ec5f0"}  # fixed fills: dark text reads on them in both themes
_CHAR_PX = 6.4  # mean glyph width of the 11 px chart font, for clipping labels to their box


def html(text: object) -> str:
    """Text for HTML: control and bidi characters made visible (as in a terminal), then HTML-escaped."""
    return _html(terminal(text))


def stacks_rank(doc: Report) -> RankReport | None:
    """The rank whose stacks the report shows: the focus rank, or the first rank with recorded stacks;
    None when no rank has a stacks section (a report from before it existed)."""
    focus = common.focus_rank(doc)
    if isinstance(focus.stacks, StackProfile) and focus.stacks.recorded:
        return focus
    found = next((r for r in doc.ranks if isinstance(r.stacks, StackProfile) and r.stacks.recorded), None)
    return found or (focus if isinstance(focus.stacks, StackProfile) else None)


def _profile(doc: Report) -> tuple[RankReport, StackProfile] | None:
    rank = stacks_rank(doc)
    if rank is None or not isinstance(rank.stacks, StackProfile):
        return None
    return rank, rank.stacks


def per_step(ns: int, steps: int) -> str:
    return fmt_ms(ns / max(steps, 1))


TAIL_WIDTH = 46  # what is left of an 80-column line after the two times


def tail(text: str, width: int = TAIL_WIDTH) -> str:
    """``text`` cut from the left to ``width`` characters (``…`` first): a path's end says the most."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


def finding_lines(doc: Report) -> list[tuple[str, str]]:
    """(finding id, its first source line) for the findings that have one."""
    out: list[tuple[str, str]] = []
    for f in doc.findings:
        lines = f.evidence.get("source_lines")
        line = lines[0] if isinstance(lines, list) and lines and isinstance(lines[0], str) else f.evidence.get("source_line")
        if isinstance(line, str) and ".py(" in line:
            out.append((f.id, line))
    return out


def _steps_label(p: StackProfile) -> str:
    if p.steps > 1:
        return f"mean per step over {p.steps} steps"
    return "over the recorded window" if p.step_source == "whole trace" else "per step (1 step)"


def stack_cost(p: StackProfile) -> str:
    """What recording the stacks cost the steps, as a caveat on the host times beside it ('' without events)."""
    if p.events <= 0 or p.window_ns <= 0:
        return ""
    cost = p.events * WITH_STACK_NS_PER_CALL
    return (f"recording these stacks cost ~{per_step(cost, p.steps)} per step (~{100 * cost / p.window_ns:.1f} % of the "
            f"step time: {p.events / max(p.steps, 1):,.0f} Python calls x ~{WITH_STACK_NS_PER_CALL} ns); the host times "
            "here include it")


# ---------------------------------------------------------------------------------------------------
# Terminal
# ---------------------------------------------------------------------------------------------------
def terminal_lines(doc: Report) -> list[str]:
    """The top user source lines (own and total time per step) and the findings' lines; one hint line when
    stacks were not recorded; nothing for a report without the section."""
    found = _profile(doc)
    if found is None:
        return []
    rank, p = found
    if not p.recorded:  # one line that fits 80 columns; the JSON and HTML carry the full hint
        return [f"Source lines: no Python stacks; `aiprof run --with-stack` adds them (+{WITH_STACK_OVERHEAD_PCT:.0f} % CPU)", ""]
    who = f"rank {rank.rank}, " if len(doc.ranks) > 1 else ""
    out = [f"Host time by source line ({who}{_steps_label(p)})",
           "  own: the function and the library code it calls; total: all under it"]
    if stack_cost(p):
        out.append("  " + stack_cost(p))
    if not p.user_lines:
        out.append("  no frame of your own code in the recorded stacks (all time is in libraries)")
    for f in p.user_lines[:TOP_LINES]:
        out.append(f"  {per_step(f.own_ns, p.steps):>9} own {per_step(f.total_ns, p.steps):>9} total  {tail(f.name)}")
    by_line: dict[str, list[str]] = {}
    for fid, line in finding_lines(doc):
        by_line.setdefault(line, []).append(fid)
    for line, ids in list(by_line.items())[:5]:
        out.append(f"  findings at {tail(line, 40)}: {', '.join(ids)}")
    out.append("")
    return [terminal(line) for line in out]


# ---------------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------------
def markdown_lines(doc: Report) -> list[str]:
    """A ``### Host time by source line`` table; the hint as a sentence when stacks were not recorded."""
    found = _profile(doc)
    if found is None:
        return []
    rank, p = found
    if not p.recorded:
        return ["", markdown(p.hint) + "."]
    who = f" (rank {rank.rank})" if len(doc.ranks) > 1 else ""
    out = ["", f"### Host time by source line{who}", "",
           f"Python stacks, {markdown(_steps_label(p))}. *own*: the line's function and the library code it calls, "
           "down to the next line of your code; *total*: everything under its calls."
           + (f" {_upper_first(markdown(stack_cost(p)))}." if stack_cost(p) else ""), "",
           "| source line | own / step | total / step | calls / step |", "|---|---:|---:|---:|"]
    for f in p.user_lines[:TOP_LINES]:
        out.append(f"| {markdown(f.name)} | {per_step(f.own_ns, p.steps)} | {per_step(f.total_ns, p.steps)} | "
                   f"{f.calls / max(p.steps, 1):.1f} |")
    if not p.user_lines:
        out.append("| no frame of your own code in the recorded stacks | - | - | - |")
    lines = finding_lines(doc)
    if lines:
        out += ["", "Findings by source line:", ""] + [f"- {markdown(fid)}: {markdown(line)}" for fid, line in lines]
    return out


# ---------------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------------
def html_section(doc: Report) -> str:
    """The section body: the hint, or the icicle, the top source lines and the findings' lines."""
    found = _profile(doc)
    if found is None:
        return ""
    rank, p = found
    if not p.recorded:
        return f"<p class=mute>{html(p.hint)}.</p>"
    who = f"Rank {rank.rank}: " if len(doc.ranks) > 1 else ""
    parts = [f"<p>{html(who)}Python stacks, {html(_steps_label(p))}; {p.events:,} Python calls in "
             f"{per_step(p.window_ns, p.steps)} per step; the main thread ({html(p.main_tid)}) spends "
             f"{_share(p.main_python_ns, p.window_ns)} of it under a Python frame. "
             "<i>own</i>: the line's function and the library code it calls, down to the next line of your code; "
             "<i>total</i>: everything under its calls."
             + (f" {_upper_first(html(stack_cost(p)))}." if stack_cost(p) else "") + "</p>"]
    parts.append(_table(("source line", "own / step", "total / step", "calls / step"),
                        [(f.name, per_step(f.own_ns, p.steps), per_step(f.total_ns, p.steps), f"{f.calls / max(p.steps, 1):.1f}")
                         for f in p.user_lines[:TOP_LINES]]))
    lines = finding_lines(doc)
    if lines:
        parts.append("<p>Findings by source line:</p><ul>"
                     + "".join(f"<li><code>{html(fid)}</code>: <code>{html(line)}</code></li>" for fid, line in lines) + "</ul>")
    icicle = icicle_svg(p)
    if icicle:
        parts.append(f"<h3>Python call tree of thread {html(p.main_tid)}</h3>"
                     "<p class=mute>Width: time (the full width is the recorded steps); each row calls the one above. "
                     "Green: your code; grey: libraries; blue: nn.Module calls. Boxes under "
                     f"{100 * p.tree_min_ns / max(p.window_ns, 1):.1f}% of the time are left out.</p>" + icicle)
    return "".join(parts)


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    if not rows:
        return ""
    thead = "".join(f"<th>{html(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td{" class=name" if i == 0 else ""}>{html(cell)}</td>'
                                    for i, cell in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{thead}</tr></thead><tbody>{body}</tbody></table>"


def _kind(name: str) -> str:
    from aiprof.analysis.stacks import MODULE_PREFIX, is_user_frame

    if name.startswith(MODULE_PREFIX):
        return "mod"
    return "user" if is_user_frame(name) else "lib"


def icicle_svg(p: StackProfile) -> str:
    """The busiest thread's call tree as an icicle (outermost frames on top), scaled to the window time.
    One ``<rect>`` per kept node with its name and time in a ``<title>``; labels clipped to their box."""
    nodes = [n for n in p.tree if n.tid == p.main_tid]
    if not nodes or p.window_ns <= 0:
        return ""
    by_id = {n.id: n for n in nodes}
    children: dict[int, list[StackNode]] = {}
    for n in nodes:
        children.setdefault(n.parent if n.parent in by_id else -1, []).append(n)
    scale = ICICLE_WIDTH / max(p.window_ns, sum(n.total_ns for n in children.get(-1, [])))
    boxes: list[tuple[float, int, float, StackNode]] = []
    todo: list[tuple[StackNode, float, int]] = []
    x = 0.0
    for root in sorted(children.get(-1, []), key=lambda n: -n.total_ns):
        todo.append((root, x, 0))
        x += root.total_ns * scale
    while todo:
        node, left, depth = todo.pop()
        if depth >= ICICLE_MAX_DEPTH:
            continue
        width = node.total_ns * scale
        boxes.append((left, depth, width, node))
        cx = left
        for ch in sorted(children.get(node.id, []), key=lambda n: -n.total_ns):
            todo.append((ch, cx, depth + 1))
            cx += ch.total_ns * scale
    depth = max(d for _, d, _, _ in boxes) + 1
    height = depth * ICICLE_ROW
    out = [f'<svg class="chart icicle" viewBox="0 0 {ICICLE_WIDTH} {height}" role="img" width="100%" '
           f'aria-label="Python call tree">']
    for left, d, width, node in boxes:
        y = d * ICICLE_ROW
        tip = (f"{node.name}: {per_step(node.total_ns, p.steps)} total, {per_step(node.self_ns, p.steps)} self per step, "
               f"{node.calls / max(p.steps, 1):.1f} calls per step")
        out.append(f'<g><rect x="{left:.2f}" y="{y}" width="{max(width, 0.5):.2f}" height="{ICICLE_ROW - 1}" '
                   f'fill="{_FILL[_kind(node.name)]}" stroke="#fff" stroke-width=".5"><title>{html(tip)}</title></rect>')
        chars = int((width - 4) / _CHAR_PX)
        if chars >= 4:
            label = node.name if len(node.name) <= chars else node.name[: chars - 1] + "…"
            out.append(f'<text x="{left + 2:.2f}" y="{y + ICICLE_ROW * 0.7:.1f}" fill="#1d1d1f">{html(label)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)



def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]
