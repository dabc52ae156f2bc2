"""How much one trace file may cost before loading stops with a one-line error: the limits every reader
applies (Kineto JSON, Nsight Systems SQLite, Nsight Compute CSV), whatever its format.

The limits are an argument of every load (``ReaderOptions.limits``, :mod:`aiprof.trace.readers.base`): the CLI
builds them from its options (``--max-trace-mb``, ``--max-events``) and they travel with each file's job to
the worker that reads it; a load given none applies the defaults (``LoadLimits()``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from aiprof.errors import AiprofError, TraceError

_MB = 1 << 20  # --max-trace-mb counts MiB (2^20 bytes), like every size aiprof shows


@dataclass(frozen=True)
class LoadLimits:
    """What one trace file may cost before loading stops with a one-line error.

    ``max_bytes``: decompressed text, whatever the file's size. ``max_ratio``: decompressed text per
    byte of file, applied past ``ratio_floor_bytes``. ``max_events``: events in one file (0: no limit)."""

    max_bytes: int = 32 << 30
    ratio_floor_bytes: int = 512 * _MB
    max_ratio: float = 100.0
    max_events: int = 0

    @classmethod
    def with_max_mb(cls, megabytes: float, max_events: int = 0) -> LoadLimits:
        """An explicit size limit (``--max-trace-mb``): the decompressed text may reach ``megabytes``
        whatever the compression ratio."""
        size = max(1, int(megabytes * _MB))
        return cls(max_bytes=size, ratio_floor_bytes=size, max_events=max_events)

    @classmethod
    def from_options(cls, max_trace_mb: float | None, max_events: int | None) -> LoadLimits:
        """The limits a command's options ask for (``--max-trace-mb``, ``--max-events``); None or 0: the
        default. Raises :class:`AiprofError` for a value that is not a positive finite number."""
        events = int(max_events or 0)
        if events < 0:
            raise AiprofError(f"--max-events must be 0 (no limit) or a positive count, not {max_events}")
        if max_trace_mb is None:
            return cls(max_events=events)
        if not math.isfinite(max_trace_mb) or max_trace_mb <= 0:
            raise AiprofError(f"--max-trace-mb must be a positive number of megabytes, not {max_trace_mb}")
        return cls.with_max_mb(max_trace_mb, events)

    def allowed_bytes(self, file_bytes: int) -> int:
        """How far the decompressed text of a file of ``file_bytes`` bytes may grow."""
        by_ratio = max(self.ratio_floor_bytes, int(self.max_ratio * file_bytes))
        return min(self.max_bytes, by_ratio)


def too_large(path: Path, limits: LoadLimits, file_bytes: int) -> TraceError:
    """The one-line error past the size limit."""
    allowed = limits.allowed_bytes(file_bytes)
    by_ratio = allowed < limits.max_bytes  # else the size limit itself (or --max-trace-mb) stopped it
    why = f", over {limits.max_ratio:g}x the {file_bytes:,}-byte file" if by_ratio else ""
    return TraceError(
        f"{path}: the trace text is larger than {allowed / _MB:,.0f} MiB{why} (a gzip bomb, or an unusually "
        "large trace); if the file is a real trace, raise the limit with --max-trace-mb"
    )


def too_many_events(path: Path, limit: int) -> TraceError:
    """The one-line error past ``LoadLimits.max_events``."""
    return TraceError(f"{path}: more than {limit:,} events (the --max-events limit); raise it to load this trace")


__all__ = ["LoadLimits", "too_large", "too_many_events"]
