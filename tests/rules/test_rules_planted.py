"""The planted-bottleneck workloads, run with real PyTorch on the CPU: the planted problem is found, with
evidence that names the planted op and a fix that promises a saving; the clean baseline shows none of the
planted problems.

Only structural assertions live here: these tests run on shared 2-core machines where other processes take
the cores from one second to the next, and a verdict that depends on timing (a share of the step crossing
15 %, the order of findings about host time, an estimate within 30 % or 2x of a measured saving, the
residue left after a fix) flips with the load. Those comparisons are measured, with repeats and medians,
in ``bench/planted_savings.py`` (results in ``bench/RESULTS.md``).

Each profile is a run directory with ``telemetry.csv`` sampled around the profiled process (``_Watch``), so
the diagnosis itself reports ``noisy_neighbour`` when other processes held the cores: a planted finding
that is then missing is a skip that says so, never a pass.

Each variant is profiled alone in a fresh process (``aiprof.workloads.isolated``), as a user's job runs:
in one process, a variant's large allocations change the C allocator's state and the next variant pays
page faults it would not pay alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest

torch = pytest.importorskip("torch")

from aiprof.pipeline import analyze_and_diagnose  # noqa: E402
from aiprof.rules import RuleOptions  # noqa: E402
from aiprof.workloads import WORKLOADS, isolated, profile_workload, profiler_ns_per_op  # noqa: E402

PLANTED = ["data_loading", "host_overhead", "attention", "elementwise", "sync", "float64"]
# What the planted finding's evidence must name: the op (or loader, or chain) the workload planted.
PLANTED_OPS: dict[str, tuple[str, ...]] = {
    "data_loading": ("DataLoader",),
    "attention": ("aten::softmax", "aten::_softmax"),
    "elementwise": ("mul", "relu", "clamp"),
    "sync": ("aten::item", "aten::_local_scalar_dense"),
    "float64": ("aten::addmm", "aten::mm"),
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
HOST_IDS = {"host_bound", "host_gaps", "host_stall", "launch_bound"}  # the host starves the device, by gap shape
STRUCTURAL_IDS = {"data_loading", "sync", "unfused_attention", "fusion_opportunity", "precision"}


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


def _profile(name: str, fixed: bool, out: Path, **kw: Any) -> tuple[str, int]:
    """Profile a variant in a fresh process under a :class:`_Watch`, and leave a run directory as
    ``aiprof run`` does (trace, ``telemetry.csv``, ``meta.json``): the diagnosis then says itself whether
    other processes held the cores meanwhile (``noisy_neighbour``)."""
    from aiprof.capture.meta import host_info

    with _Watch(out / "telemetry.csv"):
        trace, cost = isolated.profile_with_cost(name, fixed, str(out), **kw)
    (out / "meta.json").write_text(json.dumps({"format": "aiprof-run", "mode": "run", "host": msgspec.to_builtins(host_info())}))
    return trace, cost


def _perturbed(findings: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The noisy_neighbour note's evidence when the diagnosis says other processes held the cores."""
    return next((f["evidence"] for f in findings if f["id"] == "noisy_neighbour"), None)


def _diagnose(name: str, fixed: bool, out: Path, options: RuleOptions) -> list[dict[str, Any]]:
    # A fresh process with fixed allocator thresholds: profiled in this long-lived one (CI, after 900
    # tests), the elementwise workload's steps varied enough that step_variance (10.1 ms per step)
    # outranked the planted fusion finding (6.5 ms). The profiler's cost per op, subtracted from
    # host-overhead estimates, is measured there too, in the profiled process.
    trace, cost = _profile(name, fixed, out, steps=6, warmup=3)
    _, findings = analyze_and_diagnose([trace], workers=1, options=replace(options, profiler_ns_per_op=cost))
    findings = [f.to_dict() for f in findings]  # as the JSON report holds them
    return findings


def _actionable(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Findings that promise a saving, in rank order (notes and info findings explain, they do not rank)."""
    return [f for f in findings if f["severity"] != "info" and f["est_saving_ns_per_step"] > 0]


def _summary(findings: list[dict[str, Any]]) -> list[tuple[str, str, float]]:
    return [(f["id"], f["severity"], round(f["est_saving_ns_per_step"] / 1e6, 2)) for f in findings]


@pytest.mark.parametrize("name", PLANTED)
def test_planted_problem_is_found_naming_the_planted_op(name: str, tmp_path: Path, options: RuleOptions) -> None:
    """The planted finding is reported, promises a saving with a fix, and its evidence names the planted op.
    Its rank among the findings is timing (on a loaded machine, time spent descheduled lies between ops and
    a host_bound finding can outrank a planted loop of tiny ops): bench/planted_savings.py reports the order.
    A planted finding missing while the diagnosis itself says other processes held the cores
    (``noisy_neighbour``) is a skip with the findings, never a pass: the measurement was not the workload's."""
    findings = _diagnose(name, False, tmp_path, options)
    expected = WORKLOADS[name].finding_id
    found = next((f for f in findings if f["id"] == expected), None)
    if found is None and name == "host_overhead":
        # Under load, time descheduled between the tiny ops is a gap (host_gaps), and whether the ops' own
        # time still crosses host_bound's threshold is timing; that the host is what starves the step is not.
        found = next((f for f in findings if f["id"] in HOST_IDS), None)
    noisy = _perturbed(findings)
    if found is None and noisy is not None:
        pytest.skip(f"{name}: other processes held {noisy['others_cores']} of {noisy['cores']} cores while it "
                    f"was profiled (noisy_neighbour); the diagnosis found {_summary(findings)}")
    assert found is not None, _summary(findings)
    assert found["fix"] and found["est_saving_ns_per_step"] > 0 and 0 < found["share_of_step"] <= 1
    if found["id"] == expected:
        assert _names_the_planted_op(name, found["evidence"]), (name, found["evidence"])


def test_clean_baseline_shows_no_planted_problem(tmp_path: Path, options: RuleOptions) -> None:
    findings = _diagnose("clean", False, tmp_path, options)
    assert not {f["id"] for f in findings} & STRUCTURAL_IDS, _summary(findings)
    for f in findings:
        if f["id"] == "host_bound":  # time between ops, perhaps; never a loop of tiny ops
            assert f["evidence"].get("tiny_ops_per_step", 0) < 100, f["evidence"]


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
    from aiprof.rules.context import load_run_inputs

    run_dir = _capture("cpu_loading", tmp_path / "cpu")
    _, findings = analyze_and_diagnose([run_dir], workers=1, options=options)
    findings = [f.to_dict() for f in findings]  # as the JSON report holds them
    ids = [f["id"] for f in findings]
    assert "data_loading" in [f["id"] for f in _actionable(findings)], _summary(findings)  # its rank is timing
    if "noisy_neighbour" in ids:
        assert "cpu_saturation" not in ids, _summary(findings)
    else:
        sat = next((f for f in findings if f["id"] == "cpu_saturation"), None)
        table = load_run_inputs(next(run_dir.glob("*.pt.trace.json*"))).telemetry
        seen = {k: [round(v) for v in table[k]] for k in ("cpu_pct", "proc_cpu_pct")}
        assert sat is not None, (_summary(findings), seen)
        assert sat["est_saving_ns_per_step"] == 0 and sat["severity"] == "low"
        assert sat["evidence"]["saturated_sample_share"] >= 0.5 and sat["evidence"]["samples"] >= 10
        assert "GPU" not in sat["fix"] and "CUDA" not in sat["fix"], sat["fix"]
    loader_fix = next(f["fix"] for f in findings if f["id"] == "data_loading")
    assert "pin_memory" not in loader_fix and "non_blocking" not in loader_fix, loader_fix

    quiet_dir = _capture("data_loading", tmp_path / "sleep")
    _, findings = analyze_and_diagnose([quiet_dir], workers=1, options=options)
    findings = [f.to_dict() for f in findings]  # as the JSON report holds them
    telemetry = load_run_inputs(next(quiet_dir.glob("*.pt.trace.json*"))).telemetry
    busy = sum(1 for v in telemetry["cpu_pct"] if v >= 90) / len(telemetry["cpu_pct"])
    if busy < 0.5:  # the machine itself was not saturated: nothing can blame the CPUs
        assert "cpu_saturation" not in [f["id"] for f in findings]


def test_evidence_points_at_the_source_line_when_stacks_are_recorded(tmp_path: Path) -> None:
    import inspect

    from aiprof.workloads import planted

    trace = profile_workload("sync", False, tmp_path, steps=3, warmup=1, with_stack=True)
    _, findings = analyze_and_diagnose([trace], workers=1)
    findings = [f.to_dict() for f in findings]  # as the JSON report holds them
    top = next((f for f in findings if f["id"] == "sync"), None)  # found; its rank is timing (bench/)
    assert top is not None, _summary(findings)
    # Kineto's python_function events carry the function's first line: the innermost user function
    # around the .item() loop is the workload's step().
    lines, start = inspect.getsourcelines(planted._build_sync)
    step_line = start + next(i for i, text in enumerate(lines) if "def step" in text)
    assert top["evidence"]["source_lines"][0].endswith(f"planted.py({step_line}): step")
