"""``aiprof compare BEFORE AFTER [-o FILE] [--format …] [--fail-if-slower PCT]``.

BEFORE and AFTER are run directories, traces or JSON reports. Exit 1 when ``--fail-if-slower`` is given
and AFTER's median step is slower by more than PCT percent (a CI regression gate).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiprof.errors import AiprofError


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
        import os

        from aiprof.cli.analyze import _check_writable, _write_new
        from aiprof.report import format_for
        from aiprof.report.compare import compare_documents, document_for
        from aiprof.report.compare_render import render_comparison

        if args.fail_if_slower is not None and args.fail_if_slower < 0:
            raise AiprofError("--fail-if-slower takes a percentage >= 0, e.g. --fail-if-slower 5")
        fmt = format_for(args.output, args.format)
        if args.output is not None:
            _check_writable(args.output)
        cmp = compare_documents(document_for(args.before), document_for(args.after))
        for warning in cmp.get("warnings") or []:  # a partial or salvaged input is said, not dropped
            print(f"aiprof: warning: {warning}", file=sys.stderr)
        is_tty = args.output is None and sys.stdout.isatty()
        width = args.width or (min(os.get_terminal_size().columns, 100) if is_tty else 80)
        text = render_comparison(cmp, fmt, width=max(width, 60), is_tty=is_tty)
        if args.output is None:
            sys.stdout.write(text)
        else:
            _write_new(args.output, text)
            print(f"aiprof: wrote {fmt} comparison to {args.output}", file=sys.stderr)
        pct = float(cmp["step_time_ns"]["delta_pct"])
        if args.fail_if_slower is not None and pct > args.fail_if_slower:
            print(
                f"aiprof: AFTER's median step is {pct:.1f}% slower than BEFORE's (limit {args.fail_if_slower:g}%)",
                file=sys.stderr,
            )
            return 1
        return 0
