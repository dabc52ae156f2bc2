"""A crashed or incomplete run says so at the top of every report (report.runstatus), from a real
``aiprof run`` whose script is killed by SIGKILL after its recorded cycle was exported."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from capture_helpers import FAST, ROOT, SCRIPTS, aiprof_cmd, child_env, meta_of

from aiprof import app
from aiprof.report.runstatus import run_status
from aiprof.runmeta import RankMeta, RunMeta

pytestmark = [pytest.mark.usefixtures("torch_available"), pytest.mark.torch]


def _killed_run(out: Path) -> None:
    cmd = aiprof_cmd("run", "--out", str(out), *FAST, "--no-summary", "--", "python",
                     str(SCRIPTS / "faulty_train.py"), "--steps", "9", "--end", "hang", "--at", "6")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
    assert proc.stdout is not None
    pid = None
    for line in proc.stdout:
        if line.startswith("READY pid="):
            pid = int(line.split("pid=")[1])
            break
    assert pid is not None, proc.communicate(timeout=60)[1]
    os.kill(pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 137, err


def test_killed_run_has_a_banner_in_every_format(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _killed_run(out)
    assert meta_of(out)["exit_code"] == 137
    report = app.analyze([out], app.AnalyzeOptions(workers=1))
    status = report.run_status
    assert status and status.state == "crashed" and status.signal == "SIGKILL" and status.exit_code == 137
    assert status.banner.startswith("This run crashed (exit 137, killed by SIGKILL)")
    assert f"{status.complete_steps} of {status.recorded_steps} recorded step" in status.banner
    for fmt in ("terminal", "md"):
        lines = app.render(report, fmt, app.RenderOptions(width=400)).splitlines()
        assert any(status.banner in line for line in lines[:4]), fmt  # at the top, one line
    html = app.render(report, "html")
    assert status.banner in html and html.index(status.banner) < html.index("class=kpis")
    doc = json.loads(app.render(report, "json"))
    assert doc["run_status"]["state"] == "crashed" and doc["run_status"]["signal"] == "SIGKILL"


def test_run_status_sentences() -> None:
    crashed = run_status(RunMeta(status="incomplete", exit_code=137), complete_steps=3, incomplete_steps=2,
                         partial=True, cut_off=True)
    assert crashed is not None
    assert crashed.banner == ("This run crashed (exit 137, killed by SIGKILL) — 3 of 5 recorded steps complete; "
                              "numbers cover complete steps only")
    stopped = run_status(RunMeta(status="incomplete", exit_code=130), complete_steps=2, incomplete_steps=0,
                         partial=False, cut_off=False)
    assert stopped is not None and stopped.state == "interrupted" and "SIGINT" in stopped.banner
    assert run_status(RunMeta(status="complete", exit_code=0), complete_steps=2, incomplete_steps=0,
                      partial=False, cut_off=False) is None
    assert run_status(None, complete_steps=2, incomplete_steps=0, partial=False, cut_off=False) is None
    cut = run_status(None, complete_steps=1, incomplete_steps=1, partial=True, cut_off=True)
    assert cut is not None and cut.state == "partial" and cut.banner.startswith("This trace is cut off mid-write")
    # meta.json counts more recorded steps than the trace holds: its count is the denominator
    lost = run_status(RunMeta(status="incomplete", exit_code=1, ranks=[RankMeta(recorded_steps=[2, 3, 4, 5])]),
                      complete_steps=2, incomplete_steps=0, partial=False, cut_off=False)
    assert lost is not None and "2 of 4 recorded steps complete" in lost.banner
