"""Rank files that fail are counted and named, never fatal (issue #26): a real folder of 8 DLRM rank files with
one cut before any data, one replaced by garbage and one cut mid-file (salvaged: partial, not failed); a rank
whose analysis raises; the progress bar's failed count."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import msgspec
import pytest

from aiprof import app
from aiprof.analysis.run import RankAnalysis, analyze_paths
from aiprof.cli.analyze import _DelayedProgress
from aiprof.pipeline import diagnose_hook
from aiprof.report.model import Report
from aiprof.rules.diagnosis import RankDiagnosis
from aiprof.trace.model import Trace

CUT = "worker2_step_12.1694128201554.pt.trace.json.gz"  # cut to its first 64 bytes: nothing to salvage
GARBAGE = "worker5_step_12.1694128201549.pt.trace.json.gz"  # 4 kB of random bytes
SALVAGED = "worker6_step_12.1694128201553.pt.trace.json.gz"  # cut at 2/3: salvaged, a partial rank


@pytest.fixture(scope="module")
def broken(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("failed") / "ranks"
    shutil.copytree(traces_dir / "param" / "dlrm_8rank", folder)
    folder.chmod(0o755)
    for f in folder.iterdir():
        f.chmod(0o644)
    (folder / CUT).write_bytes((folder / CUT).read_bytes()[:64])
    rng = random.Random(5)
    (folder / GARBAGE).write_bytes(bytes(rng.randrange(256) for _ in range(4000)))
    data = (folder / SALVAGED).read_bytes()
    (folder / SALVAGED).write_bytes(data[: len(data) * 2 // 3])
    return folder


@pytest.fixture(scope="module")
def report_and_calls(broken: Path) -> tuple[Report, list[tuple[Path, str]], list[str]]:
    calls: list[tuple[Path, str]] = []
    warned: list[str] = []
    report = app.analyze([broken], app.AnalyzeOptions(workers=2, on_failed=lambda p, why: calls.append((p, why)),
                                                      on_warning=warned.append))
    return report, calls, warned


def test_the_summary_counts_and_names_the_failed_ranks(report_and_calls: tuple[Report, list[tuple[Path, str]],
                                                                                list[str]], broken: Path) -> None:
    report, calls, warned = report_and_calls
    s = report.summary
    assert s.rank_count == 6 and [r.rank for r in report.ranks] == [0, 1, 3, 4, 6, 7]
    assert s.failed_rank_count == 2
    assert isinstance(s.failed_ranks, list)
    assert [(Path(f.path).name, f.rank, f.stage) for f in s.failed_ranks] == [(CUT, 2, "read"), (GARBAGE, 5, "read")]
    assert "truncated before any data" in s.failed_ranks[0].reason
    assert "not a Kineto trace" in s.failed_ranks[1].reason
    # The salvaged file is a partial rank, not a failed one
    assert next(r for r in report.ranks if r.rank == 6).coverage.partial
    # Told as they failed, and warned about, each by name
    assert sorted(p.name for p, _ in calls) == [CUT, GARBAGE]
    assert all(any(name in w for w in warned) for name in (CUT, GARBAGE))


def test_every_format_says_how_many_failed_and_which(report_and_calls: tuple[Report, list[tuple[Path, str]],
                                                                               list[str]]) -> None:
    report = report_and_calls[0]
    doc = json.loads(app.render(report, "json"))
    assert doc["summary"]["failed_rank_count"] == 2
    assert [(Path(f["path"]).name, f["rank"], f["stage"]) for f in doc["summary"]["failed_ranks"]] == [
        (CUT, 2, "read"), (GARBAGE, 5, "read")]
    again = msgspec.json.decode(app.render(report, "json"), type=Report)  # the JSON reads back typed
    assert again.summary.failed_ranks == report.summary.failed_ranks
    for fmt in ("terminal", "md", "html"):
        text = " ".join(app.render(report, fmt, app.RenderOptions(width=400)).split())
        assert "2 of 8 rank files failed" in text, fmt
        assert CUT in text and GARBAGE in text, fmt


def test_a_whole_run_says_nothing_of_failures(traces_dir: Path) -> None:
    report = app.analyze([traces_dir / "param" / "dlrm_8rank"], app.AnalyzeOptions(workers=2))
    assert "failed_rank_count" not in json.loads(app.render(report, "json"))["summary"]
    assert "rank files failed" not in app.render(report, "terminal")


def raise_on_rank_3(trace: Trace, analysis: RankAnalysis) -> RankDiagnosis:
    """The diagnosis, except that it raises on worker 3's file (a bug that shows on one rank only)."""
    if trace.path.name.startswith("worker3_"):
        raise ValueError("boom on this rank")
    return diagnose_hook(trace, analysis)


def test_a_rank_whose_analysis_raises_is_a_failed_rank(traces_dir: Path) -> None:
    calls: list[tuple[Path, str]] = []
    run = analyze_paths([traces_dir / "param" / "dlrm_8rank"], workers=2, rank_hook=raise_on_rank_3,
                        on_failed=lambda p, why: calls.append((p, why)))
    assert [r.rank for r in run.ranks] == [0, 1, 2, 4, 5, 6, 7]
    assert [(f.rank, f.stage) for f in run.failed] == [(3, "analysis")]
    assert "ValueError: boom on this rank" in run.failed[0].reason
    assert [p.name for p, _ in calls] == [Path(run.failed[0].path).name]
    assert any("boom on this rank" in w for w in run.warnings)


def test_one_file_that_raises_still_raises(traces_dir: Path) -> None:
    one = sorted((traces_dir / "param" / "dlrm_8rank").glob("worker3_*"))[0]
    with pytest.raises(ValueError, match="boom"):
        analyze_paths([one], rank_hook=raise_on_rank_3)


def test_the_progress_bar_shows_done_and_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    bar = _DelayedProgress(enabled=False)
    bar.update(Path("a"), 1, 8)
    bar._show()  # what the timer does after a second
    assert bar._progress.tasks[0].fields["failed"] == ""
    bar.failed(Path("b"), "cut")
    bar.failed(Path("c"), "garbage")
    bar.update(Path("d"), 4, 8)
    task = bar._progress.tasks[0]
    assert (task.completed, task.total, task.fields["failed"]) == (4, 8, " · 2 failed")
    bar.__exit__(None, None, None)
