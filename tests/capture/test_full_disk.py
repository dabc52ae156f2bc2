"""A full disk during ``aiprof run``, for real: the run directory is on a 4 MiB tmpfs mounted in a private
user and mount namespace (``unshare -Urm``), and the script fills that disk mid-run (a checkpoint too
large), so every write after it meets a real ENOSPC: torch.profiler's export, the telemetry CSV, the
script's own flush, ``meta.json``.

What must hold: one line at the end naming the disk and what to do, a non-zero exit (the script's own
status when it failed too), no traceback; ``meta.json`` says incomplete and why (not "running"); the cut-off
cycle is kept and ``aiprof analyze`` salvages it with a warning naming the file and how much it read; no
temporary file, no space reserve and no state file left; the telemetry CSV holds whole rows only.
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from capture_helpers import ROOT, SCRIPTS, aiprof_cmd, child_env

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("torch_available")]


def _namespaces_work() -> str | None:
    """Why the test cannot run here (no unshare, or user namespaces disabled), or None."""
    if not sys.platform.startswith("linux"):
        return "tmpfs in a user namespace is Linux-only"
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    probe = subprocess.run(["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null || "
                            "mount -t tmpfs -o size=64k tmpfs /tmp"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"unprivileged user namespaces with a tmpfs mount are not allowed here ({probe.stderr.strip()[:120]})"
    return None


_SKIP = _namespaces_work()


def _run_on_small_disk(tmp_path: Path, script_args: list[str], *, prefill: bool = False) -> tuple[int, str, Path]:
    """``aiprof run`` into ``<disk>/run`` on a fresh 4 MiB tmpfs; the run directory is copied out before the
    namespace (and its tmpfs) ends. ``prefill``: the disk is full before aiprof starts. Returns the exit
    status, aiprof's standard error, and the copy of the run directory."""
    disk, copy = tmp_path / "disk", tmp_path / "copy"
    disk.mkdir()
    run = disk / "run"
    cmd = aiprof_cmd("run", "--out", str(run), "--no-summary", "--wait", "1", "--warmup", "1", "--active", "2",
                     "--telemetry-interval", "0.05", "--", "python", str(SCRIPTS / "tiny_train.py"), *script_args)
    fill = f"dd if=/dev/zero of={disk}/filler bs=4k 2>/dev/null; " if prefill else ""
    shell = (f"mount -t tmpfs -o size=4m tmpfs {shlex.quote(str(disk))} && {fill}"
             f"{shlex.join(cmd)} >{shlex.quote(str(tmp_path / 'stdout'))} 2>{shlex.quote(str(tmp_path / 'stderr'))}; echo $? >{shlex.quote(str(tmp_path / 'rc'))}; "
             f"if [ -d {shlex.quote(str(run))} ]; then cp -a {shlex.quote(str(run))} {shlex.quote(str(copy))}; fi")
    env = child_env(PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", shell], capture_output=True, text=True, timeout=120,
                          env=env, cwd=ROOT)
    assert (tmp_path / "rc").exists(), done.stderr
    return int((tmp_path / "rc").read_text()), (tmp_path / "stderr").read_text(), copy


def _one_error_line(stderr: str, disk: Path) -> str:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("aiprof: error")]
    assert len(errors) == 1, stderr
    assert stderr.rstrip().splitlines()[-1] == errors[0], "the run must end with its error line"
    assert "No space left on device" in errors[0] and f"the disk mounted at {disk}" in errors[0], errors[0]
    assert "free space there or pass --out to another disk" in errors[0]
    return errors[0]


@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_disk_full_mid_run_keeps_the_cut_cycle_and_ends_in_one_line(tmp_path: Path) -> None:
    # The script fills the disk when the recorded cycle is about to be exported, leaving 40 KiB: the export
    # (about 80 KiB) is cut off, and the flush, the telemetry and meta.json meet ENOSPC after it.
    rc, stderr, copy = _run_on_small_disk(tmp_path, ["--steps", "6", "--fill-disk", str(tmp_path / "disk" / "ckpt"),
                                                     "--fill-at", "4", "--leave-kb", "40"])
    assert rc == 2, stderr  # the script itself exited 0
    error = _one_error_line(stderr, tmp_path / "disk")
    assert "aiprof analyze" in error and "salvages" in error

    meta = json.loads((copy / "meta.json").read_text())
    assert meta["status"] == "incomplete" and "No space left on device" in meta["reason"]
    assert meta["exit_code"] == 0 and meta["finished_unix_ns"] > 0 and meta["write_errors"]
    kept = meta["uncombined_cycle_files"]
    assert kept and all((copy / name).stat().st_size > 0 for name in kept)
    # The only temporary files left are torch.profiler's cut-off cycles, listed and kept on purpose.
    assert sorted(p.name for p in copy.glob("*.tmp")) == sorted(n for n in kept if n.endswith(".part.tmp"))
    assert not list(copy.glob(".pid*.state")) and not (copy / ".aiprof.reserve").exists()
    with (copy / "telemetry.csv").open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert len(rows) > 2 and all(len(row) == len(rows[0]) for row in rows)  # whole rows only
    assert all(row[0].isdigit() and len(row[0]) >= 18 for row in rows[1:])

    res = subprocess.run(aiprof_cmd("analyze", str(copy), "--format", "json"), capture_output=True, text=True,
                         timeout=120, env=child_env(), cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    name = kept[0]
    notes = [line for line in res.stderr.splitlines() if name in line]
    assert any("did not combine" in line and "No space left on device" in line for line in notes), res.stderr
    assert any("cut off mid-write" in line and "salvaged" in line and "bytes" in line for line in notes), res.stderr
    report = json.loads(res.stdout)
    assert report["ranks"] and any(s["name"].startswith("ProfilerStep#") for s in report["ranks"][0]["steps"])


@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_disk_full_keeps_the_scripts_own_exit_status(tmp_path: Path) -> None:
    rc, stderr, copy = _run_on_small_disk(tmp_path, ["--steps", "6", "--exit-code", "3", "--fill-disk",
                                                     str(tmp_path / "disk" / "ckpt"), "--fill-at", "4", "--leave-kb", "0"])
    assert rc == 3, stderr
    _one_error_line(stderr, tmp_path / "disk")
    meta = json.loads((copy / "meta.json").read_text())
    assert meta["status"] == "incomplete" and meta["exit_code"] == 3
    assert "No space left on device" in meta["reason"] and "exited with status 3" in meta["reason"]


@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_a_disk_full_before_the_run_is_one_line_and_the_script_never_runs(tmp_path: Path) -> None:
    rc, stderr, copy = _run_on_small_disk(tmp_path, ["--steps", "6"], prefill=True)
    assert rc == 2
    _one_error_line(stderr, tmp_path / "disk")
    assert "done" not in (tmp_path / "stdout").read_text() and not copy.exists()  # nothing ran, no half-made run directory is left
