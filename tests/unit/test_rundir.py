"""The run directory's one owner (:mod:`aiprof.rundir`): recognising aiprof's own run files, reading them
bounded and typed, one answer to "which run holds this trace" for every reader, and writes that fail
cleanly (a full disk) or race (two runs, one ``--out``)."""

from __future__ import annotations

import errno
import json
import math
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from aiprof import rundir
from aiprof.report.runcontext import RunContext, run_context
from aiprof.rules.context import RunInputs, load_run_inputs
from aiprof.runmeta import HostInfo

OWN = {"format": "aiprof-run", "format_version": 1, "mode": "run", "status": "complete", "host": {"cores_logical": 2}}


def _run(tmp: Path, meta: dict[str, Any] | bytes | None, *, telemetry: bool = True, name: str = "run") -> Path:
    """A run directory with a (dummy) trace, optionally meta.json and telemetry.csv; returns the trace."""
    run = tmp / name
    run.mkdir(parents=True)
    trace = run / "rank0.pt.trace.json.gz"
    trace.write_bytes(b"")
    if meta is not None:
        (run / "meta.json").write_bytes(meta if isinstance(meta, bytes) else json.dumps(meta).encode())
    if telemetry:
        (run / "telemetry.csv").write_text("t_unix_ns,cpu_pct,proc_cpu_pct\n100,50,\n200,x,25\n300,60\n")
    return trace


def test_import_needs_no_torch_numpy_or_msgspec() -> None:
    code = "import sys, aiprof.rundir; print(sorted(m for m in ('torch', 'numpy', 'msgspec') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ})
    assert out.stdout.strip() == "[]"


def test_own_run_is_found_by_every_reader(tmp_path: Path) -> None:
    trace = _run(tmp_path, OWN)
    found = rundir.owner_of(trace)
    assert found is not None and found.path == trace.parent and found.meta.host == HostInfo(cores_logical=2)
    assert msgspec.to_builtins(load_run_inputs(trace).meta) == OWN
    ctx = run_context(rundir.find_run_dir([trace]))
    assert ctx.telemetry is not None and msgspec.to_builtins(ctx.run_metadata) == OWN
    # A trace one folder down (a rank's subfolder) belongs to the run above it.
    sub = trace.parent / "traces"
    sub.mkdir()
    assert rundir.owner_of(sub / "rank1.json") is not None


@pytest.mark.parametrize(
    ("meta", "why"),
    [
        ({"command": ["python", "t.py", "--token", "hf_x"], "HF_TOKEN": "hf_leak"}, "not an aiprof run"),
        (b"{cut mid-wri", "not a JSON object"),
        (b"[" * 200_000 + b"]" * 200_000, "not a JSON object"),  # deeper than any decoder allows
        (json.dumps({**OWN, "pad": "x" * (rundir.MAX_META_BYTES + 1)}).encode(), "more than aiprof's run metadata"),
        ({**OWN, "ranks": "not a list"}, "does not match"),
    ],
    ids=["foreign", "cut", "deep", "oversized", "wrong-type"],
)
def test_foreign_or_bad_meta_is_ignored_with_a_note(tmp_path: Path, meta: Any, why: str) -> None:
    trace = _run(tmp_path, meta)
    notes: list[str] = []
    assert rundir.owner_of(trace, notes) is None and why in notes[0]
    assert load_run_inputs(trace) == RunInputs()
    doc_notes: list[str] = []
    assert rundir.find_run_dir([trace], doc_notes) is None  # not even the telemetry of a folder that is not a run
    assert len(doc_notes) == 1 and why in doc_notes[0] and "hf_leak" not in doc_notes[0]


def test_reports_embed_only_known_fields_redacted(tmp_path: Path) -> None:
    """An older aiprof wrote the command unredacted; a newer one may add keys: neither reaches a report."""
    meta = {**OWN, "command": ["python", "t.py", "wandb.api_key=abc", "--lr", "1"], "secret_blob": "x",
            "env": {"OMP_NUM_THREADS": "4", "HF_TOKEN": "hf_leak"},
            "ranks": [{"rank": 0, "pid": 5, "trace_files": ["rank0.pt.trace.json.gz"], "future_field": 1}]}
    trace = _run(tmp_path, meta)
    embedded = msgspec.to_builtins(run_context(rundir.find_run_dir([trace])).run_metadata)
    assert embedded["command"] == ["python", "t.py", "wandb.api_key=<redacted>", "--lr", "1"]
    assert embedded["env"] == {"OMP_NUM_THREADS": "4"} and "secret_blob" not in embedded
    assert embedded["ranks"] == [{"rank": 0, "pid": 5, "trace_files": ["rank0.pt.trace.json.gz"]}]


def test_older_meta_decodes_with_defaults(tmp_path: Path) -> None:
    trace = _run(tmp_path, {"format": "aiprof-run"})
    found = rundir.owner_of(trace)
    assert found is not None and found.meta.ranks == [] and found.meta.status == "" and found.meta.to_dict() == {"format": "aiprof-run"}


def test_traces_of_two_runs_have_no_single_run_directory(tmp_path: Path) -> None:
    a, b = _run(tmp_path, OWN, name="a"), _run(tmp_path, OWN, name="b")
    assert rundir.find_run_dir([a, b]) is None and run_context(None) == RunContext()
    ctx = run_context(rundir.find_run_dir([a]))
    assert ctx.run_metadata is not None and ctx.telemetry is not None


def test_one_telemetry_reader(tmp_path: Path) -> None:
    from aiprof.capture.telemetry import read_rows
    from aiprof.report.runcontext import read_telemetry

    trace = _run(tmp_path, OWN)
    table = rundir.read_telemetry(trace.parent / "telemetry.csv")
    assert table["t_unix_ns"] == [100, 200] and all(isinstance(t, int) for t in table["t_unix_ns"])  # row 300 cut short
    assert table["cpu_pct"][0] == 50 and math.isnan(table["cpu_pct"][1]) and math.isnan(table["proc_cpu_pct"][0])
    assert list(read_rows(trace.parent / "telemetry.csv", 150)) == [{"proc_cpu_pct": 25.0, "t_unix_ns": 200}]
    plotted = read_telemetry(trace.parent / "telemetry.csv")
    assert plotted is not None and plotted.samples == 2 and plotted.series["cpu_pct"] == [50.0, None]
    (trace.parent / "other.csv").write_text("a,b\n1,2\n")
    assert rundir.read_telemetry(trace.parent / "other.csv") == {}


def test_waits_roundtrip_and_which_process_wrote_them(tmp_path: Path) -> None:
    meta = {**OWN, "ranks": [{"rank": 0, "pid": 7, "trace_files": ["rank0.pt.trace.json.gz"]},
                             {"rank": 0, "pid": 9, "trace_files": ["rank0-pid9.pt.trace.json.gz"]}]}
    trace = _run(tmp_path, meta)
    run = trace.parent
    (run / "dataloader.rank0.csv").write_bytes(rundir.format_waits([(-1, 1, 2, 5, 1), (0, 2, 3, 40, 1), (1, 3, 4, 60, 2)]))
    (run / "dataloader.rank0-pid9.csv").write_bytes(rundir.format_waits([(0, 2, 3, 7, 1)]))
    found = rundir.owner_of(trace)
    assert found is not None and found.waits_path(trace) == run / "dataloader.rank0.csv"
    assert found.waits_path(run / "rank0-pid9.pt.trace.json.gz") == run / "dataloader.rank0-pid9.csv"
    waits = rundir.read_waits(run / "dataloader.rank0.csv")
    assert waits is not None and waits.by_step() == {-1: 5, 0: 40, 1: 60} and waits.batches == (1, 1, 2)
    assert load_run_inputs(trace).loader_waits == {-1: 5, 0: 40, 1: 60}
    assert rundir.read_waits(run / "telemetry.csv") is None


def _enospc_after(monkeypatch: pytest.MonkeyPatch, budget: int) -> None:
    """os.write accepts ``budget`` bytes in all, then fails as a full disk does."""
    real = os.write
    left = [budget]

    def write(fd: int, data: Any) -> int:
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real(fd, bytes(data[: left[0]]))
        left[0] -= n
        return n

    monkeypatch.setattr(os, "write", write)


def test_full_disk_write_is_one_line_and_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rundir.update_meta(tmp_path, lambda m: m.update(status="running"))
    _enospc_after(monkeypatch, 10)
    with pytest.raises(rundir.RunDirError, match="No space left on device.*free space"):
        rundir.atomic_write(tmp_path / "rank0.pt.trace.json.gz", b"x" * 1000)
    with pytest.raises(rundir.RunDirError, match="No space left"):
        rundir.update_meta(tmp_path, lambda m: m.update(status="complete"))
    rundir.record_failure(tmp_path, "cannot write")  # best effort: never raises
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".aiprof.lock", "meta.json"]
    assert rundir.read_meta(tmp_path) == {"status": "running"}  # the old file, whole
    rundir.record_failure(tmp_path, "disk full")  # once it fits again, the failure is recorded
    assert rundir.read_meta(tmp_path)["status"] == "incomplete"


def test_telemetry_on_a_full_disk_stops_writing_and_says_why(tmp_path: Path) -> None:
    from aiprof.capture.telemetry import TelemetrySampler

    class Probe:
        columns = ["cpu_pct"]

        def read(self) -> list[float | int | None]:
            return [1.0]

        def close(self) -> None:
            pass

    sampler = TelemetrySampler(Path("/dev/full"), [Probe()], interval_s=3600, clock=iter(range(10**6)).__next__)
    sampler.start()
    for _ in range(25):
        sampler.sample_once()
    sampler.stop()
    assert not sampler.running and sampler.samples == 27
    assert len(sampler.errors) == 1 and "No space left on device" in sampler.errors[0]


def _claim(out: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    try:
        rundir.create_new(Path(out), explicit=True)
        results.put("ok")
    except rundir.RunDirError as err:
        results.put(str(err))


def test_two_runs_claiming_one_empty_out(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(str(out), barrier, results)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    answers = sorted(results.get(timeout=5) for _ in procs)
    assert answers.count("ok") == 1, answers
    assert all("claimed this folder first" in a or "not empty" in a for a in answers if a != "ok"), answers


def test_claimed_out_is_refused_and_default_names_move_on(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert rundir.create_new(out, explicit=True) == out
    with pytest.raises(rundir.RunDirError, match="claimed this folder first"):
        rundir.create_new(out, explicit=True)
    default = rundir.default_run_dir("train.py", now=0, root=tmp_path)
    first = rundir.create_new(default, explicit=False)
    assert rundir.create_new(default, explicit=False) == first.with_name(first.name + "-2")  # claimed, though empty
