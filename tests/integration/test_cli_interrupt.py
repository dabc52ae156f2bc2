"""Ctrl-C while `aiprof analyze` decodes a large trace with helper processes: one line, exit 130, no
traceback (from the reader or a helper), no process left behind, no report written."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MTIA = ROOT / ".." / "shared" / "traces" / "hta" / "mtia_trace_single_rank" / "mtia_rank_0.json.gz"


@pytest.mark.skipif(not MTIA.exists(), reason="shared traces not found")
@pytest.mark.skipif(sys.platform == "win32", reason="process groups")
@pytest.mark.parametrize("delay", [0.15, 0.3])
def test_ctrl_c_during_a_parallel_load(tmp_path: Path, delay: float) -> None:
    out = tmp_path / "report.json"
    env = dict(os.environ, AIPROF_DECODE_WORKERS="2")
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiprof", "analyze", str(MTIA), "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background shell may ignore it
    )
    time.sleep(delay)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    _, err = proc.communicate(timeout=60)
    text = err.decode()
    if proc.returncode == 0:  # the machine was fast enough to finish first: nothing to check
        pytest.skip("the analysis finished before the interrupt")
    assert proc.returncode == 130, text
    assert text.strip() == "aiprof: interrupted", text
    assert not out.exists()
    time.sleep(0.3)
    if shutil.which("pgrep"):
        alive = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert not alive, f"processes left in the group: {alive}"


INTERRUPT_DURING_IMPORTS = """
import importlib.abc, os, sys

class Interrupt(importlib.abc.MetaPathFinder):  # Ctrl-C while the CLI imports the rules, after priming
    def find_spec(self, name, path=None, target=None):
        if name == "aiprof.rules.registry":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Interrupt())
from aiprof import cli
from aiprof.trace.kineto import stream
code = cli.main(["analyze", sys.argv[1], "-o", sys.argv[2]])
try:
    os.waitpid(-1, os.WNOHANG)
    children = "children left"
except ChildProcessError:
    children = "no children"
print(code, children, flush=True)
"""


@pytest.mark.skipif(not MTIA.exists(), reason="shared traces not found")
@pytest.mark.skipif(not hasattr(os, "fork"), reason="helpers are forked")
def test_ctrl_c_while_primed_helpers_run_stops_them(tmp_path: Path) -> None:
    """Ctrl-C after the helpers were primed but before the load takes them over: they are stopped and
    reaped before the command returns (not left to exit on their own after this process is gone)."""
    out = tmp_path / "report.json"
    env = dict(os.environ, AIPROF_DECODE_WORKERS="2")
    done = subprocess.run([sys.executable, "-c", INTERRUPT_DURING_IMPORTS, str(MTIA), str(out)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["130", "no", "children"], done.stderr
    assert done.stderr.strip() == "aiprof: interrupted"
    assert not out.exists()


INTERRUPT_WHILE_A_VERB_IS_IMPORTED = """
import importlib.abc, sys, time

SLOW = sys.argv[1]

class Slow(importlib.abc.MetaPathFinder):  # the verb's module takes long to import; Ctrl-C comes then
    def find_spec(self, name, path=None, target=None):
        if name == SLOW:
            print("importing", flush=True)
            time.sleep(60)
        return None

sys.meta_path.insert(0, Slow())
sys.argv = ["aiprof", *sys.argv[2:]]
from aiprof.cli import console_main
console_main()
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT")
@pytest.mark.parametrize("module, argv", [
    ("aiprof.cli.compare", ["compare", "a", "b"]),  # while the parser is built (the verb's module)
    ("aiprof.app", ["analyze", "missing.json"]),  # while the command imports what it runs
    ("aiprof.cli.peaks", ["--help"]),  # while the parser of every verb is built
])
def test_ctrl_c_while_the_cli_starts_is_one_line(module: str, argv: list[str]) -> None:
    """A real SIGINT while the CLI is still importing: one line and 130, at whatever point it lands."""
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPT_WHILE_A_VERB_IS_IMPORTED, module, *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "importing"  # the import is under way: no timing guess
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip() == "aiprof: interrupted"


INTERRUPT_AT_VERB_IMPORT = """
import importlib.abc, sys

class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "aiprof.cli.analyze":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Interrupt())
from aiprof.cli import main
print(main(["analyze", "missing.json"]))
"""


def test_main_reports_ctrl_c_while_building_the_parser() -> None:
    done = subprocess.run([sys.executable, "-c", INTERRUPT_AT_VERB_IMPORT], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "130", done.stderr
    assert done.stderr.strip() == "aiprof: interrupted"
