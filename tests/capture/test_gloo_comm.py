"""CPU multi-rank (gloo): an all-reduce is communication in the step breakdown *and* in the timeline
overview, never idle. Two real processes with a gloo group, under torch.profiler."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from capture_helpers import ROOT, SCRIPTS, child_env

import aiprof
from aiprof.analysis.overview import timeline_overview
from aiprof.analysis.run import analyze_trace
from aiprof.trace.model import Kind

pytestmark = [pytest.mark.usefixtures("torch_available"), pytest.mark.torch]


@pytest.fixture(scope="module")
def gloo_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gloo")
    res = subprocess.run([sys.executable, str(SCRIPTS / "gloo_allreduce.py"), str(out)], capture_output=True,
                         text=True, timeout=240, env=child_env(), cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def test_gloo_all_reduce_is_communication_in_steps_and_timeline(gloo_traces: Path) -> None:
    runset = aiprof.load(gloo_traces)
    traces = list(runset)  # type: ignore[arg-type]
    assert sorted(t.rank for t in traces) == [0, 1]
    for trace in traces:
        ann = trace.rows_of(Kind.USER_ANNOTATION)
        assert trace.name_matches(ann, r"^gloo:all_reduce").any()  # how gloo shows on the CPU
        analysis = analyze_trace(trace, sections={})
        assert analysis.primary.kind == "cpu"
        steps = analysis.primary.steps
        comm = sum(s.breakdown_ns["communication"] for s in steps)
        assert comm > sum(s.breakdown_ns["idle"] for s in steps)
        overview = msgspec.to_builtins(timeline_overview(trace))
        cpu = overview["devices"][0]
        drawn = sum(cpu["communication_ns"])
        # the strip covers the steps' span: its communication is the steps' communication
        assert drawn >= comm > 0
        assert drawn > sum(cpu["idle_ns"])


def test_gloo_all_reduce_exposure_is_the_communication_bucket(gloo_traces: Path) -> None:
    """Real gloo ranks: the exposure split (analysis.comm_exposure) covers the whole communication bucket, its
    all-reduces in no backward or optimizer (the script has neither: a bare dist.all_reduce per step)."""
    for trace in list(aiprof.load(gloo_traces)):  # type: ignore[arg-type]
        analysis = analyze_trace(trace)
        (d,) = analysis.sections["communication"].exposure
        assert d.device == -1 and d.steps == len(analysis.primary.steps)
        assert d.exposed_ns == sum(s.breakdown_ns["communication"] for s in analysis.primary.steps) > 0
        assert {p.phase for p in d.by_phase} == {"forward"}  # no autograd, no optimizer: all of each step
        assert "all_reduce" in {r.collective for r in d.rows}
