"""``aiprof compare`` with statistics, on synthetic step lists with fixed durations (no timing): the median
change's bootstrap confidence interval, the gate that fails only on a significant regression beyond the
threshold, the few-steps fallback, findings matched by id and size, different-program warnings,
whole-run step times from a run directory, and the renderers' wording."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import numpy as np
import pytest

from aiprof import app
from aiprof.report.compare import Comparison, compare_reports, saving_change
from aiprof.report.compare_render import render_comparison
from aiprof.report.compare_stats import MIN_STEPS, median_change, paired_change
from aiprof.report.compare_steps import StepSample, recorded_steps, step_samples, whole_run_steps
from aiprof.report.model import Device, RankReport, Report
from aiprof.rules.finding import FindingRecord
from aiprof.runmeta import HostInfo, RunMeta, RunTelemetry
from typed_builders import report, step, totals

MS = 1_000_000


def noisy(n: int, median_ms: float, seed: int, spread: float = 0.08) -> list[int]:
    """``n`` step durations around ``median_ms`` with multiplicative noise (a fixed seed: the same list
    every time)."""
    rng = np.random.default_rng(seed)
    return [int(median_ms * MS * f) for f in np.exp(rng.normal(0.0, spread, n))]


def run_report(durations: list[int], *, ranks: int = 1, device_name: str = "GPU", command: str | None = None,
               findings: list[FindingRecord] | None = None, step_source: str = "ProfilerStep",
               sources: list[str] | None = None) -> Report:
    out = []
    for r in range(ranks):
        steps = [step(i, d) for i, d in enumerate(durations)]
        t = totals(steps)
        out.append(RankReport(rank=r, rank_source="file name", path=f"/runs/rank{r}.json", event_count=10,
                              primary_device="gpu:0",
                              devices=[Device(device="gpu:0", index=0, kind="gpu", name=device_name, steps=steps, totals=t)],
                              steps=steps, totals=t, notes=[]))
    doc = report(out, findings=findings, sources=sources)
    doc.summary.step_source = step_source
    if command is not None:
        doc.run_metadata = RunMeta(command=command.split())
    return doc


def finding(fid: str, saving_ns: int) -> FindingRecord:
    return FindingRecord(id=fid, title=f"{fid} title", severity="high", est_saving_ns_per_step=saving_ns,
                         share_of_step=0.1, saving_kind="estimate", confidence="medium", evidence={}, fix="fix it")


# --- the statistic -------------------------------------------------------------------------------------
def test_identical_distributions_with_noise_are_not_significant() -> None:
    before, after = noisy(60, 100, seed=1), noisy(60, 100, seed=2)
    result = median_change(before, after)
    assert result.enough and result.ci_pct is not None
    lo, hi = result.ci_pct
    assert lo < 0 < hi and not result.significant
    assert lo <= result.change_pct <= hi


def test_a_clear_ten_percent_shift_is_significant_and_its_interval_holds_it() -> None:
    before = noisy(60, 100, seed=3)
    after = [int(d * 1.10) for d in noisy(60, 100, seed=4)]
    result = median_change(before, after)
    assert result.significant and result.ci_pct is not None
    lo, hi = result.ci_pct
    assert 0 < lo < 10 < hi


def test_the_interval_is_deterministic() -> None:
    before, after = noisy(40, 100, seed=5), noisy(40, 103, seed=6)
    assert median_change(before, after) == median_change(before, after)


def test_too_few_steps_give_the_point_estimate_only() -> None:
    result = median_change([100, 101, 99], [110, 111, 109])
    assert not result.enough and result.ci_pct is None and not result.significant
    assert result.change_pct == pytest.approx(10.0)


# --- the comparison and the gate ---------------------------------------------------------------------
def test_identical_runs_with_noise_pass_the_gate() -> None:
    cmp = compare_reports(run_report(noisy(50, 100, seed=7)), run_report(noisy(50, 100, seed=8)))
    assert not cmp.significant and cmp.verdict.result == "unchanged"
    assert cmp.steps_used is not None and (cmp.steps_used.before, cmp.steps_used.after) == (50, 50)
    assert cmp.steps_used.source == "recorded"
    assert app.slower_than(cmp, 5.0) is None


def test_beyond_the_threshold_but_not_significant_passes_with_a_note() -> None:
    grid = [int(x * MS) for x in np.linspace(50, 150, 21)]  # very spread steps: a wide interval
    cmp = compare_reports(run_report(grid), run_report([int(d * 1.06) for d in grid]))
    assert cmp.step_time_change_pct is not None and cmp.step_time_change_pct > 5.0
    assert not cmp.significant
    assert app.slower_than(cmp, 5.0) is None
    note = app.gate_note(cmp, 5.0)
    assert note is not None and "within noise" in note
    # neither pass nor fail: the steps cannot tell +6 % from noise
    assert cmp.verdict.result == "inconclusive" and cmp.verdict.text.startswith("Inconclusive, within the steps' noise")
    assert app.gate(cmp, 5.0) == ("inconclusive", note)
    assert app.gate(cmp, 30.0) == ("pass", None)  # the estimate is within a limit that large


def test_a_clear_ten_percent_regression_fails_the_gate() -> None:
    before = noisy(50, 100, seed=9)
    cmp = compare_reports(run_report(before), run_report([int(d * 1.10) for d in noisy(50, 100, seed=10)]))
    assert cmp.significant and cmp.verdict.result == "slower"
    assert cmp.step_time_ci_pct is not None and cmp.step_time_ci_pct[0] > 0
    failed = app.slower_than(cmp, 5.0)
    assert failed is not None and "CI" in failed and "significant" in failed
    assert app.slower_than(cmp, 30.0) is None  # beyond the change: passes


def test_few_steps_warn_and_gate_on_the_point_estimate() -> None:
    cmp = compare_reports(run_report([100 * MS] * 3), run_report([108 * MS] * 3))
    assert cmp.step_time_ci_pct is None and not cmp.significant
    assert any("too few steps" in w for w in cmp.warnings)
    assert cmp.verdict.caveat is not None and "too few steps" in cmp.verdict.caveat
    failed = app.slower_than(cmp, 5.0)
    assert failed is not None and "point estimate" in failed
    assert MIN_STEPS > 3


def test_a_comparison_written_before_the_statistics_still_decodes_and_gates() -> None:
    cmp = compare_reports(run_report(noisy(20, 100, seed=11)), run_report(noisy(20, 120, seed=12)))
    old = json.loads(msgspec.json.encode(cmp))
    for key in ("step_time_change_pct", "step_time_ci_pct", "confidence", "significant", "steps_used", "program_differences"):
        old.pop(key)
    for key in ("grew", "shrank"):
        old["findings"].pop(key)
    decoded = msgspec.json.decode(json.dumps(old).encode(), type=Comparison)
    assert decoded.steps_used is None and decoded.step_time_change_pct is None and decoded.findings.grew == []
    failed = app.slower_than(decoded, 5.0)
    assert failed is not None  # gated on the recorded median, as before


# --- findings by id and size -------------------------------------------------------------------------
def test_findings_are_matched_by_id_and_magnitude() -> None:
    before = run_report([100 * MS] * 6, findings=[finding("host_bound", 8 * MS), finding("sync", 8 * MS), finding("data_loading", 20 * MS)])
    after = run_report([100 * MS] * 6, findings=[finding("host_bound", 64 * MS), finding("sync", 9 * MS), finding("data_loading", 5 * MS)])
    fc = compare_reports(before, after).findings
    assert [f.id for f in fc.grew] == ["host_bound"]
    assert [f.id for f in fc.shrank] == ["data_loading"]
    assert [f.id for f in fc.unchanged] == ["sync"]
    grew = fc.grew[0]
    assert (grew.before_saving_ns_per_step, grew.after_saving_ns_per_step) == (8 * MS, 64 * MS)
    assert saving_change(0, 0) == "unchanged" and saving_change(0, 1) == "grew"
    assert saving_change(10 * MS, 14 * MS) == "grew" and saving_change(14 * MS, 10 * MS) == "shrank"  # ±40 %


def test_a_shared_machine_note_is_never_resolved_or_new_and_its_warning_is_said_once() -> None:
    shared = finding("noisy_neighbour", 0)
    shared.evidence["others_cores"] = 1.5
    cmp = compare_reports(run_report([100 * MS] * 6, findings=[shared]), run_report([100 * MS] * 6))
    fc = cmp.findings
    assert not fc.resolved and not fc.new and not fc.unchanged
    said = [w for w in cmp.warnings if "machine was shared" in w]
    assert len(said) == 1 and said[0].startswith("before:")
    text = render_comparison(cmp, "terminal")
    assert text.count("cores on average") == 1 and "resolved" not in text  # the warning, once
    assert cmp.shared_machine == ["before"]


def _shared(doc: Report, cores: float) -> Report:
    note = finding("noisy_neighbour", 0)
    note.evidence["others_cores"] = cores
    doc.findings = [note]
    return doc


def test_a_shared_machine_makes_the_verdict_and_the_gate_inconclusive() -> None:
    """+10 %, significant, but AFTER ran beside another process: its load may be the change, so the
    comparison says what it measured and decides nothing; the same change on a quiet machine fails."""
    before = run_report(noisy(50, 100, seed=9))
    after = [int(d * 1.10) for d in noisy(50, 100, seed=10)]
    quiet = compare_reports(before, run_report(after))
    assert quiet.verdict.result == "slower" and app.gate(quiet, 5.0)[0] == "fail"
    cmp = compare_reports(before, _shared(run_report(after), 1.2))
    assert cmp.significant and cmp.shared_machine == ["after"]
    assert cmp.verdict.result == "inconclusive"
    assert cmp.verdict.text.startswith("Inconclusive: the machine was shared while AFTER ran")
    assert "measured: AFTER is slower" in cmp.verdict.text
    outcome, message = app.gate(cmp, 5.0)
    assert outcome == "inconclusive" and message is not None and "quiet machine" in message
    faster = compare_reports(_shared(run_report(after), 1.0), run_report(noisy(50, 100, seed=9)))
    assert faster.verdict.result == "inconclusive" and app.gate(faster, 5.0)[0] == "inconclusive"  # never a pass either
    for fmt in ("md", "html"):
        assert "aiprof compare: inconclusive" in render_comparison(cmp, fmt)
    assert json.loads(render_comparison(cmp, "json"))["shared_machine"] == ["after"]


def test_the_compare_cli_exits_4_when_inconclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aiprof.cli import main

    before, after = tmp_path / "b.json", tmp_path / "a.json"
    before.write_bytes(msgspec.json.encode(run_report(noisy(50, 100, seed=9))))
    after.write_bytes(msgspec.json.encode(_shared(run_report([int(d * 1.10) for d in noisy(50, 100, seed=10)]), 1.2)))
    assert main(["compare", str(before), str(after), "--format", "json", "--fail-if-slower", "5"]) == 4
    err = capsys.readouterr().err
    assert "inconclusive: the machine was shared while AFTER ran" in err
    assert main(["compare", str(before), str(after), "--format", "json"]) == 0  # no gate asked: no verdict exit
    assert main(["compare", str(before), str(before), "--format", "json", "--fail-if-slower", "5"]) == 0


# --- different programs ------------------------------------------------------------------------------
def test_different_programs_are_named() -> None:
    durations = noisy(10, 100, seed=13)
    before = run_report(durations, command="python train.py --model a")
    after = run_report(durations, ranks=2, device_name="Other GPU", command="python train.py --model b",
                       step_source="optimizer")
    cmp = compare_reports(before, after)
    text = " | ".join(cmp.program_differences)
    assert "command" in text and "--model a" in text and "--model b" in text
    assert "1 rank(s) vs 2" in text and "Other GPU" in text and "optimizer" in text
    assert any(w.startswith("different programs: ") for w in cmp.warnings)
    same = compare_reports(before, run_report(durations, command="python train.py --model a"))
    assert same.program_differences == []


# --- whole-run step times ----------------------------------------------------------------------------
def write_run_dir(folder: Path, durations_ms: list[float]) -> list[str]:
    folder.mkdir()
    (folder / "meta.json").write_text(json.dumps({"format": "aiprof-run", "command": ["python", "t.py"]}))
    rows = ["step,start_unix_ns,end_unix_ns,wait_ns,batches", "-1,0,5000000000,0,0"]
    t = 5_000_000_000
    for i, d in enumerate(durations_ms):
        rows.append(f"{i},{t},{t + int(d * MS)},0,1")
        t += int(d * MS)
    rows.append("99,12")  # a row cut by a crash: skipped
    (folder / "dataloader.rank0.csv").write_text("\n".join(rows) + "\n")
    trace = folder / "rank0.pt.trace.json.gz"
    trace.write_bytes(b"")
    return [str(trace)]


def test_whole_run_steps_come_from_the_run_directory(tmp_path: Path) -> None:
    durations = [float(x) for x in np.linspace(90, 110, 40)]
    sources = write_run_dir(tmp_path / "a", durations)
    doc = run_report([100 * MS] * 4, sources=sources)
    sample = whole_run_steps(doc)
    assert sample is not None and sample.source == "whole-run"
    assert len(sample.durations_ns) == 40  # step -1 and the cut row left out
    assert sample.durations_ns[0] == 90 * MS
    bare = run_report([100 * MS] * 4)
    assert whole_run_steps(bare) is None
    b, a = step_samples(doc, bare)  # like with like: recorded on both sides
    assert b.source == a.source == "recorded" and len(b.durations_ns) == 4


def test_app_compare_uses_every_step_of_two_run_directories(tmp_path: Path) -> None:
    before = run_report([100 * MS] * 4, sources=write_run_dir(tmp_path / "a", [float(x) for x in np.linspace(90, 110, 40)]))
    after = run_report([100 * MS] * 4, sources=write_run_dir(tmp_path / "b", [float(x) * 1.2 for x in np.linspace(90, 110, 40)]))
    cmp = app.compare(before, after)
    assert cmp.steps_used is not None and cmp.steps_used.source == "whole-run" and cmp.steps_used.before == 40
    assert cmp.step_time_ns.delta_pct == 0.0  # the recorded steps say nothing moved…
    assert cmp.significant and cmp.step_time_change_pct == pytest.approx(20.0, abs=0.5)  # …every step says +20 %
    assert app.slower_than(cmp, 5.0) is not None


def test_recorded_steps_take_the_slowest_rank_per_step() -> None:
    doc = run_report([100 * MS] * 5, ranks=2)
    doc.ranks[1].steps = [step(i, 120 * MS) for i in range(5)]
    assert recorded_steps(doc) == StepSample([120 * MS] * 5, "recorded")


# --- renderers ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["terminal", "md", "html", "json"])
def test_renderers_show_the_interval_and_the_verdict_wording(fmt: str) -> None:
    before = run_report(noisy(30, 100, seed=14, spread=0.2), findings=[finding("host_bound", 8 * MS)], command="python a.py")
    after = run_report(noisy(30, 102, seed=15, spread=0.2), findings=[finding("host_bound", 64 * MS)], command="python b.py")
    cmp = compare_reports(before, after)
    out = render_comparison(cmp, fmt, width=200)
    if fmt == "json":
        doc = json.loads(out)
        assert doc["significant"] is False and len(doc["step_time_ci_pct"]) == 2
        assert doc["steps_used"]["before"] == 30 and doc["findings"]["grew"][0]["after_saving_ns_per_step"] == 64 * MS
        return
    assert "95 % CI" in out and "not significant" in out and "Inconclusive, within the steps' noise" in out
    assert "grew" in out and "8.0 ms → 64.0 ms" in out
    assert "different programs" in out and "a.py" in out


def test_a_run_on_a_shared_machine_is_warned_about() -> None:
    durations = noisy(10, 100, seed=16)
    busy = run_report(durations)
    busy.run_metadata = RunMeta(host=HostInfo(cores_logical=2))
    # machine 90 % of 2 cores, the profiled tree one core (100 % of one core): others ~0.8 cores
    busy.telemetry = RunTelemetry(path="", samples=3, t_unix_ns=[0, 1, 2],
                                  series={"cpu_pct": [90.0, 90.0, None], "proc_cpu_pct": [100.0, 100.0, 100.0]})
    quiet = run_report(durations)
    quiet.run_metadata = RunMeta(host=HostInfo(cores_logical=2))
    quiet.telemetry = RunTelemetry(path="", samples=2, t_unix_ns=[0, 1],
                                   series={"cpu_pct": [52.0, 51.0], "proc_cpu_pct": [100.0, 100.0]})
    warnings = compare_reports(quiet, busy).warnings
    shared = [w for w in warnings if "the machine was shared" in w]
    assert len(shared) == 1 and shared[0].startswith("after:") and "0.8 cores" in shared[0]


def test_a_very_long_run_is_resampled_from_evenly_spaced_steps() -> None:
    from aiprof.report import compare_stats

    before = noisy(compare_stats.MAX_STEPS * 3, 100, seed=17)
    after = [int(d * 1.04) for d in noisy(compare_stats.MAX_STEPS * 3, 100, seed=18)]
    result = median_change(before, after)
    assert result.before_median_ns == float(np.median(before))  # the medians are every step's
    assert result.significant and result.ci_pct is not None and result.ci_pct[0] < 4 < result.ci_pct[1]


def test_a_large_move_the_steps_cannot_confirm_is_not_called_no_change() -> None:
    """−25 % on a few spread-out steps: not significant, so the verdict is inconclusive, and the words
    never say "no change"."""
    before = run_report([100 * MS, 160 * MS, 100 * MS, 170 * MS, 100 * MS, 165 * MS])
    after = run_report([70 * MS, 160 * MS, 70 * MS, 165 * MS, 72 * MS, 75 * MS])
    cmp = compare_reports(before, after)
    assert not cmp.significant and cmp.verdict.result == "inconclusive"
    assert cmp.verdict.text.startswith("Inconclusive, possibly faster, not confirmed") and "No change" not in cmp.verdict.text


# --- several pairs of runs ----------------------------------------------------------------------------
# Two processes of one program differ by more than the steps of either spread: each pair below is two runs
# of one program whose levels differ (a process-level shift), with tight steps inside each run.
SHIFTS = (0.93, 1.08, 0.97, 1.05, 0.99)  # the AFTER process's level against its BEFORE's, no real change


def test_one_pair_cannot_see_the_noise_between_runs_and_pairs_can() -> None:
    pairs = [(noisy(60, 100, seed=30 + i, spread=0.02), noisy(60, 100 * s, seed=40 + i, spread=0.02))
             for i, s in enumerate(SHIFTS)]
    alone = median_change(*pairs[1])
    assert alone.significant and alone.change_pct > 5  # +8 % between two processes reads as a regression
    together = paired_change(pairs)
    assert together.pairs == 5 and together.ci_pct is not None and not together.significant
    lo, hi = together.ci_pct
    assert lo < 0 < hi and lo <= together.change_pct <= hi
    assert [round(c) for c in together.pair_changes_pct] == [round(100 * (s - 1)) for s in SHIFTS]


def test_pairs_that_all_moved_are_significant() -> None:
    pairs = [(noisy(40, 100, seed=50 + i), noisy(40, 100 * s * 1.15, seed=60 + i)) for i, s in enumerate(SHIFTS)]
    result = paired_change(pairs)
    assert result.significant and result.ci_pct is not None and result.ci_pct[0] > 0
    assert 10 < result.change_pct < 20


def test_one_pair_is_the_single_run_statistic() -> None:
    b, a = noisy(30, 100, seed=70), noisy(30, 104, seed=71)
    assert paired_change([(b, a)]) == median_change(b, a)


def test_app_compare_over_pairs_gates_on_the_pairs(tmp_path: Path) -> None:
    def run(name: str, level: float) -> Report:
        return run_report([100 * MS] * 4, sources=write_run_dir(tmp_path / name, [float(x) * level for x in np.linspace(98, 102, 30)]))

    first = (run("b1", 1.0), run("a1", 1.08))
    more = [(run(f"b{i}", 1.0), run(f"a{i}", s)) for i, s in enumerate((0.94, 1.03, 0.98), start=2)]
    single = app.compare(*first)
    failed = app.slower_than(single, 5.0)
    assert failed is not None and "one pair of runs" in failed  # says what it cannot see
    cmp = app.compare(*first, more_pairs=more)
    assert cmp.pairs == 4 and len(cmp.pair_changes_pct) == 4 and not cmp.significant
    assert app.slower_than(cmp, 5.0) is None
    assert "4 pairs of runs" in cmp.verdict.text
    text = render_comparison(cmp, "terminal", width=200)
    assert "4 pairs of runs" in text and "+8.0%" in text
    slower = app.compare(*first, more_pairs=[(b, run(f"s{i}", 1.12)) for i, (b, _) in enumerate(more)])
    failed = app.slower_than(slower, 5.0)
    assert slower.significant and failed is not None and "4 pairs of runs" in failed
    assert "one pair" not in failed


def test_cli_compare_takes_more_pairs(tmp_path: Path) -> None:
    from aiprof.cli import main

    def report_file(name: str, level: float) -> str:
        path = tmp_path / f"{name}.json"
        doc = run_report(noisy(30, 100 * level, seed=int(name[1:]) + (100 if name[0] == "a" else 0), spread=0.01))
        path.write_bytes(msgspec.json.encode(doc))
        return str(path)

    pairs = [(report_file(f"b{i}", 1.0), report_file(f"a{i}", s)) for i, s in enumerate(SHIFTS)]
    args = ["compare", *pairs[0], "--fail-if-slower", "5", "-o", str(tmp_path / "c.json")]
    for b, a in pairs[1:]:
        args += ["--pair", b, a]
    assert main(args) == 0
    assert json.loads((tmp_path / "c.json").read_text())["pairs"] == 5
