"""A roofline result as JSON, Markdown or a standalone HTML page (``aiprof roofline -o FILE``); the
terminal form is ``roofline.render``. Op names come from traces: they are escaped for each target."""

from __future__ import annotations

import html
import json
import re

import msgspec

from aiprof.fsutil import HTML_GENERATOR, JSON_GENERATOR
from aiprof.roofline.analysis import RooflineResult
from aiprof.report.roofline_terminal import header_lines, table_rows

_COLUMNS = ("op and input shapes", "dtype", "time µs", "%", "bound", "roof")


def roofline_json(result: RooflineResult) -> str:
    section = msgspec.to_builtins(result.section())
    return json.dumps({"generator": JSON_GENERATOR, **section}, indent=1, allow_nan=False) + "\n"


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>#!|~@])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _md(text: str) -> str:
    """Text for a Markdown table cell: control characters (line breaks included) shown as spaces, and
    every character Markdown or GitHub gives a meaning (tables, links, images, mentions) escaped."""
    return _MD_SPECIAL.sub(r"\\\1", _CONTROL.sub(" ", text))


def roofline_markdown(result: RooflineResult, top: int = 15) -> str:
    lines = ["## Roofline", ""]
    lines += [_md(line) + "  " for line in header_lines(result)]
    lines += ["", "| " + " | ".join(_COLUMNS) + " |", "|---|---|---:|---:|---|---:|"]
    for row in table_rows(result, top):
        lines.append("| " + " | ".join(_md(cell) for cell in row) + " |")
    return "\n".join(lines) + "\n"


def roofline_html(result: RooflineResult, top: int = 15, title: str = "Roofline") -> str:
    from aiprof.report.roofline_chart import render_svg

    head = "".join(f"<p>{html.escape(line)}</p>" for line in header_lines(result))
    cells = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in table_rows(result, top)
    )
    columns = "".join(f"<th>{html.escape(c)}</th>" for c in _COLUMNS)
    return (
        f"<!doctype html><html><head><meta charset=utf-8>{HTML_GENERATOR}"
        "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font:14px system-ui,sans-serif;margin:2em}td,th{padding:2px 8px;text-align:left}</style>"
        f"</head><body><h1>{html.escape(title)}</h1>{head}{render_svg(result, title=title)}"
        f"<table><tr>{columns}</tr>{cells}</table></body></html>\n"
    )
