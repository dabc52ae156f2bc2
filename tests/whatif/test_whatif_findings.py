"""Findings whose fix maps to an edit carry the replayed prediction beside their formula."""

from __future__ import annotations

from pathlib import Path
import pytest

import aiprof
from aiprof.analysis.steps import step_windows
from aiprof.analysis.whatif.findings import predict_findings
from aiprof.pipeline import analyze_and_diagnose
from aiprof.trace.model import Trace
from test_whatif_edits import cpu_overhead_trace, loader_builder, loader_trace
from test_whatif_graph import sync_trace


def test_a_mapped_finding_gets_its_fix_replayed(tmp_path: Path) -> None:
    trace = loader_trace(tmp_path)
    replayed = predict_findings(trace, step_windows(trace), ["data_loading", "precision"])
    assert replayed.notes == []  # one mapped finding: no note
    assert replayed.evidence("data_loading") == {"predicted_step_ns": 60_000, "predicted_saving_ns_per_step": 40_000,
                                                 "predicted_by": "remove data_loading"}
    assert replayed.evidence("precision") == {}  # no edit for this fix: the formula only


def test_host_and_launch_overhead_fixes_are_replayed(tmp_path: Path) -> None:
    """host_bound: the per-op overhead goes (the kernel then ends the step at 79 µs, as in
    test_remove_host_overhead_with_a_device); launch_bound: CUDA graphs, the same 79 µs on this trace;
    together not 2 x 21 µs but 21 µs. CPU only: the tiny ops and short gaps go, the mm stays (60 µs)."""
    trace = loader_trace(tmp_path)
    replayed = predict_findings(trace, step_windows(trace), ["host_bound", "launch_bound"])
    assert replayed.evidence("host_bound") == {"predicted_step_ns": 79_000, "predicted_saving_ns_per_step": 21_000,
                                               "predicted_by": "remove host overhead"}
    assert replayed.fixes["launch_bound"].predicted_by == "cuda graphs"
    assert replayed.fixes["launch_bound"].predicted_step_ns == 79_000
    assert len(replayed.notes) == 1 and "saving 0.02 ms" in replayed.notes[0] and "add up to 0.04 ms" in replayed.notes[0]
    cpu = cpu_overhead_trace(tmp_path)
    on_cpu = predict_findings(cpu, step_windows(cpu), ["host_bound", "launch_bound"])
    assert on_cpu.fixes["host_bound"].predicted_step_ns == 60_000
    assert "launch_bound" not in on_cpu.fixes  # no kernel: nothing to capture in a graph


def test_overlapping_fixes_are_replayed_together_not_summed(tmp_path: Path) -> None:
    """The sync trace has no DataLoader: data_loading's fix saves 0, the sync's 13 µs; together 13 µs."""
    trace = sync_trace(tmp_path)
    replayed = predict_findings(trace, step_windows(trace), ["data_loading", "sync"])
    assert [replayed.fixes[i].predicted_saving_ns_per_step for i in ("data_loading", "sync")] == [0, 13_000]
    notes = replayed.notes
    assert len(notes) == 1 and "0.10 -> 0.09 ms" in notes[0] and "overlap" in notes[0]


def test_a_rank_of_a_distributed_run_gets_no_prediction(tmp_path: Path) -> None:
    b = loader_builder()
    b.distributed(rank=0, world_size=2)
    trace = aiprof.load(b.write(tmp_path / "r0.json"))
    assert isinstance(trace, Trace)
    assert predict_findings(trace, step_windows(trace), ["data_loading"]).fixes == {}


def test_the_diagnosis_carries_the_prediction(tmp_path: Path) -> None:
    _, findings = analyze_and_diagnose([loader_builder().write(tmp_path / "t.json")], workers=1)
    loading = next(f for f in findings if f.id == "data_loading")
    assert loading.evidence["predicted_step_ns"] == 60_000
    assert loading.evidence["predicted_saving_ns_per_step"] == 40_000
    assert list(loading.evidence)[-3:] == ["predicted_step_ns", "predicted_saving_ns_per_step", "predicted_by"]


def test_a_failing_replay_is_a_note_and_leaves_the_formula(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from aiprof.analysis.whatif import findings as module

    def broken(*args: object) -> object:
        raise ValueError("boom")

    monkeypatch.setattr(module, "build_graph", broken)
    trace = loader_trace(tmp_path)
    replayed = predict_findings(trace, step_windows(trace), ["data_loading"])
    assert replayed.fixes == {} and len(replayed.notes) == 1 and "ValueError: boom" in replayed.notes[0]
