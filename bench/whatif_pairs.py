"""What-if proof on real before/after pairs: the saving each planted trace promises (its finding's replayed
claim, else its formula) against the saving its fix measured, per pair, and Kendall's tau of the two orders.

**H200 pairs** (deterministic: the traces of ``tests/gpu/fixtures/h200``, recorded once by
``bench/gpu_record.py``): for every planted workload ``expected.json`` holds the median step of the planted and
the fixed variant measured *without* the profiler (``measured_saving_ns``) and names the finding the fix
answers (``finding_id``; none for ``clean``, whose "fix" changes nothing). Per pair:

- ``promised``: what the planted trace's finding promises for an unprofiled run. A replayed claim
  (``claimed_saving_ns_per_step``, docs/whatif.md 'Claims') is a saving of the trace's own, profiled step, and
  the profiler slows host work 0.95-2.5x on these traces (8,192 ``.item()`` calls: 196 ms profiled, 94 ms
  without), so it is taken as a share of the trace's median step times the unprofiled planted step; a formula
  saving of device time (``fusion_opportunity``, ``unfused_attention``; the profiler does not slow the device)
  is taken in ns; no such finding promises 0.
- ``profiled``: the same pair under the profiler, from the two traces (planted − fixed median step): what the
  replay itself models. On host-bound pairs under the profiler the fix's gain can vanish (the compiled
  elementwise chain: 1 µs) where it is real without it (31 µs).
- ``rank``: the place of the finding among the planted trace's findings that promise time (1 = first).

Kendall's tau-b over the pairs, promised against measured. ``tests/gpu/test_h200_fixtures.py`` asserts the
deterministic facts recorded in bench/RESULTS.md (tau, each replayed pair's error) on these traces.

**CPU pairs** (``--cpu``: live, slow, machine-dependent): ``bench/planted_savings.py``'s planted workloads,
each profiled in a fresh process and its fix measured unprofiled (``run_one``); the promised saving is the
finding's claim where it has one (in the profiled trace's ns: no unprofiled step to scale by is measured
there), else its formula.

Run:  PYTHONPATH=src python bench/whatif_pairs.py [--json out.json] [--cpu [--repeats 1] [--only sync,...]]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "gpu" / "fixtures" / "h200"


@dataclass
class Pair:
    name: str  # the planted workload
    finding_id: str  # the finding its fix answers ("" for clean)
    how: str  # claimed | formula | absent
    promised_ns: float  # for an unprofiled run (module doc)
    measured_ns: int  # planted - fixed median step, unprofiled
    claimed_ns: int | None  # the claim on the profiled trace, as the report gives it
    trace_step_ns: int  # the planted trace's median step (profiled)
    profiled_ns: int  # planted - fixed median step of the two traces
    step_ns: int  # the planted median step, unprofiled
    rank: int  # 1 = first finding that promises time; 0 = absent

    @property
    def error_of_step(self) -> float:
        """(promised - measured) / the planted step: the error of the predicted step after the fix, as a share
        of the step before it."""
        return (self.promised_ns - self.measured_ns) / self.step_ns


def _diagnose(path: Path) -> tuple[Any, list[Any]]:
    sys.path.insert(0, str(ROOT / "tests"))
    from golden.shared_reports import no_measured_peaks

    from aiprof.pipeline import analyze_and_diagnose

    with no_measured_peaks():
        return analyze_and_diagnose([path], workers=1)


def _median_step(run: Any) -> int:
    return int(statistics.median(w.duration_ns for w in run.ranks[0].windows))


def promised(run: Any, findings: list[Any], finding_id: str, unprofiled_step_ns: int) -> tuple[float, str, int | None]:
    """(promised ns, how, the claim on the trace) for ``finding_id`` (module doc)."""
    from aiprof.analysis.whatif.results import FixPrediction

    finding = next((f for f in findings if f.id == finding_id), None) if finding_id else None
    if finding is None:
        return 0.0, "absent", None
    fix = FixPrediction.of(finding.evidence)
    if fix is None or fix.claimed_saving_ns_per_step is None:
        return float(finding.est_saving_ns_per_step), "formula", None
    claim = fix.claimed_saving_ns_per_step
    return claim / _median_step(run) * unprofiled_step_ns, "claimed", claim


def h200_pairs(fixtures: Path = FIXTURES) -> list[Pair]:
    """Every planted pair of the H200 fixtures, in name order."""
    from aiprof.rules.registry import ranking_saving_ns

    cases = json.loads((fixtures / "expected.json").read_text())["cases"]
    pairs = []
    for key in sorted(k for k in cases if k.startswith("planted-")):
        case = cases[key]
        run, findings = _diagnose(fixtures / f"{key}.pt.trace.json.gz")
        fixed_run, _ = _diagnose(fixtures / f"{key}-fixed.pt.trace.json.gz")
        finding_id = case["finding_id"]
        value, how, claim = promised(run, findings, finding_id, case["step_ns_planted"])
        timed = [f.id for f in findings if f.severity != "info" and ranking_saving_ns(f) > 0]
        pairs.append(Pair(
            name=key.removeprefix("planted-"), finding_id=finding_id, how=how, promised_ns=value,
            measured_ns=int(case["measured_saving_ns"]), claimed_ns=claim, trace_step_ns=_median_step(run),
            profiled_ns=_median_step(run) - _median_step(fixed_run), step_ns=int(case["step_ns_planted"]),
            rank=timed.index(finding_id) + 1 if finding_id in timed else 0))
    return pairs


def kendall_tau_b(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b of two equally long sequences (ties in either count as neither agreement nor
    disagreement; the denominator corrects for them). 1: the same order; -1: the reverse."""
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    n0 = concordant + discordant
    denominator = ((n0 + ties_x) * (n0 + ties_y)) ** 0.5
    return (concordant - discordant) / denominator if denominator else 0.0


def h200_report(pairs: list[Pair]) -> str:
    lines = ["| pair | finding | how | promised ms | measured ms | ratio | error (of step) | claim on the trace ms "
             "(trace step) | profiled pair ms | rank |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in pairs:
        ratio = f"{p.promised_ns / p.measured_ns:.2f}" if p.measured_ns > 0 else "-"
        claim = f"{p.claimed_ns / 1e6:.3f} ({p.trace_step_ns / 1e6:.3f})" if p.claimed_ns is not None else "-"
        lines.append(f"| {p.name} | {p.finding_id or '-'} | {p.how} | {p.promised_ns / 1e6:.3f} | "
                     f"{p.measured_ns / 1e6:.3f} | {ratio} | {p.error_of_step:+.1%} | {claim} | "
                     f"{p.profiled_ns / 1e6:.3f} | {p.rank or '-'} |")
    tau = kendall_tau_b([p.promised_ns for p in pairs], [float(p.measured_ns) for p in pairs])
    replayed = [abs(p.error_of_step) for p in pairs if p.how == "claimed"]
    lines.append("")
    lines.append(f"Kendall tau-b (promised vs measured, {len(pairs)} pairs): {tau:.3f}")
    if replayed:
        lines.append(f"replayed pairs ({len(replayed)}): |error| of step median {statistics.median(replayed):.1%}, "
                     f"worst {max(replayed):.1%}")
    return "\n".join(lines)


def cpu_pairs(names: list[str], repeats: int, rounds: int) -> list[dict[str, Any]]:
    """Live CPU pairs through ``bench/planted_savings.py``'s ``run_one`` (module doc)."""
    spec = importlib.util.spec_from_file_location("planted_savings", ROOT / "bench" / "planted_savings.py")
    assert spec is not None and spec.loader is not None
    planted = importlib.util.module_from_spec(spec)
    sys.modules["planted_savings"] = planted  # its dataclasses look their module up there
    spec.loader.exec_module(planted)
    out = []
    for name in names:
        for i in range(repeats):
            with tempfile.TemporaryDirectory() as tmp:
                rep = planted.run_one(name, rounds, Path(tmp))
            row = {"name": name, "repeat": i + 1, **asdict(rep)}
            print(f"cpu {name} #{i + 1}: promised {rep.claimed_ms:.2f} ms (formula {rep.estimate_ms:.2f}), measured "
                  f"{rep.measured_ms:.2f} ms, rank {rep.rank}, order {rep.order}, load {rep.load1:.1f}", flush=True)
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--cpu", action="store_true", help="also the live CPU planted pairs (slow)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="data_loading,host_overhead,sync,elementwise,attention")
    args = parser.parse_args(argv)
    pairs = h200_pairs()
    print(h200_report(pairs), flush=True)
    doc: dict[str, Any] = {"h200": [asdict(p) for p in pairs]}
    if args.cpu:
        cpu = cpu_pairs(args.only.split(","), args.repeats, args.rounds)
        doc["cpu"] = cpu
        x = [r["claimed_ms"] for r in cpu]
        y = [r["measured_ms"] for r in cpu]
        print(f"CPU Kendall tau-b ({len(cpu)} pairs): {kendall_tau_b(x, y):.3f}")
        both_x = [p.promised_ns / 1e6 for p in pairs] + x
        both_y = [p.measured_ns / 1e6 for p in pairs] + y
        print(f"H200 + CPU Kendall tau-b ({len(both_x)} pairs): {kendall_tau_b(both_x, both_y):.3f}")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
