"""export_memory_timeline raw output: torch's own categories."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

from aiprof.memory import analyze_memory, load_memory


def test_hta_raw_timeline_peak_and_categories(traces_dir: Path) -> None:
    path = traces_dir / "hta" / "memory_analysis" / "memory_timeline.raw.gz"
    rows = json.loads(gzip.decompress(path.read_bytes()))
    # independent replay: preexisting first, then by time; the peak and its categories
    rows = sorted(rows, key=lambda r: (r[0] if r[0] >= 0 and r[1] != 1 else -1))
    total = peak = 0
    by_cat: dict[int, int] = defaultdict(int)
    at_peak: dict[int, int] = {}
    for t, action, delta, cat in rows:
        total += delta
        by_cat[cat] += delta
        if total > peak:
            peak, at_peak = total, dict(by_cat)
    report = analyze_memory(load_memory(path))
    dev = report.devices[0]
    assert report.categories_from == "torch"
    assert dev.peak_allocated_bytes == peak
    got = {c.category: c.bytes for c in dev.live_at_peak_by_category}
    assert got["activation"] == at_peak[4]
    assert got["parameter"] == at_peak[0]
    assert abs(peak / 2**30 - 2.871) < 0.001


def test_plot_json_is_read_back_into_category_deltas(tmp_path: Path) -> None:
    # export_memory_timeline's non-raw JSON: [times_us, rows of [0, 8 cumulative category sizes]]
    times = [10, 20, 30, 40]
    sizes = [[0, 100, 0, 0, 0, 0, 0, 0, 0], [0, 100, 0, 0, 0, 50, 0, 0, 0],
             [0, 100, 30, 0, 0, 80, 0, 0, 0], [0, 100, 30, 0, 0, 0, 0, 0, 0]]
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps([times, sizes]))
    dev = analyze_memory(load_memory(path)).devices[0]
    assert dev.peak_allocated_bytes == 210
    got = {c.category: c.bytes for c in dev.live_at_peak_by_category}
    assert got == {"parameter": 100, "activation": 80, "optimizer_state": 30}
