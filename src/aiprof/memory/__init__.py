"""Memory: where the memory of a step goes, what is live at the peak, and why an OOM happened.

Readers (allocator snapshot pickles, Kineto ``[memory]`` events, ``export_memory_timeline`` raw files) fill
one allocation-event table (:mod:`aiprof.memory.model`); :mod:`aiprof.memory.analysis` replays it into a
typed :class:`~aiprof.memory.report.MemoryReport`; :mod:`aiprof.memory.render` draws it. Nothing here
imports torch.
"""

from __future__ import annotations

from aiprof.memory.load import load_memory
from aiprof.memory.analysis import analyze_memory
from aiprof.memory.report import MemoryReport

__all__ = ["load_memory", "analyze_memory", "MemoryReport"]
