"""``kill -9`` of ``aiprof run`` itself, with a real torch script on the CPU: the script must not be left
running (the kernel sends it SIGTERM, so it flushes what it recorded; a script that ignores SIGTERM is
SIGKILLed after the grace period), and ``aiprof analyze`` of the run directory that was never settled
salvages the cycle files with a warning naming each file and how much it read.

Waits are bounded and generous; nothing asserts how fast anything happens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from capture_helpers import ROOT, SCRIPTS, aiprof_cmd, child_env

pytestmark = [
    pytest.mark.torch,
    pytest.mark.usefixtures("torch_available"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only"),
]


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start_and_kill_aiprof(args: list[str]) -> int:
    """Start ``aiprof run``, wait for the script's ``READY pid=N`` line, SIGKILL aiprof run; the script's pid."""
    proc = subprocess.Popen(aiprof_cmd("run", *args), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=child_env(), cwd=ROOT)
    pid = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("READY pid="):
                pid = int(line.split("pid=")[1])
                break
        assert pid is not None, "the script never got ready"
    finally:
        proc.kill()  # SIGKILL: aiprof run gets no chance to pass anything on or to settle
        proc.wait(timeout=60)
    return pid


def _ends(pid: int, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
        return False
    return True


def test_the_script_flushes_and_ends_when_aiprof_run_is_killed(tmp_path: Path) -> None:
    out = tmp_path / "run"
    pid = _start_and_kill_aiprof(["--out", str(out), "--no-summary", "--wait", "1", "--warmup", "1", "--active", "2",
                                  "--repeat", "0", "--telemetry-interval", "0.05", "--", "python",
                                  str(SCRIPTS / "tiny_train.py"), "--steps", "100", "--hang-at", "6"])
    assert _ends(pid), "the script outlived the aiprof run that was SIGKILLed"

    # It ended by SIGTERM, through its flush: its entry is in meta.json, its cycles are on disk. The run
    # itself was never settled (aiprof run is gone), so meta.json still says running.
    deadline = time.monotonic() + 30
    while not (out / "meta.json").read_text().count('"ranks"') and time.monotonic() < deadline:
        time.sleep(0.05)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "running"
    entry = next(r for r in meta["ranks"] if r["pid"] == pid)
    assert entry["status"] == "incomplete" and entry["reason"] == "terminated by SIGTERM"
    cycles = entry["cycle_files"]
    assert cycles and all((out / name).is_file() for name in cycles)

    res = subprocess.run(aiprof_cmd("analyze", str(out), "--format", "json"), capture_output=True, text=True,
                         timeout=120, env=child_env(), cwd=ROOT)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    for name in cycles:
        notes = [line for line in res.stderr.splitlines() if line.startswith(f"aiprof: warning: {name}:")]
        assert notes and "did not combine" in notes[0] and "never finished" in notes[0], res.stderr
        assert " events recovered" in notes[0] and int(notes[0].split(": ")[-1].split()[0].replace(",", "")) > 0
    report = json.loads(res.stdout)
    steps = [s["name"] for r in report["ranks"] for s in r["steps"]]
    assert len(report["ranks"]) == 1 and steps and all(s.startswith("ProfilerStep#") for s in steps)


IGNORES_TERM = ("import os, signal, time\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "print(f'READY pid={os.getpid()}', flush=True)\n"
                "for _ in range(1200):\n"
                "    time.sleep(0.1)\n")


def test_a_script_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    pid = _start_and_kill_aiprof(["--out", str(tmp_path / "run"), "--no-summary", "--no-telemetry", "--kill-grace", "0.5",
                                  "--", "python", "-c", IGNORES_TERM])
    assert _ends(pid), "a script that ignores SIGTERM outlived the aiprof run that was SIGKILLed"


RANK_SLEEPS = ("import os, sys, time\n"
               "open(os.path.join(sys.argv[1], f\"pid.{os.environ['RANK']}\"), 'w').write(str(os.getpid()))\n"
               "for _ in range(1200):\n"
               "    time.sleep(0.1)\n")


def test_torchruns_ranks_end_with_it(tmp_path: Path) -> None:
    """The path that orphaned before: the kernel's SIGKILL ended torchrun before it could stop its ranks.
    Now torchrun gets SIGTERM and stops them (measured on this change's parent: both ranks still running
    40 s after the kill -9)."""
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun not found next to this Python")
    worker = tmp_path / "worker.py"
    worker.write_text(RANK_SLEEPS)
    proc = subprocess.Popen(aiprof_cmd("run", "--out", str(tmp_path / "run"), "--no-summary", "--no-telemetry", "--",
                                       str(torchrun), "--standalone", "--nproc-per-node", "2", str(worker), str(tmp_path)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=child_env(), cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("pid.*"))) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(0.2)  # the pid files are written whole by now
        ranks = [int(p.read_text()) for p in tmp_path.glob("pid.*")]
        assert len(ranks) == 2, "torchrun's ranks never started"
    finally:
        proc.kill()
        proc.wait(timeout=60)
    ended = [_ends(pid) for pid in ranks]
    assert all(ended), "torchrun's ranks outlived the aiprof run that was SIGKILLed"
