"""``aiprof roofline PATH [--peaks FILE] [--json FILE] [--chart FILE.svg] [--top N] [--rank N]``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from aiprof.errors import AiprofError


class RooflineCommand:
    name = "roofline"
    help = "Per-op roofline of a trace: FLOPs and bytes from shapes, compute- / memory- / latency-bound."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("path", type=Path, metavar="PATH", help="a trace file (or a folder: one rank)")
        parser.add_argument("--peaks", type=Path, help="measured-peaks file (default: $AIPROF_PEAKS_FILE or "
                                                       "~/.cache/aiprof/peaks.json)")
        parser.add_argument("--device", help="use the spec peaks of this device name instead of the trace's")
        parser.add_argument("--rank", type=int, default=None, help="rank to analyse in a multi-rank folder")
        parser.add_argument("--top", type=int, default=15, help="ops to show (default 15)")
        parser.add_argument("--json", type=Path, help="write the roofline section as JSON here")
        parser.add_argument("--chart", type=Path, help="write the roofline chart here (.svg, or .png with cairosvg)")

    def run(self, args: argparse.Namespace) -> int:
        import aiprof
        from aiprof.roofline.analysis import roofline
        from aiprof.roofline.chart import write_chart
        from aiprof.roofline.peaks import PeaksChoice, load_measured, resolve, spec_for
        from aiprof.roofline.render import render_plain, render_rich
        from aiprof.trace.model import RunSet

        loaded = aiprof.load(args.path)
        if isinstance(loaded, RunSet):
            if args.rank is not None:
                try:
                    trace = loaded.rank(args.rank)
                except KeyError:
                    raise AiprofError(f"no rank {args.rank} in {args.path}: ranks are {loaded.ranks}") from None
            else:
                trace = loaded.traces[0]
        else:
            trace = loaded
        measured = load_measured(args.peaks, required=args.peaks is not None)
        choice = None
        if args.device:
            spec = spec_for(args.device)
            choice = resolve(args.device, cpu=False, measured=measured)
            if spec is None and choice.peaks is None:
                raise AiprofError(f"unknown device {args.device!r}: see docs/roofline.md for the names known")
        result = roofline(trace, choice if isinstance(choice, PeaksChoice) else None, measured=measured)
        if args.json:
            args.json.write_text(json.dumps(result.to_dict(), indent=1) + "\n", encoding="utf-8")
        if args.chart:
            write_chart(result, args.chart, title=f"Roofline: {trace.path.name}")
        if sys.stdout.isatty():
            sys.stdout.write(render_rich(result, args.top))
        else:
            sys.stdout.write(render_plain(result, args.top))
        return 0
