"""One entry point for every output format, for reports and comparisons alike.

``render(doc, fmt, width=None, is_tty=False) -> str`` formats a :class:`~aiprof.report.model.Report`
(``aiprof analyze``, ``aiprof run``) or a :class:`~aiprof.report.compare.Comparison` (``aiprof
compare``) as one of :data:`FORMATS`; ``format_for(path, explicit)`` picks the format from ``--format``
or the output file's extension. The composition root builds the document and calls these two; nothing
else in ``report/`` needs to be known to a verb.
"""

from __future__ import annotations

import os

from aiprof.report import FORMATS, format_for
from aiprof.report.compare import Comparison
from aiprof.report.model import Report

__all__ = ["FORMATS", "format_for", "render", "terminal_width"]

MIN_WIDTH = 60
MAX_WIDTH = 100


def terminal_width(width: int | None, is_tty: bool) -> int:
    """``width`` when given (at least 60 columns), else the terminal's (at most 100) on a TTY, else 80."""
    if width is None:
        try:
            width = min(os.get_terminal_size().columns, MAX_WIDTH) if is_tty else 80
        except OSError:
            width = 80
    return max(width, MIN_WIDTH)


def render(doc: Report | Comparison, fmt: str, width: int | None = None, is_tty: bool = False) -> str:
    """``doc`` as ``fmt`` ("terminal", "json", "html" or "md"); colour only when ``is_tty``."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if isinstance(doc, Comparison):
        from aiprof.report.compare_render import render_comparison

        return render_comparison(doc, fmt, width=terminal_width(width, is_tty), is_tty=is_tty)
    if fmt == "json":
        from aiprof.report.json_report import JsonRenderer

        return JsonRenderer().render(doc)
    if fmt == "md":
        from aiprof.report.markdown import MarkdownRenderer

        return MarkdownRenderer().render(doc)
    if fmt == "html":
        from aiprof.report.html_report import HtmlRenderer

        return HtmlRenderer().render(doc)
    from aiprof.report.terminal import TerminalRenderer

    return TerminalRenderer(width=terminal_width(width, is_tty), is_tty=is_tty).render(doc)
