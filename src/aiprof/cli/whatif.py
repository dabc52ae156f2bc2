"""``aiprof whatif PATH [--remove data_loading|syncs|host_gaps] [--scale-host F] [--cuda-graphs] [--scale-kernels F
[--kernels REGEX]] [--fuse-elementwise] [--overlap-comm [--interference F]] [--rank N] [-o FILE.json]``:
replay the trace on its dependency graph with each edit and print the predicted step beside the measured
one (docs/whatif.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from aiprof.cli import args as numbers
from aiprof.cli import output
from aiprof.errors import AiprofError, printable

if TYPE_CHECKING:
    from aiprof.analysis.whatif.results import WhatIf


class WhatIfCommand:
    name = "whatif"
    help = "Predict the step after a fix: replay the trace's dependency graph with edits."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("path", type=Path, metavar="PATH", help="a trace file (or a folder: one rank)")
        parser.add_argument("--remove", action="append", default=[], choices=["data_loading", "syncs", "host_gaps"],
                            help="remove the DataLoader waits, the blocking syncs, or the untraced Python "
                                 "in gaps of 1 ms or more inside the steps (repeatable)")
        parser.add_argument("--scale-host", type=numbers.factor, metavar="F",
                            help="host overhead (CPU ops, Python, runtime calls) x F")
        parser.add_argument("--cuda-graphs", action="store_true",
                            help="replay each step as a CUDA graph: no host overhead inside the steps")
        parser.add_argument("--scale-kernels", type=numbers.factor, metavar="F", help="compute kernels x F")
        parser.add_argument("--kernels", metavar="REGEX", default="",
                            help="with --scale-kernels: only kernels whose name matches")
        parser.add_argument("--fuse-elementwise", action="store_true",
                            help="fuse back-to-back elementwise kernels: one launch, no gaps")
        parser.add_argument("--overlap-comm", action="store_true",
                            help="run collectives beside compute instead of in the compute stream")
        parser.add_argument("--interference", type=numbers.factor, default=1.0, metavar="F",
                            help="with --overlap-comm: collective time x F when overlapped (default 1)")
        parser.add_argument("--rank", type=numbers.rank, default=None, help="rank to replay in a multi-rank folder")
        parser.add_argument("-o", "--output", type=Path, help="also write the prediction as JSON here")
        output.add_force(parser)

    def run(self, args: argparse.Namespace) -> int:
        from aiprof import app

        edit = app.whatif_edit
        specs = [edit("remove", what) for what in args.remove]
        if args.scale_host is not None:
            specs.append(edit("scale_host", factor=args.scale_host))
        if args.cuda_graphs:
            specs.append(edit("cuda_graphs"))
        if args.scale_kernels is not None:
            specs.append(edit("scale_kernels", args.kernels, args.scale_kernels))
        elif args.kernels:
            raise AiprofError("--kernels needs --scale-kernels F")
        if args.fuse_elementwise:
            specs.append(edit("fuse_elementwise"))
        if args.overlap_comm:
            specs.append(edit("overlap_comm", factor=args.interference))
        output.check([args.output], [args.path], args.force)
        result = app.whatif(args.path, specs, rank=args.rank)
        sys.stdout.write(text(result))
        if args.output is not None:
            from aiprof.fsutil import JSON_GENERATOR

            app.write_file(args.output, json.dumps({"generator": JSON_GENERATOR, **result.to_builtins()}, indent=1) + "\n",
                           what="prediction")
            output.wrote("the prediction", args.output)
        return 0


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms"


def text(result: WhatIf) -> str:
    """The prediction as a few lines: measured median step, then each edit's predicted median step."""
    lines = [f"{printable(Path(result.trace).name)} rank {result.rank}: {result.steps} steps "
             f"({printable(result.step_source)}), measured median step {_ms(result.baseline_median_step_ns)}"]
    rows = list(result.edits) + ([result.combined] if result.combined else [])
    if rows:
        lines.append(f"{'edit':<34} {'predicted step':>15} {'saving':>22}")
    for row in rows:
        lines.append(f"{row.edit[:34]:<34} {_ms(row.predicted_median_step_ns):>15} "
                     f"{_ms(row.predicted_saving_ns):>12} ({row.predicted_saving_share:+.1%})")
    path = result.critical_path
    if path is not None:
        parts = ", ".join(f"{kind} {ns / path.length_ns:.0%}" for kind, ns in list(path.breakdown_ns.items())[:5]
                          if path.length_ns)
        lines.append(f"critical path of the median step ({path.nodes} nodes): {parts}")
    return "\n".join(lines) + "\n"
