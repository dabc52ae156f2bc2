"""Under a sanitizer runtime aiprof forks nothing (``cores.fork_safe``): GCC 12's libasan takes no locks
around ``fork``, so a child forked while another thread holds its allocator lock would wait forever. The
forked work (decode helpers, the folder pool, the forked half of an analysis, the Nsight reader's helpers)
is then done in the process itself, with the same results; threads stay."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import os
from aiprof.trace import cores
from aiprof.trace.executors import local_map
from aiprof.analysis import forked
def pid_of(job):
    return os.getpid()
print(cores.fork_safe(), cores.worker_count(), cores.thread_count() == cores._wanted())
print(sorted(set(local_map(pid_of, [("a",), ("b",), ("c",)], 3, None))) == [os.getpid()])
print(forked.start(lambda: 1) is None)
"""


def _libasan() -> str | None:
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    found = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return found if os.path.isabs(found) and os.path.exists(found) else None


def _probe(**env: str) -> list[str]:
    full = dict(os.environ, PYTHONPATH=str(ROOT / "src"), AIPROF_DECODE_WORKERS="2", **env)
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=full)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split("\n")[:3]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_without_a_sanitizer_the_helpers_fork() -> None:
    assert _probe() == ["True 2 True", "False", "False"]


@pytest.mark.skipif(_libasan() is None, reason="no GCC libasan to preload")
def test_under_asan_nothing_forks_and_the_work_is_done_here() -> None:
    lib = _libasan()
    assert lib is not None
    assert _probe(LD_PRELOAD=lib, ASAN_OPTIONS="detect_leaks=0") == ["False 0 True", "True", "True"]
