"""Partial traces: steps whose device side the trace lacks are incomplete, left out of the accounting the
rules see, listed with the reason; and a single file keeps its own rank."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from corpus.cases_numbers import STEP_US, busy_steps, drop_device_side, write_cut_off
from kineto_builder import TraceBuilder

import aiprof
from aiprof.analysis.coverage import AFTER_RECORD, RECORD_ENDS, UNRECORDED, device_coverage
from aiprof.analysis.run import analyze_paths, analyze_trace
from aiprof.analysis.steps import step_windows
from aiprof.errors import AiprofWarning
from aiprof.pipeline import analyze_and_diagnose
from aiprof.trace.kineto.loader import load_file
from aiprof.trace.model import Trace


def _load(path: Path) -> Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AiprofWarning)
        return load_file(path)


def _coverage(path: Path) -> tuple[list[str], list[tuple[str, str]]]:
    trace = _load(path)
    cov = device_coverage(trace, step_windows(trace))
    return [w.name for w in cov.complete], [(s.name, s.reason) for s in cov.incomplete]


def test_steps_whose_launches_lost_their_kernels_are_incomplete(tmp_path: Path) -> None:
    b = busy_steps()
    drop_device_side(b, from_step=4)
    path = b.write(tmp_path / "t.json")
    complete, incomplete = _coverage(path)
    assert complete == [f"ProfilerStep#{i}" for i in range(4)]
    assert incomplete == [("ProfilerStep#4", AFTER_RECORD), ("ProfilerStep#5", AFTER_RECORD)]
    rank = analyze_trace(_load(path))
    assert rank.partial and len(rank.windows) == 4 and len(rank.primary.steps) == 4
    step = rank.incomplete_steps[0]
    assert (step.launches, step.launches_recorded, step.cpu_ops) == (4, 0, 4)
    assert rank.primary.totals.gpu_utilization > 0.9  # the 4 recorded steps, not 2 steps of "idle"
    assert any("partial trace" in n and "ProfilerStep#4, ProfilerStep#5" in n for n in rank.notes)


def test_a_middle_step_whose_launches_have_no_device_activity_is_incomplete(tmp_path: Path) -> None:
    """Dropped device records (CUPTI buffer overflow) can hit any step: its launch calls have no kernel,
    and no device work runs in its window."""
    b = busy_steps()
    lost = [e for e in b.events if e.get("cat") == "kernel" and 2 * STEP_US * 1000 <= b.ns(e) < 3 * STEP_US * 1000]
    ids = {e["args"]["correlation"] for e in lost}
    b.events[:] = [e for e in b.events if e not in lost and not (e.get("ph") in ("s", "f") and e.get("id") in ids)]
    complete, incomplete = _coverage(b.write(tmp_path / "t.json"))
    assert incomplete == [("ProfilerStep#2", UNRECORDED)]
    assert len(complete) == 5


def test_a_trace_cut_off_mid_write_is_salvaged_and_its_late_steps_left_out(tmp_path: Path) -> None:
    """Kineto writes CPU events first and device records after them: the cut keeps all 6 steps' CPU side
    and the device side (launch calls included) of the first 4 only."""
    path = write_cut_off(busy_steps(), tmp_path / "cut.pt.trace.json.gz", at_step=4)
    trace = load_file(path)
    assert any("cut off mid-write" in w for w in trace.warnings)  # the salvage path read it
    cov = device_coverage(trace, step_windows(trace))
    assert cov.cut_off and cov.partial
    assert [(s.name, s.reason, s.launches, s.cpu_ops) for s in cov.incomplete] == [
        ("ProfilerStep#4", AFTER_RECORD, 0, 4),
        ("ProfilerStep#5", AFTER_RECORD, 0, 4),
    ]
    run, findings = analyze_and_diagnose([path], workers=1)
    findings = [f.to_dict() for f in findings]  # as the JSON report holds them
    assert [f["id"] for f in findings if f["severity"] == "high"] == []
    assert any("partial trace (the file is cut off mid-write)" in w for w in run.warnings)


def test_the_step_in_which_the_record_ends_is_incomplete_too(tmp_path: Path) -> None:
    """Cut inside step 3's device records: step 3 has fewer recorded launches than the others, and the
    device record ends inside its CPU span."""
    data = write_cut_off(busy_steps(), tmp_path / "cut.json", at_step=3.5)
    complete, incomplete = _coverage(data)
    assert complete == [f"ProfilerStep#{i}" for i in range(3)]
    assert incomplete[0] == ("ProfilerStep#3", RECORD_ENDS)
    assert [name for name, _ in incomplete[1:]] == ["ProfilerStep#4", "ProfilerStep#5"]


def test_whole_traces_and_genuinely_idle_steps_are_complete(tmp_path: Path) -> None:
    complete, incomplete = _coverage(busy_steps().write(tmp_path / "busy.json"))
    assert len(complete) == 6 and incomplete == []
    # a step that launched nothing between recorded steps: the device really was idle; it stays
    b = TraceBuilder()
    for i in range(5):
        t0 = i * STEP_US
        b.step(i, ts=t0, dur=STEP_US)
        op = b.cpu_op("aten::add", ts=t0 + 5, dur=10)
        if i != 2:
            b.launch(op, kernel="add_kernel", kernel_ts=t0 + 20, kernel_dur=100)
    complete, incomplete = _coverage(b.write(tmp_path / "idle.json"))
    assert len(complete) == 5 and incomplete == []


def test_a_step_in_which_nothing_ran_is_not_incomplete(tmp_path: Path) -> None:
    """A last step with no CPU op and no launch (the short step the profiler opens before it stops, or a
    long pure-Python pause): its record is whole, nothing ran, so it stays (step_variance may name it)."""
    b = busy_steps(3)
    b.step(3, ts=3 * STEP_US + 10, dur=3 * STEP_US)
    path = b.write(tmp_path / "t.json")
    trace = _load(path)
    cov = device_coverage(trace, step_windows(trace))
    assert cov.incomplete == [] and not cov.partial and len(cov.complete) == 4
    run = analyze_paths([path], workers=1)
    assert not run.ranks[0].partial and len(run.ranks[0].primary.steps) == 4


def test_a_trace_without_steps_is_clipped_where_the_device_record_ends(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(10):
        op = b.cpu_op("aten::mm", ts=i * 100, dur=10)
        rt, k = b.launch(op, kernel="gemm", kernel_ts=i * 100 + 5, kernel_dur=90)
        if i >= 6:
            b.events.remove(k)
    trace = _load(b.write(tmp_path / "t.json"))
    cov = device_coverage(trace, step_windows(trace))
    assert cov.partial and cov.incomplete == []
    assert cov.complete[0].end_ns == cov.device_end_ns and cov.clipped_ns > 300_000
    rank = analyze_trace(trace)
    assert rank.primary.totals.gpu_utilization > 0.85


def test_all_steps_without_device_side_is_not_a_partial_device_trace(tmp_path: Path) -> None:
    """No device activity at all: the CPU accounting (with its own note) applies, nothing is left out."""
    b = busy_steps()
    drop_device_side(b, from_step=0)
    complete, incomplete = _coverage(b.write(tmp_path / "t.json"))
    assert len(complete) == 6 and incomplete == []


# ----- rank of a single file ------------------------------------------------------------------------
def test_a_single_file_keeps_its_own_rank(tmp_path: Path) -> None:
    b = busy_steps(2)
    b.distributed(rank=34, world_size=64)
    path = b.write(tmp_path / "trace.json")
    loaded = aiprof.load(path)
    assert isinstance(loaded, Trace) and (loaded.rank, loaded.rank_source) == (34, "distributedInfo")
    run = analyze_paths([path], workers=1)
    assert [(r.rank, r.rank_source) for r in run.ranks] == [(34, "distributedInfo")]


def test_a_single_file_without_distributed_info_follows_the_folder_convention(tmp_path: Path) -> None:
    plain = busy_steps(2).write(tmp_path / "trace.json")
    named = busy_steps(2).write(tmp_path / "run_rank7.json")
    assert [(r.rank, r.rank_source) for r in analyze_paths([plain], workers=1).ranks] == [(0, "file order")]
    assert [(r.rank, r.rank_source) for r in analyze_paths([named], workers=1).ranks] == [(7, "file name")]
    assert aiprof.load(named).rank == 7  # type: ignore[union-attr]


def test_report_json_of_a_partial_run(tmp_path: Path) -> None:
    from aiprof.report.document import build_document
    from aiprof.report.json_report import JsonRenderer

    b = busy_steps()
    drop_device_side(b, from_step=4)
    run, findings = analyze_and_diagnose([b.write(tmp_path / "t.json")], workers=1)
    findings = [f.to_dict() for f in findings]  # as the JSON report holds them
    doc = json.loads(JsonRenderer().render(build_document(run, findings)))
    s = doc["summary"]
    assert s["partial"] is True and s["incomplete_step_count"] == 2 and s["step_count"] == 4
    assert "Partial run" in s["partial_note"]
    rank = doc["ranks"][0]
    assert [x["name"] for x in rank["incomplete_steps"]] == ["ProfilerStep#4", "ProfilerStep#5"]
    assert all(x["incomplete"] for x in rank["incomplete_steps"]) and len(rank["steps"]) == 4
    assert rank["coverage"]["partial"] is True
