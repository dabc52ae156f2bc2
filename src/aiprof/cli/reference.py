"""The CLI reference (``docs/cli.md``), generated from the parser the ``aiprof`` command builds.

``python -m aiprof.cli.reference > docs/cli.md`` writes it; ``tests/test_cli_reference.py`` fails when the
checked-in page is not what the parser says. Every verb gets its synopsis and a table of its arguments:
the value each takes, its default and its help, in the order the verb declares them. Nothing here depends
on the terminal (argparse's own help is wrapped to its width), so the page is the same on every machine.
"""

from __future__ import annotations

import argparse
import sys

from aiprof.cli import build_parser

REGENERATE = "PYTHONPATH=src python -m aiprof.cli.reference > docs/cli.md"

_HEADER = f"""# CLI reference

<!-- Generated from the parser by `{REGENERATE}`; do not edit by hand. -->

Every verb of `aiprof`, its arguments, their defaults and what they do, as `aiprof VERB --help` says
them. `aiprof --version` prints the version. Exit status: 0 done; 1 a check failed (`compare
--fail-if-slower`); 2 bad input or usage, said in one line (`aiprof: error: …`); 3 an internal error
(`AIPROF_DEBUG=1` shows the traceback); 4 a check could not decide (`compare --fail-if-slower`: either run
shared the machine, or the change is beyond the limit but within noise); 130 interrupted (Ctrl-C). What the reports hold:
[reports.md](reports.md); how the parts fit: [architecture.md](architecture.md).
"""


def reference() -> str:
    """The whole page, Markdown."""
    parser, _ = build_parser()
    verbs = _verbs(parser)
    table = "| verb | what it does |\n|---|---|\n" + "".join(
        f"| [`{name}`](#aiprof-{name}) | {_cell(sub.description or '')} |\n" for name, sub in verbs
    )
    parts = [_HEADER, table, *(_verb(name, sub) for name, sub in verbs)]
    return "\n".join(parts)


def _verbs(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return [(str(name), sub) for name, sub in action.choices.items()]
    return []


def _verb(name: str, parser: argparse.ArgumentParser) -> str:
    actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    positionals = [a for a in actions if not a.option_strings]
    synopsis = " ".join([f"aiprof {name}", *(["[options]"] if len(positionals) < len(actions) else []),
                         *(_usage(a) for a in positionals)])
    rows = "".join(_row(parser, a) for a in actions)
    return (f"## aiprof {name}\n\n{parser.description or ''}\n\n```\n{synopsis}\n```\n\n"
            f"| argument | value | default | description |\n|---|---|---|---|\n{rows}")


def _metavar(action: argparse.Action) -> str:
    if action.choices is not None:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    if isinstance(action.metavar, str):
        return action.metavar
    return action.dest if not action.option_strings else action.dest.upper()


def _usage(action: argparse.Action) -> str:
    """A positional argument as the synopsis shows it."""
    name = _metavar(action)
    if action.nargs == argparse.ONE_OR_MORE:
        return f"{name} [{name} ...]"
    if action.nargs == argparse.ZERO_OR_MORE:
        return f"[{name} ...]"
    if action.nargs == argparse.OPTIONAL:
        return f"[{name}]"
    if action.nargs == argparse.REMAINDER:
        return f"{name} ..."
    return name


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _default(action: argparse.Action) -> str:
    if isinstance(action, argparse.BooleanOptionalAction):
        return "on" if action.default else "off"
    if action.required and action.option_strings:
        return "required"
    if not _takes_value(action) or action.default is None or action.default == []:
        return ""
    return f"`{action.default}`"


def _row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{_usage(action)}`"
    value = f"`{_metavar(action)}`" if _takes_value(action) and action.option_strings else ""
    help_text = parser._get_formatter()._expand_help(action) if action.help else ""
    if isinstance(action, argparse._AppendAction) and "repeatable" not in help_text:
        help_text += " (repeatable)"
    return f"| {names} | {_cell(value)} | {_cell(_default(action))} | {_cell(help_text)} |\n"


def _cell(text: str) -> str:
    """``text`` safe in a Markdown table cell (outside code spans: no HTML tags, no pipes, no emphasis)."""
    pieces = text.split("`")
    for i in range(0, len(pieces), 2):  # even pieces are outside code spans
        pieces[i] = (pieces[i].replace("\\", "\\\\").replace("<", "&lt;").replace(">", "&gt;")
                     .replace("*", "\\*").replace("_", "\\_")
                     .replace("[", "\\[").replace("]", "\\]"))
    return "`".join(pieces).replace("|", "\\|").replace("\n", " ")


def main() -> None:
    """Print the reference (``python -m aiprof.cli.reference > docs/cli.md``)."""
    sys.stdout.write(reference())


if __name__ == "__main__":
    main()
