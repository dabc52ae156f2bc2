"""Planted bottlenecks: aiprof's estimated saving against the saving measured after applying the fix.

Moved here from ``tests/rules/test_rules_planted.py`` and ``test_rules_demo.py`` (issue 15, step 5): the
tests keep what cannot flip with machine load (the planted problem is found, its evidence names the planted
op, the clean baseline shows no structural id, the demo runs end to end); every comparison of timings
lives here, with repeats and a median, on a machine whose load is reported alongside.

For each planted workload (``aiprof.workloads.WORKLOADS``) and each repeat:

1. profile the planted variant in a fresh process (``isolated.profile_with_cost``: trace + the profiler's
   cost per op measured in that process), diagnose it, and take the planted finding's
   ``est_saving_ns_per_step`` (the estimate) and its rank among the findings that promise a saving;
2. time both variants alone in fresh processes (``isolated.measure_saving_ns``: median step before and
   after the fix, alternating ``--rounds`` times): measured saving = before - after.

Printed per workload: median estimate, median measured saving, median ratio (estimate / measured), how
many repeats fall within 30 % and within 2x, and the finding order. For ``data_loading`` the fixed variant
is profiled too: the residue (the data_loading saving left after the fix) against the saving before it.
The 1-minute load average is printed per repeat: on a shared machine, timings are the machine's, not the
workload's.

Two more planted classes run the corpus scripts (``tests/corpus/scripts``), each variant in its own process:

- ``leak`` (``leak_train.py``: a validation forward outside ``no_grad`` summed as a tensor): the estimate is
  ``mem_leak``'s ``est_saving_bytes`` (the leaked blocks live at the peak), the measured saving is the peak
  allocated bytes of the leaking run minus the fixed one's (``no_grad`` + ``.item()``), in MiB;
- ``straggler`` (``ddp_straggler.py``: 2-process gloo DDP, rank 1 with extra Python per step): the estimate
  is the saving of the one finding that names rank 1, the measured saving is the slowest rank's median
  step minus the balanced run's (both from the traces), in ms.

Usage:  PYTHONPATH=src python bench/planted_savings.py [--repeats 5] [--rounds 2] [--only sync,attention]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

PLANTED = ["data_loading", "host_overhead", "attention", "elementwise", "sync", "float64", "leak", "straggler"]
SCRIPTS = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "scripts"
SCRIPT_CLASSES = {"leak": "mem_leak", "straggler": "host_gaps"}


@dataclass
class Repeat:
    estimate_ms: float
    measured_ms: float
    rank: int  # 1 = first among the findings with a saving; 0 = not found
    order: list[str]
    load1: float
    residue_ms: float | None = None  # data_loading only: the saving still estimated after the fix
    claimed_ms: float = 0.0  # the finding's replayed claim (docs/whatif.md 'Claims'), else its formula; 0: absent
    step_ms: float = 0.0  # the planted variant's median step, unprofiled (0: not measured)
    trace_step_ms: float = 0.0  # the planted trace's median step (profiled)

    @property
    def ratio(self) -> float:
        return self.estimate_ms / self.measured_ms if self.measured_ms > 0 else float("inf")


@dataclass
class Result:
    name: str
    finding_id: str
    repeats: list[Repeat] = field(default_factory=list)


def _actionable(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Findings that promise a saving, in rank order (as the tests define it)."""
    return [f for f in findings if f["severity"] != "info" and f["est_saving_ns_per_step"] > 0]


def _diagnose(name: str, fixed: bool, out: Path) -> list[dict[str, Any]]:
    return _diagnose_run(name, fixed, out)[0]


def _diagnose_run(name: str, fixed: bool, out: Path) -> tuple[list[dict[str, Any]], float]:
    """The planted (or fixed) variant's findings, as the JSON report holds them, and its trace's median step (ms)."""
    from aiprof.pipeline import analyze_and_diagnose
    from aiprof.rules import RuleOptions
    from aiprof.workloads import isolated

    trace, cost = isolated.profile_with_cost(name, fixed, str(out), steps=6, warmup=3)
    run, findings = analyze_and_diagnose([trace], workers=1, options=replace(RuleOptions(), profiler_ns_per_op=cost))
    step = statistics.median(w.duration_ns for w in run.ranks[0].windows) / 1e6 if run.ranks[0].windows else 0.0
    return [f.to_dict() for f in findings], step


def _saving(findings: list[dict[str, Any]], finding_id: str) -> float:
    return next((f["est_saving_ns_per_step"] for f in findings if f["id"] == finding_id), 0) / 1e6


def _claimed(findings: list[dict[str, Any]], finding_id: str) -> float:
    """The saving ``finding_id`` is ranked by: its claim where its fix was replayed, else its formula (ms)."""
    found = next((f for f in findings if f["id"] == finding_id), None)
    if found is None:
        return 0.0
    claim = found["evidence"].get("claimed_saving_ns_per_step")
    return (claim if isinstance(claim, int) else found["est_saving_ns_per_step"]) / 1e6


def run_one(name: str, rounds: int, tmp: Path) -> Repeat:
    from aiprof.workloads import WORKLOADS, isolated

    expected = WORKLOADS[name].finding_id
    findings, trace_step = _diagnose_run(name, False, tmp / "before")
    actionable = _actionable(findings)
    ids = [f["id"] for f in actionable]
    before, after = isolated.measure_saving_ns(name, rounds=rounds)
    rep = Repeat(
        estimate_ms=_saving(findings, expected),
        measured_ms=(before - after) / 1e6,
        rank=ids.index(expected) + 1 if expected in ids else 0,
        order=[f"{f['id']}:{f['est_saving_ns_per_step'] / 1e6:.1f}" for f in actionable[:4]],
        load1=os.getloadavg()[0],
        claimed_ms=_claimed(findings, expected),
        step_ms=before / 1e6,
        trace_step_ms=trace_step,
    )
    if name == "data_loading":
        rep.residue_ms = _saving(_diagnose(name, True, tmp / "after"), expected)
    return rep


def _script(name: str, out: Path, *args: str) -> Path:
    import subprocess

    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(SCRIPTS / name), str(out), *args], check=True, capture_output=True, env=env)
    (out / "store").unlink(missing_ok=True)
    return out


def _peak_mib(path: Path) -> float:
    from aiprof.memory import analyze_memory, load_memory

    return max(d.peak_allocated_bytes for d in analyze_memory(load_memory(path)).devices) / 2**20


def _slowest_median_ms(run: Any) -> float:
    return max(statistics.median(s.duration_ns for s in r.primary.steps) for r in run.ranks) / 1e6


def run_script_class(name: str, tmp: Path) -> Repeat:
    """One repeat of ``leak`` or ``straggler`` (see the module docstring)."""
    from aiprof.pipeline import analyze_and_diagnose

    expected = SCRIPT_CLASSES[name]
    if name == "leak":
        before = _script("leak_train.py", tmp / "before") / "trace.json"
        after = _script("leak_train.py", tmp / "after", "fixed") / "trace.json"
        _, findings = analyze_and_diagnose([before], workers=1)
        findings = [f.to_dict() for f in findings]  # as the JSON report holds them
        found = next((f for f in findings if f["id"] == expected), None)
        estimate = (found["evidence"]["est_saving_bytes"] / 2**20) if found else 0.0
        measured = _peak_mib(before) - _peak_mib(after)
    else:
        run, findings = analyze_and_diagnose([_script("ddp_straggler.py", tmp / "before")], workers=1)
        findings = [f.to_dict() for f in findings]  # as the JSON report holds them
        fixed, _ = analyze_and_diagnose([_script("ddp_straggler.py", tmp / "after", "balanced")], workers=1)
        found = next((f for f in findings if f["id"] == expected and f["ranks"] == [1]), None)
        estimate = found["est_saving_ns_per_step"] / 1e6 if found else 0.0
        measured = _slowest_median_ms(run) - _slowest_median_ms(fixed)
    ids = [f["id"] for f in findings if f["severity"] != "info"]
    return Repeat(estimate, measured, ids.index(expected) + 1 if expected in ids else 0, ids[:4], os.getloadavg()[0])


def _within(rep: Repeat, factor: float) -> bool:
    return rep.measured_ms > 0 and rep.measured_ms / factor <= rep.estimate_ms <= rep.measured_ms * factor


def report(results: list[Result]) -> str:
    lines = [
        "| planted | finding | estimate ms (median) | measured ms (median) | ratio (median) | within 30 % | within 2x "
        "| first finding | load avg |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        reps = r.repeats
        n = len(reps)
        lines.append(
            f"| {r.name}{' (MiB, not ms)' if r.name == 'leak' else ''} | {r.finding_id} "
            f"| {statistics.median(x.estimate_ms for x in reps):.2f} "
            f"| {statistics.median(x.measured_ms for x in reps):.2f} | {statistics.median(x.ratio for x in reps):.2f} "
            f"| {sum(abs(x.ratio - 1) <= 0.3 for x in reps)}/{n} | {sum(_within(x, 2.0) for x in reps)}/{n} "
            f"| {sum(x.rank == 1 for x in reps)}/{n} | {statistics.median(x.load1 for x in reps):.1f} |"
        )
    lines.append("")
    for r in results:
        for k, x in enumerate(r.repeats):
            extra = ""
            if x.residue_ms is not None:
                saving = x.estimate_ms
                extra = f"; after the fix {x.residue_ms:.2f} ms left ({'under' if x.residue_ms < saving / 2 else 'NOT under'} half)"
            lines.append(f"- {r.name} #{k + 1}: estimate {x.estimate_ms:.2f} ms, measured {x.measured_ms:.2f} ms, "
                         f"ratio {x.ratio:.2f}, rank {x.rank or 'missing'}, order {x.order}{extra}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="alternating before/after timing rounds per repeat")
    parser.add_argument("--only", default=",".join(PLANTED))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    import aiprof.workloads  # noqa: F401  (torch; fails early when it is missing)
    from aiprof.workloads import WORKLOADS

    results = []
    with tempfile.TemporaryDirectory(prefix="aiprof-planted-") as tmp:
        for name in args.only.split(","):
            scripted = name in SCRIPT_CLASSES
            result = Result(name, SCRIPT_CLASSES[name] if scripted else WORKLOADS[name].finding_id)
            for k in range(args.repeats):
                where = Path(tmp) / f"{name}-{k}"
                result.repeats.append(run_script_class(name, where) if scripted else run_one(name, args.rounds, where))
                print(f"{name} #{k + 1}: {asdict(result.repeats[-1])}", file=sys.stderr, flush=True)
            results.append(result)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
