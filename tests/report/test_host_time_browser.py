"""The source-lines and modules sections in headless Chromium: the icicle and the modules table render,
no console error or request, no horizontal scroll with long and hostile frame names, and a frame named
like markup runs nothing. Skips when chromium is missing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import Browser, install_sentinel, why_no_browser
from test_host_time_sections import _evil_doc, _trace_with_stacks

from aiprof import app
from aiprof.report.render import render

# A browser test is slow (tests/conftest.py marks test_html_browser.py by name; this file marks itself).
pytestmark = [pytest.mark.slow, pytest.mark.skipif(why_no_browser() is not None, reason=why_no_browser() or "")]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser() as b:
        install_sentinel(b)
        yield b


@pytest.mark.parametrize("frame", ["train.py(20): step", "pkg/" + "very_long_module_name_" * 12 + ".py(7): f"])
def test_icicle_and_modules_on_screen(browser: Browser, tmp_path: Path, frame: str) -> None:
    doc = app.analyze([_trace_with_stacks(tmp_path, frame=frame)], app.AnalyzeOptions(workers=1))
    page = tmp_path / "r.html"
    page.write_text(render(doc, "html"), encoding="utf-8")
    log = browser.open(page)
    assert log.errors == [] and log.requests == [page.resolve().as_uri()]
    state = browser.evaluate(
        "({boxes: document.querySelectorAll('#source-lines svg rect').length,"
        " modules: document.querySelectorAll('#modules tbody tr').length,"
        " width: document.documentElement.scrollWidth,"
        " icicle: document.querySelector('#source-lines svg').getBoundingClientRect().width})"
    )
    assert state["boxes"] >= 4 and state["modules"] == 1
    assert state["width"] <= 1280 and 0 < state["icicle"] <= 1280  # no horizontal scrolling


def test_markup_in_frame_names_runs_nothing(browser: Browser, tmp_path: Path) -> None:
    evil = "<img src=x onerror=alert(1)>.py(1): f"
    page = tmp_path / "evil.html"
    page.write_text(render(_evil_doc(evil), "html"), encoding="utf-8")
    log = browser.open(page)
    assert log.dialogs == [] and browser.evaluate("window.__aiprof_xss") == []
    assert browser.evaluate("document.querySelectorAll('img').length") == 0
    assert evil in browser.evaluate("document.querySelector('#source-lines').innerText")
    assert browser.evaluate("document.documentElement.scrollWidth") <= 1280
