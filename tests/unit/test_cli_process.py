"""Process-level settings of the read-only CLI commands (each check runs in a fresh interpreter)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

SETTINGS = """
import os, sys
from aiprof import cli, heap
cli._import_numpy_without_blas_threads()
print(len(os.listdir("/proc/self/task")), "OPENBLAS_NUM_THREADS" in os.environ, heap.keep_freed_memory())
"""


def _run(code: str, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="counts threads through /proc")
def test_numpy_starts_no_blas_threads_and_the_environment_is_restored() -> None:
    threads, leaked, heap_tuned = _run(SETTINGS)
    assert threads == "1"  # OpenBLAS would start one thread per core
    assert leaked == "False"
    assert heap_tuned == str(platform.libc_ver()[0] == "glibc")


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="counts threads through /proc")
def test_a_users_blas_setting_is_kept() -> None:
    threads, leaked, _ = _run(SETTINGS.replace('"OPENBLAS_NUM_THREADS" in os.environ',
                                               'os.environ["OPENBLAS_NUM_THREADS"]'), OPENBLAS_NUM_THREADS="2")
    assert leaked == "2"
    assert int(threads) <= 2


def test_a_verb_builds_only_its_own_parser() -> None:
    code = ("import sys; from aiprof.cli import build_parser, _VERBS; _, one = build_parser('analyze'); "
            "print(','.join(one), 'aiprof.cli.demo' in sys.modules); _, every = build_parser(); "
            "print(sorted(every) == sorted(_VERBS))")
    first, second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert first == "analyze False"
    assert second == "True"


INTERRUPT_AT_NUMPY = """
import importlib.abc, sys

class Interrupt(importlib.abc.MetaPathFinder):  # Ctrl-C while the CLI imports NumPy, before main()
    def find_spec(self, name, path=None, target=None):
        if name == "numpy":
            raise KeyboardInterrupt
        return None

from aiprof import cli
assert "numpy" not in sys.modules
sys.meta_path.insert(0, Interrupt())
sys.argv = ["aiprof", "analyze", "missing.json"]
cli.console_main()
"""


def test_ctrl_c_before_main_is_one_line() -> None:
    done = subprocess.run([sys.executable, "-c", INTERRUPT_AT_NUMPY], capture_output=True, text=True)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "aiprof: interrupted"
