"""``aiprof memory PATH``: where the memory went, what is live at the peak, and why an OOM happened."""

from __future__ import annotations

import argparse
from pathlib import Path

from aiprof.cli import args as numbers
from aiprof.cli import output
from aiprof.errors import AiprofError

FORMATS = ("terminal", "json", "md", "html")


class MemoryCommand:
    name = "memory"
    help = "Memory report of an allocator snapshot, a trace with [memory] events, or a run directory."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("path", type=Path, help="snapshot .pickle, trace .json[.gz], memory timeline, or run dir")
        parser.add_argument("--format", choices=FORMATS, default=None, help="output format (default: from -o, else terminal)")
        parser.add_argument("-o", "--output", type=Path, default=None, help="write here instead of stdout")
        output.add_force(parser)
        parser.add_argument("--device-memory-gib", type=float, default=None,
                            help="device memory in GiB, when the input does not say (enables capacity findings)")
        parser.add_argument("--rule-option", action="append", default=[], metavar="NAME=VALUE",
                            help="change a memory rule's threshold, e.g. mem_near_capacity_fraction=0.8 (repeatable; "
                                 "see docs/findings.md)")

    def run(self, args: argparse.Namespace) -> int:
        from aiprof import app

        gib = args.device_memory_gib
        if gib is not None and not (0 < gib < 1 << 20):
            raise AiprofError(f"--device-memory-gib must be a positive number of GiB, not {gib}")
        fmt = args.format or _format_of(args.output)
        rules = numbers.rule_options(args.rule_option)
        output.check([args.output], [args.path], args.force)
        options = app.MemoryOptions(device_memory_bytes=int(gib * (1 << 30)) if gib else None)
        report = app.memory(args.path, options)
        app.write(report, args.output, fmt, app.RenderOptions(rules=rules), what="memory report")
        if args.output is not None:
            output.wrote(f"the {fmt} memory report", args.output)
        return 0


def _format_of(output: Path | None) -> str:
    if output is None:
        return "terminal"
    suffix = output.suffix.lower()
    return {".json": "json", ".md": "md", ".html": "html", ".htm": "html"}.get(suffix, "terminal")
