"""Findings whose fix maps to an edit carry the replayed prediction beside their formula."""

from __future__ import annotations

from pathlib import Path
import pytest

import aiprof
from aiprof.analysis.steps import step_windows
from aiprof.analysis.whatif.findings import predict_findings
from aiprof.pipeline import analyze_and_diagnose
from aiprof.trace.model import Trace
from kineto_builder import TraceBuilder
from test_whatif_edits import cpu_overhead_trace, item_trace, loader_builder, loader_trace
from test_whatif_graph import sync_trace


def test_a_mapped_finding_gets_its_fix_replayed(tmp_path: Path) -> None:
    trace = loader_trace(tmp_path)
    replayed = predict_findings(trace, step_windows(trace), ["data_loading", "precision"])
    assert replayed.notes == []  # one mapped finding: no note
    assert replayed.evidence("data_loading") == {"predicted_step_ns": 60_000, "predicted_saving_ns_per_step": 40_000,
                                                 "predicted_by": "remove data_loading",
                                                 "claimed_saving_ns_per_step": 40_000}
    assert replayed.evidence("precision") == {}  # no edit for this fix: the formula only


def test_host_and_launch_overhead_fixes_are_replayed(tmp_path: Path) -> None:
    """host_bound: the per-op overhead goes (the kernel then ends the step at 79 µs, as in
    test_remove_host_overhead_with_a_device); launch_bound: CUDA graphs, the same 79 µs on this trace. Both
    change aten::mm's host segments: one cause, replayed together (79 µs) and claimed once, by host_bound
    (first in FIX_EDITS); launch_bound keeps its own replay, claims 0 and names host_bound. CPU only: the tiny
    ops and short gaps go, the mm stays (60 µs)."""
    trace = loader_trace(tmp_path)
    replayed = predict_findings(trace, step_windows(trace), ["host_bound", "launch_bound"])
    assert replayed.evidence("host_bound") == {"predicted_step_ns": 79_000, "predicted_saving_ns_per_step": 21_000,
                                               "predicted_by": "remove host overhead + cuda graphs",
                                               "claimed_saving_ns_per_step": 21_000, "claimed_with": ["launch_bound"]}
    assert replayed.evidence("launch_bound") == {"predicted_step_ns": 79_000, "predicted_saving_ns_per_step": 21_000,
                                                 "predicted_by": "cuda graphs", "claimed_saving_ns_per_step": 0,
                                                 "claimed_by": "host_bound"}
    assert len(replayed.notes) == 1 and "saving 0.02 ms" in replayed.notes[0]
    assert "host_bound 0.02 ms (with launch_bound: the same time)" in replayed.notes[0]
    cpu = cpu_overhead_trace(tmp_path)
    on_cpu = predict_findings(cpu, step_windows(cpu), ["host_bound", "launch_bound"])
    assert on_cpu.fixes["host_bound"].predicted_step_ns == 60_000
    assert "launch_bound" not in on_cpu.fixes  # no kernel: nothing to capture in a graph


def test_an_item_loop_is_one_cause_for_sync_and_launch_bound(tmp_path: Path) -> None:
    """item_trace: sync's fix (the call, its wait, the .item() op and its copy: 65 µs, as in
    test_scalar_reads_go_with_their_syncs) and CUDA graphs (the host work: aten::item's segments among it)
    share nodes. Together every host node in the step costs nothing and the sync waits for nothing: the launch
    at 0, the kernel at 9-49 (its 9 µs latency): 49 µs, claimed by sync."""
    trace = item_trace(tmp_path)
    replayed = predict_findings(trace, step_windows(trace), ["launch_bound", "sync"])
    sync, graphs = replayed.fixes["sync"], replayed.fixes["launch_bound"]
    assert (sync.predicted_step_ns, sync.claimed_saving_ns_per_step, sync.claimed_with) == (49_000, 51_000,
                                                                                           ["launch_bound"])
    assert sync.predicted_by == "remove syncs + cuda graphs"
    assert (graphs.claimed_saving_ns_per_step, graphs.claimed_by) == (0, "sync")


def test_claims_are_marginal_and_add_up_to_at_most_the_step(tmp_path: Path) -> None:
    """loader_trace: data_loading alone 100 -> 60 µs; host_bound with launch_bound (one cause) 100 -> 79. In
    that order: data_loading claims 40, then host_bound what is left once the loader is gone: 60 -> 39 (the
    kernel at 9-39), 21; launch_bound 0. Alone the three replays save 40 + 21 + 21 = 82 µs; the claims add
    up to 61, the saving of all three together."""
    trace = loader_trace(tmp_path)
    replayed = predict_findings(trace, step_windows(trace), ["launch_bound", "host_bound", "data_loading"])
    claims = {i: f.claimed_saving_ns_per_step for i, f in replayed.fixes.items()}
    assert claims == {"data_loading": 40_000, "host_bound": 21_000, "launch_bound": 0}
    assert sum(f.predicted_saving_ns_per_step for f in replayed.fixes.values()) == 82_000
    assert "100 -> 39" not in replayed.notes[0] and "0.10 -> 0.04 ms (saving 0.06 ms)" in replayed.notes[0]


def test_findings_are_ranked_by_claim_not_by_overlapping_formulas(tmp_path: Path) -> None:
    """Three 1.3 ms steps, each a 300 µs DataLoader wait then 40 tiny ops (20 µs each, a 16 µs launch call
    inside, a 3 µs kernel). By formula launch_bound (800 µs) comes first, data_loading (300) second, host_bound
    (80) last; their fixes alone replay to 1000 + 300 + 1000 µs, far more than the step. Claimed: the host
    overhead and the launch waits are one cause (1000 µs, claimed by host_bound), the loader what is left
    once they are gone (180 µs: the 300 µs wait now overlaps the 120 µs of device work), launch_bound 0; in
    that order, and the claims add up to less than the step."""
    b = TraceBuilder()
    for s in range(3):
        t0 = s * 1300
        b.step(s, ts=t0, dur=1300)
        b.dataloader(ts=t0, dur=300)
        for i in range(40):
            t = t0 + 300 + 25 * i
            op = b.cpu_op("aten::mul", ts=t, dur=20)
            b.launch(op, kernel="elementwise_kernel", kernel_ts=t + 22, kernel_dur=3, ts=t + 2, dur=16)
    _, findings = analyze_and_diagnose([b.write(tmp_path / "loop.json")], workers=1)
    timed = [f for f in findings if "claimed_saving_ns_per_step" in f.evidence]
    assert [(f.id, f.evidence["claimed_saving_ns_per_step"]) for f in timed] == [
        ("host_bound", 1_000_000), ("data_loading", 180_000), ("launch_bound", 0)]
    assert sorted(timed, key=lambda f: -f.est_saving_ns_per_step)[0].id == "launch_bound"
    assert sum(f.evidence["predicted_saving_ns_per_step"] for f in timed) > 1_300_000
    assert sum(f.evidence["claimed_saving_ns_per_step"] for f in timed) <= 1_300_000
    assert [f.id for f in findings].index("launch_bound") > [f.id for f in findings].index("data_loading")


def test_ties_are_broken_by_formula_then_severity_then_id() -> None:
    from aiprof.rules.finding import Finding
    from aiprof.rules.registry import rank_findings

    def finding(i: str, claim: int | None, formula: int, severity: str = "medium") -> Finding:
        evidence: dict[str, object] = {}
        if claim is not None:
            evidence = {"predicted_step_ns": 1, "predicted_saving_ns_per_step": claim, "predicted_by": "x",
                        "claimed_saving_ns_per_step": claim}
        return Finding(i, i, severity, formula, 0.1, "estimate", "", "medium", evidence, "")

    found = [finding("b", 5, 1), finding("a", 5, 1), finding("c", 5, 2), finding("d", None, 5, "high"),
             finding("e", None, 5, "low"), finding("f", 9, 0)]
    # f claims most; d, e (formula 5) and c (claims 5) tie: the formula, then the severity; a before b by id
    assert [f.id for f in rank_findings(found)] == ["f", "d", "e", "c", "a", "b"]


def test_overlapping_fixes_are_replayed_together_not_summed(tmp_path: Path) -> None:
    """The sync trace has no DataLoader: data_loading's fix saves 0, the sync's 13 µs; together 13 µs."""
    trace = sync_trace(tmp_path)
    replayed = predict_findings(trace, step_windows(trace), ["data_loading", "sync"])
    assert [replayed.fixes[i].predicted_saving_ns_per_step for i in ("data_loading", "sync")] == [0, 13_000]
    assert [replayed.fixes[i].claimed_saving_ns_per_step for i in ("data_loading", "sync")] == [0, 13_000]
    notes = replayed.notes
    assert len(notes) == 1 and "0.10 -> 0.09 ms" in notes[0] and "claimed once" in notes[0]


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
    assert list(loading.evidence)[-4:] == ["predicted_step_ns", "predicted_saving_ns_per_step", "predicted_by",
                                           "claimed_saving_ns_per_step"]


def test_a_failing_replay_is_a_note_and_leaves_the_formula(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from aiprof.analysis.whatif import findings as module

    def broken(*args: object) -> object:
        raise ValueError("boom")

    monkeypatch.setattr(module, "build_graph", broken)
    trace = loader_trace(tmp_path)
    replayed = predict_findings(trace, step_windows(trace), ["data_loading"])
    assert replayed.fixes == {} and len(replayed.notes) == 1 and "ValueError: boom" in replayed.notes[0]
