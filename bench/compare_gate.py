"""False-alarm and detection rates of ``aiprof compare --fail-if-slower`` (issue 16, "Trust").

Each run is a fresh ``aiprof run`` of a small CPU training loop (the planted workloads' MLP training
step, width 256, one intra-op thread, fixed allocator thresholds as ``aiprof.workloads.isolated`` sets
them), so every comparison sees what a CI job sees: two processes, two run directories, whole-run step
times from the data-loader table (``dataloader.rank0.csv``) and a few recorded steps.

* identical pairs: BEFORE and AFTER run the same command; the gate at ``--threshold`` (5 %) must pass
  (goal: no false alarm in ``--pairs`` pairs);
* planted pairs: AFTER spins (busy CPU work) for ``--slowdown`` (10 %) of each step's own time after
  the step, so every step is that much slower (a sleep would not do: under contention the scheduler
  runs a process that slept ahead of the others, and its compute got faster) (same command line: the slowdown comes through the environment);
  the gate must fail every time.

Each pair's two runs go one after the other (what a CI job does: its load can change in between), or
with ``--side-by-side`` both at once, so both see the same background load and the rates measure the
statistic rather than the machine. Each comparison also says whether a side's telemetry found the
machine shared (``noisy_neighbour``). Prints one line per pair and a summary; ``--json FILE`` writes
every comparison's numbers.

With ``--repeats K`` each comparison rests on K pairs of runs (``aiprof compare B A --pair B A …``):
K interleaved triplets (BEFORE, a second BEFORE, the planted AFTER), so the step-time interval holds the
noise between runs of one program, which one pair cannot see.

    PYTHONPATH=src python bench/compare_gate.py --pairs 20 --steps 40
    PYTHONPATH=src python bench/compare_gate.py --pairs 20 --steps 150 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_SCRIPT = '''
import os, sys, time
import torch
from aiprof.workloads.base import _Threads
from aiprof.workloads.planted import _mlp, _train_step

steps, slow = int(sys.argv[1]), float(os.environ.get("AIPROF_BENCH_SLOWDOWN", "0"))
with _Threads("cpu"):
    torch.manual_seed(0)
    model, opt = _mlp(torch, "cpu", width=256, depth=3)
    x, y = torch.randn(256, 256), torch.randint(0, 10, (256,))
    for _ in range(steps):
        start = time.perf_counter()
        _train_step(torch, model, opt, x, y)
        if slow:  # busy work (not a sleep: a sleeping process is scheduled ahead when it wakes)
            end = time.perf_counter() + slow * (time.perf_counter() - start)
            while time.perf_counter() < end:
                pass
'''
_ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def _start(work: Path, name: str, steps: int, slow: float) -> tuple[Path, subprocess.Popen[str]]:
    out = work / name
    cmd = [
        sys.executable, "-m", "aiprof", "run", "--out", str(out), "--no-summary",
        "--wait", "5", "--warmup", "2", "--active", "5",
        "--", sys.executable, str(work / "loop.py"), str(steps),
    ]
    env = {**_ALLOCATOR_ENV, **os.environ, "AIPROF_BENCH_SLOWDOWN": str(slow)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return out, proc


def _wait(started: tuple[Path, subprocess.Popen[str]]) -> Path:
    out, proc = started
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"aiprof run failed ({proc.returncode}): {err[-2000:]}")
    return out


def _pair(work: Path, names: tuple[str, str], steps: int, slow: float, side_by_side: bool) -> tuple[Path, Path]:
    """BEFORE (no slowdown) and AFTER (``slow``): one after the other, or both at once (side by side:
    both see the same background load)."""
    if side_by_side:
        first, second = _start(work, names[0], steps, 0.0), _start(work, names[1], steps, slow)
        return _wait(first), _wait(second)
    before = _wait(_start(work, names[0], steps, 0.0))
    return before, _wait(_start(work, names[1], steps, slow))


def _compare(before: Path, after: Path, threshold: float,
             more: list[tuple[Path, Path]] | None = None) -> dict[str, Any]:
    from aiprof import app

    cmp = app.compare(before, after, more_pairs=more or [])
    gate = app.slower_than(cmp, threshold)
    used = cmp.steps_used
    return {
        "change_pct": cmp.step_time_change_pct,
        "ci_pct": cmp.step_time_ci_pct,
        "significant": cmp.significant,
        "steps_used": None if used is None else {"before": used.before, "after": used.after, "source": used.source},
        "recorded_median_delta_pct": cmp.step_time_ns.delta_pct,
        "program_differences": cmp.program_differences,
        "shared_machine": any("the machine was shared" in w for w in cmp.warnings),
        "gate_fails": gate is not None,
        "gate_message": gate,
        "verdict": cmp.verdict.text,
        "pairs": cmp.pairs,
        "pair_changes_pct": cmp.pair_changes_pct,
    }


def _triplets(work: Path, i: int, repeats: int, steps: int, slow: float) -> list[tuple[Path, Path, Path]]:
    """``repeats`` times, one after the other: BEFORE, a second BEFORE and the planted AFTER (in reverse
    order every other time, so no side always runs first): the identical comparison takes the two
    BEFOREs of each triplet, the planted one BEFORE and AFTER."""
    out = []
    for j in range(repeats):
        names = [(f"c{i}r{j}b", 0.0), (f"c{i}r{j}same", 0.0), (f"c{i}r{j}slow", slow)]
        done = {name: _wait(_start(work, name, steps, s)) for name, s in (names if j % 2 == 0 else names[::-1])}
        out.append((done[names[0][0]], done[names[1][0]], done[names[2][0]]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200, help="training steps per run")
    parser.add_argument("--threshold", type=float, default=5.0, help="--fail-if-slower PCT")
    parser.add_argument("--slowdown", type=float, default=0.10, help="planted slowdown (fraction of each step)")
    parser.add_argument("--side-by-side", action="store_true",
                        help="run each pair's two runs at the same time (both see the same background load)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="pairs of runs per comparison (interleaved; `aiprof compare B A --pair B A …`); "
                        "1: one pair, as before")
    parser.add_argument("--json", type=Path, help="write every comparison here")
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {"identical": [], "planted": []}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aiprof-gate-") as tmp:
        work = Path(tmp)
        (work / "loop.py").write_text(_SCRIPT)
        for i in range(args.pairs):
            runs = _triplets(work, i, args.repeats, args.steps, args.slowdown) if args.repeats > 1 else []
            for kind, slow in (("identical", 0.0), ("planted", args.slowdown)):
                if runs:
                    pairs = [(b, same if kind == "identical" else slowed) for b, same, slowed in runs]
                    r = _compare(*pairs[0], args.threshold, more=pairs[1:])
                else:
                    before, after = _pair(work, (f"{kind}{i}a", f"{kind}{i}b"), args.steps, slow, args.side_by_side)
                    r = _compare(before, after, args.threshold)
                results[kind].append(r)
                ci = r["ci_pct"]
                ci_text = f"[{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else "n/a"
                print(f"{'comparison' if runs else 'pair'} {i:2d} {kind:9s} change {r['change_pct']:+6.2f}% CI {ci_text:16s} "
                      f"recorded-median {r['recorded_median_delta_pct']:+6.2f}% gate {'FAIL' if r['gate_fails'] else 'pass'}"
                      f"{' (shared machine)' if r['shared_machine'] else ''}", 
                      flush=True)
    ident, plant = results["identical"], results["planted"]
    false_alarms = sum(r["gate_fails"] for r in ident)
    caught = sum(r["gate_fails"] for r in plant)
    def bound(r: dict[str, Any]) -> bool:  # the stricter rule: the interval's lower bound beyond the threshold
        return bool(r["ci_pct"] and r["ci_pct"][0] > args.threshold)

    print(f"lower-bound rule (CI low > {args.threshold:g} %): {sum(map(bound, ident))}/{len(ident)} false alarms, "
          f"{sum(map(bound, plant))}/{len(plant)} caught")
    old_false = sum(r["recorded_median_delta_pct"] > args.threshold for r in ident)
    old_caught = sum(r["recorded_median_delta_pct"] > args.threshold for r in plant)
    print(f"\nidentical pairs: {false_alarms}/{len(ident)} false alarms at {args.threshold:g} % "
          f"(old gate on the recorded median: {old_false}/{len(ident)})")
    print(f"planted +{100 * args.slowdown:g} %: caught {caught}/{len(plant)} "
          f"(old gate: {old_caught}/{len(plant)})")
    for kind, rows in results.items():
        quiet = [r for r in rows if not r["shared_machine"]]
        print(f"{kind}: {len(quiet)}/{len(rows)} pairs without a noisy_neighbour warning; gate failed on "
              f"{sum(r['gate_fails'] for r in quiet)} of them")
    print(f"elapsed {time.monotonic() - started:.0f} s; load average at the end {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
