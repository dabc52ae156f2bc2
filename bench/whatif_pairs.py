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
finding's claim where it has one, else its formula, as a share of the trace's median step times the
unprofiled planted step (on a CPU every saving is host time, which the profiler slows).

**gloo pairs** (``--gloo``: live): ``tests/corpus/scripts/ddp_straggler.py``, two processes of real
``torch.distributed`` gloo DDP on the CPU, rank 1 with a planted straggler (``python``: a Python loop;
``compute``: matrix products) and its fix (``balanced``: no extra work). Both variants are profiled (the script
records both ranks), so the pair is profiled against profiled: measured = the planted run's step − the
balanced run's, a run's step being per step the slowest rank's, median over the steps (what the joined replay
predicts: docs/whatif.md 'Ranks together'); promised = the claim of the finding that explains rank 1
(``host_gaps`` for Python, ``straggler`` for compute), else its formula.

All pairs together: median and worst |error| of the step after the fix, and Kendall's tau-b.

Run:  PYTHONPATH=src python bench/whatif_pairs.py [--json out.json] [--cpu [--repeats 1] [--only sync,...]]
      [--gloo [--gloo-repeats 3]]
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


@dataclass
class LivePair:
    """A pair measured here (CPU workloads, gloo DDP): as :class:`Pair`, with the machine's load."""

    name: str
    finding_id: str
    how: str  # claimed | formula | absent
    promised_ns: float
    measured_ns: float
    step_ns: float  # the planted step the error is a share of
    rank: int
    load1: float

    @property
    def error_of_step(self) -> float:
        return (self.promised_ns - self.measured_ns) / self.step_ns if self.step_ns else 0.0


def _run_step_ns(run: Any) -> float:
    """A run's step: per step index the slowest rank's, median over the steps (ranks cut to the shortest)."""
    steps = [[w.duration_ns for w in r.windows] for r in run.ranks]
    count = min(len(s) for s in steps)
    return float(statistics.median(max(s[i] for s in steps) for i in range(count)))


def gloo_pair(mode: str, tmp: Path) -> LivePair:
    """One repeat of a gloo straggler pair (module doc)."""
    import os
    import subprocess

    from aiprof.pipeline import analyze_and_diagnose
    from aiprof.rules.registry import ranking_saving_ns

    from aiprof.analysis.whatif.results import FixPrediction

    script = ROOT / "tests" / "corpus" / "scripts" / "ddp_straggler.py"
    folders = {}
    for variant in (mode, "balanced"):
        out = tmp / variant
        subprocess.run([sys.executable, str(script), str(out), variant], check=True, capture_output=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
        (out / "store").unlink(missing_ok=True)
        folders[variant] = out
    run, findings = analyze_and_diagnose([folders[mode]], workers=1)
    fixed, _ = analyze_and_diagnose([folders["balanced"]], workers=1)
    step = _run_step_ns(run)
    # The finding that explains rank 1: its own (the straggler rule hands it the wait), else the straggler's.
    found = next((f for f in findings if f.ranks == (1,) and "straggler" in f.evidence), None)
    found = found or next((f for f in findings if f.id == "straggler"), None)
    timed = [f.id for f in findings if f.severity != "info" and ranking_saving_ns(f) > 0]
    ranked = ""
    if found is None:
        promise, how, fid = 0.0, "absent", ""
    else:
        fix = FixPrediction.of(found.evidence)
        ranked = found.id
        if fix is not None and fix.claimed_by:  # one cause: its lead claims (and is ranked by) both fixes' time
            ranked = fix.claimed_by
            fix = FixPrediction.of(next(f for f in findings if f.id == ranked).evidence)
        claimed = fix is not None and fix.claimed_saving_ns_per_step is not None
        promise = float(fix.claimed_saving_ns_per_step if claimed and fix else found.est_saving_ns_per_step)
        how, fid = ("claimed" if claimed else "formula"), found.id if ranked == found.id else f"{found.id} ({ranked})"
    return LivePair(f"gloo_{mode}", fid, how, promise, step - _run_step_ns(fixed), step,
                    timed.index(ranked) + 1 if ranked in timed else 0, os.getloadavg()[0])


def gloo_pairs(modes: list[str], repeats: int) -> list[LivePair]:
    out = []
    for mode in modes:
        for i in range(repeats):
            with tempfile.TemporaryDirectory() as tmp:
                pair = gloo_pair(mode, Path(tmp))
            print(f"gloo {mode} #{i + 1}: {pair.finding_id or '-'} {pair.how} promised {pair.promised_ns / 1e6:.2f} ms, "
                  f"measured {pair.measured_ns / 1e6:.2f} ms of a {pair.step_ns / 1e6:.2f} ms step "
                  f"(error {pair.error_of_step:+.1%}), load {pair.load1:.1f}", flush=True)
            out.append(pair)
    return out


def cpu_live(rows: list[dict[str, Any]]) -> list[LivePair]:
    """The CPU pairs as :class:`LivePair` (module doc: the promise scaled to the unprofiled step)."""
    from aiprof.workloads import WORKLOADS

    out = []
    for r in rows:
        scale = r["step_ms"] / r["trace_step_ms"] if r["trace_step_ms"] else 1.0
        how = "absent" if r["rank"] == 0 and r["claimed_ms"] == 0 else (
            "claimed" if r["claimed_ms"] != r["estimate_ms"] else "formula")
        out.append(LivePair(r["name"], WORKLOADS[r["name"]].finding_id, how, r["claimed_ms"] * scale * 1e6,
                            r["measured_ms"] * 1e6, r["step_ms"] * 1e6, r["rank"], r["load1"]))
    return out


def summary(pairs: list[Any], label: str) -> str:
    """Median and worst |error| of the step after the fix, and Kendall's tau-b, over ``pairs``."""
    errors = [abs(p.error_of_step) for p in pairs]
    tau = kendall_tau_b([p.promised_ns for p in pairs], [float(p.measured_ns) for p in pairs])
    return (f"{label} ({len(pairs)} pairs): |error| of step median {statistics.median(errors):.1%}, worst "
            f"{max(errors):.1%} ({max(pairs, key=lambda p: abs(p.error_of_step)).name}); Kendall tau-b {tau:.3f}")


def live_report(pairs: list[LivePair]) -> str:
    lines = ["| pair | finding | how | promised ms | measured ms | step ms | error (of step) | rank | load |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for p in pairs:
        lines.append(f"| {p.name} | {p.finding_id or '-'} | {p.how} | {p.promised_ns / 1e6:.2f} | "
                     f"{p.measured_ns / 1e6:.2f} | {p.step_ns / 1e6:.2f} | {p.error_of_step:+.1%} | {p.rank or '-'} "
                     f"| {p.load1:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--cpu", action="store_true", help="also the live CPU planted pairs (slow)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="data_loading,host_overhead,sync,elementwise,attention,float64")
    parser.add_argument("--gloo", action="store_true", help="also the live 2-rank gloo DDP straggler pairs")
    parser.add_argument("--gloo-repeats", type=int, default=3)
    args = parser.parse_args(argv)
    pairs = h200_pairs()
    print(h200_report(pairs), flush=True)
    doc: dict[str, Any] = {"h200": [asdict(p) for p in pairs]}
    every: list[Any] = list(pairs)
    live: list[LivePair] = []
    if args.cpu:
        cpu = cpu_pairs(args.only.split(","), args.repeats, args.rounds)
        doc["cpu"] = cpu
        live += cpu_live(cpu)
    if args.gloo:
        gloo = gloo_pairs(["python", "compute"], args.gloo_repeats)
        doc["gloo"] = [asdict(p) for p in gloo]
        live += gloo
    if live:
        print(live_report(live))
        print(summary(live, "live pairs"))
        every += live
    print(summary(every, "all pairs"))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
