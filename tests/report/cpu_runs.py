"""Real CPU-only run directories for the report tests: ``aiprof run`` on a small torch training loop
(``scripts/cpu_steps.py``), recorded once per session. A uniquely named module, not ``conftest``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "scripts" / "cpu_steps.py"
# 8 steps: skip 1, warm up 1, record 4 (each ≥ 50 ms); telemetry every 20 ms, so the recorded span holds
# several samples.
RUN_ARGS = ["--wait", "1", "--warmup", "1", "--active", "4", "--telemetry-interval", "0.02"]


def aiprof(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m aiprof ARGS`` as a user runs it (the test's Python; its PYTHONPATH)."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    full_env.pop("AIPROF_CAPTURE", None)
    full_env.pop("AIPROF_RUN_DIR", None)
    return subprocess.run([sys.executable, "-m", "aiprof", *args], capture_output=True, text=True, timeout=300,
                          env=full_env, cwd=cwd)


@pytest.fixture(scope="session")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete CPU-only run directory with telemetry and data-loader waits."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("cpu-run") / "run"
    res = aiprof("run", "--out", str(out), "--no-summary", *RUN_ARGS, "--", sys.executable, str(SCRIPT))
    assert res.returncode == 0, res.stderr
    assert (out / "rank0.pt.trace.json.gz").exists() and (out / "telemetry.csv").exists()
    return out
