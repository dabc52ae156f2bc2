"""``aiprof analyze PATH... [-o FILE] [--format terminal|json|html|md] [--rank N] [--ncu REPORT]``."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiprof.cli import args as numbers
from aiprof.cli import output
from aiprof.errors import printable

if TYPE_CHECKING:
    from aiprof.report.model import Report


class _DelayedProgress:
    """A progress bar on stderr that appears only when loading takes over a second: ranks done of all, and
    how many failed (``failed``, told by the analysis as each rank file fails)."""

    def __init__(self, enabled: bool, delay_s: float = 1.0) -> None:
        self.enabled = enabled
        self.delay_s = delay_s
        self.started = time.monotonic()
        self.done = 0
        self.total = 0
        self.failures = 0
        self._progress: Any = None
        self._task: Any = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def __enter__(self) -> _DelayedProgress:
        if self.enabled:
            self._timer = threading.Timer(self.delay_s, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with self._lock:
            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("loading traces"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}{task.fields[failed]}"),
                TimeElapsedColumn(),
                console=Console(file=sys.stderr),
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("load", total=self.total or None, completed=self.done,
                                                 failed=self.failed_text())

    def update(self, path: Path, done: int, total: int) -> None:
        with self._lock:
            self.done, self.total = done, total
            if self._progress is not None:
                self._progress.update(self._task, completed=done, total=total)

    def failed(self, path: Path, why: str) -> None:
        """One more rank file failed (``why`` is its warning, said when the run ends)."""
        with self._lock:
            self.failures += 1
            if self._progress is not None:
                self._progress.update(self._task, failed=self.failed_text())

    def failed_text(self) -> str:
        """What the bar adds after done/total: `` · 2 failed``, or nothing."""
        return f" · {self.failures} failed" if self.failures else ""

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self._progress is not None:
                self._progress.stop()


class AnalyzeCommand:
    name = "analyze"
    help = "Analyse Kineto / torch.profiler traces: where each step's time went and why the GPU is idle."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH",
                            help="trace file(s) or a folder (one file per rank; a CUDA/HIP graph replay with "
                                 "its capture trace is one rank)")
        parser.add_argument("-o", "--output", type=Path, help="write the report here; the format follows the extension")
        output.add_force(parser)
        parser.add_argument("--format", choices=["terminal", "json", "html", "md"], help="output format")
        parser.add_argument("--rank", type=numbers.rank, action="append", help="only these rank(s) (repeatable)")
        parser.add_argument("--width", type=numbers.width, default=None,
                            help="terminal width, 60..1000 (default: the terminal's, max 100)")
        parser.add_argument("--jobs", type=numbers.workers, default=None, help="worker processes for multi-rank runs (>= 1)")
        parser.add_argument("--executor", default="local", metavar="WHERE",
                            help="where the ranks are analysed: local (this machine's processes, the default), "
                                 "dask (the cluster at $DASK_SCHEDULER_ADDRESS, else one started on this machine) "
                                 "or dask://HOST:PORT (needs aiprof[dask]; see docs/scale-out.md)")
        parser.add_argument("--cache", nargs="?", const="", default=None, metavar="DIR",
                            help="keep each file's result in a rank cache (DIR, default $AIPROF_CACHE_DIR or "
                                 "~/.cache/aiprof/ranks): a rerun skips the files already analysed and unchanged")
        parser.add_argument("--max-trace-mb", type=float,
                            help="largest trace text to read, in MiB (2^20 bytes; docs/performance.md)")
        parser.add_argument("--max-events", type=int, default=0, help="most events in one trace file (default: no limit)")
        parser.add_argument(
            "--rule-option",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="change a diagnosis threshold, e.g. data_loading_share=0.1 (repeatable; see docs/findings.md)",
        )
        memory = parser.add_mutually_exclusive_group()
        memory.add_argument("--memory", dest="memory", action="store_const", const="all", default="auto",
                            help="the memory section and findings (the default): from the allocator dumps of "
                                 "`aiprof run --memory`, else the trace's [memory] events (profile_memory=True; "
                                 "the trace is read a second time)")
        memory.add_argument("--no-memory", dest="memory", action="store_const", const="off",
                            help="leave out the memory section")
        parser.add_argument("--step-range", metavar="REGEX", help="Nsight Systems reports: the NVTX ranges "
                            "whose name matches REGEX are the steps (see docs/nsight.md)")
        parser.add_argument("--ncu", type=Path, metavar="REPORT",
                            help="Nsight Compute results of the same program (ncu --csv export or .ncu-rep): "
                                 "measured per-kernel points in the roofline section, beside the estimates "
                                 "from shapes (first rank shown; see docs/nsight.md)")

    def run(self, args: argparse.Namespace) -> int:
        from aiprof import app

        fmt = app.output_format(args.output, args.format)
        reader = app.reader_options(args.step_range, args.max_trace_mb, args.max_events)  # carried to every read
        output.check([args.output], [*args.paths, args.ncu], args.force)
        rules = numbers.rule_options(args.rule_option)
        said: list[str] = []  # said once the progress bar is gone
        try:
            with _DelayedProgress(enabled=sys.stderr.isatty()) as progress:
                options = app.AnalyzeOptions(workers=args.jobs, ranks=tuple(args.rank or ()), rules=rules,
                                             progress=progress.update, on_warning=said.append,
                                             memory=args.memory, ncu=args.ncu, executor=args.executor,
                                             cache_dir=_cache_dir(args.cache), on_failed=progress.failed,
                                             reader=reader)
                if fmt == "html":  # the interactive timeline's events are gathered only for an HTML report
                    report, timeline = app.analyze_with_timeline(args.paths, options)
                else:
                    report, timeline = app.analyze(args.paths, options), None
        finally:
            for message in said:
                warn(message)
        is_tty = args.output is None and sys.stdout.isatty()
        app.write(report, args.output, fmt, app.RenderOptions(width=args.width, is_tty=is_tty, timeline=timeline))
        if args.output is not None:
            output.wrote(f"the {fmt} report", args.output)
        return 0


def _cache_dir(value: str | None) -> Path | None:
    """``--cache``'s folder: None without the flag, the default folder for a bare ``--cache``."""
    if value is None:
        return None
    from aiprof import app

    return Path(value) if value else app.default_cache_dir()


def warn(message: str) -> None:
    """A warning about the inputs, on stderr (what every verb does with ``AnalyzeOptions.on_warning``)."""
    print(f"aiprof: warning: {printable(message)}", file=sys.stderr)


def render(doc: Report, fmt: str, width: int | None = None, is_tty: bool = False) -> str:
    """A report document as text (kept for callers of the old name; it is :func:`aiprof.app.render`)."""
    from aiprof import app

    return app.render(doc, fmt, app.RenderOptions(width=width, is_tty=is_tty))
