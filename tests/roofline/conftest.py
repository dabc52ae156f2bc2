from __future__ import annotations

from pathlib import Path

import pytest

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.skip(f"shared traces not found at {TRACES}")
    return TRACES
