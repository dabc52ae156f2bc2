"""What a person reads in each report format, for tests that check wording: the visible text of an
HTML page (no style, no embedded JSON) and its tables as rows of cell texts. A uniquely named module."""

from __future__ import annotations

import html as _html
import re
from html.parser import HTMLParser


def visible_text(page: str, drop_sections: tuple[str, ...] = ()) -> str:
    """The text of ``page`` as shown: no ``<style>``/``<script>``, the ``<section id=…>`` named in
    ``drop_sections`` left out, tags as line breaks."""
    page = re.sub(r"<(style|script)\b.*?</\1>", "", page, flags=re.S)
    for section in drop_sections:
        page = re.sub(rf'<section id="{section}">.*?</section>', "", page, flags=re.S)
    return _html.unescape(re.sub(r"<[^>]+>", "\n", page))


class _Tables(HTMLParser):
    """Every <table>: its header cells and rows of cell texts (cells may be left unclosed)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[list[str], list[list[str]]]] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._head = False
        self._label = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append(([], []))
        elif tag == "tr" and self.tables:
            self._close_cell()
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._close_cell()
            self._cell, self._head, self._label = [], tag == "th", 0
        elif tag == "label" and self._cell is not None:
            self._label += 1  # sortable headers hold the name twice (descending and ascending labels)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self._close_cell()
        elif tag == "tr" and self._row is not None:
            self._close_cell()
            if self._row:
                head, rows = self.tables[-1]
                if self._head:
                    head.extend(self._row)
                else:
                    rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None and self._label <= 1:
            self._cell.append(data)

    def _close_cell(self) -> None:
        if self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
        self._cell = None


def html_tables(page: str) -> list[tuple[list[str], list[list[str]]]]:
    """The page's tables as (header cells, body rows)."""
    parser = _Tables()
    parser.feed(re.sub(r"<(style|script)\b.*?</\1>", "", page, flags=re.S))
    return parser.tables


def markdown_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """The Markdown tables of ``text`` as (header cells, body rows)."""
    out: list[tuple[list[str], list[list[str]]]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.startswith("|") and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()):
            head = [c.strip() for c in line.strip().strip("|").split("|")]
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            out.append((head, rows))
    return out


DURATION = re.compile(r"^-?[\d,]+(\.\d+)? (ms|µs)$")


def unlabelled_duration_columns(tables: list[tuple[list[str], list[list[str]]]]) -> list[str]:
    """Headers of columns that hold durations but do not say whether they are per step or totals."""
    bad = []
    for head, rows in tables:
        for j, name in enumerate(head):
            cells = [r[j] for r in rows if j < len(r) and r[j] not in ("", "-", "…", "?")]
            if cells and all(DURATION.match(c) for c in cells):
                if not re.search(r"/step|per step|step\b|total|/call", name):
                    bad.append(name)
    return bad
