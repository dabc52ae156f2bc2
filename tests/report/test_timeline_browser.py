"""The interactive timeline in real headless Chromium: it renders, zooms, reports a known kernel at its time
under the mouse, shows hostile names as text without running them, runs only under its hash-pinned CSP,
makes no request, and loads the largest shared trace within a generous bound. Skips without chromium."""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from browser import Browser, install_sentinel, why_no_browser
from report_docs import SHARED
from test_timeline_payload import HOSTILE, build_trace, decode, track_of

from aiprof import app
from aiprof.report.timeline import payload
from aiprof.rules.finding import FindingRecord

pytestmark = pytest.mark.skipif(why_no_browser() is not None, reason=why_no_browser() or "")

LARGEST = SHARED / "hta" / "mtia_trace_single_rank" / "mtia_rank_0.json.gz"  # 455,739 events: the largest shared


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser() as b:
        install_sentinel(b)
        yield b


def write_page(paths: list[Path], out: Path, findings: list[FindingRecord] | None = None) -> tuple[Path, dict[str, Any]]:
    report, data = app.analyze_with_timeline([str(p) for p in paths], app.AnalyzeOptions(workers=1))
    assert data is not None
    if findings is not None:
        report = msgspec.structs.replace(report, findings=findings)
    out.write_text(app.render(report, "html", app.RenderOptions(timeline=data)), encoding="utf-8")
    return out, msgspec.to_builtins(payload(report, data))


def canvas_point(b: Browser, x: float, y: float) -> tuple[float, float]:
    """Viewport coordinates of a point of the canvas (scrolled into view first)."""
    b.evaluate(f"document.querySelector('#aiprof-tl canvas').scrollIntoView({{block: 'start'}}); window.scrollBy(0, {max(y - 200, 0)})")
    r = b.evaluate("(() => { const r = document.querySelector('#aiprof-tl canvas').getBoundingClientRect();"
                   " return [r.left, r.top]; })()")
    return r[0] + x, r[1] + y


def key(b: Browser, name: str, code: str) -> None:
    b.evaluate("document.querySelector('#aiprof-tl canvas').focus()")
    text = {"text": name} if len(name) == 1 else {}
    b.send("Input.dispatchKeyEvent", type="keyDown", key=name, code=code, **text)
    b.send("Input.dispatchKeyEvent", type="keyUp", key=name, code=code)


def settle(b: Browser) -> None:
    b.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def test_timeline_renders_offline(browser: Browser, tmp_path: Path) -> None:
    page, p = write_page([build_trace(tmp_path / "t.json")[0]], tmp_path / "t.html")
    log = browser.open(page)
    assert log.errors == [] and log.dialogs == []
    assert log.requests == [page.resolve().as_uri()]  # the page itself, nothing else
    state = browser.evaluate(
        "(() => { const c = document.querySelector('#aiprof-tl canvas');"
        " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        " let painted = 0; const colours = new Set();"
        " for (let i = 0; i < d.length; i += 4) { if (d[i + 3]) { painted++; colours.add(d[i] << 16 | d[i + 1] << 8 | d[i + 2]); } }"
        " return {painted, colours: colours.size, hidden: document.getElementById('aiprof-tl').hidden,"
        " events: aiprofTimeline.events, strips: document.querySelectorAll('svg.strip').length}; })()"
    )
    assert not state["hidden"] and state["events"] == p["events"]["count"]
    assert state["painted"] > 20_000 and state["colours"] > 10  # drawn, and in several colours
    assert state["strips"] >= 1  # the static strips stay for readers without script


def test_keyboard_wheel_and_drag_zoom(browser: Browser, tmp_path: Path) -> None:
    page, _ = write_page([build_trace(tmp_path / "t.json")[0]], tmp_path / "t.html")
    browser.open(page)
    width = lambda: (lambda v: v[1] - v[0])(browser.evaluate("aiprofTimeline.view()"))  # noqa: E731
    full = width()
    key(browser, "+", "Equal")
    settle(browser)
    assert width() == pytest.approx(full / 2)
    key(browser, "ArrowRight", "ArrowRight")
    before = browser.evaluate("aiprofTimeline.view()")
    assert before[0] > -full * 0.02  # panned right
    key(browser, "0", "Digit0")
    assert width() == pytest.approx(full)
    g = browser.evaluate("aiprofTimeline.geometry()")
    x, y = canvas_point(browser, g["gutter"] + 200, 40)
    browser.send("Input.dispatchMouseEvent", type="mouseWheel", x=x, y=y, deltaX=0, deltaY=-400)
    settle(browser)
    assert width() < full * 0.8
    key(browser, "0", "Digit0")
    # keyboard selection: "]" selects the first event in view, then the next one of its row; Enter zooms to it
    key(browser, "]", "BracketRight")
    first = browser.evaluate("aiprofTimeline.selected()")
    key(browser, "]", "BracketRight")
    second = browser.evaluate("aiprofTimeline.selected()")
    assert second["index"] == first["index"] + 1 and second["start_ns"] >= first["start_ns"]
    assert second["name"] in browser.evaluate("document.querySelector('#aiprof-tl .tl-sel').textContent")
    key(browser, "]", "BracketRight")
    third = browser.evaluate("aiprofTimeline.selected()")
    key(browser, "Enter", "Enter")  # zoom to it: in view, at most 6 times its length (or 20 µs) wide
    v0, v1 = browser.evaluate("aiprofTimeline.view()")
    assert v0 <= third["start_ns"] and third["end_ns"] <= v1
    assert v1 - v0 <= max(third["dur_ns"] * 6, 20_000) * 1.0001
    key(browser, "Escape", "Escape")
    assert browser.evaluate("aiprofTimeline.selected()") is None
    key(browser, "0", "Digit0")
    # shift + drag selects a range and zooms to it
    x0, y0 = canvas_point(browser, g["gutter"] + 100, 40)
    browser.send("Input.dispatchMouseEvent", type="mousePressed", x=x0, y=y0, button="left", clickCount=1, modifiers=8)
    browser.send("Input.dispatchMouseEvent", type="mouseMoved", x=x0 + 150, y=y0, button="left", modifiers=8)
    browser.send("Input.dispatchMouseEvent", type="mouseReleased", x=x0 + 150, y=y0, button="left", clickCount=1, modifiers=8)
    settle(browser)
    plot = g["width"] - g["gutter"]
    assert width() == pytest.approx(full * 150 / plot, rel=0.05)


def test_known_kernel_under_the_mouse(browser: Browser, tmp_path: Path) -> None:
    page, p = write_page([build_trace(tmp_path / "t.json")[0]], tmp_path / "t.html")
    a = decode(p)
    gemm = p["strings"].index("sm90_xmma_gemm_f32f32")
    index = sorted(range(len(a["t"])), key=lambda i: a["t"][i])
    second = [i for i in index if a["n"][i] == gemm][1]  # the GEMM of step 1
    t, d = float(a["t"][second]), float(a["d"][second])
    track = track_of(p, second)
    track_no = p["tracks"].index(track)
    row = next(r for r, (lo, hi) in enumerate(track["rows"]) if lo <= second < hi)
    browser.open(page)
    v0, v1 = browser.evaluate(f"aiprofTimeline.setView({t - 2 * d}, {t + 3 * d})")
    g = browser.evaluate("aiprofTimeline.geometry()")
    lane = browser.evaluate(f"aiprofTimeline.rowOf({track_no}, {row})")
    x = g["gutter"] + (t + d / 2 - v0) / (v1 - v0) * (g["width"] - g["gutter"])
    y = lane["y"] + lane["h"] / 2
    hit = browser.evaluate(f"aiprofTimeline.hitTest({x}, {y})")
    assert hit["name"] == "sm90_xmma_gemm_f32f32" and hit["start_ns"] == t
    assert hit["dur_ns"] == pytest.approx(d) and hit["track"] == track["label"]
    # The same through a real mouse: the tooltip names it, as text.
    cx, cy = canvas_point(browser, x, y)
    browser.send("Input.dispatchMouseEvent", type="mouseMoved", x=cx, y=cy)
    tip = browser.evaluate("document.querySelector('#aiprof-tl .tl-tip').textContent")
    assert browser.evaluate("document.querySelector('#aiprof-tl .tl-tip .tl-name').textContent") == "sm90_xmma_gemm_f32f32"
    assert f"start {t / 1e6:.6f} ms" in tip  # t is 1.05 ms: shown to the ns
    # A click selects it and says which launch started it.
    browser.send("Input.dispatchMouseEvent", type="mousePressed", x=cx, y=cy, button="left", clickCount=1)
    browser.send("Input.dispatchMouseEvent", type="mouseReleased", x=cx, y=cy, button="left", clickCount=1)
    assert browser.evaluate("aiprofTimeline.selected().index") == second
    assert "launched by cudaLaunchKernel" in browser.evaluate("document.querySelector('#aiprof-tl .tl-sel').textContent")


def test_hostile_names_are_text(browser: Browser, tmp_path: Path) -> None:
    path, _ = build_trace(tmp_path / "t.json", names=HOSTILE)
    page, p = write_page([path], tmp_path / "evil.html")
    log = browser.open(page)
    assert log.dialogs == [] and browser.evaluate("window.__aiprof_xss") == []
    assert log.errors == [] and log.requests == [page.resolve().as_uri()]
    assert browser.evaluate("document.querySelectorAll('img').length") == 0
    assert browser.evaluate("document.querySelectorAll('script').length") == 3  # report data, timeline data, viewer
    a = decode(p)
    g = browser.evaluate("aiprofTimeline.geometry()")
    for name in HOSTILE:
        i = next(i for i in range(len(a["t"])) if p["strings"][a["n"][i]] == name and track_of(p, i)["kind"] == "stream")
        t, d = float(a["t"][i]), float(a["d"][i])
        v0, v1 = browser.evaluate(f"aiprofTimeline.setView({t - d}, {t + 2 * d})")
        track = track_of(p, i)
        row = next(r for r, (lo, hi) in enumerate(track["rows"]) if lo <= i < hi)
        lane = browser.evaluate(f"aiprofTimeline.rowOf({p['tracks'].index(track)}, {row})")
        x = g["gutter"] + (t + d / 2 - v0) / (v1 - v0) * (g["width"] - g["gutter"])
        cx, cy = canvas_point(browser, x, lane["y"] + lane["h"] / 2)
        browser.send("Input.dispatchMouseEvent", type="mouseMoved", x=cx, y=cy)
        shown = browser.evaluate("(() => { const n = document.querySelector('#aiprof-tl .tl-tip .tl-name');"
                                 " return [n.textContent, n.children.length, n.parentNode.querySelectorAll('*').length]; })()")
        assert shown == [name, 0, 2]  # the name as text, exactly; no element made from it
    assert browser.evaluate("window.__aiprof_xss") == [] and browser.evaluate("document.querySelectorAll('img').length") == 0


def test_csp_hash_pins_the_script(browser: Browser, tmp_path: Path) -> None:
    page, _ = write_page([build_trace(tmp_path / "t.json")[0]], tmp_path / "t.html")
    html = page.read_text(encoding="utf-8")
    script = re.findall(r"<script>(.*?)</script>", html, flags=re.S)
    assert len(script) == 1
    digest = base64.b64encode(hashlib.sha256(script[0].encode()).digest()).decode()
    policy = browser.evaluate("(() => { const m = document.querySelector('meta[http-equiv=\"Content-Security-Policy\"]');"
                              " return m && m.content; })()") if browser.open(page) else None
    assert policy is not None and f"script-src 'sha256-{digest}'" in policy and "default-src 'none'" in policy
    assert browser.evaluate("!!window.aiprofTimeline")
    tampered = tmp_path / "tampered.html"
    changed = html.replace("<script>", "<script>window.__tampered=1;", 1)  # the inline viewer (no attributes)
    assert changed != html
    tampered.write_text(changed, encoding="utf-8")
    log = browser.open(tampered)
    assert browser.evaluate("typeof window.__tampered") == "undefined"
    assert browser.evaluate("typeof window.aiprofTimeline") == "undefined"
    assert browser.evaluate("document.getElementById('aiprof-tl').hidden")  # the viewer stays hidden
    assert any("Content Security Policy" in text for _, text in log.console), log.console


def test_finding_shows_its_evidence(browser: Browser, tmp_path: Path) -> None:
    path, _ = build_trace(tmp_path / "t.json", names=("my_slow_kernel",))
    record = FindingRecord(id="planted", title="slow kernel", severity="high", est_saving_ns_per_step=1,
                           share_of_step=0.1, confidence="low",
                           evidence={"top_kernels": [{"name": "my_slow_kernel", "total_ns": 5}]}, fix="")
    page, p = write_page([path], tmp_path / "f.html", findings=[record])
    browser.open(page)
    assert browser.evaluate("document.querySelectorAll('#findings button.tl-show').length") == 1
    browser.evaluate("document.querySelector('#findings button.tl-show').click()")
    chosen = browser.evaluate("aiprofTimeline.selected()")
    (target,) = p["findings"]
    step0, step1 = target["step"][0], target["step"][1]
    assert chosen["name"] == "my_slow_kernel" and step0 <= chosen["start_ns"] <= step1  # in the slowest step
    v0, v1 = browser.evaluate("aiprofTimeline.view()")
    assert v0 <= chosen["start_ns"] and chosen["end_ns"] <= v1 and v1 - v0 < p["span_ns"] / 5


def test_largest_shared_trace_loads_within_budget(browser: Browser, tmp_path: Path) -> None:
    """Measured on the shared 2-core dev machine (docs/reports.md): page 3.7 MB, 138,370 events, viewer ready
    57-234 ms after its script starts, a full redraw 4-9 ms, JS heap 3-5 MB (+ ~5 MB of typed arrays), the
    whole open 0.7-0.8 s. The bounds are 10x and more: no flake under load."""
    if not LARGEST.exists():
        pytest.skip(f"{LARGEST} not present (../shared/traces)")
    page, p = write_page([LARGEST], tmp_path / "mtia.html")
    size = page.stat().st_size
    browser.send("Performance.enable")
    started = time.monotonic()
    log = browser.open(page, settle_s=0.2)
    wall = time.monotonic() - started
    assert log.errors == [] and log.requests == [page.resolve().as_uri()]
    stats = browser.evaluate("({load: aiprofTimeline.loadMs, draw: aiprofTimeline.redraw(), events: aiprofTimeline.events,"
                             " nav: performance.now()})")
    metrics = {m["name"]: m["value"] for m in browser.send("Performance.getMetrics")["metrics"]}
    heap = browser.send("Runtime.getHeapUsage")["usedSize"]
    print(f"\nlargest trace: page {size / 1e6:.1f} MB, {stats['events']:,} events, viewer {stats['load']:.0f} ms, "
          f"redraw {stats['draw']:.1f} ms, open {wall:.2f} s, JS heap {heap / 1e6:.0f} MB "
          f"(JSHeapUsedSize {metrics.get('JSHeapUsedSize', 0) / 1e6:.0f} MB)")
    assert stats["events"] == p["events"]["count"] > 100_000
    assert size < 40e6
    assert stats["load"] < 10_000 and stats["draw"] < 2_000 and wall < 60
    assert heap < 600e6


def test_ranks_scroll_and_line_up_on_a_real_multi_rank_run(browser: Browser, tmp_path: Path) -> None:
    """The 8-rank DLRM run: every rank's tracks on one clock, a canvas no taller than the window however
    many tracks there are, and a kernel of the last rank found under the mouse after scrolling to it."""
    from report_docs import shared_path

    page, p = write_page([shared_path("dlrm_8rank")], tmp_path / "dlrm.html")
    log = browser.open(page)
    assert log.errors == [] and log.requests == [page.resolve().as_uri()]
    assert sorted({t["rank"] for t in p["tracks"]}) == list(range(8)) and p["clock"] == "unix"
    g = browser.evaluate("aiprofTimeline.geometry()")
    assert g["content"] > g["height"] and g["height"] <= 900  # scrolls inside a window-sized canvas
    a = decode(p)
    last = [i for i in range(len(a["t"])) if a["k"][i] == 4 and track_of(p, i)["rank"] == 7]  # rank 7's collectives
    i = max(last, key=lambda i: a["d"][i])
    t, d = float(a["t"][i]), float(a["d"][i])
    v0, v1 = browser.evaluate(f"aiprofTimeline.setView({t - d}, {t + 2 * d})")
    track = track_of(p, i)
    row = next(r for r, (lo, hi) in enumerate(track["rows"]) if lo <= i < hi)
    lane = browser.evaluate(f"aiprofTimeline.rowOf({p['tracks'].index(track)}, {row})")
    assert 0 < lane["y"] < g["height"]
    x = g["gutter"] + (t + d / 2 - v0) / (v1 - v0) * (g["width"] - g["gutter"])
    hit = browser.evaluate(f"aiprofTimeline.hitTest({x}, {lane['y'] + lane['h'] / 2})")
    assert hit["index"] == i and hit["track"] == f"rank 7 · {track['label']}" and hit["category"] == "communication"


def synthetic_rank(events: int, tracks: int = 8) -> Any:
    """A rank of ``events`` kernels on ``tracks`` streams, gaps of 0.2-3 µs (numbers, not a trace file)."""
    import numpy as np

    from aiprof.analysis.explore import RankTimeline

    rng = np.random.default_rng(0)
    per = events // tracks
    gaps = rng.integers(200, 3000, (tracks, per))
    start = (np.cumsum(gaps, axis=1) + 1_700_000_000_000_000_000).reshape(-1).astype(np.int64)
    dur = (gaps * rng.uniform(0.2, 0.9, gaps.shape)).reshape(-1).astype(np.int64)
    n = start.size
    return RankTimeline(0, [f"kernel_{i}" for i in range(500)], ["stream"] * tracks,
                        [f"gpu 0 · stream {t}" for t in range(tracks)], np.repeat(np.arange(tracks, dtype=np.int32), per),
                        np.zeros(n, np.int16), start, dur, rng.integers(0, 500, n).astype(np.int32),
                        np.full(n, 3, np.int8), np.zeros(0, np.int64), np.zeros(0, np.int64), total_events=n,
                        clock="unix", base_time_ns=1_700_000_000_000_000_000)


def test_half_a_million_events_stay_responsive(browser: Browser, tmp_path: Path) -> None:
    """500,000 events: the page embeds the run's 400,000 (the longest per track), says so, and stays
    responsive. Measured (docs/reports.md): 9.3 MB, viewer ready in ~260 ms, a full redraw 23-33 ms, 8 ms
    zoomed in; the bounds here are far above, never a timing race."""
    from aiprof.report.timeline import TimelineInput

    path, _ = build_trace(tmp_path / "t.json")
    report, _ = app.analyze_with_timeline([str(path)], app.AnalyzeOptions(workers=1))
    page = tmp_path / "big.html"
    page.write_text(app.render(report, "html", app.RenderOptions(timeline=TimelineInput([synthetic_rank(500_000)]))),
                    encoding="utf-8")
    log = browser.open(page)
    assert log.errors == [] and log.requests == [page.resolve().as_uri()]
    state = browser.evaluate("({events: aiprofTimeline.events, load: aiprofTimeline.loadMs, draw: aiprofTimeline.redraw(),"
                             " note: document.querySelector('#aiprof-tl ul').textContent})")
    digits = re.sub(r"(?<=\d)[^\w\s]?\s?(?=\d{3}\b)", "", state["note"])  # digit groups, whatever the locale
    assert state["events"] == 400_000 and "400000 events of 500000 embedded" in digits
    assert state["load"] < 10_000 and state["draw"] < 2_000
    v0, v1 = browser.evaluate("aiprofTimeline.view()")
    browser.evaluate(f"aiprofTimeline.setView({v0 + (v1 - v0) * 0.3}, {v0 + (v1 - v0) * 0.301})")
    assert browser.evaluate("aiprofTimeline.redraw()") < 2_000
