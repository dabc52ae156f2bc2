"""Two profiler cycles in one trace (``schedule(repeat=2)``: steps 7-10, then 17-20, 3 s apart): the
unrecorded time between them is found (analysis.recording), counted in no number — not as idle in the
timeline strip, not in the profiler's share of host time — and the cycles are named in every report."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import msgspec
from kineto_builder import TraceBuilder

from aiprof.analysis.health import run_health
from aiprof.analysis.overview import timeline_overview
from aiprof.analysis.recording import gaps_ns, profiler_cycles
from aiprof.analysis.run import analyze_trace
from aiprof.errors import AiprofWarning
from aiprof.pipeline import analyze_and_diagnose
from aiprof.report.document import build_document
from aiprof.report.render import render
from aiprof.trace.kineto.loader import load_file
from aiprof.trace.model import Trace

MS = 1000  # µs per ms (the builder takes µs)
GAP_MS = 3000


def _steps(b: TraceBuilder, numbers: range, t0: float) -> float:
    """10 ms steps, each an op launching an 8 ms kernel; returns the end."""
    for k, n in enumerate(numbers):
        t = t0 + k * 10 * MS
        b.step(n, ts=t, dur=10 * MS)
        op = b.cpu_op("aten::mm", ts=t + 10, dur=50, shapes=[[64, 64], [64, 64]])
        b.launch(op, kernel_ts=t + 100, kernel_dur=8 * MS)
    return t0 + len(numbers) * 10 * MS


def _two_cycles(b: TraceBuilder, numbers: tuple[range, range] = (range(7, 11), range(17, 21))) -> None:
    end = _steps(b, numbers[0], 0)
    b.cpu_op("aten::empty", ts=end + 100, dur=200)  # the export's own work after the last step: cycle 1's
    _steps(b, numbers[1], end + GAP_MS * MS)


def _load(path: Path) -> Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AiprofWarning)
        return load_file(path)


def test_the_cycles_and_the_gap_between_them_are_found(tmp_path: Path) -> None:
    b = TraceBuilder()
    _two_cycles(b)
    cycles = profiler_cycles(_load(b.write(tmp_path / "t.json")))
    assert [(c.first_step, c.last_step, c.steps) for c in cycles] == [(7, 10, 4), (17, 20, 4)]
    (gap,) = gaps_ns(cycles)
    assert GAP_MS * 10**6 - 10**6 < gap <= GAP_MS * 10**6  # the export's 0.3 ms stays in cycle 1
    assert cycles[0].end_ns >= (40 * MS + 300) * 1000


def test_consecutive_steps_are_one_cycle(tmp_path: Path) -> None:
    """Steps 7-14 without a jump in their numbers: one recording, however long a step is."""
    b = TraceBuilder()
    _two_cycles(b, (range(7, 11), range(11, 15)))
    trace = _load(b.write(tmp_path / "t.json"))
    assert profiler_cycles(trace) == []
    assert "segments" not in msgspec.to_builtins(timeline_overview(trace))


def test_the_strip_joins_the_cycles_and_shows_no_gap_as_idle(tmp_path: Path) -> None:
    b = TraceBuilder()
    _two_cycles(b)
    overview = msgspec.to_builtins(timeline_overview(_load(b.write(tmp_path / "t.json"))))
    (device,) = overview["devices"]
    binned = sum(sum(device[f"{k}_ns"]) for k in ("compute", "communication", "memcpy", "memset", "compile", "idle"))
    assert binned == overview["end_ns"] - overview["start_ns"]  # every recorded ns in one bin, once
    assert binned < 100 * MS * 1000  # 8 steps of 10 ms: the 3 s between the cycles is in no bin
    assert sum(device["compute_ns"]) == 8 * 8 * MS * 1000  # every kernel of both cycles
    assert len(overview["segments"]) == 2


def test_the_profilers_share_is_over_the_recorded_time(tmp_path: Path) -> None:
    b = TraceBuilder()
    _two_cycles(b)
    health = analyze_trace(_load(b.write(tmp_path / "t.json"))).health
    assert health is not None and len(health.cycles) == 2
    assert health.host_span_ns < 100 * MS * 1000  # not the 3 s wall span
    item = next(i for i in run_health([health]).items if i.id == "profiler_cycles")
    assert item.status == "limited" and item.value > 2.9e9
    assert "2 profiler cycles (cycle 1: steps 7–10" in item.text and "cycle 2: steps 17–20" in item.text
    assert "3.0 s between them was not recorded" in item.text


def test_every_report_names_the_cycles(tmp_path: Path) -> None:
    b = TraceBuilder()
    _two_cycles(b)
    doc = build_document(*analyze_and_diagnose([b.write(tmp_path / "t.json")]))
    for fmt in ("terminal", "md", "html"):
        text = render(doc, fmt, width=200)
        assert "2 profiler cycles" in text and "not recorded" in text, fmt
    html = render(doc, "html")
    assert "profiler cycles are joined end to end" in html
    data = json.loads(render(doc, "json"))
    assert any(i["id"] == "profiler_cycles" and i["status"] == "limited" for i in data["health"]["items"])


def test_cycle_files_of_one_process_keep_their_spans(tmp_path: Path) -> None:
    """A folder of one process's cycle files (merged into one rank): the cycles are the files' spans."""
    first, second = TraceBuilder(), TraceBuilder()
    end = _steps(first, range(7, 11), 0)
    _steps(second, range(17, 21), end + GAP_MS * MS)
    first.write(tmp_path / "host_1.1.pt.trace.json")
    second.write(tmp_path / "host_1.2.pt.trace.json")
    run, _ = analyze_and_diagnose([tmp_path])
    (rank,) = run.ranks
    assert rank.health is not None and [(c.first_step, c.last_step) for c in rank.health.cycles] == [(7, 10), (17, 20)]
    assert sum(gaps_ns(rank.health.cycles)) > 2.9e9
