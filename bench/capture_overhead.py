"""Capture overhead: ``aiprof run`` against bare ``torch.profiler`` at the same settings, and against no
profiling, on a CPU training workload (the small transformer of examples/train_tiny.py).

Two measurements, each a fresh process per run, the three modes interleaved (none, torch, aiprof,
none, ...) so that load on a shared machine hits them alike, ``--repeat`` times:

1. **Recorded steps.** A schedule that records many steps (wait 5, warmup 2, active 20); the median
   time of the recorded steps, aiprof vs bare torch.profiler. Both start the profiler after the first
   step, as ``aiprof run`` does, so the same iterations are recorded. Target: aiprof ≤ +3 %.
2. **Whole run, default schedule.** ``--steps`` steps (default 150) with aiprof's default schedule; the
   training loop's total time vs unprofiled. Target: ≤ +2 %. End-to-end process wall time (torch
   import, aiprof's start-up, trace export and telemetry merge) is reported too.

The workload measures its own step times (perf_counter at each iteration) and writes them to JSON;
``aiprof run`` leaves the script untouched. Run:  python bench/capture_overhead.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DEFAULT = {"wait": 5, "warmup": 2, "active": 4, "repeat": 1}  # aiprof's default (capture/options.py)
MANY = {"wait": 5, "warmup": 2, "active": 20, "repeat": 1}


# --- the workload (runs in the measured process) ------------------------------------------------
def worker(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    import torch
    from train_tiny import RandomTokens, TinyLM
    from torch import nn
    from torch.utils.data import DataLoader

    torch.manual_seed(0)
    seq, vocab, batch = 64, 1000, 16
    loader = DataLoader(RandomTokens(args.steps * batch, seq, vocab), batch_size=batch, drop_last=True)
    model = TinyLM(vocab, 128, 4, 2, seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    prof: Any = None
    times: list[float] = []
    cpu: list[float] = []
    t_prev = time.perf_counter()
    c_prev = time.thread_time()
    for i, (tokens, targets) in enumerate(loader):
        loss = loss_fn(model(tokens).reshape(-1, vocab), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.mode == "torch":
            if prof is None:  # start after the first step, as aiprof run does
                prof = _bare_profiler(torch, json.loads(args.schedule), args.trace_dir)
                prof.start()
            else:
                prof.step()
        now, c_now = time.perf_counter(), time.thread_time()
        times.append(now - t_prev)
        cpu.append(c_now - c_prev)
        t_prev, c_prev = now, c_now
    if prof is not None:
        prof.stop()
    Path(args.result).write_text(json.dumps({"step_s": times, "step_cpu_s": cpu}))


def _bare_profiler(torch: Any, s: dict[str, int], trace_dir: str) -> Any:
    """torch.profiler with aiprof's default switches, exporting each cycle to a gzipped trace."""
    from torch.profiler import ProfilerActivity, profile, schedule

    def ready(p: Any) -> None:
        p.export_chrome_trace(str(Path(trace_dir) / f"torch-{time.time_ns()}.pt.trace.json.gz"))

    return profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(**s),
        on_trace_ready=ready,
        record_shapes=True,
        profile_memory=True,
        with_stack=False,
    )


# --- the driver ---------------------------------------------------------------------------------
def run_once(mode: str, schedule: dict[str, int], steps: int, env: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="aiprof-bench-") as tmp:
        result = Path(tmp) / "result.json"
        inner = [sys.executable, str(Path(__file__).resolve()), "--worker", "--steps", str(steps), "--result", str(result),
                 "--mode", "torch" if mode == "torch" else "none", "--schedule", json.dumps(schedule), "--trace-dir", tmp]
        cmd = inner
        if mode == "aiprof":
            flags = [f"--{k}={v}" for k, v in schedule.items()]
            cmd = [sys.executable, "-m", "aiprof", "run", "--out", str(Path(tmp) / "run"), "--no-summary", *flags, "--", *inner]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{mode} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        out: dict[str, Any] = json.loads(result.read_text())
        out["process_wall_s"] = wall
        return out


def recorded_window(schedule: dict[str, int]) -> range:
    """Iterations recorded when the profiler starts after iteration 0 (ProfilerStep#N = iteration N+1)."""
    first = schedule["wait"] + schedule["warmup"] + 1
    return range(first, first + schedule["active"])


def pct(a: float, b: float) -> float:
    return round(100.0 * (a / b - 1.0), 2)


MODES = ("none", "torch", "aiprof")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="none", help=argparse.SUPPRESS)
    p.add_argument("--schedule", default=json.dumps(DEFAULT), help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--trace-dir", help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=150, help="steps of the whole-run measurement (default 150)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    # One intra-op thread: the main thread's CPU time then holds all the step's work, which makes
    # CPU time a stable measure on a shared machine where wall time is mostly waiting for a core.
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    window = recorded_window(MANY)
    raw: dict[str, dict[str, list[float]]] = {m: {k: [] for k in ("rec_wall", "rec_cpu", "loop_wall", "loop_cpu", "process_wall")} for m in MODES}
    for r in range(args.repeat):
        for mode in MODES:
            out = run_once(mode, MANY, window.stop + 2, env)
            raw[mode]["rec_wall"].append(statistics.median(out["step_s"][i] for i in window) * 1e3)
            raw[mode]["rec_cpu"].append(statistics.median(out["step_cpu_s"][i] for i in window) * 1e3)
            out = run_once(mode, DEFAULT, args.steps, env)
            raw[mode]["loop_wall"].append(sum(out["step_s"]))
            raw[mode]["loop_cpu"].append(sum(out["step_cpu_s"]))
            raw[mode]["process_wall"].append(out["process_wall_s"])
            last = {k: round(v[-1], 2) for k, v in raw[mode].items()}
            print(f"repeat {r + 1}/{args.repeat} {mode:6s} {last}", flush=True)
    med = {m: {k: round(statistics.median(v), 3) for k, v in raw[m].items()} for m in MODES}
    summary = {
        "recorded_step_cpu_aiprof_vs_torch_pct": pct(med["aiprof"]["rec_cpu"], med["torch"]["rec_cpu"]),
        "recorded_step_wall_aiprof_vs_torch_pct": pct(med["aiprof"]["rec_wall"], med["torch"]["rec_wall"]),
        "recorded_step_cpu_torch_vs_none_pct": pct(med["torch"]["rec_cpu"], med["none"]["rec_cpu"]),
        "whole_loop_cpu_aiprof_vs_none_pct": pct(med["aiprof"]["loop_cpu"], med["none"]["loop_cpu"]),
        "whole_loop_wall_aiprof_vs_none_pct": pct(med["aiprof"]["loop_wall"], med["none"]["loop_wall"]),
        "whole_loop_cpu_torch_vs_none_pct": pct(med["torch"]["loop_cpu"], med["none"]["loop_cpu"]),
        "whole_loop_wall_torch_vs_none_pct": pct(med["torch"]["loop_wall"], med["none"]["loop_wall"]),
        "process_wall_aiprof_vs_none_pct": pct(med["aiprof"]["process_wall"], med["none"]["process_wall"]),
    }
    print(json.dumps({"medians": med, "summary": summary}, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"medians": med, "summary": summary, "raw": raw}, indent=2))


if __name__ == "__main__":
    main()
