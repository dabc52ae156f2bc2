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


# Test layers (docs/architecture.md, "Tests"). Markers are given by where a test lives and what it needs,
# so a new test file is classified without anyone remembering to mark it:
#   torch  - the module imports torch or uses the `torch_available` fixture (real PyTorch runs);
#   slow   - end-to-end and integration tests (subprocesses, a browser, every shared trace).
# `make test-fast` runs `-m "not slow and not torch"`: unit tests on synthetic traces, in seconds.
_SLOW_DIRS = ("integration", "capture", "golden")  # golden: every shared trace's JSON report
_SLOW_FILES = {
    "test_html_browser.py",
    "test_rules_real_traces.py",
    "test_rules_planted.py",
    "test_rules_demo.py",
    "test_cli_process.py",
    "test_compare_export.py",
    "test_partial_runs.py",
    "test_loader_fuzz.py",
    "test_native_columnar.py",
    "test_flop_counter.py",
    "test_rule_order.py",  # every corpus case and every shared trace, rules reversed and shuffled
    "test_nsys_shared.py",  # every shared Nsight sample against independent SQL
    "test_capture.py",  # memory/: real PyTorch runs through aiprof.profile (pytest.importorskip("torch"))
    "test_kineto.py",  # memory/: PyTorch runs and shared real traces
}
_TORCH_SOURCE_CACHE: dict[Path, bool] = {}


def _uses_torch(path: Path) -> bool:
    if path not in _TORCH_SOURCE_CACHE:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            text = ""
        _TORCH_SOURCE_CACHE[path] = any(
            marker in text for marker in ("import torch", "torch_available", 'importorskip("torch")')
        )
    return _TORCH_SOURCE_CACHE[path]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_root = Path(__file__).resolve().parent
    for item in items:
        path = Path(str(item.fspath)).resolve()
        try:
            parts = path.relative_to(tests_root).parts
        except ValueError:
            continue
        if _uses_torch(path) or "torch_available" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.torch)
        if parts[0] in _SLOW_DIRS or path.name in _SLOW_FILES or "browser" in item.fixturenames:
            item.add_marker(pytest.mark.slow)
