"""``-o`` never overwrites what the command reads: one rule (aiprof.fsutil.output_problem) for every verb.
An input (the same file, links resolved; any file inside an input folder) is never written, a symbolic
link is never written through, an existing file that is not an aiprof output needs ``--force``, and every
output aiprof writes is recognised as its own (re-running a command needs no ``--force``). A character
device or a named pipe (``-o /dev/null``, ``/dev/stdout``) is written in place; a block device, a socket
or a folder is one line."""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import subprocess
import sys
import threading
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
    assert output_problem(tmp_path / "fifo", []) is None  # written in place (test_devices_and_pipes below)
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


# --- outputs that are not regular files -----------------------------------------------------------
def test_dev_null_and_a_link_to_it_are_written_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No --force, no rename over the device, no file created (the folder /dev is not writable to a user)."""
    source = trace(tmp_path / "in.json")
    link = tmp_path / "discard.json"
    link.symlink_to(os.devnull)
    for target in (Path(os.devnull), link):
        for argv in (("analyze", source), ("compare", source, source), ("memory", source), ("roofline", source)):
            code, err = cli(capsys, *argv, "-o", target, "--format", "json")
            assert code == 0 and f"to {target}" in err and "Traceback" not in err, (argv, err)
        code, err = cli(capsys, "roofline", source, "--json", target, "--chart", target)  # the same device twice
        assert code == 0, err
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode) and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["discard.json", "in.json"]


def test_a_named_pipe_gets_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = trace(tmp_path / "in.json")
    fifo = tmp_path / "report.pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code, err = cli(capsys, "analyze", source, "-o", fifo, "--format", "json")
    reader.join(60)
    assert code == 0 and f"wrote the json report to {fifo}" in err, err
    assert got and b'"generator": "aiprof' in got[0] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_full_device_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    code, err = cli(capsys, "analyze", trace(tmp_path / "in.json"), "-o", "/dev/full", "--format", "json")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "/dev/full: cannot write the report (No space left on device)" in err, err


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="no /dev/stdout here")
def test_dev_stdout_is_a_pipe_or_a_terminal_never_an_input(tmp_path: Path) -> None:
    """``-o /dev/stdout`` writes to a pipe; when the shell sends stdout to the input itself (``>>``), the
    link leads to a regular file and is refused: the input is unchanged."""
    source = trace(tmp_path / "in.json")
    before = digest(source)
    aiprof = [sys.executable, "-m", "aiprof", "analyze", str(source), "-o", "/dev/stdout", "--format", "json"]
    piped = subprocess.run(aiprof, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and '"generator": "aiprof' in piped.stdout, piped.stderr
    with open(source, "ab") as same:
        appended = subprocess.run(aiprof, stdout=same, stderr=subprocess.PIPE, text=True, timeout=120)
    assert appended.returncode == 2 and "a symbolic link" in appended.stderr and "Traceback" not in appended.stderr
    assert digest(source) == before


def test_a_socket_a_block_device_and_a_dangling_link_say_what_they_are(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    source = trace(tmp_path / "in.json")
    sock_path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    try:
        code, err = cli(capsys, "analyze", source, "-o", sock_path, "--format", "json", "--force")
    finally:
        server.close()
    assert code == 2 and "s.sock: a socket; aiprof writes a regular file" in err and len(err.strip().splitlines()) == 1
    dangling = tmp_path / "gone.json"
    dangling.symlink_to(tmp_path / "nowhere.json")
    code, err = cli(capsys, "analyze", source, "-o", dangling, "--force")
    assert code == 2 and "a symbolic link" in err and not (tmp_path / "nowhere.json").exists(), err
    devices = sorted(Path("/dev").iterdir()) if os.path.isdir("/dev") else []
    block = next((d for d in devices if stat.S_ISBLK(os.lstat(d).st_mode)), None)
    if block is not None:  # refused before anything opens it
        assert "a block device" in str(output_problem(block, [], force=True))


def test_run_out_onto_a_device_says_it_is_not_a_folder(tmp_path: Path) -> None:
    from aiprof import rundir

    with pytest.raises(rundir.RunDirError, match="not a folder; --out names the run directory"):
        rundir.create_new(Path(os.devnull), explicit=True)
