"""The one atomic-write helper: whole file or old file, fresh temporary names, nothing left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from aiprof.fsutil import atomic_write, current_umask, writable_folder_problem


def test_writes_text_and_bytes_with_the_usual_permissions(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    atomic_write(target, "héllo")
    assert target.read_text(encoding="utf-8") == "héllo"
    atomic_write(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~current_umask()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="symlinks")
def test_planted_symlinks_at_temporary_names_are_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "out.json"
    planted = [tmp_path / name for name in (".out.json.tmp", f".out.json.tmp-{os.getpid()}", "out.tmp", "out.json.tmp")]
    for link in planted:
        link.symlink_to(victim)
    atomic_write(target, "new")
    assert target.read_text() == "new" and not target.is_symlink()
    assert victim.read_text() == "keep me"
    assert all(link.is_symlink() and link.resolve() == victim for link in planted)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    (folder / "inside").write_text("x")
    with pytest.raises(OSError):
        atomic_write(folder, "cannot replace a non-empty folder with a file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-folder"]

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    target = tmp_path / "kept.json"
    target.write_text("old")
    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError):
        atomic_write(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-folder", "kept.json"]


def test_writable_folder_problem(tmp_path: Path) -> None:
    assert writable_folder_problem(tmp_path / "r.json") is None
    assert "no such folder" in str(writable_folder_problem(tmp_path / "missing" / "r.json"))
    assert "is a folder" in str(writable_folder_problem(tmp_path))
