"""``aiprof analyze PATH... [-o FILE] [--format terminal|json|html|md] [--rank N]``."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiprof.errors import AiprofError


class _DelayedProgress:
    """A progress bar on stderr that appears only when loading takes over a second."""

    def __init__(self, enabled: bool, delay_s: float = 1.0) -> None:
        self.enabled = enabled
        self.delay_s = delay_s
        self.started = time.monotonic()
        self.done = 0
        self.total = 0
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
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                console=Console(file=sys.stderr),
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("load", total=self.total or None, completed=self.done)

    def update(self, path: Path, done: int, total: int) -> None:
        with self._lock:
            self.done, self.total = done, total
            if self._progress is not None:
                self._progress.update(self._task, completed=done, total=total)

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
        parser.add_argument("paths", nargs="+", metavar="PATH", help="trace file(s) or a folder (one file per rank)")
        parser.add_argument("-o", "--output", type=Path, help="write the report here; the format follows the extension")
        parser.add_argument("--format", choices=["terminal", "json", "html", "md"], help="output format")
        parser.add_argument("--rank", type=int, action="append", help="only these rank(s) (repeatable)")
        parser.add_argument("--width", type=int, default=None, help="terminal width (default: the terminal's, max 100)")
        parser.add_argument("--jobs", type=int, default=None, help="worker processes for multi-rank runs")
        parser.add_argument("--max-trace-mb", type=float, help="largest trace text to read, in MB (docs/performance.md)")
        parser.add_argument("--max-events", type=int, default=0, help="most events in one trace file (default: no limit)")
        parser.add_argument(
            "--rule-option",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="change a diagnosis threshold, e.g. data_loading_share=0.1 (repeatable; see docs/findings.md)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from aiprof.report import format_for

        fmt = format_for(args.output, args.format)
        if args.output is not None:
            _check_writable(args.output)
        from aiprof.trace import source

        source.configure(source.LoadLimits.from_options(args.max_trace_mb, args.max_events))
        stop_primed = _start_loading(args.paths)
        try:
            return self._analyze(args, fmt)
        finally:
            stop_primed()

    def _analyze(self, args: argparse.Namespace, fmt: str) -> int:
        from aiprof.pipeline import analyze_and_diagnose
        from aiprof.report.document import build_document
        from aiprof.rules.options import RuleOptions

        options = RuleOptions.from_assignments(args.rule_option) if args.rule_option else None
        with _DelayedProgress(enabled=sys.stderr.isatty()) as progress:
            run, findings = analyze_and_diagnose(
                args.paths, workers=args.jobs, progress=progress.update, options=options
            )
        for warning in run.warnings:
            print(f"aiprof: warning: {warning}", file=sys.stderr)
        if args.rank:
            wanted = set(args.rank)
            present = [r.rank for r in run.ranks]
            run.ranks = [r for r in run.ranks if r.rank in wanted]
            if not run.ranks:
                raise AiprofError(f"no rank {sorted(wanted)} in these traces; ranks present: {_ranks(present)}")
        if args.rank:
            findings = [f for f in findings if not f.get("ranks") or set(f["ranks"]) & set(args.rank)]
        doc = build_document(run, findings)
        text = render(doc, fmt, width=args.width, is_tty=args.output is None and sys.stdout.isatty())
        if args.output is None:
            sys.stdout.write(text)
        else:
            _write_new(args.output, text)
            print(f"aiprof: wrote {fmt} report to {args.output}", file=sys.stderr)
        return 0


def _start_loading(paths: list[str]) -> Callable[[], None]:
    """One trace file: its decode helpers start on it now, while this process imports the analyses
    (about 30 ms of imports the second core would otherwise sit out). Returns what stops helpers that
    no load took over (call it when the command ends, however it ends)."""
    if len(paths) != 1 or not os.path.isfile(paths[0]):
        return lambda: None
    from aiprof.trace.stream import discard_primed, prime

    try:
        prime(Path(paths[0]))
        import aiprof.analysis.compat  # noqa: F401 - imported now rather than during the analysis
        import aiprof.analysis.kernels  # noqa: F401
        import aiprof.analysis.ops  # noqa: F401
        import aiprof.roofline.analysis  # noqa: F401
        import aiprof.rules.registry  # noqa: F401
    except BaseException:  # Ctrl-C during the imports: the helpers stop with this process
        discard_primed()
        raise
    return discard_primed


def render(doc: dict[str, Any], fmt: str, width: int | None = None, is_tty: bool = False) -> str:
    if fmt == "json":
        from aiprof.report.json_report import JsonRenderer

        return JsonRenderer().render(doc)
    if fmt == "md":
        from aiprof.report.markdown import MarkdownRenderer

        return MarkdownRenderer().render(doc)
    if fmt == "html":
        from aiprof.report.html_report import HtmlRenderer

        return HtmlRenderer().render(doc)
    from aiprof.report.terminal import TerminalRenderer

    if width is None:
        width = min(os.get_terminal_size().columns, 100) if is_tty else 80
    return TerminalRenderer(width=max(width, 60), is_tty=is_tty).render(doc)


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:16])
    return shown + (f" … ({len(ranks)} ranks)" if len(ranks) > 16 else "")


def _check_writable(path: Path) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise AiprofError(f"{parent}: no such folder for the report; create it or choose another -o path")
    if not os.access(parent, os.W_OK):
        raise AiprofError(f"{parent}: not writable; choose another -o path")
    if path.is_dir():
        raise AiprofError(f"{path}: is a folder; give a file name such as {path / 'report.json'}")


def _write_new(path: Path, text: str) -> None:
    """Write atomically: a temporary file renamed over the target, so a crash never leaves half a report."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise AiprofError(f"{path}: cannot write the report ({err.strerror})") from None
