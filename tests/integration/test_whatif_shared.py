"""The identity replay reproduces every step of every real trace under ../shared/traces: the graph's
explicit gap nodes and calibrated edges leave nothing unexplained, so the replayed windows are the
observed ones (the bar: median error <= 1 %, p95 <= 3 % over all steps)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import aiprof
from aiprof.analysis.whatif.graph import build_graph
from aiprof.analysis.whatif.replay import replay, step_times
from aiprof.trace.model import RunSet, Trace
from test_load_all_traces import FILES as ALL_FILES
from test_load_all_traces import NOT_TRACES, ROOT

# The loader test's Kineto traces (without the few non-traces among its files), and the Nsight databases.
FILES = [f for f in ALL_FILES if f not in NOT_TRACES] + (
    sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.sqlite")) if ROOT.is_dir() else [])
pytestmark = pytest.mark.skipif(not FILES, reason=f"shared traces not found at {ROOT}")


def _traces(path: Path) -> list[Trace]:
    loaded = aiprof.load(path)
    return [loaded.rank(r) for r in loaded.ranks] if isinstance(loaded, RunSet) else [loaded]


def _errors(trace: Trace) -> np.ndarray:
    graph = build_graph(trace)
    observed = np.array([w.duration_ns for w in graph.windows], dtype=np.float64)
    predicted = step_times(graph, replay(graph)).duration_ns.astype(np.float64)
    keep = observed > 0
    return np.abs(predicted[keep] - observed[keep]) / observed[keep]  # type: ignore[no-any-return]


def test_identity_replay_over_every_shared_trace() -> None:
    errors = [e for rel in FILES for trace in _traces(ROOT / rel) for e in _errors(trace).tolist()]
    assert len(errors) >= len(FILES)  # every trace gives at least one step
    assert float(np.median(errors)) <= 0.01
    assert float(np.percentile(errors, 95)) <= 0.03


@pytest.mark.parametrize("rel", ["astra-sim/megatron_tp8", "param/dlrm_8rank"])
def test_joined_identity_replay_of_the_shared_runs(rel: str) -> None:
    """Every rank of a real distributed run joined at its collectives (docs/whatif.md 'Ranks together'):
    every collective matched on all ranks, every rank's steps replayed as observed."""
    from aiprof.analysis.steps import step_windows
    from aiprof.analysis.whatif.findings import whole_run
    from aiprof.analysis.whatif.ranks import build_run_graph, run_steps

    if not (ROOT / rel).is_dir():
        pytest.skip(f"{rel} not in the shared traces")
    traces = _traces(ROOT / rel)
    assert len(traces) == 8 and whole_run([t.distributed for t in traces])
    windows = [step_windows(t) for t in traces]
    run = build_run_graph(traces, windows, [t.rank for t in traces])
    assert run.collectives and all(c.ranks.size == 8 for c in run.collectives)
    _, times = run_steps(run, replay(run.graph))
    for w, t in zip(windows, times):
        assert t.duration_ns.tolist() == [x.duration_ns for x in w]
