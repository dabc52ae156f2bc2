"""The report: the typed document (``report.model``, built by ``report.document.build_document``), the
comparison of two reports (``report.compare``), and the renderers that format them and nothing else.

Entry points for a verb: ``report.render.render(doc, fmt, width=None, is_tty=False)`` for a ``Report`` or
a ``Comparison`` in any of :data:`FORMATS`, and :func:`format_for` to pick the format from ``--format``
or the output file's extension. Each renderer validates its options in ``__init__`` and has
``render(document) -> str``; trace strings are escaped per sink by ``report.escape``.
"""

from __future__ import annotations

from pathlib import Path

from aiprof.errors import AiprofError

FORMATS = ("terminal", "json", "html", "md")
_EXTENSIONS = {".json": "json", ".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".txt": "terminal"}


def format_for(path: Path | None, explicit: str | None) -> str:
    """The output format: ``--format`` when given, else from ``-o``'s extension, else terminal."""
    if explicit:
        if explicit not in FORMATS:
            raise AiprofError(f"unknown format {explicit!r}; use one of {', '.join(FORMATS)}")
        return explicit
    if path is None:
        return "terminal"
    fmt = _EXTENSIONS.get(path.suffix.lower())
    if fmt is None:
        raise AiprofError(
            f"cannot tell the format from {path.name!r}; use .json, .html, .md or .txt, or pass --format"
        )
    return fmt
