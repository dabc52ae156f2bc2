"""Capture: record a PyTorch run into a run directory (traces per rank, telemetry, data-loader waits,
metadata). Imports torch lazily, inside the code paths that need it; knows nothing of analysis.

Entry points: :func:`profile` / :func:`step` (Python API), ``aiprof run`` (:mod:`aiprof.capture.runner`),
and :mod:`aiprof.capture.bootstrap` (what ``aiprof run`` injects into the script's processes).
"""

from __future__ import annotations

from aiprof.capture.api import Profile, profile, step
from aiprof.capture.options import CaptureOptions, Schedule

__all__ = ["CaptureOptions", "Profile", "Schedule", "profile", "step"]
