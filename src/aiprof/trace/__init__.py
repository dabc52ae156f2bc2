"""The trace model: load Kineto/Chrome-trace JSON or Nsight Systems SQLite into columnar tables
(``aiprof.load``; the reader is picked by the file's content, see :mod:`aiprof.trace.readers`)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from aiprof.trace.cycles import MergeRanks, merge_cycle_sets
from aiprof.trace.model import DeviceInfo, Kind, RunSet, Trace
from aiprof.trace.runset import ProgressCallback, load_paths


def load(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    progress: ProgressCallback | None = None,
    step_range: str | None = None,
    merge: MergeRanks = merge_cycle_sets,
) -> Trace | RunSet:
    """Load a trace file (→ :class:`Trace`), or a folder / several files (→ :class:`RunSet`, one
    trace per rank; an Nsight Systems report of several CUDA processes is a :class:`RunSet` too).
    ``step_range``: Nsight Systems reports, a regular expression naming the NVTX ranges that are the
    steps. ``merge``: how the loaded traces become ranks (:func:`load_paths`; ``aiprof.load`` is
    :func:`aiprof.analysis.load.load`, which also folds graph captures into their replays). Raises
    :class:`aiprof.AiprofError` with a one-line message on bad input."""
    from aiprof.trace.readers import ReaderOptions

    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    return load_paths(paths, progress=progress, merge=merge, options=ReaderOptions(step_range=step_range))


__all__ = ["DeviceInfo", "Kind", "RunSet", "Trace", "load"]
