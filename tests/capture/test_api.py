"""The Python API in this process: context manager, decorator, explicit and automatic steps, errors."""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from capture_helpers import FAST, SCRIPTS, meta_of, run_aiprof, step_names, trace_events

import aiprof
from aiprof.errors import AiprofError

torch = pytest.importorskip("torch")


def _train(steps: int, prof: Any | None = None) -> None:
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 8)), batch_size=2)
    for i, (x,) in enumerate(loader):
        if i == steps:
            break
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        if prof is not None:
            prof.step()


def test_context_manager_with_explicit_steps(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with aiprof.profile(out, schedule=(1, 1, 2), telemetry_interval=0.02, quiet=True) as prof:
        _train(6, prof)
    meta = meta_of(out)
    assert meta["status"] == "complete" and meta["mode"] == "api"
    assert meta["ranks"][0]["steps_seen"] == 6
    trace = out / "rank0.pt.trace.json.gz"
    assert step_names(trace) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert any(e.get("ph") == "C" for e in trace_events(trace))
    assert (out / "telemetry.csv").exists() and (out / "dataloader.rank0.csv").exists()
    assert not [t for t in threading.enumerate() if t.name == "aiprof-telemetry"]
    aiprof.step()  # no capture running: a no-op


def test_automatic_steps_from_the_optimizer(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with aiprof.profile(out, schedule=aiprof.Schedule(0, 1, 2), telemetry=False, quiet=True):
        _train(5)
    assert meta_of(out)["ranks"][0]["steps_seen"] == 5
    names = step_names(out / "rank0.pt.trace.json.gz")
    assert names == ["ProfilerStep#1", "ProfilerStep#2"]


def test_decorator_makes_a_fresh_run_per_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    @aiprof.profile(schedule=(0, 1, 1), telemetry=False, quiet=True)
    def work() -> None:
        _train(3)

    work()
    work()
    runs = sorted((tmp_path / "aiprof-runs").iterdir())
    assert len(runs) == 2
    assert all(meta_of(r)["status"] == "complete" for r in runs)


def test_exception_flushes_and_propagates(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="diverged"):
        with aiprof.profile(out, schedule=(0, 1, 3), telemetry=False, quiet=True) as prof:
            _train(3, prof)
            raise RuntimeError("loss diverged")
    meta = meta_of(out)
    assert meta["status"] == "incomplete" and "RuntimeError" in meta["reason"]
    assert step_names(out / "rank0.pt.trace.json.gz")[:2] == ["ProfilerStep#1", "ProfilerStep#2"]


def test_existing_run_is_never_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "rank0.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": []}).encode()))
    with pytest.raises(AiprofError, match="never overwrites"):
        with aiprof.profile(out, quiet=True):
            pass
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["rank0.pt.trace.json.gz"]


def test_api_inside_aiprof_run_attaches(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *FAST, "--no-auto-step", "--", "python", str(SCRIPTS / "api_inside.py"), str(tmp_path / "ignored"))
    assert res.returncode == 0, res.stderr
    assert meta_of(out)["ranks"][0]["steps_seen"] == 5
    assert not (tmp_path / "ignored").exists()
    assert step_names(out / "rank0.pt.trace.json.gz") == ["ProfilerStep#2", "ProfilerStep#3"]


def test_several_cycles_make_one_trace_per_rank(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with aiprof.profile(out, schedule=aiprof.Schedule(wait=1, warmup=1, active=1, repeat=2), telemetry=False, quiet=True) as prof:
        _train(8, prof)
    assert meta_of(out)["ranks"][0]["cycles"] == 2
    assert step_names(out / "rank0.pt.trace.json.gz") == ["ProfilerStep#2", "ProfilerStep#5"]
    loaded = aiprof.load(out)
    assert len(loaded) == 1  # type: ignore[arg-type]


def test_ranks_of_one_job_share_an_explicit_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under torchrun every rank enters profile(out=same): the first creates it, the others join it;
    a folder left by another job is still refused."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-a")
    out = tmp_path / "run"
    first = aiprof.Profile(out)._claim_run_dir()
    (out / "rank0.pt.trace.json.gz").write_bytes(b"")  # rank 0 got there first
    assert aiprof.Profile(out)._claim_run_dir() == first
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-b")
    with pytest.raises(AiprofError, match="never overwrites"):
        aiprof.Profile(out)._claim_run_dir()
