"""Shared test fixtures. This folder is on sys.path (pytest's rootdir-relative import), so unit tests can
``from kineto_builder import TraceBuilder``. Add fixtures below; do not remove others'."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

SHARED_TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"

# The Ctrl-C tests need SIGINT deliverable, here and in the processes they start. A test run started in
# the background (`nohup make test &`, a non-interactive shell's `&`) inherits SIGINT ignored, and an
# ignored signal stays ignored across exec: handle it here (a handled signal is reset to the default
# in every process started from this one).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The shared real traces (``../shared/traces``); tests that need them skip when it is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"shared traces not found at {SHARED_TRACES.resolve()}")
    return SHARED_TRACES.resolve()
