"""Rank files that could not be analysed: counted and named in the report, never fatal in a folder.

In a folder of rank files (``aiprof analyze folder/``), a file that cannot be read (missing, cut past
salvage, garbage, not a trace), whose analysis raised, or whose worker died on every retry (a Dask task,
:mod:`aiprof.trace.executors`) is one :class:`FailedRank`; the run goes on with the others. The report's
summary counts them and names each (``Summary.failed_ranks``), the terminal says it under the headline and
the progress bar shows ranks done / failed. A *cut* file that could be salvaged is not failed: it is a
partial rank (its warning says what was left out).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec

Stage = Literal["read", "analysis", "worker"]
FailureCallback = Callable[[Path, str], None]  # (file, why): a rank file failed, as soon as it is known


class FailedRank(msgspec.Struct, kw_only=True):
    """One rank file that is in no number of the report."""

    path: str
    rank: int | None  # the rank its file name says (rank-3…, worker3…); None when the name says none
    stage: Stage  # "read": the file is no readable trace; "analysis": analysing it raised; "worker": its worker died
    reason: str  # the one-line error, as the warning says it


def failed_rank(path: Path, stage: Stage, reason: str) -> FailedRank:
    """The record of a failed rank file (its rank from the file name, when it says one)."""
    from aiprof.trace.runset import rank_from_name

    return FailedRank(path=str(path), rank=rank_from_name(path), stage=stage, reason=reason)


def failed_note(failed: list[FailedRank], analysed: int, limit: int = 8) -> str | None:
    """The report's sentence for failed rank files (None when none failed): how many of how many, and which
    (their rank when the name says it, and file name), the first ``limit`` of them."""
    if not failed:
        return None
    total = len(failed) + analysed
    named = [f"{Path(f.path).name}{f' (rank {f.rank})' if f.rank is not None else ''}" for f in failed[:limit]]
    more = f" and {len(failed) - limit} more" if len(failed) > limit else ""
    verb = "was" if len(failed) == 1 else "were"
    return (f"{len(failed)} of {total} rank files failed and {verb} left out of every number: "
            f"{', '.join(named)}{more} (warnings say why).")


__all__ = ["FailedRank", "FailureCallback", "Stage", "failed_note", "failed_rank"]
