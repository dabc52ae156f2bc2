"""The whole run from synthetic data-loader tables (analysis.wholerun), and its waits file round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aiprof import rundir
from aiprof.analysis import wholerun
from aiprof.analysis.wholerun import whole_run, whole_run_of
from aiprof.report.wholerun_section import summary_lines
from aiprof.rundir import LoaderWaits

MS = 1_000_000


def _table(durations_ms: list[float], *, first: int = 0, wait_ms: float = 1.0, samples: int = 8, tokens: int = -1,
           setup: bool = True, tail: bool = True) -> LoaderWaits:
    """A loader table: setup row (-1), one row per step, and the empty __next__ after the loop."""
    rows: list[tuple[int, ...]] = []
    t = 1_700_000_000_000_000_000
    if setup:
        rows.append((-1, t - 5 * MS, t, 3 * MS, 1, samples, tokens))
    for k, d in enumerate(durations_ms):
        end = t + int(d * MS)
        rows.append((first + k, t, end, int(wait_ms * MS), 1, samples, tokens))
        t = end
    if tail:
        rows.append((first + len(durations_ms), t, t + 40 * MS, MS, 0, -1, -1))
    return LoaderWaits(*[tuple(c) for c in zip(*rows)])


def test_statistics_spikes_and_throughput() -> None:
    rng = np.random.default_rng(0)
    steady = (100 + rng.normal(0, 1, 60)).round(3).tolist()
    steady[30] = 400.0  # a spike at step 32 (2 warm-up steps before)
    w = whole_run([_table([900.0, 700.0] + steady, samples=8, tokens=8 * 128)], recorded_steps=[10, 11])
    assert w is not None
    assert w.steps == 62 and w.first_step == 0 and w.last_step == 61  # setup and the empty tail left out
    assert w.warmup_steps == [0, 1] and w.steady_steps == 60
    d = np.array(steady) * MS
    assert w.median_ns == int(np.median(d)) and w.p90_ns == int(np.percentile(d, 90))
    assert w.p99_ns == int(np.percentile(d, 99))
    assert [s.step for s in w.spikes] == [32] and w.spike_count == 1 and w.spikes[0].times_median > 3
    assert w.samples_per_step == 8 and w.tokens_per_step == 1024
    assert w.samples_per_s is not None and abs(w.samples_per_s - 8 * 60 / (d.sum() / 1e9)) < 0.01
    assert w.tokens_per_s is not None and abs(w.tokens_per_s - 128 * w.samples_per_s) < 1
    assert 0.009 < w.wait_share < 0.011  # 1 ms of ~100 ms
    assert w.recorded is not None and w.recorded.representative and w.recorded.steps == [10, 11]
    assert len(w.series_steps) == 62


def test_recorded_window_in_warmup_is_not_representative() -> None:
    w = whole_run([_table([900.0, 700.0] + [100.0] * 20)], recorded_steps=[0, 1])
    assert w is not None and w.recorded is not None
    assert w.recorded.representative is False and w.recorded.in_warmup == 2
    assert "not representative" in w.recorded.verdict


def test_ranks_combine_slowest_step_and_summed_samples() -> None:
    fast = _table([100.0] * 10, samples=4)
    slow = _table([100.0] * 5 + [150.0] + [100.0] * 4, samples=4)
    w = whole_run([fast, slow], recorded_steps=[])
    assert w is not None and w.ranks == 2 and w.samples_per_step == 8
    assert max(w.series_ns) == 150 * MS and w.recorded is None


def test_unknown_batch_sizes_and_old_files_give_no_throughput(tmp_path: Path) -> None:
    w = whole_run([_table([100.0] * 5, samples=-1)], recorded_steps=[])
    assert w is not None and w.samples_per_s is None and w.tokens_per_s is None
    # A file written before batch sizes were recorded (five columns): read, no throughput.
    old = rundir.format_waits([(0, 0, 100 * MS, MS, 1), (1, 100 * MS, 200 * MS, MS, 1)])
    assert old.startswith(rundir.WAITS_HEADER_V1.encode() + b"\n")
    (tmp_path / "dataloader.rank0.csv").write_bytes(old)
    w = whole_run_of(tmp_path, recorded_steps=[1])
    assert w is not None and w.steps == 2 and w.samples_per_s is None and w.sources == ["dataloader.rank0.csv"]


def test_waits_file_round_trip_with_batch_sizes(tmp_path: Path) -> None:
    path = tmp_path / "dataloader.rank0.csv"
    path.write_bytes(rundir.format_waits([(0, 0, 10, 1, 1, 32, 4096), (1, 10, 20, 2, 1, -1, -1)]))
    waits = rundir.read_waits(path)
    assert waits is not None and waits.samples == (32, -1) and waits.tokens == (4096, -1)


def test_long_runs_are_downsampled_for_the_chart() -> None:
    w = whole_run([_table([100.0] * (wholerun.MAX_SERIES * 3), tail=False, setup=False)], recorded_steps=[5])
    assert w is not None and w.steps == wholerun.MAX_SERIES * 3
    assert len(w.series_ns) == wholerun.MAX_SERIES and w.series_steps[0] == 0


def test_no_steps_no_section(tmp_path: Path) -> None:
    assert whole_run([_table([], tail=False)], recorded_steps=[]) is None
    assert whole_run_of(tmp_path, recorded_steps=[]) is None


SCHEDULE = {"wait": 5, "warmup": 2, "active": 4, "repeat": 1, "skip_first": 0}  # records steps 7-10


def _with_one_time_costs() -> list[float]:
    """40 steps of ~100 ms: the profiler starts at step 5 (300 ms), exports after step 10 (900 ms), the script's
    own spike at step 20 (400 ms) and a last step that saves a checkpoint (5 s)."""
    rng = np.random.default_rng(1)
    d = (100 + rng.normal(0, 1, 40)).round(3).tolist()
    d[5], d[10], d[20], d[39] = 300.0, 900.0, 400.0, 5000.0
    return d


def test_one_time_steps_are_labelled_from_the_schedule_not_spikes() -> None:
    d = _with_one_time_costs()
    w = whole_run([_table(d)], recorded_steps=range(7, 11), schedule=SCHEDULE)
    assert w is not None
    causes = {s.step: s.cause for s in w.one_time}
    assert set(causes) == {5, 10, 39}
    assert "starting to trace (at step 5)" in causes[5] and "exporting its trace (after step 10)" in causes[10]
    assert "last step" in causes[39]
    assert [s.step for s in w.spikes] == [20] and w.spike_count == 1  # the script's own spike stays one
    assert w.steady_steps == 37 and w.one_time[1].times_median > 8
    steady = np.array([x for i, x in enumerate(d) if i not in (5, 10, 39)]) * MS
    assert w.p99_ns == int(np.percentile(steady, 99)) and w.mean_ns == int(steady.mean())


def test_without_a_schedule_the_recorded_steps_place_the_profiler() -> None:
    w = whole_run([_table(_with_one_time_costs())], recorded_steps=range(5, 11))
    assert w is not None
    assert {s.step: s.cause.split(" (")[0] for s in w.one_time} == {
        5: "the profiler starting to trace", 10: "the profiler stopping and exporting its trace",
        39: "the run's last step"}
    assert [s.step for s in w.spikes] == [20]


def test_a_profiler_step_that_is_not_slow_is_not_labelled() -> None:
    d = [100.0 + 0.1 * (i % 3) for i in range(30)]
    w = whole_run([_table(d)], recorded_steps=range(7, 11), schedule=SCHEDULE)
    assert w is not None and w.one_time == [] and w.spikes == [] and w.steady_steps == 30


def test_a_real_run_directory() -> None:
    """The H200 train run (tests/gpu/fixtures/h200/run-train: schedule wait 5 / warm-up 2 / active 4): the 81.8 ms
    export step (14x) and the 10 s last step are one-time costs, not spikes of the script; the steady median
    stays ~5.6 ms."""
    run = Path(__file__).resolve().parents[1] / "gpu" / "fixtures" / "h200" / "run-train"
    w = whole_run_of(run, range(7, 11))
    assert w is not None
    causes = {s.step: s.cause for s in w.one_time}
    assert "exporting" in causes[10] and "last step" in causes[28] and "starting" in causes[4]
    assert w.spikes == [] and 5.0 * MS < w.median_ns < 6.0 * MS and w.p99_ns < 7 * MS
    doc_line = next(line for line in summary_lines(w) if "one-time" in line)
    assert "step 10 (81.8 ms" in doc_line and "step 28 (10,026 ms" in doc_line
