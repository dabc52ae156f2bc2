"""``aiprof run`` under faults, with real processes: a script that ends by ``os._exit`` or SIGKILL, one
that ignores SIGTERM, aiprof itself killed, and helper processes (a ``multiprocessing.Pool``) that are
not ranks. Waits are bounded by generous deadlines; nothing asserts how fast anything happens."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from capture_helpers import FAST, ROOT, SCRIPTS, aiprof_cmd, child_env, meta_of, run_aiprof, step_names

pytestmark = [pytest.mark.usefixtures("torch_available"), pytest.mark.torch]

FAULTY = str(SCRIPTS / "faulty_train.py")
POOL = str(SCRIPTS / "pool_train.py")


def _start(out: Path, *script_args: str, aiprof_args: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    cmd = aiprof_cmd("run", "--out", str(out), *FAST, "--no-summary", *aiprof_args, "--", "python", FAULTY, *script_args)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT,
                            preexec_fn=_as_from_a_terminal)


def _as_from_a_terminal() -> None:
    """aiprof as a terminal starts it: SIGHUP at its default and no signal blocked. An ignored or blocked
    signal is inherited across exec, and the test process may have SIGHUP ignored or blocked (``nohup``, or a
    library an earlier test loaded): the script would then never see the SIGHUP aiprof forwards (seen in
    `make test`: the SIGHUP case alone timed out, and passed when run by itself)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP, signal.SIGTERM, signal.SIGINT})


def _read_pids(proc: subprocess.Popen[str]) -> dict[str, int]:
    """The pids the script announces (``GRANDCHILD pid=``, ``READY pid=``), up to READY."""
    assert proc.stdout is not None
    pids: dict[str, int] = {}
    deadline = time.monotonic() + 120
    while "READY" not in pids and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if "pid=" in line:
            pids[line.split()[0]] = int(line.split("pid=")[1])
    assert "READY" in pids, proc.communicate(timeout=60)[1]
    return pids


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return not _alive(pid)


def _kill_quietly(*pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- the script ends without aiprof's flush ---------------------------------------------------------


def test_os_exit_after_the_loop_keeps_the_run_complete(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *FAST, "--no-summary", "--", "python", FAULTY, "--steps", "6", "--end", "os_exit")
    assert res.returncode == 0, res.stderr
    meta = meta_of(out)
    assert meta["status"] == "complete", meta.get("reason")
    assert [(r["rank"], r["status"]) for r in meta["ranks"]] == [(0, "complete")]
    assert step_names(out / "rank0.pt.trace.json.gz") == ["ProfilerStep#2", "ProfilerStep#3"]
    assert not [p.name for p in out.iterdir() if p.name.endswith((".part", ".state"))]


def test_os_exit_inside_the_recorded_cycle_keeps_its_steps(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ("--wait", "1", "--warmup", "1", "--active", "4")
    res = run_aiprof("run", "--out", str(out), *args, "--no-summary", "--", "python", FAULTY,
                     "--steps", "9", "--end", "os_exit", "--at", "5", "--code", "3")
    assert res.returncode == 3, res.stderr
    meta = meta_of(out)
    assert meta["status"] == "incomplete" and "status 3" in meta["reason"] and "os._exit(3)" in meta["reason"]
    assert {"ProfilerStep#2", "ProfilerStep#3"} <= set(step_names(out / "rank0.pt.trace.json.gz"))


@pytest.mark.parametrize(
    "at,needle",
    [("0", "after importing torch, before its first step"), ("2", "while profiling, before any recorded cycle was exported")],
    ids=["before-first-step", "while-profiling"],
)
def test_sigkill_before_any_trace_says_what_happened(tmp_path: Path, at: str, needle: str) -> None:
    out = tmp_path / "run"
    proc = _start(out, "--steps", "9", "--end", "hang", "--at", at)
    pid = _read_pids(proc)["READY"]
    os.kill(pid, signal.SIGKILL)  # the script itself: no flush of its own is possible
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 137, err
    errors = [line for line in err.splitlines() if line.startswith("aiprof: error:")]
    assert len(errors) == 1, err
    assert "killed by SIGKILL" in errors[0] and needle in errors[0] and "no trace was written" in errors[0]
    assert "no profiled process imported torch" not in err
    meta = meta_of(out)
    assert meta["status"] == "incomplete" and meta["exit_signal"] == "SIGKILL" and meta["trace_files"] == []
    assert not list(out.glob(".pid*"))


def test_failing_before_torch_is_not_blamed_on_torch(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *FAST, "--", "python", FAULTY, "--end", "normal", "--at", "-2", "--code", "4")
    assert res.returncode == 4
    assert "the script exited with status 4 before any process imported torch" in res.stderr


# --- signals and escalation --------------------------------------------------------------------------


def test_script_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _start(out, "--steps", "9", "--end", "hang", "--at", "6", "--ignore-term", aiprof_args=("--kill-grace", "1"))
    pid = _read_pids(proc)["READY"]
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        _kill_quietly(pid)
    assert proc.returncode == 137, err
    assert "did not exit within 1 s of SIGTERM; killed with SIGKILL" in err
    meta = meta_of(out)
    assert meta["status"] == "incomplete" and "SIGKILL" in meta["reason"] and meta["signals_received"] == ["SIGTERM"]
    assert "did not exit within 1 s of SIGTERM" in meta["escalation"]
    assert step_names(out / f"pid{pid}.pt.trace.json.gz") == ["ProfilerStep#2", "ProfilerStep#3"]  # salvaged


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_signal_to_aiprof_reaches_the_scripts_process_group(tmp_path: Path, sig: signal.Signals) -> None:
    """The script and a process it started both end; aiprof exits with the script's status."""
    out = tmp_path / "run"
    proc = _start(out, "--steps", "9", "--end", "hang", "--at", "6", "--grandchild")
    pids = _read_pids(proc)
    try:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + sig.value, err
        assert _gone_within(pids["READY"], 60) and _gone_within(pids["GRANDCHILD"], 60)
    finally:
        _kill_quietly(*pids.values())
    assert meta_of(out)["status"] == "incomplete"


def test_sigkill_of_aiprof_does_not_leave_the_script_running(tmp_path: Path) -> None:
    proc = _start(tmp_path / "run", "--end", "hang", "--at", "-2")
    pid = _read_pids(proc)["READY"]
    try:
        proc.kill()
        proc.communicate(timeout=60)
        assert _gone_within(pid, 60), "the script outlived a SIGKILLed aiprof run"
    finally:
        _kill_quietly(pid)


# --- helper processes are not ranks ------------------------------------------------------------------


@pytest.mark.parametrize("context,teardown", [("spawn", "close"), ("spawn", "terminate"), ("fork", "terminate")])
def test_pool_workers_are_not_ranks(tmp_path: Path, context: str, teardown: str) -> None:
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *FAST, "--no-summary", "--", "python", POOL, context, teardown, timeout=300)
    assert res.returncode == 0, res.stderr
    main_pid = int(res.stdout.split("done pid=")[1].split()[0])
    meta = meta_of(out)
    assert meta["status"] == "complete", meta.get("reason")
    assert [(r["rank"], r["pid"], r["status"]) for r in meta["ranks"]] == [(0, main_pid, "complete")]
    assert meta["trace_files"] == ["rank0.pt.trace.json.gz"]
    assert step_names(out / "rank0.pt.trace.json.gz") == ["ProfilerStep#2", "ProfilerStep#3"]
    assert sorted(p.name for p in out.glob("dataloader*.csv")) == ["dataloader.rank0.csv"]
    steps = [line.split(",")[0] for line in (out / "dataloader.rank0.csv").read_text().split()[1:]]
    assert steps[:2] == ["-1", "0"]  # the main process's steps, not a helper's single setup row


# --- in a terminal -----------------------------------------------------------------------------------


def test_in_a_terminal_ctrl_c_reaches_the_script_once_and_it_shares_the_group(tmp_path: Path) -> None:
    """Typed at a prompt, the script stays in aiprof's (foreground) process group, so the terminal's
    keys and ``input()`` work as without aiprof; Ctrl-C reaches it from the terminal and from aiprof
    and it still flushes once and exits 130."""
    import pty
    import re
    import select

    out = tmp_path / "run"
    cmd = aiprof_cmd("run", "--out", str(out), *FAST, "--no-summary", "--", "python", FAULTY, "--steps", "9", "--end", "hang", "--at", "6")
    env = child_env()
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child execs at once
        os.chdir(ROOT)
        os.execve(cmd[0], cmd, env)
    output = b""

    def read_for(seconds: float, until: bytes | None = None) -> None:
        nonlocal output
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (until is None or until not in output):
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                output += chunk

    status: int | None = None
    try:
        read_for(120, until=b"READY pid=")
        read_for(1, until=b"\n")
        match = re.search(rb"READY pid=(\d+)", output)
        assert match, output.decode(errors="replace")
        script = int(match.group(1))
        assert os.getpgid(script) == pid  # aiprof leads the terminal's session and foreground group
        os.write(fd, b"\x03")  # Ctrl-C at the terminal: SIGINT to the whole foreground group
        deadline = time.monotonic() + 120
        while status is None and time.monotonic() < deadline:
            read_for(0.5)
            done, raw = os.waitpid(pid, os.WNOHANG)
            status = raw if done else None
        assert status is not None, output.decode(errors="replace")
    finally:
        if status is None:
            _kill_quietly(pid)
            os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 130, output.decode(errors="replace")
    meta = meta_of(out)
    assert meta["status"] == "incomplete" and "SIGINT" in meta["reason"]
    assert step_names(out / "rank0.pt.trace.json.gz") == ["ProfilerStep#2", "ProfilerStep#3"]


def test_a_helper_that_never_stepped_dies_by_sigterm_without_a_flush(tmp_path: Path) -> None:
    """A process that imported torch under ``aiprof run`` but never ran a step (a pool worker) has
    nothing to flush: on SIGTERM it dies at once, as without aiprof. Flushing there ran Python in the
    handler that could wait on a lock the interrupted code held, and once hung ``pool.join()``."""
    import signal
    import subprocess
    import sys
    import textwrap

    marker = tmp_path / "flushed"
    code = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from aiprof.capture.options import CaptureOptions
        from aiprof.capture.session import CaptureSession
        session = CaptureSession(CaptureOptions(), Path({str(tmp_path)!r}), lazy_start=True, write_traces=False)
        session.finalize = lambda *a, **k: Path({str(marker)!r}).write_text("x")
        session.install_signal_handlers()
        os.kill(os.getpid(), signal.SIGTERM)
        print("survived")
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == -signal.SIGTERM, res.stderr
    assert "survived" not in res.stdout and not marker.exists()
