"""``aiprof compare BEFORE AFTER [-o FILE] [--format …] [--fail-if-slower PCT]``.

BEFORE and AFTER are run directories, traces or JSON reports; ``--pair B A`` adds further pairs of runs of
the same two programs. Exit 1 when ``--fail-if-slower`` is given and AFTER's median step (over every step
of both runs; over the pairs with ``--pair``) is slower by more than PCT percent and the change is
significant (its 95 % confidence interval excludes 0): a CI regression gate that noise between the steps
of a run does not trip, nor, with several pairs, noise between runs (``app.slower_than``). Exit 4
(inconclusive) when either run shared the machine with other processes, or the change is beyond PCT but
not significant (``app.gate``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiprof.cli import args as numbers
from aiprof.cli import output
from aiprof.errors import EXIT_FAILED_CHECK, EXIT_INCONCLUSIVE


class CompareCommand:
    name = "compare"
    help = "Compare two runs (run directories, traces or JSON reports): did the change make the step faster?"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("before", metavar="BEFORE", help="run directory, trace file/folder, or aiprof JSON report")
        parser.add_argument("after", metavar="AFTER", help="the same, after the change")
        parser.add_argument(
            "--pair", nargs=2, action="append", default=[], metavar=("BEFORE", "AFTER"),
            help="another pair of runs of the same two programs (repeatable; best interleaved in time: B A B A …): "
            "the step-time change and its confidence interval are then over the pairs, so the noise between two "
            "runs of one program is in the interval (one pair cannot see it)",
        )
        parser.add_argument("-o", "--output", type=Path, help="write the comparison here; the format follows the extension")
        output.add_force(parser)
        parser.add_argument("--format", choices=["terminal", "json", "html", "md"], help="output format")
        parser.add_argument(
            "--fail-if-slower",
            type=numbers.percentage,
            metavar="PCT",
            help="exit 1 when AFTER's median step is slower than BEFORE's by more than PCT percent (finite, >= 0) "
            "and the change is significant (its 95%% confidence interval excludes 0; with fewer than 5 steps "
            "a side: the point estimate, with a warning); exit 4 (inconclusive) when either run shared the machine "
            "with other processes or the change is beyond PCT but within noise",
        )
        parser.add_argument("--width", type=numbers.width, default=None,
                            help="terminal width, 60..1000 (default: the terminal's, max 100)")

    def run(self, args: argparse.Namespace) -> int:
        from aiprof import app
        from aiprof.cli.analyze import warn

        fmt = app.output_format(args.output, args.format)
        output.check([args.output], [args.before, args.after, *(p for pair in args.pair for p in pair)], args.force)
        comparison = app.compare(args.before, args.after, more_pairs=[tuple(p) for p in args.pair])
        is_tty = args.output is None and sys.stdout.isatty()
        if args.output is not None or fmt != "terminal":  # the terminal comparison lists them itself: said once
            for warning in app.warnings_of(comparison):  # each side's, labelled: a partial input is said, not dropped
                warn(warning)
        app.write(comparison, args.output, fmt, app.RenderOptions(width=args.width, is_tty=is_tty), what="comparison")
        if args.output is not None:
            output.wrote(f"the {fmt} comparison", args.output)
        if args.fail_if_slower is not None:
            outcome, message = app.gate(comparison, args.fail_if_slower)
            if message is not None:
                print(f"aiprof: {message}", file=sys.stderr)
            return {"fail": EXIT_FAILED_CHECK, "inconclusive": EXIT_INCONCLUSIVE}.get(outcome, 0)
        return 0
