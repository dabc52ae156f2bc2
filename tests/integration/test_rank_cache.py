"""The rank cache (`aiprof analyze --cache`): a rerun serves unchanged files from the cache with the same
report (the CLI's output byte for byte, with Arrow tables and without); a changed file, other rule options, a
damaged or cut-short entry are misses; a folder others can write is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aiprof import app
from aiprof.analysis import rankcache
from aiprof.analysis.run import analyze_paths
from aiprof.errors import AiprofError
from aiprof.pipeline import diagnose_hook
from aiprof.rules.diagnosis import RankDiagnosis


@pytest.fixture()
def ranks(traces_dir: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for f in sorted((traces_dir / "param" / "dlrm_8rank").iterdir())[:3]:
        shutil.copyfile(f, folder / f.name)
    return folder


def _misses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the files the worker function really analyses (the cache's misses)."""
    calls: list[int] = []
    real = rankcache.cached_map

    def counting(cache, mapper, fn, jobs, keep):  # type: ignore[no-untyped-def]
        def counted(f, todo):  # type: ignore[no-untyped-def]
            calls.append(len(todo))
            return mapper(f, todo)
        return real(cache, counted, fn, jobs, keep)

    monkeypatch.setattr("aiprof.analysis.run.cached_map", counting)
    return calls


def test_a_rerun_is_served_from_the_cache_with_the_same_report(ranks: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    fresh = analyze_paths([ranks], workers=1, rank_hook=diagnose_hook)  # no cache
    calls = _misses(monkeypatch)
    first = app.render(app.analyze([ranks], app.AnalyzeOptions(cache_dir=cache, workers=1)), "json")
    second = app.render(app.analyze([ranks], app.AnalyzeOptions(cache_dir=cache, workers=1)), "json")
    assert second == first
    assert calls == [3], calls  # the second run analysed nothing
    assert len(list(cache.glob(f"*{rankcache.SUFFIX}"))) == 3
    # The worker's typed diagnosis is what the cache stores and serves: the same Finding objects.
    served = analyze_paths([ranks], workers=1, rank_hook=diagnose_hook, cache_dir=cache)
    assert calls == [3], calls
    assert all(isinstance(r.diagnosis, RankDiagnosis) for r in served.ranks)
    assert any(r.diagnosis.findings for r in served.ranks if r.diagnosis)
    assert [r.diagnosis.findings for r in served.ranks if r.diagnosis] == \
        [r.diagnosis.findings for r in fresh.ranks if r.diagnosis]
    # A rewritten file is a miss; the two others still hit.
    victim = sorted(ranks.iterdir())[1]
    data = victim.read_bytes()
    victim.write_bytes(data)
    os.utime(victim, ns=(victim.stat().st_atime_ns, victim.stat().st_mtime_ns + 10**9))
    app.analyze([ranks], app.AnalyzeOptions(cache_dir=cache, workers=1))
    assert calls == [3, 1]


def test_a_changed_file_beside_the_traces_is_a_miss(ranks: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The rank hook reads a run directory's other files (requests, telemetry, memory dumps): a change to
    one of them changes the result, so it is a miss for every rank of that folder."""
    cache = tmp_path / "cache"
    calls = _misses(monkeypatch)
    (ranks / "requests.rank0.csv").write_text("request,start_ns\n")
    analyze_paths([ranks], workers=1, rank_hook=diagnose_hook, cache_dir=cache)
    analyze_paths([ranks], workers=1, rank_hook=diagnose_hook, cache_dir=cache)
    (ranks / "requests.rank0.csv").write_text("request,start_ns\n0,1\n")
    analyze_paths([ranks], workers=1, rank_hook=diagnose_hook, cache_dir=cache)
    assert calls == [3, 3]


def test_other_rule_options_and_damaged_entries_are_misses(ranks: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import functools

    from aiprof.rules.options import DEFAULT_OPTIONS

    cache = tmp_path / "cache"
    calls = _misses(monkeypatch)
    analyze_paths([ranks], workers=1, rank_hook=diagnose_hook, cache_dir=cache)
    from aiprof.rules.options import RuleOptions

    other = functools.partial(diagnose_hook, options=RuleOptions.from_assignments(["data_loading_share=0.5"]))
    assert other.keywords["options"] != DEFAULT_OPTIONS
    analyze_paths([ranks], workers=1, rank_hook=other, cache_dir=cache)
    assert calls == [3, 3]
    entries = sorted(cache.glob(f"*{rankcache.SUFFIX}"))
    assert len(entries) == 6
    for entry in entries:
        entry.write_bytes(b"not a summary")
    run = analyze_paths([ranks], workers=1, rank_hook=diagnose_hook, cache_dir=cache)
    assert calls[-1] == 3 and len(run.ranks) == 3
    analyze_paths([ranks], workers=1, rank_hook=diagnose_hook, cache_dir=cache)
    assert calls == [3, 3, 3]  # rewritten: all hits
    for entry in sorted(cache.glob(f"*{rankcache.SUFFIX}")):
        data = entry.read_bytes()
        entry.write_bytes(data[: len(data) // 2])  # cut short
    run = analyze_paths([ranks], workers=1, rank_hook=diagnose_hook, cache_dir=cache)
    assert calls == [3, 3, 3, 3] and len(run.ranks) == 3


def test_a_cache_folder_others_can_write_is_refused(ranks: Path, tmp_path: Path) -> None:
    cache = tmp_path / "shared-cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    with pytest.raises(AiprofError, match="writable by others"):
        analyze_paths([ranks], workers=1, cache_dir=cache)


def _cli(*args: str) -> bytes:
    import aiprof

    env = {**os.environ, "PYTHONPATH": str(Path(aiprof.__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-m", "aiprof", "analyze", *args], env=env, capture_output=True,
                          check=True, timeout=600).stdout


def test_the_cli_output_is_the_same_cold_and_warm(ranks: Path, tmp_path: Path) -> None:
    """``aiprof analyze --cache``: the first run writes the summaries, the second reads them; the reports are
    byte for byte the same, and the same as without the cache."""
    cache = tmp_path / "cache"
    for fmt in ("json", "html"):
        plain = _cli(str(ranks), "--format", fmt)
        cold = _cli(str(ranks), "--cache", str(cache / fmt), "--format", fmt)
        warm = _cli(str(ranks), "--cache", str(cache / fmt), "--format", fmt)
        assert len(list((cache / fmt).glob(f"*{rankcache.SUFFIX}"))) == 3
        assert cold == warm == plain, fmt


def test_without_pyarrow_the_tables_are_messagepack(ranks: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The same report from MessagePack tables; an entry with Arrow tables where pyarrow is missing is a miss."""
    from aiprof.analysis import summary

    cache = tmp_path / "cache"
    calls = _misses(monkeypatch)
    with_arrow = summary.arrow() is not None
    first = app.render(app.analyze([ranks], app.AnalyzeOptions(cache_dir=cache, workers=1)), "json")
    monkeypatch.setattr(summary, "arrow", lambda: None)
    second = app.render(app.analyze([ranks], app.AnalyzeOptions(cache_dir=cache, workers=1)), "json")
    third = app.render(app.analyze([ranks], app.AnalyzeOptions(cache_dir=cache, workers=1)), "json")
    assert first == second == third
    assert calls == ([3, 3] if with_arrow else [3]), calls
