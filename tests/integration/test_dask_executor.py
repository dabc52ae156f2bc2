"""`--executor dask` on a real Dask cluster started by the test (a LocalCluster of two worker processes):
the same report as the local pool, a worker killed mid-run loses no rank, damaged files are named, never
fatal. Skipped when the optional extra (aiprof[dask]) is not installed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

import cloudpickle  # noqa: E402

from aiprof import app  # noqa: E402
from aiprof.errors import AiprofError  # noqa: E402
from aiprof.analysis.run import analyze_paths  # noqa: E402
from aiprof.pipeline import diagnose_hook  # noqa: E402
from aiprof.rules.diagnosis import RankDiagnosis  # noqa: E402
from aiprof.rules.finding import Finding  # noqa: E402
from aiprof.trace.executors import DaskExecutor, executor_for  # noqa: E402


# The workers cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster():  # type: ignore[no-untyped-def]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as c:
        yield c


def _json(report: object) -> dict:
    return json.loads(app.render(report, "json"))  # type: ignore[arg-type]


def test_dask_gives_the_local_report_byte_for_byte(cluster, traces_dir: Path) -> None:  # type: ignore[no-untyped-def]
    folder = traces_dir / "astra-sim" / "megatron_tp8"
    local = app.render(app.analyze([folder], app.AnalyzeOptions(executor="local")), "json")
    remote = app.render(app.analyze([folder], app.AnalyzeOptions(executor=f"dask://{cluster.scheduler_address.removeprefix('tcp://')}")), "json")
    assert remote == local
    assert '"cross_rank"' in local


def kill_worker_once(trace, analysis):  # type: ignore[no-untyped-def]
    """A rank hook that kills the worker process the first time it sees rank file 3 (a marker file says
    whether it already did): the task must be run again on another worker."""
    marker = Path(os.environ["AIPROF_TEST_KILL_MARKER"])
    if trace.path.name.endswith("_3.json.gz") and not marker.exists():
        marker.write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)
    return diagnose_hook(trace, analysis)


def test_a_worker_killed_mid_run_loses_no_rank(cluster, traces_dir: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "killed"
    monkeypatch.setenv("AIPROF_TEST_KILL_MARKER", str(marker))
    cluster.scale(2)
    client_env = {"AIPROF_TEST_KILL_MARKER": str(marker)}
    with distributed.Client(cluster) as client:
        client.run(lambda: os.environ.update(client_env))  # the workers' environment
    folder = traces_dir / "astra-sim" / "megatron_tp8"
    run = analyze_paths([folder], rank_hook=kill_worker_once, executor=DaskExecutor(cluster.scheduler_address))
    assert marker.exists(), "the hook never killed a worker: the test did not test anything"
    assert [r.rank for r in run.ranks] == list(range(8))
    assert all(isinstance(r.diagnosis, RankDiagnosis) for r in run.ranks)  # carried back typed, by Dask too
    assert all(isinstance(f, Finding) for r in run.ranks if r.diagnosis for f in r.diagnosis.findings)


def test_cut_and_replaced_files_are_named_and_the_run_completes(cluster, traces_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "ranks"
    shutil.copytree(traces_dir / "astra-sim" / "megatron_tp8", folder)
    os.chmod(folder, 0o755)
    for f in folder.iterdir():
        os.chmod(f, 0o644)
    data = (folder / "megatron_kineto_1.json.gz").read_bytes()
    (folder / "megatron_kineto_1.json.gz").write_bytes(data[: len(data) // 3])  # cut mid-copy
    (folder / "megatron_kineto_4.json.gz").write_bytes(b"\x1f\x8b not really gzip")  # replaced by garbage
    (folder / "megatron_kineto_6.json.gz").write_text("{\"traceEvents\": [}")  # replaced by broken JSON
    warned: list[str] = []
    report = app.analyze([folder], app.AnalyzeOptions(
        executor=f"dask://{cluster.scheduler_address.removeprefix('tcp://')}", on_warning=warned.append))
    text = " ".join(warned)
    assert "megatron_kineto_4.json.gz" in text and "megatron_kineto_6.json.gz" in text
    ranks = [r.rank for r in report.ranks]
    assert 4 not in ranks and 6 not in ranks and len(ranks) >= 5
    # The cut file is either salvaged with a warning or skipped with one: named either way.
    assert "megatron_kineto_1.json.gz" in text


def test_an_unknown_executor_and_an_unreachable_scheduler_are_one_line_errors(tmp_path: Path, traces_dir: Path) -> None:
    with pytest.raises(AiprofError, match="expected local, dask"):
        executor_for("spark")
    trace = traces_dir / "astra-sim" / "megatron_tp8"
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "1s"}
    proc = subprocess.run([sys.executable, "-m", "aiprof", "analyze", str(trace), "--executor", "dask://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in proc.stderr
    assert "Traceback" not in proc.stderr


def kill_worker_always(trace, analysis):  # type: ignore[no-untyped-def]
    """A rank hook that kills its worker process whenever it sees worker 3's file: a rank no worker survives."""
    if trace.path.name.startswith("worker3_"):
        os.kill(os.getpid(), signal.SIGKILL)
    return diagnose_hook(trace, analysis)


def test_a_rank_no_worker_survives_is_a_failed_rank(traces_dir: Path) -> None:
    import dask

    calls: list[str] = []
    # A task fails once a worker died running it (the scheduler's allowed-failures 0), retried TASK_RETRIES times.
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=50) as c:
        run = analyze_paths([traces_dir / "param" / "dlrm_8rank"], rank_hook=kill_worker_always,
                            executor=DaskExecutor(c.scheduler_address), on_failed=lambda p, why: calls.append(p.name))
    # Rank 3 never comes back; a task that was queued on a dying worker may share its fate (Dask counts the
    # death against every task on that worker): failed too, named the same way, never lost
    failed = {f.rank: f for f in run.failed}
    assert 3 in failed and 3 not in [r.rank for r in run.ranks]
    assert sorted([r.rank for r in run.ranks] + list(failed)) == list(range(8))
    assert all(f.stage == "worker" and "died each time it ran" in f.reason for f in run.failed)
    assert sorted(calls) == sorted(Path(f.path).name for f in run.failed)
    assert len(run.ranks) >= 5
