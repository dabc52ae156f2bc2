"""``aiprof export PATH... -o merged.json[.gz]``: one trace for Perfetto / chrome://tracing with every
rank's events, telemetry counters and aiprof's steps and findings as annotation tracks."""

from __future__ import annotations

import argparse
from pathlib import Path

from aiprof.cli import output


class ExportCommand:
    name = "export"
    help = "Write the merged trace (events + telemetry counters + findings) that Perfetto and chrome://tracing open."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH", help="trace file(s), a folder of ranks, or an aiprof run directory")
        parser.add_argument("-o", "--output", type=Path, required=True, help="the merged trace (.json, or .json.gz to compress)")
        output.add_force(parser)

    def run(self, args: argparse.Namespace) -> int:
        from aiprof import app
        from aiprof.cli.analyze import warn

        # What `aiprof analyze` says about these traces is said here too.
        out = app.export(list(args.paths), args.output, app.AnalyzeOptions(on_warning=warn), force=args.force)
        output.wrote("the merged trace (open it at ui.perfetto.dev or chrome://tracing)", out)
        return 0
