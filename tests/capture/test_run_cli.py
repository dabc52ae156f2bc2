"""``aiprof run`` end to end, with real subprocesses: success, crash, Ctrl-C, SIGTERM, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from capture_helpers import EXAMPLE, FAST, ROOT, SCRIPTS, SECRET, aiprof_cmd, child_env, meta_of, run_aiprof, step_names, trace_events

pytestmark = pytest.mark.usefixtures("torch_available")

TINY = str(SCRIPTS / "tiny_train.py")
RECORD_4 = ["--wait", "1", "--warmup", "1", "--active", "4", "--telemetry-interval", "0.05"]


def test_example_end_to_end_and_analyze(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *FAST, "--", "python", str(EXAMPLE), "--steps", "6", "--num-workers", "1")
    assert res.returncode == 0, res.stderr
    assert f"run directory: {out}" in res.stdout and "aiprof analyze" in res.stdout
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "capture.log", "dataloader.rank0.csv", "meta.json", "rank0.pt.trace.json.gz", "telemetry.csv",
    ]
    # torch.profiler's own start/stop chatter goes to the run directory's log, not to the terminal.
    for chatter in ("USDT:", "STAGE:", "profiler_start", "profiler_stop", "Memory block of unknown size"):
        assert chatter not in res.stderr and chatter not in res.stdout, chatter
    log = (out / "capture.log").read_text()
    assert "profiler_start" in log and "profiler_stop" in log and "Memory block of unknown size" in log
    meta = meta_of(out)
    assert meta["status"] == "complete" and meta["exit_code"] == 0
    assert meta["torch"].startswith("2.") and meta["host"]["cpu_model"] and meta["host"]["cores_logical"] >= 1
    assert meta["schedule"] == {"wait": 1, "warmup": 1, "active": 2, "repeat": 1, "skip_first": 0}
    assert meta["command"][-4:] == ["--steps", "6", "--num-workers", "1"]
    rank = meta["ranks"][0]
    assert rank["recorded_steps"] == [2, 3] and rank["steps_seen"] == 6
    loader = rank["dataloader"]["loaders"][0]
    assert loader["num_workers"] == 1 and loader["batch_size"] == 8 and loader["persistent_workers"] is True
    assert loader["prefetch_factor"] == 2 and loader["pin_memory"] is False
    # The env allow-list: the fake secret is set in the script's environment and must appear nowhere.
    assert set(meta["env"]) <= {"OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"} and meta["env"]["OMP_NUM_THREADS"] == "1"
    for path in out.iterdir():
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    trace = out / "rank0.pt.trace.json.gz"
    assert step_names(trace) == ["ProfilerStep#2", "ProfilerStep#3"]
    events = trace_events(trace)
    # The counters lie in the trace's own span (every timed event: ops, annotations, memory events; not
    # only ops, which a loaded machine can start well after the profiler) ± two sampling intervals.
    timed = [e for e in events if e.get("ph") in ("X", "i", "I") and isinstance(e.get("ts"), (int, float))]
    assert any(e.get("cat") == "cpu_op" for e in timed)
    counters = [e for e in events if e.get("ph") == "C"]
    assert counters, "telemetry counters missing from the trace"
    lo = min(e["ts"] for e in timed)
    hi = max(e["ts"] + e.get("dur", 0) for e in timed)
    margin = 2 * 0.05 * 1e6
    assert all(lo - margin - 1 <= e["ts"] <= hi + margin + 1 for e in counters)  # same (Kineto) clock
    # Data-loader waits for every step, recorded or not, plus the setup interval (-1).
    lines = (out / "dataloader.rank0.csv").read_text().split()
    assert lines[0] == "step,start_unix_ns,end_unix_ns,wait_ns,batches,samples,tokens"
    assert [int(line.split(",")[0]) for line in lines[1:]] == list(range(-1, 5))
    # The analysis side reads the directory as one rank.
    import aiprof

    loaded = aiprof.load(out)
    assert len(loaded) == 1  # type: ignore[arg-type]
    analyze = subprocess.run(aiprof_cmd("analyze", str(out)), capture_output=True, text=True, timeout=120, env=child_env())
    assert analyze.returncode == 0, analyze.stderr


def test_script_form_without_python_and_explicit_steps(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *FAST, TINY, "--steps", "5", "--explicit")
    assert res.returncode == 0, res.stderr
    meta = meta_of(out)
    assert meta["ranks"][0]["steps_seen"] == 5  # the optimizer hook and aiprof.step() are not both counted
    assert step_names(out / "rank0.pt.trace.json.gz") == ["ProfilerStep#2", "ProfilerStep#3"]


def test_exception_keeps_steps_so_far_and_exit_status(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *RECORD_4, "--", "python", TINY, "--steps", "9", "--crash-at", "5")
    assert res.returncode == 1
    assert "ValueError: boom at step 5" in res.stderr
    meta = meta_of(out)
    assert meta["status"] == "incomplete" and "status 1" in meta["reason"]
    assert "ValueError" in meta["ranks"][0]["reason"]
    assert {"ProfilerStep#2", "ProfilerStep#3"} <= set(step_names(out / "rank0.pt.trace.json.gz"))
    assert (out / "telemetry.csv").stat().st_size > 0


def test_nonzero_exit_status_is_preserved(tmp_path: Path) -> None:
    res = run_aiprof("run", "--out", str(tmp_path / "run"), *FAST, "--", "python", TINY, "--steps", "5", "--exit-code", "7")
    assert res.returncode == 7
    assert meta_of(tmp_path / "run")["status"] == "incomplete"


@pytest.mark.parametrize(
    "sig,code,group",
    [(signal.SIGINT, 130, False), (signal.SIGINT, 130, True), (signal.SIGTERM, 143, False)],
    ids=["sigint", "ctrl-c-to-process-group", "sigterm"],
)
def test_signal_flushes_and_keeps_status(tmp_path: Path, sig: signal.Signals, code: int, group: bool) -> None:
    """``group``: the signal goes to the whole process group, as a terminal's Ctrl-C does, so the script
    gets it twice (directly and forwarded by aiprof run) and must still flush once and exit 130."""
    out = tmp_path / "run"
    cmd = aiprof_cmd("run", "--out", str(out), *RECORD_4, "--", "python", TINY, "--steps", "9", "--hang-at", "5")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT, start_new_session=group
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    line = ""
    while "READY" not in line and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
    assert "READY" in line, proc.stderr.read() if proc.stderr else ""
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    meta = meta_of(out)
    assert meta["status"] == "incomplete"
    assert signal.Signals(sig).name in meta["reason"]
    names = step_names(out / "rank0.pt.trace.json.gz")
    assert {"ProfilerStep#2", "ProfilerStep#3"} <= set(names)
    assert not list(out.glob(".*.part"))


def test_too_few_steps_says_so_and_writes_what_exists(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), "--", "python", TINY, "--steps", "3")
    assert res.returncode == 2
    err = [line for line in res.stderr.splitlines() if line.startswith("aiprof: error:")]
    assert len(err) == 1 and "no steps recorded: the script ran 3 step(s)" in err[0] and "at least 11 steps" in err[0]
    assert res.stderr.strip().splitlines()[-1] == err[0]
    meta = meta_of(out)
    assert meta["status"] == "incomplete" and meta["trace_files"] == []
    assert (out / "telemetry.csv").exists() and (out / "dataloader.rank0.csv").exists()
    assert not list(out.glob("*.json.gz"))
    # analysing the folder later says the same: what is missing, why, and what to do (one line, exit 2)
    later = run_aiprof("analyze", str(out))
    assert later.returncode == 2 and later.stderr.count("\n") == 1, later.stderr
    assert "has meta.json but no trace: no steps recorded: the script ran 3 step(s)" in later.stderr
    assert "at least 11 steps" in later.stderr and "run more steps" in later.stderr


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--", "python", "missing_script.py"], "missing_script.py: no such script"),
        (["--", "python", str(SCRIPTS / "bad_syntax.py")], "bad_syntax.py:2: syntax error"),
        ([], "no command given"),
        (["--kill-grace", "nan", "--", "python", TINY], "--kill-grace: expected a number of seconds >= 0"),
        (["--kill-grace", "-1", "--", "python", TINY], "--kill-grace: expected a number of seconds >= 0"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path: Path, argv: list[str], needle: str) -> None:
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *argv)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and needle in res.stderr
    assert not out.exists()  # nothing created, nothing half-written


def test_unwritable_and_existing_out(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = run_aiprof("run", "--out", str(blocker / "run"), "--", "python", TINY)
    assert res.returncode == 2 and "cannot create the run directory" in res.stderr
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "meta.json").write_text(json.dumps({"status": "complete"}))
    res = run_aiprof("run", "--out", str(existing), "--", "python", TINY)
    assert res.returncode == 2 and "never overwrites" in res.stderr
    assert json.loads((existing / "meta.json").read_text()) == {"status": "complete"}


def test_no_torch_in_the_interpreter(tmp_path: Path) -> None:
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    res = run_aiprof("run", "--out", str(tmp_path / "run"), "--", str(venv / "bin" / "python"), TINY)
    assert res.returncode == 2 and "torch is not installed" in res.stderr
    assert res.stderr.strip().count("\n") == 0


@pytest.mark.parametrize("marker,steps", [("Net", 6), ("infer_lib:predict", 6)])
def test_step_marker_for_inference(tmp_path: Path, marker: str, steps: int) -> None:
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *FAST, "--step-marker", marker, "--", "python", str(SCRIPTS / "infer.py"), str(steps))
    assert res.returncode == 0, res.stderr
    meta = meta_of(out)
    assert meta["ranks"][0]["steps_seen"] == steps
    assert step_names(out / "rank0.pt.trace.json.gz") == ["ProfilerStep#2", "ProfilerStep#3"]


def test_python_m_aiprof_and_default_out(tmp_path: Path) -> None:
    res = subprocess.run(
        aiprof_cmd("run", *FAST, "--no-telemetry", "--no-summary", TINY, "--steps", "4"),
        capture_output=True, text=True, timeout=120, env=child_env(), cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    runs = list((tmp_path / "aiprof-runs").iterdir())
    assert len(runs) == 1 and runs[0].name.endswith("-tiny_train")
    meta = meta_of(runs[0])
    assert meta["telemetry"] == {"enabled": False} and not (runs[0] / "telemetry.csv").exists()


def test_sigkill_of_the_script_keeps_exported_cycles(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = aiprof_cmd("run", "--out", str(out), *FAST, "--", "python", TINY, "--steps", "9", "--hang-at", "6")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    while line and "READY" not in line:
        line = proc.stdout.readline()
    assert "READY" in line
    pid = int(line.split("pid=")[1])
    os.kill(pid, signal.SIGKILL)  # the script itself: no flush of its own is possible
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 137, err
    meta = meta_of(out)
    assert meta["status"] == "incomplete" and "SIGKILL" in meta["reason"]
    trace = out / f"pid{pid}.pt.trace.json.gz"
    assert step_names(trace) == ["ProfilerStep#2", "ProfilerStep#3"]


def test_an_inference_loop_needs_no_marker(tmp_path: Path) -> None:
    """Six no-grad forwards of one model and no optimizer: each top-level forward is a step (issue #24)."""
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *FAST, "--", "python", str(SCRIPTS / "infer.py"), "6")
    assert res.returncode == 0, res.stderr
    assert meta_of(out)["status"] == "complete"


def test_no_step_detected_is_exit_2(tmp_path: Path) -> None:
    """No optimizer, no module forward, no marker: nothing says where a step is."""
    script = tmp_path / "loop.py"
    script.write_text("import torch\nx = torch.randn(64, 64)\nfor _ in range(6):\n    x = (x @ x).tanh()\n"
                      "print('done', flush=True)\n")
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *FAST, "--", "python", str(script))
    assert res.returncode == 2
    err = [line for line in res.stderr.splitlines() if line.startswith("aiprof: error:")]
    assert len(err) == 1 and "no steps detected" in err[0]
    assert meta_of(out)["status"] == "incomplete"
    later = run_aiprof("analyze", str(out))
    assert later.returncode == 2 and "has meta.json but no trace: no steps detected" in later.stderr


def test_environment_sitecustomize_still_runs(tmp_path: Path) -> None:
    """aiprof's injected sitecustomize shadows the environment's; it must run it afterwards."""
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "site-ran"
    (site / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'a').write('x')\n")
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *FAST, "--no-telemetry", "--", "python", TINY, "--steps", "4", PYTHONPATH=str(site))
    assert res.returncode == 0, res.stderr
    assert marker.exists()  # (the torch preflight runs no Python of the script's interpreter here)
    assert step_names(out / "rank0.pt.trace.json.gz") == ["ProfilerStep#2"]
