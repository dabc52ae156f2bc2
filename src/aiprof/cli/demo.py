"""``aiprof demo``: profile a small training job with a real data-loading bottleneck, print the diagnosis,
apply the top fix, profile again, and show what it gave.

The job is :mod:`aiprof.workloads`'s ``data_loading`` workload (an MLP fed by a Dataset that waits like a
slow disk, ``num_workers=0``); the fix is the one the top finding names (background DataLoader workers).
It runs on the GPU when one is present, else on the CPU, in well under a minute on two cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiprof.cli import args as numbers
from aiprof.errors import AiprofError

if TYPE_CHECKING:
    from aiprof.report.model import Report

WORKLOAD = "data_loading"


class DemoCommand:
    name = "demo"
    help = "Profile a built-in training job, diagnose it, apply the top fix, and show the difference."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="where to train (default: GPU if present)")
        parser.add_argument("--steps", type=numbers.int_in(3, 1000), default=6, help="profiled steps per run, 3..1000 (default 6)")
        parser.add_argument("--out", type=Path, default=None, help="folder for the two traces (default: a new temporary folder)")
        parser.add_argument("--width", type=numbers.width, default=None,
                            help="terminal width, 60..1000 (default: the terminal's, max 100)")

    def run(self, args: argparse.Namespace) -> int:
        try:
            import torch
        except ImportError:
            raise AiprofError("aiprof demo needs PyTorch: pip install 'aiprof[torch]' (or pip install torch)") from None
        device = _device(args.device, torch)
        out = args.out or Path(tempfile.mkdtemp(prefix="aiprof-demo-"))
        is_tty = sys.stdout.isatty()
        width = args.width or (min(os.get_terminal_size().columns, 100) if is_tty else 80)
        say = _Printer(width, is_tty)
        from aiprof.workloads import WORKLOADS

        job = WORKLOADS[WORKLOAD]
        say.title(f"aiprof demo: {job.description} ({device})")
        say.line("1. Profiling the job as written …")
        before = _profile_and_diagnose(False, out / "before", device, args.steps)
        say.text(_render(before, width, is_tty))
        top = before.findings[0] if before.findings else None
        if top is None:
            say.line("No finding on this run (the machine may be too busy to show the bottleneck); nothing to fix.")
            return 0
        say.line(f"2. Top finding: {top.title}")
        say.line(f"   Applying its fix: {job.fix}")
        if top.id != job.finding_id:
            say.line(f"   (the job was built to show '{job.finding_id}'; this run ranked '{top.id}' first)")
        say.line("3. Profiling again with the fix …")
        after = _profile_and_diagnose(True, out / "after", device, args.steps)
        say.line("4. Before → after:")
        say.text(_comparison(before, after, width, is_tty))
        say.line(_resolution(before, after, job.finding_id))
        say.line(f"Traces kept in {out} (open them in Perfetto, or run `aiprof analyze {out / 'before'}`).")
        return 0


def _device(choice: str, torch: Any) -> str:
    if choice == "cuda" and not torch.cuda.is_available():
        raise AiprofError("--device cuda: no CUDA GPU visible to PyTorch; use --device cpu or auto")
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(choice)


def _profile_and_diagnose(fixed: bool, out: Path, device: str, steps: int) -> Report:
    from aiprof import app
    from aiprof.workloads import profile_workload

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's "more workers than cores" note: sleep-bound loading
        trace = profile_workload(WORKLOAD, fixed, out, steps=steps, warmup=3, device=device)
    return app.analyze([trace], app.AnalyzeOptions(workers=1))


def _render(doc: Report, width: int, is_tty: bool) -> str:
    from aiprof import app

    return app.render(doc, "terminal", app.RenderOptions(width=width, is_tty=is_tty))


def _comparison(before: Report, after: Report, width: int, is_tty: bool) -> str:
    from aiprof import app

    return app.render(app.compare(before, after), "terminal", app.RenderOptions(width=width, is_tty=is_tty))


def _resolution(before: Report, after: Report, finding_id: str) -> str:
    """One line: the step time change, and whether the planted finding is gone."""
    b, a = before.summary.median_step_ns, after.summary.median_step_ns
    est = next((f.est_saving_ns_per_step for f in before.findings if f.id == finding_id), None)
    left = next((f for f in after.findings if f.id == finding_id), None)
    status = "resolved" if left is None else f"still reported ({left.severity}, {left.est_saving_ns_per_step / 1e6:.1f} ms)"
    estimate = f", estimated {est / 1e6:.1f} ms" if est else ""
    return (f"Result: median step {b / 1e6:.1f} ms → {a / 1e6:.1f} ms (saved {(b - a) / 1e6:.1f} ms{estimate}); "
            f"'{finding_id}' {status}.")


class _Printer:
    def __init__(self, width: int, is_tty: bool) -> None:
        from rich.console import Console

        self.console = Console(width=width, force_terminal=is_tty, no_color=not is_tty, highlight=False, emoji=False)
        self.started = time.monotonic()

    def title(self, text: str) -> None:
        self.console.print(text, style="bold")
        self.console.print()

    def line(self, text: str) -> None:
        self.console.print(text, style="bold", soft_wrap=False)

    def text(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
        self.console.print()
