"""The trace-health section (``Report.health``, :class:`aiprof.analysis.health.Health`) in each format, shown
first in every report: what this trace cannot show, and the findings dropped, downgraded or not judged because
of it. Item texts may quote a trace (rank numbers only today), so they are escaped per format here."""

from __future__ import annotations

from aiprof.analysis.health import FindingChange, Health, HealthItem
from aiprof.report.escape import html as esc
from aiprof.report.escape import markdown as md
from aiprof.report.model import Report

TITLE = "Trace health: what this trace cannot show"
_MARK = {"missing": "missing", "limited": "limited", "ok": "ok"}
_ACTION = {"not_run": "not judged", "downgraded": "confidence lowered", "dropped": "dropped"}


def _section(doc: Report) -> Health | None:
    return doc.health if isinstance(doc.health, Health) else None


def item_line(item: HealthItem) -> str:
    """``missing  stacks: no Python stacks …``."""
    return f"{_MARK[item.status]}: {item.text}"


def change_lines(changes: list[FindingChange]) -> list[str]:
    """The findings changed, one line per (action, reason): ``not judged: precision, mfu (it needs …)``."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for c in changes:
        ids = grouped.setdefault((c.action, c.reason), [])
        if c.id not in ids:
            ids.append(c.id)
    return [f"{_ACTION[action]}: {', '.join(ids)} ({reason})" for (action, reason), ids in grouped.items()]


def summary_lines(h: Health) -> list[str]:
    """The section as plain sentences: the limits, then the findings they changed; one line when nothing is missing."""
    limits = h.limits
    if not limits:
        return [f"nothing missing ({len(h.items)} checks: {', '.join(i.id for i in h.items)})"]
    return [item_line(i) for i in limits] + [f"findings {line}" for line in change_lines(h.findings)]


def terminal_lines(doc: Report) -> list[str]:
    h = _section(doc)
    if h is None:
        return []
    return [TITLE] + [f"  {line}" for line in summary_lines(h)]


def markdown_lines(doc: Report) -> list[str]:
    h = _section(doc)
    if h is None:
        return []
    return ["### Trace health", "", *(f"- {md(line)}" for line in summary_lines(h)), ""]


def html_section(doc: Report) -> str:
    """A list of the limits (each with its status as a class) and the changed findings; empty without the section."""
    h = _section(doc)
    if h is None:
        return ""
    limits = h.limits
    if not limits:
        body = f"<li class=ok>{esc(summary_lines(h)[0])}</li>"
    else:
        body = "".join(f'<li class="{esc(i.status)}"><b>{esc(i.status)}</b> {esc(i.text)}</li>' for i in limits)
        body += "".join(f"<li class=change>findings {esc(line)}</li>" for line in change_lines(h.findings))
    return f'<section class="health" id="health"><h2>Trace health</h2><ul>{body}</ul></section>'
