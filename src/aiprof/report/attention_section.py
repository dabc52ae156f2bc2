"""The attention section of the report, in each format: which attention path ran (from the kernels' names),
its share of kernel time and, with shapes, its TFLOP/s against the device's dense matrix peak.

Reads the focus rank's ``attention`` section (:func:`aiprof.roofline.attention.attention_section`); nothing
is shown when no kernel is attention. Kernel names are trace data: escaped for their sink.
"""

from __future__ import annotations

from aiprof.report import common
from aiprof.report.escape import html as _html
from aiprof.report.escape import markdown, terminal
from aiprof.report.model import Report
from aiprof.roofline.attention import AttentionReport, path_text


def _section(doc: Report) -> AttentionReport | None:
    sec = common.focus_rank(doc).attention
    return sec if sec and sec.available and sec.paths else None


def lines(sec: AttentionReport) -> list[str]:
    """A headline, then one sentence per path (most time first); steps whose share differs from the run's."""
    steps = len(sec.steps)
    out = [f"Attention: {100 * float(sec.share or 0.0):.1f}% of kernel time in the steps"]
    out += [path_text(p, steps) for p in sec.paths]
    if steps > 1:
        shares = [s.share for s in sec.steps]
        out.append(f"per step: {100 * min(shares):.1f}% to {100 * max(shares):.1f}% of kernel time over {steps} steps")
    return out


def terminal_lines(doc: Report) -> list[str]:
    sec = _section(doc)
    if sec is None:
        return []
    head, *rest = lines(sec)
    return [terminal(head), *(terminal("  " + line) for line in rest), ""]


def markdown_lines(doc: Report) -> list[str]:
    sec = _section(doc)
    if sec is None:
        return []
    head, *rest = lines(sec)
    return ["", "### " + markdown(head), "", *(f"- {markdown(line)}" for line in rest)]


def html_section(doc: Report) -> str:
    sec = _section(doc)
    if sec is None:
        return ""
    head, *rest = lines(sec)
    items = "".join(f"<li>{_html(terminal(line))}</li>" for line in rest)
    return f"<p>{_html(terminal(head))}</p><ul>{items}</ul>"
