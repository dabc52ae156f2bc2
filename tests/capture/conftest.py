"""Fixtures for the capture tests; helpers live in ``capture_helpers``."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def torch_available() -> None:
    pytest.importorskip("torch")
