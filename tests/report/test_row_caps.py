"""Large runs stay readable and small: per-rank tables and per-step lists show the first and last rows
and one aggregate line for the rest in the terminal, Markdown and HTML; the JSON keeps every row."""

from __future__ import annotations

import json

from typed_builders import rank, report

from aiprof.report.common import ROW_CAP_FIRST, ROW_CAP_LAST
from aiprof.report.render import render

RANKS = 3000


def _big_run():  # type: ignore[no-untyped-def]
    ranks = [rank(r) for r in range(RANKS)]
    ranks[1234] = rank(1234, step_ns=9_000_000)  # the slowest rank sits in the middle
    return report(ranks)


def test_thousands_of_ranks_are_capped_in_every_human_format() -> None:
    doc = _big_run()
    hidden = RANKS - ROW_CAP_FIRST - ROW_CAP_LAST
    for fmt in ("terminal", "md", "html"):
        text = render(doc, fmt)
        assert f"… {hidden:,} more ranks: median step" in text, fmt
        assert "max 1.0 ms" in text  # the aggregate's max (the slowest is shown, not hidden)
        if fmt != "html":
            assert len(text) < 20_000, (fmt, len(text))
    terminal = render(doc, "terminal")
    assert "1234" in terminal and "◀ slowest" in terminal
    md_rows = [line for line in render(doc, "md").splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(md_rows) == ROW_CAP_FIRST + ROW_CAP_LAST
    assert md_rows[-1].startswith(f"| {RANKS - 1} |")
    html = render(doc, "html")
    assert html.count('<svg class="chart strip"') <= ROW_CAP_FIRST + ROW_CAP_LAST
    assert "rank 1234 (slowest)" in html
    full = render(doc, "json")
    assert len(json.loads(full)["ranks"]) == RANKS  # the JSON keeps everything
    # the page embeds every rank, those it does not show with their totals only (no steps, no sections)
    embedded = json.loads(html.split('id="aiprof-data">', 1)[1].split("</script>", 1)[0])
    assert len(embedded["ranks"]) == RANKS and len(html) < len(full) / 2
    shown = {r["rank"] for r in embedded["ranks"] if r["steps"]}
    assert len(shown) == ROW_CAP_FIRST + ROW_CAP_LAST and 1234 in shown
    assert "kernels" not in embedded["ranks"][500] and embedded["ranks"][500]["totals"]["steps"] == 1


def test_a_small_run_shows_every_rank() -> None:
    doc = report([rank(r) for r in range(ROW_CAP_FIRST + ROW_CAP_LAST + 1)])
    for fmt in ("terminal", "md", "html"):
        assert "more ranks" not in render(doc, fmt)


def test_thousands_of_steps_are_capped_in_html() -> None:
    doc = report([rank(0, n_steps=2000)])
    html = render(doc, "html")
    assert "first 60 of 2,000 steps; … 1,940 more steps: median" in html
    page = html.split('id="aiprof-data">', 1)[0]  # what the page shows (the embedded JSON keeps every step)
    assert page.count("ProfilerStep#") < 200
    assert len(json.loads(render(doc, "json"))["ranks"][0]["steps"]) == 2000
