"""``aiprof compare BEFORE AFTER [-o FILE] [--format …] [--fail-if-slower PCT]``.

BEFORE and AFTER are run directories, traces or JSON reports. Exit 1 when ``--fail-if-slower`` is given
and AFTER's median step is slower by more than PCT percent (a CI regression gate).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from aiprof.errors import AiprofError

if TYPE_CHECKING:
    from aiprof.report.model import Report


class CompareCommand:
    name = "compare"
    help = "Compare two runs (run directories, traces or JSON reports): did the change make the step faster?"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("before", metavar="BEFORE", help="run directory, trace file/folder, or aiprof JSON report")
        parser.add_argument("after", metavar="AFTER", help="the same, after the change")
        parser.add_argument("-o", "--output", type=Path, help="write the comparison here; the format follows the extension")
        parser.add_argument("--format", choices=["terminal", "json", "html", "md"], help="output format")
        parser.add_argument(
            "--fail-if-slower",
            type=float,
            metavar="PCT",
            help="exit 1 when AFTER's median step is slower than BEFORE's by more than PCT percent",
        )
        parser.add_argument("--width", type=int, default=None, help="terminal width (default: the terminal's, max 100)")

    def run(self, args: argparse.Namespace) -> int:
        from aiprof.cli.analyze import _check_writable, _write_new
        from aiprof.report import format_for
        from aiprof.report.compare import compare_reports
        from aiprof.report.render import render

        if args.fail_if_slower is not None and args.fail_if_slower < 0:
            raise AiprofError("--fail-if-slower takes a percentage >= 0, e.g. --fail-if-slower 5")
        fmt = format_for(args.output, args.format)
        if args.output is not None:
            _check_writable(args.output)
        cmp = compare_reports(_report_for(args.before), _report_for(args.after))
        for warning in cmp.warnings:  # a partial or salvaged input is said, not dropped
            print(f"aiprof: warning: {warning}", file=sys.stderr)
        is_tty = args.output is None and sys.stdout.isatty()
        text = render(cmp, fmt, width=args.width, is_tty=is_tty)
        if args.output is None:
            sys.stdout.write(text)
        else:
            _write_new(args.output, text)
            print(f"aiprof: wrote {fmt} comparison to {args.output}", file=sys.stderr)
        pct = cmp.step_time_ns.delta_pct
        if args.fail_if_slower is not None and pct > args.fail_if_slower:
            print(
                f"aiprof: AFTER's median step is {pct:.1f}% slower than BEFORE's (limit {args.fail_if_slower:g}%)",
                file=sys.stderr,
            )
            return 1
        return 0


def _report_for(path: str) -> Report:
    """The report for one BEFORE/AFTER argument: a JSON report file read and validated, else the traces
    or run directory analysed and diagnosed as `aiprof analyze` does."""
    from aiprof.report.compare import is_report_file, load_report

    p = Path(path)
    if not p.exists():
        raise AiprofError(f"{path}: no such file or folder")
    if is_report_file(p):
        return load_report(p)
    from aiprof.pipeline import analyze_and_diagnose
    from aiprof.report.document import build_document

    run, findings = analyze_and_diagnose([path])
    return build_document(run, findings)
