"""The ranks of a run replayed together: a collective ends when its last rank arrives, so a fix on the
straggler moves every rank's step and a fix on a rank that waits saves nothing. Two hand-built gloo ranks,
answers worked out by hand in each docstring."""

from __future__ import annotations

from pathlib import Path

import aiprof
from aiprof.analysis.steps import step_windows
from aiprof.analysis.whatif.edits import Edit, RemoveHostGaps, ScaleHost
from aiprof.analysis.whatif.findings import predict_run_findings
from aiprof.analysis.whatif.graph import NodeKind
from aiprof.analysis.whatif.ranks import RunGraph, build_run_graph, on_rank, predict_run, straggler_work
from aiprof.trace.model import Trace
from kineto_builder import TraceBuilder

MS = 1000  # the builder's unit is the µs


def rank_builder(rank: int, steps: int = 1, busy: bool = False) -> TraceBuilder:
    """Step 0-60 ms on thread 1; the all-reduce runs on gloo's thread 2, 10 (rank 0) or 40 (rank 1) to 45 ms.

    - rank 0: aten::mm 0-8, c10d::allreduce_ 8-10, then waits (untraced) for the all-reduce until 45;
      aten::add_ 45-55; untraced 55-60.
    - rank 1 (the straggler): untraced Python 0-28, aten::mm 28-38, c10d::allreduce_ 38-40, waits until 45;
      aten::add_ 45-55; untraced 55-60.

    The transfer, once both ranks are there (40), takes 5 ms on each. ``steps`` such steps back to back. With
    ``busy``, rank 0 runs aten::detach 11-12 ms while the all-reduce runs (so its wait, 12-45, is not a join
    on gloo's thread seen one rank alone)."""
    b = TraceBuilder()
    b.distributed(rank=rank, world_size=2, backend="gloo")
    for n in range(steps):
        t = n * 60
        b.step(n, ts=t * MS, dur=60 * MS)
        first = 0 if rank == 0 else 28
        arrive = 10 if rank == 0 else 40
        b.cpu_op("aten::mm", ts=(t + first) * MS, dur=(arrive - 2 - first) * MS)
        b.cpu_op("c10d::allreduce_", ts=(t + arrive - 2) * MS, dur=2 * MS)
        b.annotation("gloo:all_reduce", ts=(t + arrive) * MS, dur=(45 - arrive) * MS, tid=2)
        if busy and rank == 0:
            b.cpu_op("aten::detach", ts=(t + 11) * MS, dur=1 * MS)
        b.cpu_op("aten::add_", ts=(t + 45) * MS, dur=10 * MS)
    return b


def run_traces(tmp_path: Path, steps: int = 1, busy: bool = False) -> list[Trace]:
    out = []
    for rank in (0, 1):
        loaded = aiprof.load(rank_builder(rank, steps, busy).write(tmp_path / f"rank{rank}.json"))
        assert isinstance(loaded, Trace)
        out.append(loaded)
    return out


def run_graph(tmp_path: Path, busy: bool = False) -> RunGraph:
    traces = run_traces(tmp_path, busy=busy)
    return build_run_graph(traces, [step_windows(t) for t in traces], [0, 1])


def _run_ms(run: RunGraph, edits: list[Edit]) -> float:
    prediction = predict_run(run, edits)
    assert prediction.baseline_ns.tolist() == [60 * MS * 1000]
    return prediction.predicted_median_ns / 1e6


def test_the_collective_is_joined_and_the_identity_replay_is_exact(tmp_path: Path) -> None:
    """One all-reduce matched on both ranks: each rank's span is split into its arrival (10, 40 ms) and the
    transfer from the last arrival (40-45 ms on both); replayed as is, each rank's step is its 60 ms."""
    run = run_graph(tmp_path)
    assert len(run.collectives) == 1
    coll = run.collectives[0]
    assert coll.arrive_ns.tolist() == [10 * MS * 1000, 40 * MS * 1000]
    g = run.graph
    assert g.kind[coll.arrive].tolist() == [int(NodeKind.ARRIVE)] * 2
    assert g.start[coll.transfer].tolist() == [40 * MS * 1000] * 2
    assert g.dur[coll.transfer].tolist() == [5 * MS * 1000] * 2
    assert _run_ms(run, []) == 60


def test_a_faster_waiting_rank_saves_nothing(tmp_path: Path) -> None:
    """Rank 0's host work halved: it arrives at 5 ms, the transfer still starts when rank 1 arrives (40) and
    ends at 45; rank 0's add_ 45-50 and its last gap (2.5 ms) end its step at 52.5 ms, rank 1 still takes 60:
    the run's step stays 60 ms."""
    run = run_graph(tmp_path)
    assert _run_ms(run, [on_rank(run, 0, [ScaleHost(0.5)])]) == 60


def test_removing_the_stragglers_python_shortens_every_rank(tmp_path: Path) -> None:
    """host_gaps' fix on rank 1 (untraced gaps of 1 ms or more go: 0-28 and 55-60): rank 1 arrives at 12 ms,
    both transfers run 12-17, both add_ 17-27; rank 0 keeps its own last gap (27-32), rank 1 ends at 27. The
    run's step: 32 ms."""
    run = run_graph(tmp_path)
    assert _run_ms(run, [on_rank(run, 1, [RemoveHostGaps()])]) == 32


def test_straggler_work_is_scaled_to_arrive_with_the_others(tmp_path: Path) -> None:
    """Rank 1 arrives 30 ms after rank 0, its work towards the collective spans 0-40 ms: its host work there
    (the gap 28, mm 10, c10d 2 ms) is scaled by 1 - 30/40 = 0.25 (7 + 2.5 + 0.5 = 10 ms): it arrives at 10
    with rank 0; the transfers run 10-15, add_ 15-25, the last gaps 25-30: 30 ms on every rank."""
    run = run_graph(tmp_path)
    edit = straggler_work(run, 1)
    assert sorted(edit.factors) == [0.25] * 3
    assert straggler_work(run, 0).nodes == ()  # rank 0 is never late
    assert _run_ms(run, [edit]) == 30


def test_a_wait_on_the_steps_thread_ends_with_the_collective(tmp_path: Path) -> None:
    """With rank 0 busy 11-12 ms during the all-reduce, one rank alone sees its untraced 12-45 ms as its own
    time; joined, the gap in which the last rank arrived (40) and that ends with the transfer (45) is a wait
    for it. So the straggler's fix (previous test) moves it: the transfer ends at 15, rank 0's add_ 15-25,
    its gap 25-30: 30 ms, as without the detach."""
    run = run_graph(tmp_path, busy=True)
    assert int((run.graph.kind[run.offsets[0]:run.offsets[1]] == int(NodeKind.JOIN)).sum()) == 1
    assert _run_ms(run, [straggler_work(run, 1)]) == 30


def test_a_straggler_and_its_own_finding_are_one_cause(tmp_path: Path) -> None:
    """straggler's and host_gaps' fixes change the same nodes (rank 1's 28 ms gap): one group, led by
    host_gaps (the rank's own cause first). Together: rank 1's gaps go and the rest of its work before the
    collective is scaled by 0.25 (mm 2.5 + c10d 0.5 ms): it arrives at 3, the transfer waits for rank 0 (10)
    and ends at 15; rank 0 ends at 30 (add_ 15-25, gap 25-30). host_gaps claims 60 - 30 = 30 ms, straggler 0;
    straggler alone replays to 30 ms too, host_gaps alone to 32."""
    traces = run_traces(tmp_path)
    fixes = predict_run_findings(traces, [step_windows(t) for t in traces], [0, 1],
                                 [("straggler", (1,)), ("host_gaps", (1,)), ("sync", (0,))]).fixes
    assert set(fixes) == {"straggler", "host_gaps"}  # no sync on rank 0: no edit, no prediction
    lead, other = fixes["host_gaps"], fixes["straggler"]
    assert (lead.predicted_step_ns, lead.claimed_saving_ns_per_step, lead.claimed_with) == (30 * 10**6, 30 * 10**6,
                                                                                           ["straggler"])
    assert (other.predicted_step_ns, other.claimed_saving_ns_per_step, other.claimed_by) == (30 * 10**6, 0, "host_gaps")


def test_the_run_diagnosis_carries_the_joined_prediction(tmp_path: Path) -> None:
    """Through the pipeline, on 4 such steps: the run's findings get the joined replay of their fix, on the
    ranks they name. A host_gaps finding on rank 1: the first step takes 32 ms (test above); from then on rank
    1 starts each step 5 ms before rank 0 (it has no last gap) and arrives 12 ms in, 3 ms before rank 0 (10 ms
    after its start): rank 0's 10 + 5 + 10 + 5 = 30 ms set every later step. Steps 32, 30, 30, 30: median 30,
    median saving 30 ms. Here the rules
    blame rank 1's host_bound (its fix, CPU ops under 20 µs and gaps under 1 ms, changes nothing on this trace:
    no prediction), and a CPU backend's exposed_communication has no overlap edit (gloo already runs the
    collective on its own thread): both keep their formula."""
    import dataclasses

    from aiprof.pipeline import _with_run_replay, analyze_and_diagnose

    run_traces(tmp_path, steps=4)
    run, findings = analyze_and_diagnose([tmp_path], workers=1)
    assert {f.id: f.ranks for f in findings} == {"host_bound": (1,), "exposed_communication": (0, 1)}
    assert not any("predicted_step_ns" in f.evidence for f in findings)
    gaps = dataclasses.replace(findings[0], id="host_gaps", evidence={})
    (found,) = _with_run_replay(run, [gaps])
    assert found.evidence["predicted_step_ns"] == 30 * 10**6
    assert found.evidence["claimed_saving_ns_per_step"] == 30 * 10**6
