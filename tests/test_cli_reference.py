"""docs/cli.md is the parser's own reference: regenerated whenever a verb or an option changes."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from aiprof.cli import _VERBS, build_parser
from aiprof.cli.reference import REGENERATE, reference

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_docs_cli_md_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == reference(), f"docs/cli.md is out of date; regenerate it: {REGENERATE}"


def test_every_verb_and_option_is_in_the_reference() -> None:
    text = reference()
    parser, commands = build_parser()
    assert set(commands) == _VERBS
    for name, command in commands.items():
        assert f"## aiprof {name}\n" in text
        sub = argparse.ArgumentParser()
        command.prepare_parser(sub)
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in text, f"aiprof {name} {flag} is missing from the reference"


def test_a_new_option_changes_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page follows the parser: an option added to a verb shows up, with its default and help."""
    from aiprof.cli import analyze

    original = analyze.AnalyzeCommand.prepare_parser

    def with_extra(self: analyze.AnalyzeCommand, parser: argparse.ArgumentParser) -> None:
        original(self, parser)
        parser.add_argument("--colour-depth", type=int, default=8, help="bits per channel | shown <raw>")

    monkeypatch.setattr(analyze.AnalyzeCommand, "prepare_parser", with_extra)
    row = next(line for line in reference().splitlines() if "`--colour-depth`" in line)
    assert row == "| `--colour-depth` | `COLOUR_DEPTH` | `8` | bits per channel \\| shown &lt;raw&gt; |"
