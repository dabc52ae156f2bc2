"""Renderers: they format the report document (``report.document``) and nothing else.

Each renderer validates its options in ``__init__`` and has ``render(document) -> str``; the format of
``aiprof analyze -o FILE`` follows the file's extension (``renderer_for``).
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
