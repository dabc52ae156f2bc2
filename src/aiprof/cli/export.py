"""``aiprof export PATH... -o merged.json[.gz]``: one trace for Perfetto / chrome://tracing with every
rank's events, telemetry counters and aiprof's steps and findings as annotation tracks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiprof.errors import AiprofError


class ExportCommand:
    name = "export"
    help = "Write the merged trace (events + telemetry counters + findings) that Perfetto and chrome://tracing open."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH", help="trace file(s), a folder of ranks, or an aiprof run directory")
        parser.add_argument("-o", "--output", type=Path, required=True, help="the merged trace (.json, or .json.gz to compress)")

    def run(self, args: argparse.Namespace) -> int:
        from aiprof.cli.analyze import _check_writable
        from aiprof.pipeline import analyze_and_diagnose
        from aiprof.report.document import build_document
        from aiprof.report.perfetto import encode, merged_trace, read_raw_trace

        out: Path = args.output
        name = out.name.lower()
        if not (name.endswith(".json") or name.endswith(".json.gz")):
            raise AiprofError(f"{out.name}: the merged trace must end in .json or .json.gz")
        _check_writable(out)
        doc = build_document(*analyze_and_diagnose(list(args.paths)))
        for warning in doc.warnings:  # what `aiprof analyze` says about these traces, said here too
            print(f"aiprof: warning: {warning}", file=sys.stderr)
        try:
            raws = [read_raw_trace(Path(r.path)) for r in doc.ranks]
        except (OSError, ValueError) as err:
            raise AiprofError(f"cannot re-read a trace for the export: {err}") from None
        data = encode(merged_trace(doc, raws), gz=name.endswith(".gz"))
        tmp = out.with_name(f".{out.name}.tmp")
        try:
            tmp.write_bytes(data)
            tmp.replace(out)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise AiprofError(f"{out}: cannot write the merged trace ({err.strerror})") from None
        print(f"aiprof: wrote the merged trace to {out}; open it at ui.perfetto.dev or chrome://tracing", file=sys.stderr)
        return 0
