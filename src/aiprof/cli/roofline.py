"""``aiprof roofline PATH [--peaks FILE] [--json FILE] [--chart FILE.svg] [--top N] [--rank N]``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

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
        parser.add_argument("--ncu", type=Path, help="Nsight Compute results (ncu --csv export or .ncu-rep) of the "
                                                     "same program: measured points beside the estimates")

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
        points = _measured(trace, args.ncu) if args.ncu else None
        if args.json:
            section = result.to_dict()
            if points is not None:
                section["measured"] = [p.to_dict() for p in points]
            args.json.write_text(json.dumps(section, indent=1) + "\n", encoding="utf-8")
        if args.chart:
            write_chart(result, args.chart, title=f"Roofline: {trace.path.name}")
        if sys.stdout.isatty():
            sys.stdout.write(render_rich(result, args.top))
        else:
            sys.stdout.write(render_plain(result, args.top))
        if points is not None:
            sys.stdout.write(_measured_text(points, args.top))
        return 0


def _measured(trace: Any, path: Path) -> list[Any]:
    from aiprof.trace.readers.ncu import measured_points, read_ncu

    return measured_points(trace, read_ncu(path))


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
