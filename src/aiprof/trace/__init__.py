"""The trace model: load Kineto/Chrome-trace JSON into columnar tables (``aiprof.load``)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from aiprof.trace.model import DeviceInfo, Kind, RunSet, Trace
from aiprof.trace.runset import ProgressCallback, load_paths


def load(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    progress: ProgressCallback | None = None,
) -> Trace | RunSet:
    """Load a trace file (→ :class:`Trace`), or a folder / several files (→ :class:`RunSet`, one
    trace per rank). Raises :class:`aiprof.AiprofError` with a one-line message on bad input."""
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    return load_paths(paths, progress=progress)


__all__ = ["DeviceInfo", "Kind", "RunSet", "Trace", "load"]
