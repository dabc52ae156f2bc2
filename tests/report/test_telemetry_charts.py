"""Telemetry charts in the HTML report, on a real CPU run recorded with ``aiprof run``: only the samples
inside the span the timeline shows are drawn (and set the scale), every chart has a y-axis that says its
unit, no label runs past the chart's edge, and the machine's CPU share (100 % = every core) is never on
one axis with the process tree's (100 % = one core)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from browser import Browser, why_no_browser
from cpu_runs import cpu_run  # noqa: F401 - the fixture
from report_docs import document_of

from aiprof import app
from aiprof.report import svg
from aiprof.report.model import Report
from aiprof.runmeta import RunTelemetry

SVG = re.compile(r'<svg class="chart line" viewBox="0 0 (\d+) (\d+)"[^>]*>(.*?)</svg>', re.S)


def _charts(page: str) -> list[tuple[int, int, str]]:
    return [(int(w), int(h), body) for w, h, body in SVG.findall(page)]


def _span(doc: Report) -> tuple[int, int]:
    ov: Any = msgspec.to_builtins(doc.ranks[0].timeline_overview)
    start = int(ov["start_ns"]) + int(ov.get("base_time_ns") or 0)
    return start, start + int(ov["end_ns"]) - int(ov["start_ns"])


def _inside(doc: Report) -> list[int]:
    start, end = _span(doc)
    tel: Any = msgspec.to_builtins(doc.telemetry)
    return [i for i, t in enumerate(tel["t_unix_ns"]) if start <= t <= end]


@pytest.fixture(scope="module")
def cpu_doc(cpu_run: Path) -> Report:  # noqa: F811
    doc = app.analyze([cpu_run])
    assert isinstance(doc.telemetry, RunTelemetry) and len(_inside(doc)) >= 2, "the run's span must hold samples"
    return doc


def test_only_samples_inside_the_span(cpu_doc: Report) -> None:
    page = app.render(cpu_doc, "html")
    inside = _inside(cpu_doc)
    tel: Any = msgspec.to_builtins(cpu_doc.telemetry)
    assert f"The {len(inside)} of {len(tel['t_unix_ns'])} samples" in page
    charts = _charts(page)
    assert charts
    for width, _, body in charts:
        for path in re.findall(r'<path d="([^"]+)"', body):
            points = re.findall(r"[ML]([\d.]+) ([\d.]+)", path)
            assert len(points) <= len(inside)
            for x, _y in points:
                assert 90 <= float(x) <= width


def test_outside_samples_do_not_set_the_scale(cpu_doc: Report) -> None:
    """A huge value outside the span (the script's start-up) is neither drawn nor the top of the axis."""
    tel: Any = msgspec.to_builtins(cpu_doc.telemetry)
    start, _ = _span(cpu_doc)
    tel["t_unix_ns"] = [start - 10**9] + tel["t_unix_ns"]
    for name, values in tel["series"].items():
        tel["series"][name] = [1e15] + values
    doc = msgspec.structs.replace(cpu_doc, telemetry=msgspec.convert(tel, RunTelemetry))
    page = app.render(doc, "html")
    for _, _, body in _charts(page):
        assert "1000.0 TB" not in body and "peak 1000" not in body
    machine = next(body for _, _, body in _charts(page) if "whole machine" in body)
    assert ">100%<" in machine and ">0%<" in machine  # 0 … 100 % of all cores, whatever the outliers


def test_y_axis_labelled_and_cpu_shares_apart(cpu_doc: Report) -> None:
    page = app.render(cpu_doc, "html")
    charts = _charts(page)
    units = {"% of all cores", "% of one core", "bytes", "bytes/s"}
    for _, _, body in charts:
        texts = re.findall(r"<text[^>]*>([^<]*)</text>", body)
        assert any(f"({u})" in texts[0] for u in units), texts[0]  # the heading says the unit
        ticks = texts[1:]
        assert len(ticks) == 2 and ticks[1] in ("0%", "0 B", "0 B/s"), ticks
        legend_keys = re.findall(r"<title>(\w+) \(peak", body)
        assert not {"cpu_pct", "proc_cpu_pct"} <= set(legend_keys), "machine and one-core shares on one axis"
    headings = [re.findall(r"<text[^>]*>([^<]*)</text>", body)[0] for _, _, body in charts]
    assert "CPU, whole machine (% of all cores)" in headings and "CPU, profiled processes (% of one core)" in headings


def _text_boxes(body: str) -> list[tuple[float, float, str, str]]:
    return [(float(x), float(y), anchor or "start", text)
            for x, y, anchor, text in re.findall(r'<text x="([\d.]+)" y="([\d.]+)"(?: text-anchor="(\w+)")?[^>]*>([^<]*)</text>', body)]


def test_labels_fit_inside_the_chart(cpu_doc: Report) -> None:
    """Every label's extent (an upper bound of the font's glyph widths) lies inside the viewBox."""
    page = app.render(cpu_doc, "html")
    for width, height, body in _charts(page):
        for x, y, anchor, text in _text_boxes(body):
            w = svg.text_width(text)
            left = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
            assert left >= 0 and left + w <= width, text
            assert y - svg.FONT_PX >= -1 and y <= height, text


def test_too_few_samples_say_so(cpu_doc: Report) -> None:
    tel: Any = msgspec.to_builtins(cpu_doc.telemetry)
    keep = _inside(cpu_doc)[:1]
    tel["t_unix_ns"] = [tel["t_unix_ns"][i] for i in keep]
    tel["series"] = {k: [v[i] for i in keep] for k, v in tel["series"].items()}
    page = app.render(msgspec.structs.replace(cpu_doc, telemetry=msgspec.convert(tel, RunTelemetry)), "html")
    assert not _charts(page) and "1 of 1 samples fall inside" in page and "too few to chart" in page


@pytest.mark.skipif(why_no_browser() is not None, reason=why_no_browser() or "")
@pytest.mark.parametrize("key", ["cpu", "dlrm_8rank"])
def test_labels_fit_in_the_browser(key: str, cpu_doc: Report, tmp_path: Path) -> None:
    """Measured by Chromium: each label's box (getBBox) inside its chart's viewBox, for every chart of
    the page (telemetry, step and rank bars, idle causes, timeline strips and axis)."""
    doc = cpu_doc if key == "cpu" else document_of(key)
    page = tmp_path / "report.html"
    page.write_text(app.render(doc, "html"))
    with Browser() as browser:
        browser.open(page)
        # each label's rendered box (transforms such as a rotated axis title included) against its svg's box
        out = browser.evaluate(
            "[...document.querySelectorAll('svg.chart')].map(s => {const c = s.getBoundingClientRect();"
            " return [...s.querySelectorAll('text')].map(t => {const b = t.getBoundingClientRect();"
            " return [t.textContent, b.left - c.left, b.top - c.top, b.right - c.left, b.bottom - c.top, c.width, c.height];});})"
        )
    assert len(out) >= 3
    for chart in out:
        for text, x0, y0, x1, y1, w, h in chart:
            assert x0 >= -0.5 and x1 <= w + 0.5 and y0 >= -0.5 and y1 <= h + 0.5, (text, x0, y0, x1, y1, w, h)
