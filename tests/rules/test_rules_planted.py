"""The planted-bottleneck workloads, run with real PyTorch on the CPU: the planted problem is found, first
among the findings that promise a saving, with evidence that names the planted op, and a saving within a
generous factor of the one measured after applying the fix; the clean baseline shows none of the planted
problems.

The assertions are structural on purpose. These tests run on shared 2-core machines where other processes
take the cores from one second to the next: a share of the step crossing 15 % (``high``) or a saving landing
within 30 % of a measurement are timing, not diagnosis (the ``sync`` test once failed with ``medium`` instead
of ``high`` on a clean ``make test``). Severity levels are not asserted; the saving is checked within a
factor of :data:`FACTOR` either way, over up to :data:`ATTEMPTS` fresh profiles and measurements.

The tests also know when the machine was shared: each profile is a run directory with ``telemetry.csv``
sampled around the profiled process (``_Watch``), so the diagnosis itself reports ``noisy_neighbour`` when
other processes held the cores. A verdict that such load makes meaningless (the order of findings about
host time; a saving measured while others ran) is then skipped with the numbers, never passed silently;
on a quiet machine every assertion applies.

Each variant is profiled and timed alone in a fresh process (``aiprof.workloads.isolated``), as a user's
job runs: in one process, a variant's large allocations change the C allocator's state and the next
variant pays page faults it would not pay alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from aiprof.pipeline import analyze_and_diagnose  # noqa: E402
from aiprof.rules import RuleOptions  # noqa: E402
from aiprof.workloads import WORKLOADS, isolated, profile_workload, profiler_ns_per_op  # noqa: E402

PLANTED = ["data_loading", "host_overhead", "attention", "elementwise", "sync"]
# What the planted finding's evidence must name: the op (or loader, or chain) the workload planted.
PLANTED_OPS: dict[str, tuple[str, ...]] = {
    "data_loading": ("DataLoader",),
    "attention": ("aten::softmax", "aten::_softmax"),
    "elementwise": ("mul", "relu", "clamp"),
    "sync": ("aten::item", "aten::_local_scalar_dense"),
}
LOOP_COLUMNS = 1024  # host_overhead's Python loop: a few tiny ops for each of 1,024 columns per step


def _names_the_planted_op(name: str, evidence: dict[str, Any]) -> bool:
    """The evidence points at what was planted. host_overhead's ops are each tiny, so the top ops by time are
    the model's GEMMs: its evidence is the count of tiny ops (thousands per step, one loop turn per column)."""
    if name == "host_overhead":
        return float(evidence.get("tiny_ops_per_step", 0)) >= LOOP_COLUMNS
    return any(op in json.dumps(evidence) for op in PLANTED_OPS[name])
# Ids a clean MLP step cannot produce whatever the load: no DataLoader, no .item(), no attention, no
# elementwise chain. (host_bound can: on a loaded machine, time the run spends descheduled lies between ops.)
STRUCTURAL_IDS = {"data_loading", "sync", "unfused_attention", "fusion_opportunity"}
FACTOR = 2.0  # the estimate lies within [measured / FACTOR, measured × FACTOR]
ATTEMPTS = 3


@pytest.fixture(scope="module")
def options() -> RuleOptions:
    """Rule options with this machine's measured profiler cost per op."""
    return RuleOptions(profiler_ns_per_op=profiler_ns_per_op())


class _Watch:
    """Samples the machine while this process's children (the profiled or timed workload) run, into
    ``path`` (``telemetry.csv``): the process tree is this process and its descendants, everything else is
    other processes."""

    def __init__(self, path: Path) -> None:
        from aiprof.capture.telemetry import SystemProbe, TelemetrySampler

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # 20 ms: six profiled steps of 50-200 ms must hold the 10 samples a telemetry verdict needs.
        self.sampler = TelemetrySampler(path, [SystemProbe(os.getpid())], interval_s=0.02)

    def __enter__(self) -> _Watch:
        self.sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sampler.stop()

    def others_pct(self) -> float:
        """Mean share of the machine's CPU used outside the process tree (noisy_neighbour's measure)."""
        from aiprof.rules.machine import telemetry_core_count
        from aiprof.rules.telemetry import read_telemetry

        table = read_telemetry(self.path)
        cores = telemetry_core_count(table)
        pairs = [(m, t) for m, t in zip(table.get("cpu_pct", []), table.get("proc_cpu_pct", []))
                 if m == m and t == t][1:]  # NaN-free; the first sample precedes psutil's first interval
        if not pairs or not cores:
            return 0.0
        return sum(max(m - t / cores, 0.0) for m, t in pairs) / len(pairs)


def _profile(name: str, fixed: bool, out: Path, **kw: Any) -> tuple[str, int]:
    """Profile a variant in a fresh process under a :class:`_Watch`, and leave a run directory as
    ``aiprof run`` does (trace, ``telemetry.csv``, ``meta.json``): the diagnosis then says itself whether
    other processes held the cores meanwhile (``noisy_neighbour``)."""
    from aiprof.capture.meta import host_info

    with _Watch(out / "telemetry.csv"):
        trace, cost = isolated.profile_with_cost(name, fixed, str(out), **kw)
    (out / "meta.json").write_text(json.dumps({"format": "aiprof-run", "mode": "run", "host": host_info()}))
    return trace, cost


def _perturbed(findings: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The noisy_neighbour note's evidence when the diagnosis says other processes held the cores."""
    return next((f["evidence"] for f in findings if f["id"] == "noisy_neighbour"), None)


def _diagnose(name: str, fixed: bool, out: Path, options: RuleOptions) -> list[dict[str, Any]]:
    # A fresh process with fixed allocator thresholds: profiled in this long-lived one (CI, after 900
    # tests), the elementwise workload's steps varied enough that step_variance (10.1 ms per step)
    # outranked the planted fusion finding (6.5 ms). The profiler's cost per op is measured there too
    # (see test_estimated_saving_matches_the_measured_fix).
    trace, cost = _profile(name, fixed, out, steps=6, warmup=3)
    _, findings = analyze_and_diagnose([trace], workers=1, options=replace(options, profiler_ns_per_op=cost))
    return findings


def _actionable(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Findings that promise a saving, in rank order (notes and info findings explain, they do not rank)."""
    return [f for f in findings if f["severity"] != "info" and f["est_saving_ns_per_step"] > 0]


def _summary(findings: list[dict[str, Any]]) -> list[tuple[str, str, float]]:
    return [(f["id"], f["severity"], round(f["est_saving_ns_per_step"] / 1e6, 2)) for f in findings]


@pytest.mark.parametrize("name", PLANTED)
def test_planted_problem_is_the_top_finding(name: str, tmp_path: Path, options: RuleOptions) -> None:
    """First among the findings with a saving, naming the planted op — unless the diagnosis itself says
    other processes held the cores while it was profiled (``noisy_neighbour``): the time the run spent
    descheduled then lies between its ops and inside them, and a finding about time outside any op can
    rightly outrank, or swallow, a planted loop of tiny ops. Then the order is not judged, and a planted
    finding that is missing is a skip that says so (never a pass): the measurement was not the workload's."""
    findings = _diagnose(name, False, tmp_path, options)
    expected = WORKLOADS[name].finding_id
    actionable = _actionable(findings)
    noisy = _perturbed(findings)
    top = next((f for f in actionable if f["id"] == expected), None)
    if noisy is not None and (top is None or actionable[0] is not top):
        assert noisy["others_cores"] > 0, noisy
        if top is None:
            pytest.skip(f"{name}: other processes held {noisy['others_cores']} of {noisy['cores']} cores while it "
                        f"was profiled (noisy_neighbour); the diagnosis found {_summary(findings)}")
    else:
        assert actionable and actionable[0]["id"] == expected, _summary(findings)
    assert top is not None
    assert top["fix"] and top["est_saving_ns_per_step"] > 0 and 0 < top["share_of_step"] <= 1
    assert _names_the_planted_op(name, top["evidence"]), (name, top["evidence"])


def test_clean_baseline_shows_no_planted_problem(tmp_path: Path, options: RuleOptions) -> None:
    findings = _diagnose("clean", False, tmp_path, options)
    assert not {f["id"] for f in findings} & STRUCTURAL_IDS, _summary(findings)
    for f in findings:
        if f["id"] == "host_bound":  # time between ops, perhaps; never a loop of tiny ops
            assert f["evidence"].get("tiny_ops_per_step", 0) < 100, f["evidence"]


def test_fix_resolves_the_data_loading_finding(tmp_path: Path, options: RuleOptions) -> None:
    before = _diagnose("data_loading", False, tmp_path / "before", options)
    after = _diagnose("data_loading", True, tmp_path / "after", options)
    saving_before = next(f["est_saving_ns_per_step"] for f in before if f["id"] == "data_loading")
    left = [f for f in after if f["id"] == "data_loading"]
    # Four workers sleep in parallel where one main thread slept: most of the wait is gone (a residue of
    # worker IPC remains under load).
    assert not left or left[0]["est_saving_ns_per_step"] < saving_before / 2, left


@pytest.mark.parametrize("name", PLANTED)
def test_estimated_saving_matches_the_measured_fix(name: str, tmp_path: Path, options: RuleOptions) -> None:
    expected = WORKLOADS[name].finding_id
    attempts: list[tuple[float, float, str]] = []
    for k in range(ATTEMPTS):
        # The profiler's cost per op, subtracted from host-overhead estimates, measured in the profiled
        # process: on a 16k-op sync episode, the fixture's value (taken in this long-lived process)
        # being 30 ns off moves the estimate by 1 ms.
        trace, cost = _profile(name, False, tmp_path / str(k))
        _, findings = analyze_and_diagnose([trace], workers=1, options=replace(options, profiler_ns_per_op=cost))
        estimate = next((f["est_saving_ns_per_step"] for f in findings if f["id"] == expected), 0)
        with _Watch(tmp_path / f"{k}-timing" / "telemetry.csv") as watch:
            before, after = isolated.measure_saving_ns(name)
        measured = before - after
        shared = _perturbed(findings) is not None or watch.others_pct() >= options.noisy_neighbour_pct
        attempts.append((estimate / 1e6, measured / 1e6, "shared machine" if shared else "quiet"))
        if measured > 0 and measured / FACTOR <= estimate <= measured * FACTOR:
            return
    if all(a[2] != "quiet" for a in attempts):
        pytest.skip(f"{name}: other processes held the cores in every attempt (estimate, measured ms): {attempts}")
    pytest.fail(f"{name}: estimate vs measured saving (ms), per attempt: {attempts}")


def _capture(name: str, out: Path) -> Path:
    """Run a workload under aiprof.profile (trace + telemetry.csv in a run directory)."""
    import warnings

    import aiprof
    from aiprof.workloads.base import _Threads

    runner = WORKLOADS[name].build(False, "cpu")
    try:
        with _Threads("cpu"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Samples every 20 ms over 20 recorded steps: telemetry verdicts need 10 samples inside the
            # steady steps, and these steps last ~50 ms (at 50 ms over 12 steps, a run held 11 samples).
            with aiprof.profile(out, schedule=(2, 2, 20), quiet=True, telemetry_interval=0.02) as prof:
                for _ in range(24):
                    runner.step()
                    prof.step()
    finally:
        runner.close()
    return out


def test_cpu_saturation_from_real_telemetry(tmp_path: Path, options: RuleOptions) -> None:
    """CPU-heavy transforms in 2 workers: data loading explained by CPUs the run itself saturates — unless
    other processes held a sizeable part of the cores (this machine is shared), when the run must say the
    timings are perturbed instead of blaming the CPUs; a loader that only waits (sleep, like slow storage)
    does not saturate them. Either way the advice fits a CPU-only run on this host."""
    from aiprof.rules.telemetry import load_run_inputs

    run_dir = _capture("cpu_loading", tmp_path / "cpu")
    _, findings = analyze_and_diagnose([run_dir], workers=1, options=options)
    ids = [f["id"] for f in findings]
    assert _actionable(findings)[0]["id"] == "data_loading", _summary(findings)
    if "noisy_neighbour" in ids:
        assert "cpu_saturation" not in ids, _summary(findings)
    else:
        sat = next((f for f in findings if f["id"] == "cpu_saturation"), None)
        table = load_run_inputs(next(run_dir.glob("*.pt.trace.json*")))["telemetry"]
        seen = {k: [round(v) for v in table[k]] for k in ("cpu_pct", "proc_cpu_pct")}
        assert sat is not None, (_summary(findings), seen)
        assert sat["est_saving_ns_per_step"] == 0 and sat["severity"] == "low"
        assert sat["evidence"]["saturated_sample_share"] >= 0.5 and sat["evidence"]["samples"] >= 10
        assert "GPU" not in sat["fix"] and "CUDA" not in sat["fix"], sat["fix"]
    loader_fix = next(f["fix"] for f in findings if f["id"] == "data_loading")
    assert "pin_memory" not in loader_fix and "non_blocking" not in loader_fix, loader_fix

    quiet_dir = _capture("data_loading", tmp_path / "sleep")
    _, findings = analyze_and_diagnose([quiet_dir], workers=1, options=options)
    telemetry = load_run_inputs(next(quiet_dir.glob("*.pt.trace.json*")))["telemetry"]
    busy = sum(1 for v in telemetry["cpu_pct"] if v >= 90) / len(telemetry["cpu_pct"])
    if busy < 0.5:  # the machine itself was not saturated: nothing can blame the CPUs
        assert "cpu_saturation" not in [f["id"] for f in findings]


def test_evidence_points_at_the_source_line_when_stacks_are_recorded(tmp_path: Path) -> None:
    import inspect

    from aiprof.workloads import planted

    trace = profile_workload("sync", False, tmp_path, steps=3, warmup=1, with_stack=True)
    _, findings = analyze_and_diagnose([trace], workers=1)
    top = findings[0]
    assert top["id"] == "sync"
    # Kineto's python_function events carry the function's first line: the innermost user function
    # around the .item() loop is the workload's step().
    lines, start = inspect.getsourcelines(planted._build_sync)
    step_line = start + next(i for i, text in enumerate(lines) if "def step" in text)
    assert top["evidence"]["source_lines"][0].endswith(f"planted.py({step_line}): step")
