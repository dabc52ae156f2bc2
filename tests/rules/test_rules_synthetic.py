"""Each rule on tiny hand-built traces: it fires where the problem is planted, with the saving its formula
gives, and stays quiet on the same trace without the problem."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

import aiprof
from aiprof.analysis.run import analyze_trace
from aiprof.pipeline import analyze_and_diagnose
from aiprof.rules import DEFAULT_OPTIONS, Finding, diagnose_rank
from aiprof.rules.finding import FindingRecord
from aiprof.rules.context import RunInputs, load_run_inputs
from aiprof.trace import Trace
from kineto_builder import TraceBuilder

US = 1000
STEP_US = 1000


def _findings(b: TraceBuilder, tmp_path: Path, name: str = "t.json", extras: RunInputs | None = None) -> dict[str, Finding]:
    path = b.write(tmp_path / name)
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    found, notes = diagnose_rank(trace, analyze_trace(trace), DEFAULT_OPTIONS, inputs=extras)
    assert notes == []
    return {f.id: f for f in found}


def _steps(b: TraceBuilder, n: int = 4, step_us: int = STEP_US, body: Callable[[TraceBuilder, int, int], None] | None = None) -> None:
    """``n`` steps; each has a 600 µs GEMM-like kernel on a big grid (a busy, healthy step) plus ``body``."""
    for i in range(n):
        t0 = i * step_us
        b.step(i, ts=t0, dur=step_us)
        op = b.cpu_op("aten::mm", ts=t0 + 10, dur=20)
        b.launch(op, kernel="ampere_sgemm_128x64_nn", kernel_ts=t0 + 40, kernel_dur=600, grid=(264, 1, 1))
        if body is not None:
            body(b, i, t0)


def test_data_loading_fires_with_the_exposed_loader_time(tmp_path: Path) -> None:
    def body(b: TraceBuilder, i: int, t0: int) -> None:
        b.dataloader(ts=t0 + 650, dur=300)  # the GPU finished at 640: 300 µs exposed

    b = TraceBuilder()
    _steps(b, body=body)
    f = _findings(b, tmp_path)["data_loading"]
    assert f.est_saving_ns_per_step == 300 * US
    assert f.severity == "high" and f.evidence["workers"].startswith("single-process")
    assert "num_workers" in f.fix
    quiet = TraceBuilder()
    _steps(quiet, body=lambda b, i, t0: b.dataloader(ts=t0 + 100, dur=300))  # hidden under the kernel
    assert "data_loading" not in _findings(quiet, tmp_path, "q.json")


def test_sync_and_allocator_churn(tmp_path: Path) -> None:
    def body(b: TraceBuilder, i: int, t0: int) -> None:
        item = b.cpu_op("aten::item", ts=t0 + 40, dur=610)
        b.runtime("cudaStreamSynchronize", ts=t0 + 45, dur=600, external_id=int(item["args"]["External id"]))
        b.runtime("cudaMalloc", ts=t0 + 660, dur=40)
        after = b.cpu_op("aten::add", ts=t0 + 800, dur=10)
        b.launch(after, kernel="add_kernel", kernel_ts=t0 + 812, kernel_dur=100, grid=(264, 1, 1))

    b = TraceBuilder()
    _steps(b, body=body)
    found = _findings(b, tmp_path)
    assert found["sync"].est_saving_ns_per_step == 161 * US  # 640..801: drained until the next launch call
    assert found["sync"].evidence["top_ops"][0]["name"] == "aten::item"
    churn = found["allocator_churn"]
    assert churn.est_saving_ns_per_step == 40 * US and churn.evidence["calls_per_step"] == 1.0
    quiet = TraceBuilder()
    _steps(quiet)
    assert not {"sync", "allocator_churn"} & set(_findings(quiet, tmp_path, "q.json"))


def test_pageable_and_exposed_copies(tmp_path: Path) -> None:
    def body(b: TraceBuilder, i: int, t0: int) -> None:
        op = b.cpu_op("aten::copy_", ts=t0 + 650, dur=10)
        b.memcpy(op, ts=t0 + 660, dur=200, nbytes=8 << 20)  # pageable, exposed

    b = TraceBuilder()
    _steps(b, body=body)
    found = _findings(b, tmp_path)
    assert found["pageable_memcpy"].est_saving_ns_per_step == 100 * US  # no pinned copy: assumed 2x faster
    assert found["memcpy_exposed"].est_saving_ns_per_step == 200 * US

    def pinned(b: TraceBuilder, i: int, t0: int) -> None:
        op = b.cpu_op("aten::copy_", ts=t0 + 20, dur=10)
        b.launch(op, kernel="Memcpy HtoD (Pinned -> Device)", kind="memcpy", nbytes=8 << 20, kernel_ts=t0 + 100,
                 kernel_dur=100, stream=9)  # pinned and hidden under the GEMM

    quiet = TraceBuilder()
    _steps(quiet, body=pinned)
    assert not {"pageable_memcpy", "memcpy_exposed"} & set(_findings(quiet, tmp_path, "q.json"))


def test_launch_bound_on_many_tiny_kernels(tmp_path: Path) -> None:
    def body(b: TraceBuilder, i: int, t0: int) -> None:
        for j in range(30):  # 30 tiny kernels, each waiting 8 µs after its launch
            op = b.cpu_op("aten::add", ts=t0 + 650 + j * 10, dur=9)
            b.launch(op, kernel="tiny_add", ts=t0 + 650 + j * 10, dur=2, kernel_ts=t0 + 658 + j * 10, kernel_dur=2)

    b = TraceBuilder()
    _steps(b, body=body)
    f = _findings(b, tmp_path)["launch_bound"]
    assert f.evidence["tiny_kernels_per_step"] == 30.0
    assert f.est_saving_ns_per_step >= 30 * 6 * US
    quiet = TraceBuilder()
    _steps(quiet)
    assert "launch_bound" not in _findings(quiet, tmp_path, "q.json")


def test_launch_config_small_grids(tmp_path: Path) -> None:
    def body(b: TraceBuilder, i: int, t0: int) -> None:
        op = b.cpu_op("aten::sum", ts=t0 + 600, dur=10)
        b.launch(op, kernel="reduce_kernel", kernel_ts=t0 + 640, kernel_dur=300, grid=(33, 1, 1))

    b = TraceBuilder()
    _steps(b, body=body)
    f = _findings(b, tmp_path)["launch_config"]
    assert f.evidence["sm_count"] == 132
    assert f.est_saving_ns_per_step == 300 * US * (132 - 33) // 132
    quiet = TraceBuilder()
    _steps(quiet)
    assert "launch_config" not in _findings(quiet, tmp_path, "q.json")


def test_memory_pressure_from_memory_events(tmp_path: Path) -> None:
    total = TraceBuilder.device_properties(0, "GH100")["totalGlobalMem"]

    def body(fraction: float) -> Callable[[TraceBuilder, int, int], None]:
        def add(b: TraceBuilder, i: int, t0: int) -> None:
            b.memory(ts=t0 + 15, nbytes=1 << 20, total_allocated=int(total * fraction) - (1 << 30),
                     total_reserved=int(total * fraction), device=0)
        return add

    b = TraceBuilder()
    _steps(b, body=body(0.95))
    f = _findings(b, tmp_path)["memory_pressure"]
    assert f.evidence["peak_fraction"] == pytest.approx(0.95, abs=1e-3)
    # A risk with no saving of its own is never above low (Finding caps it): it must not outrank real savings.
    assert f.est_saving_ns_per_step == 0 and f.severity == "low"
    quiet = TraceBuilder()
    _steps(quiet, body=body(0.5))
    assert "memory_pressure" not in _findings(quiet, tmp_path, "q.json")


def test_step_variance_names_the_outlier(tmp_path: Path) -> None:
    b = TraceBuilder()
    _steps(b, n=6)
    b.step(6, ts=6 * STEP_US, dur=3 * STEP_US)  # a 3x step (checkpointing, eval…)
    f = _findings(b, tmp_path)["step_variance"]
    assert f.evidence["outlier_steps"] == ["ProfilerStep#6"]
    # The first step is as long as the others (no warm-up, no one-time cost): it is kept, 7 steps count.
    assert f.est_saving_ns_per_step == (2 * STEP_US * US) // 7
    quiet = TraceBuilder()
    _steps(quiet, n=7)
    assert "step_variance" not in _findings(quiet, tmp_path, "q.json")


def test_graph_replays_without_kernels_say_so_and_mute_idle_rules(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(4):
        t0 = i * STEP_US
        b.step(i, ts=t0, dur=STEP_US)
        b.runtime("cudaGraphLaunch", ts=t0 + 10, dur=5)
        op = b.cpu_op("aten::add", ts=t0 + 20, dur=900)  # host busy: would read as host-bound
        b.launch(op, kernel="add_kernel", kernel_ts=t0 + 30, kernel_dur=10)
    path = b.write(tmp_path / "g.json")
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    found, notes = diagnose_rank(trace, analyze_trace(trace))
    ids = {f.id for f in found}
    assert "graph_trace_incomplete" in ids and "host_bound" not in ids
    assert any("host_bound skipped" in n for n in notes)
    quiet = TraceBuilder()
    _steps(quiet)
    assert "graph_trace_incomplete" not in _findings(quiet, tmp_path, "q.json")


def test_optimizer_unfused_per_parameter_kernels(tmp_path: Path) -> None:
    def body(n_ops: int, name: str) -> Callable[[TraceBuilder, int, int], None]:
        def add(b: TraceBuilder, i: int, t0: int) -> None:
            b.annotation("Optimizer.step#SGD.step", ts=t0 + 640, dur=300)
            for j in range(n_ops):
                op = b.cpu_op(name, ts=t0 + 641 + j * 5, dur=4)
                b.launch(op, kernel="add_kernel", ts=t0 + 642 + j * 5, dur=1, kernel_ts=t0 + 646 + j * 5, kernel_dur=2)
        return add

    b = TraceBuilder()
    _steps(b, body=body(50, "aten::add_"))
    f = _findings(b, tmp_path)["optimizer_unfused"]
    assert f.evidence["optimizer_ops_per_step"] == 50.0
    assert f.est_saving_ns_per_step == (247 - 100) * US  # kernels span 646..893, busy 50 x 2 µs
    quiet = TraceBuilder()
    _steps(quiet, body=body(2, "aten::_foreach_add_"))
    assert "optimizer_unfused" not in _findings(quiet, tmp_path, "q.json")


def test_straggler_across_ranks(tmp_path: Path) -> None:
    def rank(r: int, work_us: int) -> Path:
        b = TraceBuilder()
        b.distributed(rank=r, world_size=3)
        for i in range(4):
            t0 = i * STEP_US
            b.step(i, ts=t0, dur=STEP_US)
            op = b.cpu_op("aten::mm", ts=t0 + 5, dur=5)
            b.launch(op, kernel="sgemm", kernel_ts=t0 + 10, kernel_dur=work_us, grid=(264, 1, 1))
            c = b.cpu_op("c10d::allreduce_", ts=t0 + 12, dur=5)
            b.launch(c, kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL", kernel_ts=t0 + 10 + work_us,
                     kernel_dur=STEP_US - 20 - work_us, stream=9)
        return b.write(tmp_path / f"rank{r}.json")

    for r, work in enumerate((400, 400, 700)):
        rank(r, work)
    run, findings = analyze_and_diagnose([tmp_path], workers=1)
    findings = [f.to_dict() for f in findings]  # as the JSON report holds them
    f = next(f for f in findings if f["id"] == "straggler")
    assert f["evidence"]["straggler_rank"] == 2
    assert f["est_saving_ns_per_step"] == 300 * US


def _run_dir(tmp_path: Path, b: TraceBuilder, rows: list[dict[str, float]]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text(json.dumps({"format": "aiprof-run"}))
    path = b.write(run / "rank0.pt.trace.json")
    columns = ["t_unix_ns", "cpu_pct", "cpu0_pct", "cpu1_pct", "disk_read_bytes", "proc_cpu_pct"]
    with (run / "telemetry.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for row in rows:
            w.writerow([row.get(c, "") for c in columns])
    return path


@pytest.mark.parametrize(("cpu", "read_per_sample", "expect"), [
    (98.0, 0, {"cpu_saturation"}),
    (20.0, 40e6, {"io_bound"}),  # 40 MB per 0.1 s = 400 MB/s with idle CPUs
    (20.0, 0, set()),
])
def test_telemetry_rules(tmp_path: Path, cpu: float, read_per_sample: float, expect: set[str]) -> None:
    b = TraceBuilder()
    _steps(b, n=4, step_us=100_000, body=lambda b, i, t0: b.dataloader(ts=t0 + 700, dur=60_000))
    rows = [{"t_unix_ns": b.base_time_ns + k * 100_000_000 // 10, "cpu_pct": cpu, "cpu0_pct": cpu, "cpu1_pct": cpu,
             "disk_read_bytes": k * read_per_sample, "proc_cpu_pct": cpu * 2} for k in range(45)]
    path = _run_dir(tmp_path, b, rows)
    extras = load_run_inputs(path)
    assert extras.telemetry is not None and extras.telemetry["cpu_pct"][0] == cpu
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    found, _ = diagnose_rank(trace, analyze_trace(trace), inputs=extras)
    ids = {f.id for f in found}
    assert "data_loading" in ids
    assert ids & {"cpu_saturation", "io_bound"} == expect


def test_a_broken_rule_is_a_note_not_a_crash(tmp_path: Path) -> None:
    def broken(ctx: Any) -> list[Finding]:
        raise ZeroDivisionError("planted")

    b = TraceBuilder()
    _steps(b)
    trace = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(trace, Trace)
    found, notes = diagnose_rank(trace, analyze_trace(trace), rules=[broken])
    assert found == [] and "rule broken failed" in notes[0] and "ZeroDivisionError" in notes[0]


def test_options_reach_the_worker_processes(tmp_path: Path) -> None:
    """Custom thresholds cross the process boundary (two ranks, two workers)."""
    from aiprof.rules import RuleOptions

    for r in range(2):
        b = TraceBuilder()
        b.distributed(rank=r, world_size=2)
        _steps(b, body=lambda b, i, t0: b.dataloader(ts=t0 + 650, dur=300))
        b.write(tmp_path / f"rank{r}.json")
    _, default = analyze_and_diagnose([tmp_path], workers=2)
    default = [f.to_dict() for f in default]  # as the JSON report holds them
    assert [f["id"] for f in default][:1] == ["data_loading"] and default[0]["ranks"] == [0, 1]
    assert set(default[0]["evidence"]["per_rank_saving_ns"]) == {"0", "1"}
    assert "straggler" not in [f["id"] for f in default]  # identical ranks
    _, strict = analyze_and_diagnose([tmp_path], workers=2, options=RuleOptions(data_loading_share=0.99))
    strict = [f.to_dict() for f in strict]  # as the JSON report holds them
    assert "data_loading" not in [f["id"] for f in strict]


def test_finding_and_options_validation() -> None:
    from aiprof import AiprofError
    from aiprof.rules import RuleOptions
    from aiprof.rules.registry import rank_findings

    def make(id: str, saving: int, severity: str = "low") -> Finding:
        return Finding(id=id, title=id, severity=severity, est_saving_ns_per_step=saving, share_of_step=0.1,
                       saving_kind="estimate", saving_formula="f", confidence="low", evidence={"n": 1}, fix="x")

    f = make("sync", 5)
    assert msgspec.to_builtins(msgspec.convert(f.to_dict(), FindingRecord)) == f.to_dict()  # read back from JSON
    assert json.loads(json.dumps(f.to_dict()))["docs"] == "docs/findings.md#sync"
    with pytest.raises(ValueError):
        make("sync", 1, severity="urgent")
    ranked = rank_findings([make("a", 1), make("b", 0, "info"), make("c", 9)])
    assert [x.id for x in ranked] == ["c", "a", "b"]
    with pytest.raises(AiprofError, match="unknown rule option"):
        RuleOptions.from_dict({"data_loading_shre": 0.1})
    assert RuleOptions().severity(0.2) == "high" and RuleOptions().severity(0.06) == "medium"


def test_rule_lists_can_be_replaced(tmp_path: Path) -> None:
    from aiprof.rules import idle

    b = TraceBuilder()
    _steps(b, body=lambda b, i, t0: b.dataloader(ts=t0 + 650, dur=300))
    path = b.write(tmp_path / "t.json")
    _, only_sync = analyze_and_diagnose([path], workers=1, rank_rules=[idle.sync], run_rules=[])
    only_sync = [f.to_dict() for f in only_sync]  # as the JSON report holds them
    assert only_sync == []
    _, default = analyze_and_diagnose([path], workers=1)
    default = [f.to_dict() for f in default]  # as the JSON report holds them
    assert default[0]["id"] == "data_loading"


@pytest.mark.parametrize("case", ["empty_step", "kernel_only", "cpu_only_ops", "one_step", "no_shapes_attention"])
def test_degenerate_traces_never_break_a_rule(tmp_path: Path, case: str) -> None:
    b = TraceBuilder()
    if case == "empty_step":
        b.step(0, ts=0, dur=100)
    elif case == "kernel_only":
        b.kernel("k", ts=10, dur=5)
    elif case == "cpu_only_ops":
        for i in range(3):
            b.step(i, ts=i * 100, dur=100)
            b.cpu_op("aten::item", ts=i * 100 + 10, dur=5)
            b.cpu_op("aten::mul", ts=i * 100 + 20, dur=5, shapes=[[4], [4]])
    elif case == "one_step":
        _steps(b, n=1)
    else:
        for i in range(3):
            b.step(i, ts=i * 100, dur=100)
            b.cpu_op("aten::matmul", ts=i * 100 + 1, dur=5)
            b.cpu_op("aten::softmax", ts=i * 100 + 10, dur=5, shapes=[[2, 4, 64, 64], [], []])
            b.cpu_op("aten::matmul", ts=i * 100 + 20, dur=5, shapes=[[2, 4, 64, 64], [2, 4, 64, 8]])
    trace = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(trace, Trace)
    findings, notes = diagnose_rank(trace, analyze_trace(trace))
    assert notes == []
    for f in findings:
        json.dumps(f.to_dict())


def test_step_variance_leaves_data_loading_waits_to_data_loading(tmp_path: Path) -> None:
    """Steps that vary only by how long they wait for the loader: one finding (data_loading), not two."""
    b = TraceBuilder()
    for i in range(8):
        ts = i * 4 * STEP_US
        wait = 3 * STEP_US if i % 4 == 3 else 0  # the loader falls behind every fourth step
        b.step(i, ts=ts, dur=STEP_US + wait)
        if wait:
            b.dataloader(ts=ts + 1, dur=wait - 2)
        b.launch(b.cpu_op("aten::mm", ts=ts + wait + 1, dur=10), kernel_ts=ts + wait + 20, kernel_dur=STEP_US - 40)
    found = _findings(b, tmp_path)
    assert "data_loading" in found
    assert "step_variance" not in found
