"""``aiprof.load``: traces loaded into ranks by the rules ``aiprof analyze`` applies.

The trace layer reads files and joins a process' profiler cycles into one rank (:func:`aiprof.trace.load`);
which files are one rank also depends on what the analysis recognises: a CUDA/HIP graph capture trace that
pairs with a replay (:mod:`aiprof.analysis.graphs`) is no rank of its own, it is attached to the replay so that
the replayed kernels are attributed to the captured ops. ``aiprof analyze`` pairs the files it analyses in
workers with the same rule (:func:`~aiprof.analysis.graphs.pair_replays`, keyed by
:func:`~aiprof.analysis.graphs.process_key`); this is the in-process path of the Python API.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from aiprof.analysis.graphs import pair_and_merge
from aiprof.trace import load as load_traces
from aiprof.trace.model import RunSet, Trace
from aiprof.trace.runset import ProgressCallback


def load(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    progress: ProgressCallback | None = None,
    step_range: str | None = None,
) -> Trace | RunSet:
    """Load a trace file (→ :class:`Trace`), or a folder / several files (→ :class:`RunSet`, one trace per
    rank: a process' profiler cycles merged, a graph capture folded into the replay it pairs with).
    ``step_range``: Nsight Systems reports, a regular expression naming the NVTX ranges that are the steps.
    Raises :class:`aiprof.AiprofError` with a one-line message on bad input."""
    return load_traces(path, progress=progress, step_range=step_range, merge=pair_and_merge)


__all__ = ["load"]
