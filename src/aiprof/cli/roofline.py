"""``aiprof roofline PATH [-o FILE] [--format …] [--peaks FILE] [--device NAME] [--rank N] [--top N]
[--chart FILE.svg]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiprof.cli import args as numbers


class RooflineCommand:
    name = "roofline"
    help = "Per-op roofline of a trace: FLOPs and bytes from shapes, compute- / memory- / latency-bound."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("path", type=Path, metavar="PATH", help="a trace file (or a folder: one rank)")
        parser.add_argument("-o", "--output", type=Path, help="write the roofline here; the format follows the extension")
        parser.add_argument("--format", choices=["terminal", "json", "html", "md"], help="output format")
        parser.add_argument("--peaks", type=Path, help="measured-peaks file (default: $AIPROF_PEAKS_FILE or "
                                                       "~/.cache/aiprof/peaks.json)")
        parser.add_argument("--device", help="use the spec peaks of this device name instead of the trace's")
        parser.add_argument("--rank", type=numbers.rank, default=None, help="rank to analyse in a multi-rank folder")
        parser.add_argument("--top", type=numbers.count, default=15, help="ops to show (default 15)")
        parser.add_argument("--width", type=numbers.width, default=None,
                            help="terminal width, 60..1000 (default: the terminal's, max 100)")
        parser.add_argument("--json", type=Path, help="also write the roofline as JSON here (the same as -o FILE.json)")
        parser.add_argument("--chart", type=Path, help="write the roofline chart here (.svg, or .png with cairosvg)")

    def run(self, args: argparse.Namespace) -> int:
        from aiprof import app

        fmt = app.output_format(args.output, args.format)
        for path in (args.output, args.json, args.chart):
            if path is not None:
                app.check_writable(path)
        options = app.RooflineOptions(rank=args.rank, peaks_file=args.peaks, device=args.device)
        result = app.roofline(args.path, options)
        if args.json:
            app.write(result, args.json, "json", what="roofline")
        if args.chart:
            app.write_chart(result, args.chart, title=f"Roofline: {Path(args.path).name}")
        is_tty = args.output is None and sys.stdout.isatty()
        app.write(result, args.output, fmt, app.RenderOptions(width=args.width, is_tty=is_tty, top=args.top),
                  what="roofline")
        if args.output is not None:
            print(f"aiprof: wrote {fmt} roofline to {args.output}", file=sys.stderr)
        return 0
