"""Helpers for capture tests: run ``python -m aiprof run`` as a real subprocess, read what it wrote.

A uniquely named module, not ``conftest``: that name is ambiguous across test folders.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
EXAMPLE = ROOT / "examples" / "train_tiny.py"
FAST = ["--wait", "1", "--warmup", "1", "--active", "2", "--telemetry-interval", "0.05"]
SECRET = "aiprof-test-secret-d41d8cd9"


def child_env(**extra: str) -> dict[str, str]:
    """The test's environment plus a fake secret that must never reach the run directory."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["AIPROF_TEST_TOKEN"] = SECRET
    env["OMP_NUM_THREADS"] = "1"
    env.pop("AIPROF_CAPTURE", None)
    env.pop("AIPROF_RUN_DIR", None)
    env.update(extra)
    return env


def aiprof_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "aiprof", *args]


def run_aiprof(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(aiprof_cmd(*args), capture_output=True, text=True, timeout=timeout, env=child_env(**env), cwd=ROOT)


def meta_of(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "meta.json").read_text())
    return data


def trace_events(path: Path) -> list[dict[str, Any]]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events: list[dict[str, Any]] = doc["traceEvents"]
    return events


def step_names(path: Path) -> list[str]:
    return sorted(e["name"] for e in trace_events(path) if str(e.get("name", "")).startswith("ProfilerStep#"))
