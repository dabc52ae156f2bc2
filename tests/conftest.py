"""Shared test fixtures. This folder is on sys.path (pytest's rootdir-relative import), so unit tests can
``from kineto_builder import TraceBuilder``. Add fixtures below; do not remove others'."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The shared real traces (``../shared/traces``); tests that need them skip when it is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"shared traces not found at {SHARED_TRACES.resolve()}")
    return SHARED_TRACES.resolve()
