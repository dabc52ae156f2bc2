"""``-o`` never overwrites what the command reads: one rule (aiprof.fsutil.output_problem) for every verb.
An input (the same file, links resolved; any file inside an input folder) is never written, a symbolic
link is never written through, an existing file that is not an aiprof output needs ``--force``, and every
output aiprof writes is recognised as its own (re-running a command needs no ``--force``)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hostile_inputs import kineto_trace as trace

from aiprof.cli import main
from aiprof.fsutil import is_aiprof_output, output_problem


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


# --- the rule -------------------------------------------------------------------------------------
def test_the_rule(tmp_path: Path) -> None:
    source = trace(tmp_path / "in.json")
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text('{"status": "done"}\n')
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    link = tmp_path / "link.json"
    link.symlink_to(other)
    hard = tmp_path / "hard.json"
    os.link(source, hard)
    assert output_problem(tmp_path / "new.html", [source]) is None
    assert "an input" in str(output_problem(source, [source], force=True))
    assert "an input" in str(output_problem(hard, [source], force=True))  # the same inode by another name
    (tmp_path / "in-link").symlink_to(source)
    assert "an input" in str(output_problem(source, [tmp_path / "in-link"], force=True))  # the input by a link
    assert "an input" in str(output_problem(run / "meta.json", [run], force=True))
    assert "symbolic link" in str(output_problem(link, [source], force=True))
    assert "not an aiprof output" in str(output_problem(other, [source]))
    assert output_problem(other, [source], force=True) is None
    os.mkfifo(tmp_path / "fifo")
    assert "not a regular file" in str(output_problem(tmp_path / "fifo", [], force=True))
    assert "no such folder" in str(output_problem(tmp_path / "absent" / "r.json", []))


def test_analyze_never_overwrites_its_input_a_link_or_a_foreign_file(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    source = trace(tmp_path / "in.json")
    before = digest(source)
    code, err = cli(capsys, "analyze", source, "-o", source)
    assert code == 2 and "an input of this command" in err and len(err.strip().splitlines()) == 1, err
    code, err = cli(capsys, "analyze", source, "-o", source, "--format", "json", "--force")
    assert code == 2 and "an input" in err, err
    assert digest(source) == before
    run = tmp_path / "run"
    run.mkdir()
    trace(run / "rank0.json")
    (run / "meta.json").write_text('{"status": "done"}\n')
    code, err = cli(capsys, "analyze", run, "-o", run / "meta.json", "--force")
    assert code == 2 and "an input" in err and (run / "meta.json").read_text() == '{"status": "done"}\n'
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n")
    link = tmp_path / "report.md"
    link.symlink_to(notes)
    code, err = cli(capsys, "analyze", source, "-o", link, "--force")
    assert code == 2 and "symbolic link" in err and link.is_symlink() and notes.read_text() == "# my notes\n"
    code, err = cli(capsys, "analyze", source, "-o", notes)
    assert code == 2 and "--force" in err and notes.read_text() == "# my notes\n"
    code, err = cli(capsys, "analyze", source, "-o", notes, "--force")
    assert code == 0 and f"wrote the md report to {notes}" in err
    assert is_aiprof_output(notes)


def test_compare_and_export_guard_their_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = trace(tmp_path / "in.json")
    report = tmp_path / "a.json"
    assert cli(capsys, "analyze", source, "-o", report)[0] == 0
    before = digest(report)
    code, err = cli(capsys, "compare", report, source, "-o", report, "--force")
    assert code == 2 and "an input" in err and digest(report) == before, err
    code, err = cli(capsys, "export", source, "-o", source, "--force")
    assert code == 2 and "an input" in err, err
    code, err = cli(capsys, "roofline", source, "-o", tmp_path / "r.json", "--json", tmp_path / "r.json")
    assert code == 2 and "the same file" in err, err


# Every verb, every format: written once, then again over its own output without --force.
COMMANDS = [
    *(("analyze", "{in}", "-o", f"{{out}}/report.{ext}") for ext in ("json", "html", "md", "txt")),
    *(("compare", "{in}", "{in}", "-o", f"{{out}}/compare.{ext}") for ext in ("json", "html", "md", "txt")),
    *(("roofline", "{in}", "-o", f"{{out}}/roofline.{ext}") for ext in ("json", "html", "md", "txt")),
    ("roofline", "{in}", "--json", "{out}/roofline-side.json", "--chart", "{out}/chart.svg"),
    *(("memory", "{in}", "-o", f"{{out}}/memory.{ext}") for ext in ("json", "html", "md", "txt")),
    ("whatif", "{in}", "--remove", "syncs", "-o", "{out}/whatif.json"),
    ("export", "{in}", "-o", "{out}/merged.json"),
    ("export", "{in}", "-o", "{out}/merged.json.gz"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c[0]}-{c[-1].rsplit('/', 1)[-1]}")
def test_every_output_is_recognised_as_aiprofs_own(command: tuple[str, ...], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    source = trace(tmp_path / "in.json")
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(**{"in": source, "out": out}) for a in command]
    code, err = cli(capsys, *argv)
    assert code == 0, err
    written = sorted(out.iterdir())
    assert written and all(is_aiprof_output(p) for p in written), written
    assert all("wrote the " in line for line in err.splitlines() if "wrote" in line)
    assert sum("wrote" in line for line in err.splitlines()) == len(written), err
    code, err = cli(capsys, *argv)  # over its own output: no --force needed
    assert code == 0, err
