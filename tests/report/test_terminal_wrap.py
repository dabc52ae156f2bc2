"""The terminal's findings: the fix is never cut; title, saving and fix wrap to the terminal's width
(the console's width, or ``$COLUMNS`` when the output is piped) under a hanging indent."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from report_docs import document_of, shared_path
from typed_builders import finding, rank, report

from aiprof.report import common
from aiprof.report.escape import terminal
from aiprof.report.model import Report
from aiprof.report.render import render

WIDTHS = (60, 100, 200)

LONG_FIX = (
    "Load batches in background workers: DataLoader(dataset, batch_size=..., num_workers=3, "
    "persistent_workers=True, prefetch_factor=2) and move them with .to(device, non_blocking=True); "
    "then check that the loader keeps up: every word of this sentence must reach the reader, "
    "including the very last one, which is zanzibar.\n"
    "A second line of the fix, with code: torch.set_num_threads(4)"
)


def _findings_block(out: str) -> str:
    start = out.index("Findings\n")
    end = out.find("\n\n", start)
    return out[start:end if end >= 0 else len(out)]


def _words(text: str) -> list[str]:
    return terminal(text).split()


def _assert_fix_whole(doc: Report, width: int) -> None:
    out = render(doc, "terminal", width=width)
    lines = out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width, f"a line wider than {width}"
    block = "\n".join(line for line in _findings_block(out).splitlines() if "more finding(s)" not in line)
    assert "…" not in block, "a finding's text was cut"
    flowing = " ".join(block.split())  # the words in reading order, line breaks undone
    for f in common.findings(doc)[:3]:
        # every word, in order: the words of the fix as one sequence in the flowing text
        words = [w for line in f.fix.strip().splitlines() for w in _words(line)]
        pattern = r"\s+".join(re.escape(w) for w in words)
        assert re.search(pattern, flowing), f"width {width}: fix of {f.id} not whole"
        for line in block.splitlines()[1:]:
            assert line.startswith(" " * 9) or line.startswith("  "), line


@pytest.mark.parametrize("width", WIDTHS)
def test_long_fix_wraps_whole(width: int) -> None:
    doc = report([rank(0)], findings=[finding("Host overhead in a long title " + "word " * 20, fix=LONG_FIX)])
    _assert_fix_whole(doc, width)
    out = render(doc, "terminal", width=width)
    assert "zanzibar" in out and "torch.set_num_threads(4)" in out


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("key", ["resnet50_nw0", "dlrm_8rank", "cpu_only"])
def test_real_fixes_wrap_whole(key: str, width: int) -> None:
    doc = document_of(key)
    assert doc.findings
    _assert_fix_whole(doc, width)


def test_piped_output_follows_columns() -> None:
    """``aiprof analyze`` into a pipe: 80 columns, or ``$COLUMNS`` when it says a width."""
    path = shared_path("resnet50_nw0")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}

    def widest(**extra: str) -> int:
        res = subprocess.run([sys.executable, "-m", "aiprof", "analyze", str(path)], capture_output=True, text=True,
                             timeout=180, env={**env, **extra})
        assert res.returncode == 0, res.stderr
        return max(len(line.rstrip()) for line in res.stdout.splitlines())

    assert 70 < widest() <= 80
    assert 110 < widest(COLUMNS="140") <= 140
    assert widest(COLUMNS="garbage") <= 80


def test_fix_of_a_hostile_finding_stays_escaped(tmp_path: Path) -> None:
    """Wrapping does not read a fix as markup: brackets and escape sequences print as written."""
    fix = "use [bold]this[/bold] and \x1b[31mred\x1b[0m " + "x " * 60
    doc = report([rank(0)], findings=[finding("t", fix=fix)])
    out = render(doc, "terminal", width=60)
    assert "[bold]this[/bold]" in out and "\x1b" not in out and "␛[31mred" in out
