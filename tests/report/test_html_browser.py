"""The HTML report in headless Chromium: no console errors, no network request, findings and charts on
screen, tables that sort, and trace strings that cannot run script. Skips when chromium is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import Browser, install_sentinel, why_no_browser
from report_docs import RENDERED, as_report, document_of
from kineto_builder import TraceBuilder

from aiprof.report.render import render
from aiprof.report.common import findings

pytestmark = pytest.mark.skipif(why_no_browser() is not None, reason=why_no_browser() or "")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser() as b:
        install_sentinel(b)
        yield b


@pytest.mark.parametrize("key", RENDERED)
def test_report_renders_cleanly_offline(browser: Browser, tmp_path: Path, key: str) -> None:
    doc = document_of(key)
    page = tmp_path / f"{key}.html"
    page.write_text(render(doc, "html"), encoding="utf-8")
    log = browser.open(page)
    assert log.errors == [], log.errors
    assert log.requests == [page.resolve().as_uri()]  # the page itself, nothing else
    assert log.dialogs == [] and browser.evaluate("window.__aiprof_xss.length") == 0
    state = browser.evaluate(
        "({sections: [...document.querySelectorAll('section')].map(s => s.id),"
        " findings: document.querySelectorAll('article.finding').length,"
        " strips: document.querySelectorAll('svg.strip').length,"
        " bars: document.querySelectorAll('#steps svg rect').length,"
        " data: JSON.parse(document.getElementById('aiprof-data').textContent).summary.median_step_ns,"
        " width: document.documentElement.scrollWidth})"
    )
    assert state["findings"] == len(findings(doc))
    assert {"steps", "timeline", "metadata"} <= set(state["sections"])
    assert state["strips"] >= 1 and state["bars"] >= len(doc.ranks[0].steps[:1])
    assert state["data"] == doc.summary.median_step_ns
    assert state["width"] <= 1280  # no horizontal scrolling on a laptop-sized window
    shot = browser.screenshot(tmp_path / f"{key}.png")
    assert shot.stat().st_size > 20_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dark = browser.screenshot(tmp_path / f"{key}-dark.png", dark=True)
    assert dark.read_bytes() != shot.read_bytes()
    browser.send("Emulation.setEmulatedMedia", features=[])


def test_tables_sort_without_script(browser: Browser, tmp_path: Path) -> None:
    page = tmp_path / "sort.html"
    page.write_text(render(document_of("resnet50_nw0"), "html"), encoding="utf-8")
    browser.open(page)
    read = (
        "(() => { const t = document.querySelector('#kernels .sort');"
        " const rows = [...t.querySelectorAll('tbody tr')];"
        " rows.sort((a, b) => getComputedStyle(a).order - getComputedStyle(b).order);"
        " return rows.map(r => r.children[1].textContent.replace(/,/g, '') * 1); })()"
    )
    assert browser.evaluate(read) != sorted(browser.evaluate(read), reverse=True)  # by total time first
    tid = browser.evaluate("document.querySelector('#kernels .sort').id")
    browser.evaluate(f"document.querySelector('label[for=\"{tid}-1-d\"]').click()")
    calls = browser.evaluate(read)
    assert calls == sorted(calls, reverse=True)
    browser.evaluate(f"document.querySelector('label[for=\"{tid}-1-a\"]').click()")
    calls = browser.evaluate(read)
    assert calls == sorted(calls)


def test_kernel_named_like_markup_does_not_run(browser: Browser, tmp_path: Path) -> None:
    """The issue's test: a kernel (and op, and file path) named ``<img src=x onerror=alert(1)>``."""
    evil = "<img src=x onerror=alert(1)>"
    b = TraceBuilder()
    b.step(0, ts=0, dur=50)
    op = b.cpu_op(evil, ts=1, dur=10)
    b.launch(op, kernel=evil, kernel_ts=5, kernel_dur=10)
    trace = b.write(tmp_path / "t.json")
    page = tmp_path / "evil.html"
    run = subprocess.run(
        [sys.executable, "-m", "aiprof", "analyze", str(trace), "-o", str(page)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    doc = json.loads(_embedded(page))
    doc["findings"] = [
        {"id": "evil", "title": evil, "severity": "high", "est_saving_ns_per_step": 5, "share_of_step": 0.1,
         "confidence": "low", "evidence": {"kernel": evil}, "fix": evil}
    ]
    doc["ranks"][0]["trace_metadata"]["path"] = evil
    page2 = tmp_path / "evil2.html"
    page2.write_text(render(as_report(doc), "html"), encoding="utf-8")
    for p in (page, page2):
        log = browser.open(p)
        assert log.dialogs == [] and browser.evaluate("window.__aiprof_xss") == []
        assert browser.evaluate("document.querySelectorAll('img').length") == 0
        assert evil in browser.evaluate("document.body.innerText")  # shown as text
        assert log.requests == [p.resolve().as_uri()]


def _embedded(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    start = text.index('id="aiprof-data">') + len('id="aiprof-data">')
    return text[start : text.index("</script>", start)].replace("\\u003c", "<")
