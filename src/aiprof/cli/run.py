"""``aiprof run [options] -- python train.py args...``: profile a script without changing it."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from aiprof import rundir
from aiprof.errors import EXIT_USAGE, AiprofError, printable



class RunCommand:
    name = "run"
    help = "run a training or inference script with profiling injected and write a run directory"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        from aiprof.capture.options import CaptureOptions, Schedule
        from aiprof.capture.supervise import DEFAULT_GRACE_S

        s, o = Schedule(), CaptureOptions()
        parser.usage = "aiprof run [options] -- python train.py [args...]   (or: aiprof run [options] train.py [args...])"
        parser.add_argument("--out", type=Path, help="run directory to create (default: ./aiprof-runs/<time>-<script>/); never overwritten")
        group = parser.add_argument_group("which steps to record (torch.profiler schedule, counted from the first step)")
        group.add_argument("--wait", type=int, default=s.wait, help=f"steps to skip before recording (default {s.wait})")
        group.add_argument("--warmup", type=int, default=s.warmup, help=f"profiler warm-up steps, not kept (default {s.warmup})")
        group.add_argument("--active", type=int, default=s.active, help=f"steps recorded per cycle (default {s.active})")
        group.add_argument("--repeat", type=int, default=s.repeat, help=f"cycles; 0 = until the script ends (default {s.repeat})")
        group.add_argument("--skip-first", type=int, default=s.skip_first, help="steps to ignore before the first cycle (default 0)")
        group = parser.add_argument_group("what the profiler records")
        group.add_argument("--record-shapes", action=argparse.BooleanOptionalAction, default=o.record_shapes, help="input shapes of ops: FLOPs, roofline (default on)")
        group.add_argument("--profile-memory", action=argparse.BooleanOptionalAction, default=o.profile_memory, help="allocator events (default on)")
        group.add_argument("--memory", action="store_true", help="CUDA allocator history around the recorded steps, dumped at the end and on OOM, and memory_stats() per step (read it with aiprof memory RUN_DIR); on a CPU run, the profiler's [memory] events (always on unless --no-profile-memory) are the memory input")
        group.add_argument("--with-stack", action=argparse.BooleanOptionalAction, default=o.with_stack, help="Python call stacks: source lines, costly (default off)")
        group = parser.add_argument_group("steps and telemetry")
        group.add_argument("--step-marker", metavar="SPEC", help="what ends a step besides optimizer.step(): an nn.Module class name (Model), or MODULE:FUNCTION")
        group.add_argument("--no-auto-step", dest="auto_step", action="store_false", help="do not count optimizer.step() calls as steps")
        group.add_argument("--telemetry-interval", type=float, default=o.telemetry_interval_s, metavar="SECONDS", help=f"sampling interval (default {o.telemetry_interval_s})")
        group.add_argument("--no-telemetry", dest="telemetry", action="store_false", help="do not sample CPU/memory/disk/network/GPU")
        parser.add_argument("--no-summary", dest="summary", action="store_false", help="do not analyse the run at the end")
        parser.add_argument("--kill-grace", type=float, default=DEFAULT_GRACE_S, metavar="SECONDS",
                            help=f"after passing a signal on to the script, SIGKILL it if it has not exited within this time (default {DEFAULT_GRACE_S:g})")
        parser.add_argument("script_argv", nargs=argparse.REMAINDER, metavar="COMMAND", help="the script or command to run")

    def run(self, args: argparse.Namespace) -> int:
        from aiprof.capture.options import CaptureOptions, Schedule
        from aiprof.capture.runner import Runner

        command = list(args.script_argv)
        if command and command[0] == "--":
            command = command[1:]
        options = CaptureOptions(
            schedule=Schedule(args.wait, args.warmup, args.active, args.repeat, args.skip_first),
            record_shapes=args.record_shapes,
            profile_memory=args.profile_memory or args.memory,
            with_stack=args.with_stack,
            memory=args.memory,
            telemetry=args.telemetry,
            telemetry_interval_s=args.telemetry_interval,
            step_marker=args.step_marker,
            auto_step=args.auto_step,
        )
        if options.step_marker:
            from aiprof.capture.steps import parse_marker

            parse_marker(options.step_marker)
        if not math.isfinite(args.kill_grace) or args.kill_grace < 0:
            raise AiprofError(f"--kill-grace: expected a number of seconds >= 0, got {args.kill_grace}")
        result = Runner(command, options, args.out, kill_grace_s=args.kill_grace).run()
        return report(result.run_dir, result.exit_code, result.meta, options, summary=args.summary)


def report(run_dir: Path, code: int, meta: dict[str, Any], options: Any, *, summary: bool) -> int:
    """Say where the run is and what it holds; the exit status is the script's, or 2 if nothing was recorded."""
    traces = meta.get("trace_files", [])
    if not traces:
        why = rundir.why_no_trace(meta, options.schedule.describe())
        print(f"aiprof: error: {printable(why)}; wrote what exists to {run_dir} (marked incomplete)", file=sys.stderr)
        return code if code != 0 else EXIT_USAGE
    status = meta.get("status", "?")
    note = "" if status == "complete" else f" ({meta.get('reason')})"
    print(f"aiprof: run directory: {run_dir}  [{status}{note}]")
    print(f"aiprof: {len(traces)} trace(s), steps recorded per rank: {_recorded(meta)}")
    if getattr(options, "memory", False) and not (run_dir / "memory").is_dir():
        print("aiprof: --memory: no CUDA allocator ran (a CPU run), so no allocator history was dumped; the "
              "memory section comes from the profiler's [memory] events in the trace (sites are ops, not stacks)")
    if summary:
        _print_summary(run_dir)
    print(f"aiprof: next: aiprof analyze {run_dir}")
    return code


def _recorded(meta: dict[str, Any]) -> str:
    parts = []
    for r in meta.get("ranks", []):
        steps = r.get("recorded_steps") or []
        if steps:
            parts.append(f"rank {r.get('rank')}: {steps[0]}-{steps[-1]}" if len(steps) > 1 else f"rank {r.get('rank')}: {steps[0]}")
    return ", ".join(parts) or "none"


def _print_summary(run_dir: Path) -> None:
    """The analysis summary with the diagnosis (as ``aiprof analyze`` prints it); never fails the run."""
    try:
        from aiprof import app

        text = app.render_summary(app.analyze([run_dir]))
    except AiprofError as err:
        print(f"aiprof: summary unavailable: {err}", file=sys.stderr)
        return
    except Exception as err:  # noqa: BLE001 - the run itself succeeded; say why there is no summary
        print(f"aiprof: summary unavailable ({type(err).__name__}: {err})", file=sys.stderr)
        return
    if text:
        print(str(text).rstrip())
