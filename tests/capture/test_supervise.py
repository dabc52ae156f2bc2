"""The pieces of capture under faults without torch: the supervised child (process group, signals,
escalation, parent death), the per-process state files, and the log that takes torch's chatter.
Real processes, bounded waits; nothing asserts how fast anything happens."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from aiprof.capture import procstate
from aiprof.capture.recorder import CAPTURE_LOG, discard_empty_log, output_to
from aiprof.capture.supervise import Supervisor

IGNORES_TERM = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(120)"


def _wait_for_file(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists()


def _started(tmp_path: Path, code: str, **kwargs: object) -> Supervisor:
    flag = tmp_path / "up"
    script = f"open({str(flag)!r}, 'w').close()\n{code}"
    sup = Supervisor([sys.executable, "-c", script], dict(os.environ), **kwargs)  # type: ignore[arg-type]
    sup.start()
    _wait_for_file(flag)
    return sup


def _send_later(sup: Supervisor, signum: int) -> threading.Timer:
    """Deliver ``signum`` through the supervisor's handler, as if aiprof had received it."""
    timer = threading.Timer(0.2, sup.forward, args=(signum, None))
    timer.start()
    return timer


@pytest.mark.parametrize("own_group", [True, False], ids=["own-group", "shared-group"])
def test_a_child_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path, own_group: bool, capsys: pytest.CaptureFixture[str]) -> None:
    sup = _started(tmp_path, IGNORES_TERM, grace_s=0.5, own_group=own_group)
    timer = _send_later(sup, signal.SIGTERM)
    try:
        rc = sup.wait()
    finally:
        timer.cancel()
        _stop(sup)
    assert rc == -signal.SIGKILL
    assert sup.signals == [signal.SIGTERM] and sup.escalated is not None and "SIGTERM" in sup.escalated
    assert "did not exit within 0.5 s of SIGTERM; killed with SIGKILL" in capsys.readouterr().err


def test_own_group_and_signals_reach_the_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    code = (
        "import os, subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pid_file)!r} + '.tmp', 'w').write(str(p.pid))\n"
        f"os.replace({str(pid_file)!r} + '.tmp', {str(pid_file)!r})\n"
        "time.sleep(120)\n"
    )
    sup = _started(tmp_path, code, grace_s=60, own_group=True)
    assert sup.child is not None and os.getpgid(sup.child.pid) == sup.child.pid != os.getpgrp()
    _wait_for_file(pid_file)
    grandchild = int(pid_file.read_text())
    timer = _send_later(sup, signal.SIGTERM)
    try:
        assert sup.wait() == -signal.SIGTERM
        deadline = time.monotonic() + 60
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(grandchild)
    finally:
        timer.cancel()
        _kill_quietly(grandchild)
        _stop(sup)
    assert sup.escalated is None


def test_a_child_still_flushing_gets_more_time(tmp_path: Path) -> None:
    """At the end of the grace period a process that says it is writing its trace is not killed."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    code = (
        "import os, signal, time, pathlib\n"
        f"d = pathlib.Path({str(run_dir)!r})\n"
        "def on_term(signum, frame):\n"
        "    open(d / f'.pid{os.getpid()}.state', 'a').write('torch\\nprofiling\\nflushing\\n')\n"
        "    time.sleep(1.5)\n"
        "    open(d / f'.pid{os.getpid()}.state', 'a').write('flushed\\n')\n"
        "    raise SystemExit(5)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "time.sleep(120)\n"
    )
    sup = _started(tmp_path, code, grace_s=0.2, run_dir=run_dir, own_group=True)
    timer = _send_later(sup, signal.SIGTERM)
    try:
        assert sup.wait() == 5
    finally:
        timer.cancel()
        _stop(sup)
    assert sup.escalated is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_the_child_dies_with_its_supervisor(tmp_path: Path) -> None:
    """A process that runs a Supervisor is SIGKILLed; the supervised child must not survive it."""
    pid_file = tmp_path / "child"
    code = (
        "import os, sys\n"
        "from aiprof.capture.supervise import Supervisor\n"
        "sup = Supervisor([sys.executable, '-c', 'import time; time.sleep(120)'], dict(os.environ), grace_s=5)\n"
        "pid = sup.start()\n"
        f"open({str(pid_file)!r} + '.tmp', 'w').write(str(pid))\n"
        f"os.replace({str(pid_file)!r} + '.tmp', {str(pid_file)!r})\n"
        "sup.wait()\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        _wait_for_file(pid_file)
        child = int(pid_file.read_text())
        parent.kill()
        parent.wait(timeout=60)
        deadline = time.monotonic() + 60
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the supervised child outlived its SIGKILLed supervisor"
    finally:
        parent.kill()
        if pid_file.exists():
            _kill_quietly(int(pid_file.read_text()))


def test_process_states_are_read_and_removed(tmp_path: Path) -> None:
    procstate.note(tmp_path, procstate.TORCH, pid=11)
    procstate.note(tmp_path, procstate.TORCH, pid=12)
    procstate.note(tmp_path, procstate.PROFILING, pid=12)
    procstate.note(tmp_path, procstate.FLUSHING, pid=12)
    (tmp_path / ".pid13.cycle0.part").write_text("{}")
    states = procstate.read_all(tmp_path)
    assert sorted(states) == [11, 12]
    assert states[11].imported_torch and not states[11].profiling and not states[11].flushing
    assert states[12].profiling and states[12].flushing and procstate.any_flushing(tmp_path)
    procstate.note(tmp_path, procstate.FLUSHED, pid=12)
    assert not procstate.any_flushing(tmp_path)
    procstate.remove_all(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [".pid13.cycle0.part"]


def test_output_to_takes_standard_error_of_python_and_native_code(tmp_path: Path) -> None:
    log = tmp_path / CAPTURE_LOG
    code = (
        "import os, sys\n"
        "from aiprof.capture.recorder import output_to\n"
        "print('visible-before', file=sys.stderr, flush=True)\n"
        f"with output_to(__import__('pathlib').Path({str(log)!r})):\n"
        "    print('hidden-python', file=sys.stderr)\n"
        "    os.write(2, b'hidden-native\\n')\n"
        "print('visible-after', file=sys.stderr, flush=True)\n"
        "os.close(2)\n"
        f"with output_to(__import__('pathlib').Path({str(log)!r})):\n"
        "    pass\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert res.returncode == 0, res.stderr
    assert res.stderr.split() == ["visible-before", "visible-after"]
    assert log.read_text().split() == ["hidden-python", "hidden-native"]


def test_an_empty_log_is_discarded(tmp_path: Path) -> None:
    with output_to(tmp_path / CAPTURE_LOG):
        pass
    assert (tmp_path / CAPTURE_LOG).exists()
    discard_empty_log(tmp_path)
    assert not (tmp_path / CAPTURE_LOG).exists()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _stop(sup: Supervisor) -> None:
    """Kill what is left of a test's child, only while it is unreaped (its pid cannot be reused)."""
    if sup.child is not None and sup.child.poll() is None:
        sup.kill()
        sup.child.wait(timeout=60)


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
