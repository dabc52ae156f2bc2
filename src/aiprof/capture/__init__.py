"""Capture: record a PyTorch run into a run directory (traces per rank, telemetry, data-loader waits,
metadata). Imports torch lazily, inside the code paths that need it; knows nothing of analysis.

Entry points: :func:`profile` / :func:`step` (Python API), ``aiprof run`` (:mod:`aiprof.capture.runner`),
and :mod:`aiprof.capture.bootstrap` (what ``aiprof run`` injects into the script's processes).

The names below load on first use, so that importing a submodule (the CLI reads
``aiprof.capture.options`` for its defaults) does not pull in the whole capture stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiprof.capture.api import Profile, profile, step
    from aiprof.capture.options import CaptureOptions, Schedule

_LAZY = {
    "Profile": "aiprof.capture.api",
    "profile": "aiprof.capture.api",
    "step": "aiprof.capture.api",
    "CaptureOptions": "aiprof.capture.options",
    "Schedule": "aiprof.capture.options",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aiprof.capture' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["CaptureOptions", "Profile", "Schedule", "profile", "step"]
