"""Telemetry verdicts that hold on shared machines, severities that follow the saving, and fixes that follow
the machine (issue 12, item 9): whose CPU it was (the profiled process tree vs the machine), how many samples
a verdict needs, and how many cores / which device the advice is written for."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

import aiprof
from aiprof.analysis.run import analyze_trace
from aiprof.rules import DEFAULT_OPTIONS, Finding, diagnose_rank
from aiprof.rules.context import RankContext, RunInputs
from aiprof.rules.finding import FindingRecord, capped_severity
from aiprof.rules.views.machine import MachineFacts, machine_facts
from aiprof.rules.registry import rank_findings
from aiprof.rules.context import load_run_inputs
from aiprof.trace import Trace
from kineto_builder import TraceBuilder

MS = 1000  # builder µs
STEP_MS = 100
COLUMNS = ["t_unix_ns", "cpu_pct", "cpu0_pct", "cpu1_pct", "disk_read_bytes", "proc_cpu_pct"]


def _finding(severity: str, saving: int, id: str = "x") -> Finding:
    return Finding(id=id, title=id, severity=severity, est_saving_ns_per_step=saving, share_of_step=0.0,
                   saving_kind="upper_bound", saving_formula="", confidence="medium", evidence={}, fix="")


@pytest.mark.parametrize(("asked", "saving", "kept"), [
    ("high", 0, "low"), ("medium", 0, "low"), ("low", 0, "low"), ("info", 0, "info"),
    ("high", 5_000_000, "high"), ("medium", 1, "medium"),
])
def test_a_note_with_no_saving_is_never_high(asked: str, saving: int, kept: str) -> None:
    assert capped_severity(asked, saving) == kept
    f = _finding(asked, saving)
    assert f.severity == kept
    assert msgspec.convert({**f.to_dict(), "severity": asked}, FindingRecord).severity == kept  # read back from JSON too


def test_zero_saving_notes_rank_after_every_saving() -> None:
    ranked = rank_findings([_finding("high", 0, "note"), _finding("low", 20_000, "small"), _finding("info", 0, "i")])
    assert [f.id for f in ranked] == ["small", "note", "i"]


# ----- run directories ------------------------------------------------------------------------------
def _gpu_loader_steps(b: TraceBuilder, n: int = 12) -> None:
    """``n`` 100 ms steps on a GPU: 40 ms waiting in a single-process loader, then 55 ms of GEMM."""
    for i in range(n):
        t0 = i * STEP_MS * MS
        b.step(i, ts=t0, dur=STEP_MS * MS)
        b.dataloader(ts=t0 + 100, dur=40 * MS)
        op = b.cpu_op("aten::mm", ts=t0 + 41 * MS, dur=20)
        b.launch(op, kernel="ampere_sgemm_128x64_nn", kernel_ts=t0 + 42 * MS, kernel_dur=55 * MS, grid=(264, 1, 1))


def _cpu_loader_steps(b: TraceBuilder, n: int = 12, multi: bool = False) -> None:
    """``n`` 100 ms CPU-only steps: 40 ms in the loader, then 55 ms of ops."""
    name = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__" if multi else None
    for i in range(n):
        t0 = i * STEP_MS * MS
        b.step(i, ts=t0, dur=STEP_MS * MS)
        if name:
            b.annotation(name, ts=t0 + 100, dur=40 * MS)
        else:
            b.dataloader(ts=t0 + 100, dur=40 * MS)
        b.cpu_op("aten::mm", ts=t0 + 41 * MS, dur=55 * MS)


def _write(tmp: Path, b: TraceBuilder, *, meta: dict[str, Any] | None, rows: list[list[Any]] | None,
           columns: list[str] = COLUMNS) -> Path:
    run = tmp / "run"
    run.mkdir(parents=True, exist_ok=True)
    if meta is not None:
        (run / "meta.json").write_text(json.dumps(meta))
    if rows is not None:
        with (run / "telemetry.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(columns)
            w.writerows(rows)
    return b.write(run / "rank0.pt.trace.json")


def _rows(b: TraceBuilder, machine: float, tree: float | None, count: int, every_ms: int = 50) -> list[list[Any]]:
    """``count`` samples from the second step on (inside the steady steps)."""
    t0 = b.base_time_ns + STEP_MS * 1_000_000 + 1
    return [[t0 + k * every_ms * 1_000_000, machine, machine, machine, 0, "" if tree is None else tree]
            for k in range(count)]


def _diagnose(path: Path) -> dict[str, Finding]:
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    found, notes = diagnose_rank(trace, analyze_trace(trace), DEFAULT_OPTIONS, inputs=load_run_inputs(path))
    assert not [n for n in notes if "failed" in n], notes
    return {f.id: f for f in found}


META_2 = {"format": "aiprof-run", "host": {"cores_logical": 2, "cores_available": 2}}


def test_another_process_loading_the_machine_is_not_cpu_saturation(tmp_path: Path) -> None:
    """The machine reads 95 % busy, the profiled tree 78 % of one core (39 % of two): the saturation is
    someone else's. No cpu_saturation (its "more workers will not help" was wrong: they did); a note says the
    timings are perturbed, as info, with no saving."""
    b = TraceBuilder()
    _gpu_loader_steps(b)
    found = _diagnose(_write(tmp_path, b, meta=META_2, rows=_rows(b, 95.0, 78.0, 20)))
    assert "cpu_saturation" not in found and "data_loading" in found
    note = found["noisy_neighbour"]
    assert note.severity == "info" and note.est_saving_ns_per_step == 0
    assert note.evidence["others_cores"] == pytest.approx(1.12, abs=0.01)
    assert note.evidence["process_tree_cores"] == pytest.approx(0.78, abs=0.01)


def test_the_run_saturating_the_machine_itself_is_cpu_saturation(tmp_path: Path) -> None:
    b = TraceBuilder()
    _gpu_loader_steps(b)
    found = _diagnose(_write(tmp_path, b, meta=META_2, rows=_rows(b, 97.0, 190.0, 20)))
    sat = found["cpu_saturation"]
    assert sat.severity == "low" and sat.est_saving_ns_per_step == 0 and sat.confidence == "medium"
    assert sat.evidence["process_tree_cpu_pct"] == pytest.approx(190.0, abs=0.5)
    assert "noisy_neighbour" not in found


def test_no_telemetry_verdict_from_a_handful_of_samples(tmp_path: Path) -> None:
    b = TraceBuilder()
    _gpu_loader_steps(b)
    few = _rows(b, 97.0, 190.0, 4, every_ms=100)
    found = _diagnose(_write(tmp_path, b, meta=META_2, rows=few))
    assert "cpu_saturation" not in found and "noisy_neighbour" not in found and "data_loading" in found
    noisy_few = _rows(b, 95.0, 20.0, DEFAULT_OPTIONS.telemetry_min_samples - 1)
    (tmp_path / "run" / "rank0.pt.trace.json").unlink()
    assert "noisy_neighbour" not in _diagnose(_write(tmp_path, b, meta=META_2, rows=noisy_few))


def test_older_telemetry_without_the_process_tree_stays_readable(tmp_path: Path) -> None:
    """A run directory whose telemetry has no proc_cpu_pct: the split is unknown, so cpu_saturation (from
    the machine alone) comes with low confidence and says so; no noisy_neighbour guess."""
    b = TraceBuilder()
    _gpu_loader_steps(b)
    columns = COLUMNS[:-1]
    rows = [r[:-1] for r in _rows(b, 97.0, None, 20)]
    found = _diagnose(_write(tmp_path, b, meta=META_2, rows=rows, columns=columns))
    sat = found["cpu_saturation"]
    assert sat.confidence == "low" and sat.notes and "proc_cpu_pct" in sat.notes[0]
    assert sat.evidence["process_tree_cpu_pct"] is None
    assert "noisy_neighbour" not in found


def test_ranks_sampling_their_own_process_are_not_neighbours(tmp_path: Path) -> None:
    """aiprof.profile in two ranks on one host: each rank's sampler sees only its own process, so the other
    rank reads as "others". That is not a noisy neighbour: the split is unknown, and said so."""
    meta = {**META_2, "mode": "api", "ranks": [{"rank": 0, "pid": 1}, {"rank": 1, "pid": 2}]}
    b = TraceBuilder()
    _gpu_loader_steps(b)
    found = _diagnose(_write(tmp_path, b, meta=meta, rows=_rows(b, 95.0, 78.0, 20)))
    assert "noisy_neighbour" not in found
    sat = found["cpu_saturation"]
    assert sat.confidence == "low" and "2 ranks" in sat.notes[0]


def test_a_run_pinned_to_some_cores_is_judged_on_its_own_cores(tmp_path: Path) -> None:
    """taskset / a cpuset container: the run may use 2 of the machine's 4 cores. The machine at 50 % with
    the tree on 1.9 cores is the run saturating its own cores; the other two cores' load is not a neighbour
    in its way (not judged)."""
    columns = ["t_unix_ns", "cpu_pct", "cpu0_pct", "cpu1_pct", "cpu2_pct", "cpu3_pct", "proc_cpu_pct"]
    b = TraceBuilder()
    _gpu_loader_steps(b)
    rows = [[r[0], 50.0, 95.0, 95.0, 5.0, 5.0, 190.0] for r in _rows(b, 0, 0, 20)]
    meta = {"format": "aiprof-run", "host": {"cores_logical": 4, "cores_available": 2}}
    found = _diagnose(_write(tmp_path, b, meta=meta, rows=rows, columns=columns))
    sat = found["cpu_saturation"]
    assert sat.confidence == "medium" and "2 of the machine's 4 cores" in sat.notes[0]
    assert "noisy_neighbour" not in found


def test_cpu_saturation_gives_no_gpu_advice_on_a_cpu_run(tmp_path: Path) -> None:
    b = TraceBuilder()
    _cpu_loader_steps(b)
    found = _diagnose(_write(tmp_path, b, meta=META_2, rows=_rows(b, 97.0, 190.0, 20)))
    fix = found["cpu_saturation"].fix
    assert "GPU" not in fix and "CUDA" not in fix and "DALI" not in fix, fix


# ----- machine facts and the data_loading fix ---------------------------------------------------------
def _facts(tmp_path: Path, build: Callable[[TraceBuilder], None], meta: dict[str, Any] | None,
           rows: bool = False) -> MachineFacts:
    b = TraceBuilder()
    build(b)
    path = _write(tmp_path, b, meta=meta, rows=_rows(b, 50.0, 50.0, 12) if rows else None)
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    return machine_facts(RankContext(trace, analyze_trace(trace), DEFAULT_OPTIONS, load_run_inputs(path)))


def test_machine_facts_come_from_the_run_directory(tmp_path: Path) -> None:
    meta = {"format": "aiprof-run", "host": {"cores_logical": 64, "cores_available": 8}, "torch_threads": 8}
    facts = _facts(tmp_path / "a", _gpu_loader_steps, meta)
    assert (facts.device_kind, facts.cores, facts.torch_threads) == ("gpu", 8, 8)  # the affinity, not the box
    assert facts.cores_source == "meta.json host.cores_available" and facts.loader_workers == 4
    facts = _facts(tmp_path / "b", _cpu_loader_steps, {"format": "aiprof-run"}, rows=True)
    assert (facts.device_kind, facts.cores, facts.loader_workers) == ("cpu", 2, 1)  # telemetry's cpuN columns
    facts = _facts(tmp_path / "c", _gpu_loader_steps, None)
    assert facts.cores is None and facts.loader_workers is None and facts.cores_source == "unknown"


def _loader_fix(tmp_path: Path, build: Callable[[TraceBuilder], None], meta: dict[str, Any] | None) -> Finding:
    b = TraceBuilder()
    build(b)
    return _diagnose(_write(tmp_path, b, meta=meta, rows=None))["data_loading"]


def test_data_loading_fix_follows_the_machine(tmp_path: Path) -> None:
    cpu2 = _loader_fix(tmp_path / "cpu2", _cpu_loader_steps, META_2)
    assert "num_workers=1" in cpu2.fix and "num_workers=4" not in cpu2.fix, cpu2.fix
    assert not re.search(r"pin_memory|non_blocking|GPU|CUDA", cpu2.fix), cpu2.fix
    assert cpu2.evidence["recommended_num_workers"] == 1 and cpu2.evidence["cores"] == 2
    assert cpu2.title.startswith("Training loop waits")

    gpu16 = _loader_fix(tmp_path / "gpu16", _gpu_loader_steps,
                        {"format": "aiprof-run", "host": {"cores_logical": 16, "cores_available": 16}})
    assert "num_workers=4" in gpu16.fix and "pin_memory=True" in gpu16.fix and "non_blocking=True" in gpu16.fix

    foreign = _loader_fix(tmp_path / "foreign", _gpu_loader_steps, None)  # a trace found in the wild
    assert "num_workers=N" in foreign.fix and "up to the free cores" in foreign.fix, foreign.fix
    assert not re.search(r"num_workers=\d", foreign.fix), foreign.fix

    one = _loader_fix(tmp_path / "one", _cpu_loader_steps, {"format": "aiprof-run", "host": {"cores_available": 1}})
    assert "num_workers=" not in one.fix and "1 core" in one.fix, one.fix

    multi = _loader_fix(tmp_path / "multi", lambda b: _cpu_loader_steps(b, multi=True), META_2)
    assert "will not fit on 2 cores" in multi.fix and "pin_memory" not in multi.fix, multi.fix


def test_run_inputs_read_meta_without_telemetry(tmp_path: Path) -> None:
    b = TraceBuilder()
    _gpu_loader_steps(b, n=3)
    path = _write(tmp_path, b, meta=META_2, rows=None)
    assert load_run_inputs(path) == RunInputs(meta=META_2)
    (tmp_path / "run" / "meta.json").write_text("{cut mid-wri")
    assert load_run_inputs(path) == RunInputs()
