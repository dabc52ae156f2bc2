"""Memory: where the memory of a step goes, what is live at the peak, and why an OOM happened.

Readers (allocator snapshot pickles, Kineto ``[memory]`` events, ``export_memory_timeline`` raw files) fill
one allocation-event table (:mod:`aiprof.memory.model`); :mod:`aiprof.memory.analysis` replays it into a
typed :class:`~aiprof.memory.report.MemoryReport`; :mod:`aiprof.report.memory_render` draws it. Nothing here
imports torch. The names below are imported on first use: the report document imports
``aiprof.memory.report`` (its types) on every run, and that must not load the readers and NumPy analyses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiprof.memory.analysis import analyze_memory
    from aiprof.memory.load import load_memory
    from aiprof.memory.report import MemoryReport

__all__ = ["load_memory", "analyze_memory", "MemoryReport"]
_WHERE = {"load_memory": "aiprof.memory.load", "analyze_memory": "aiprof.memory.analysis",
          "MemoryReport": "aiprof.memory.report"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'aiprof.memory' has no attribute {name!r}")
