"""``aiprof roofline PATH [-o FILE] [--format …] [--peaks FILE] [--device NAME] [--rank N] [--top N]
[--chart FILE.svg]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from aiprof.cli import args as numbers
from aiprof.cli import output


class RooflineCommand:
    name = "roofline"
    help = "Per-op roofline of a trace: FLOPs and bytes from shapes, compute- / memory- / latency-bound."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("path", type=Path, metavar="PATH", help="a trace file (or a folder: one rank)")
        parser.add_argument("-o", "--output", type=Path, help="write the roofline here; the format follows the extension")
        output.add_force(parser)
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
        parser.add_argument("--ncu", type=Path, help="Nsight Compute results (ncu --csv export or .ncu-rep) of the "
                                                     "same program: measured points beside the estimates")

    def run(self, args: argparse.Namespace) -> int:
        from aiprof import app

        fmt = app.output_format(args.output, args.format)
        output.check([args.output, args.json, args.chart], [args.path, args.peaks, args.ncu], args.force)
        options = app.RooflineOptions(rank=args.rank, peaks_file=args.peaks, device=args.device, ncu=args.ncu)
        result, points = app.roofline_measured(args.path, options)
        if args.json:
            app.write_roofline_json(result, points, args.json)
            output.wrote("the roofline as JSON", args.json)
        if args.chart:
            app.write_chart(result, args.chart, title=f"Roofline: {Path(args.path).name}")
            output.wrote("the roofline chart", args.chart)
        is_tty = args.output is None and sys.stdout.isatty()
        app.write(result, args.output, fmt, app.RenderOptions(width=args.width, is_tty=is_tty, top=args.top),
                  what="roofline")
        if points is not None and args.output is None:
            sys.stdout.write(_measured_text(points, args.top))
        if args.output is not None:
            output.wrote(f"the {fmt} roofline", args.output)
        return 0


def _measured_text(points: list[Any], top: int) -> str:
    """Measured points (docs/nsight.md): kernel, its op, time, achieved GFLOP/s and GB/s, SOL %, estimate."""
    def num(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
        return "-" if value is None else f"{value / scale:,.{digits}f}"

    lines = ["", f"Measured by Nsight Compute ({sum(p.row >= 0 for p in points)} of {len(points)} matched to the "
             "timeline)", f"{'kernel':<40} {'op':<16} {'µs':>8} {'GFLOP/s':>9} {'GB/s':>8} {'SM%':>5} {'mem%':>5} "
             f"{'est GFLOP':>9} {'meas GFLOP':>10}"]
    for p in points[:top]:
        lines.append(f"{p.kernel[:40]:<40} {(p.op or '-')[:16]:<16} {num(p.duration_ns, 1e3):>8} "
                     f"{num(p.achieved_flops_per_s, 1e9):>9} {num(p.achieved_bytes_per_s, 1e9):>8} "
                     f"{num(p.sm_sol_pct, digits=0):>5} {num(p.memory_sol_pct, digits=0):>5} "
                     f"{num(p.est_flops, 1e9, 3):>9} {num(p.flops, 1e9, 3):>10}")
    return "\n".join(lines) + "\n"
