"""The diagnosis corpus: synthetic traces, one per class of real trace the rules must hold on.

Each ``cases_<area>.py`` module in this folder exports ``CASES: list[Case]``. A case builds one trace (or a
folder of ranks) with :class:`kineto_builder.TraceBuilder`, names the finding that must come first (or
``None`` for an honest "nothing to fix"), the ids that must be present and the ids that must not appear,
and says why, as a performance engineer would. ``tests/rules/test_corpus.py`` runs every case through the
same pipeline as ``aiprof analyze``. The real half of the corpus is ``tests/rules/test_rules_real_traces.py``
(every trace in ``../shared/traces``).

Cases describe classes of traces (a cold start, a graph capture, a custom all-to-all…), never one file's
numbers: the rules are checked again on traces nobody here has seen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# build(tmp_dir) -> the path to analyse (a trace file or a folder of rank files)
Builder = Callable[[Path], Path]
# check(run, findings) -> None: extra assertions on numbers (a saving, an evidence field); raise to fail
Check = Callable[[Any, list[dict[str, Any]]], None]


@dataclass(frozen=True)
class Case:
    """One corpus entry. ``top`` is the id of the first finding (``None``: no finding at all, or only
    ``info`` notes when ``top_info_ok``); ``present`` must be among the ids, ``absent`` must not be."""

    name: str
    build: Builder
    top: str | None
    reason: str
    present: frozenset[str] = field(default_factory=frozenset)
    absent: frozenset[str] = field(default_factory=frozenset)
    check: Check | None = None
    # With top=None: info findings (zero-saving notes such as cold_start / graph_capture) may still appear.
    top_info_ok: bool = True


def case(
    name: str,
    build: Builder,
    top: str | None,
    reason: str,
    *,
    present: set[str] | frozenset[str] = frozenset(),
    absent: set[str] | frozenset[str] = frozenset(),
    check: Check | None = None,
    top_info_ok: bool = True,
) -> Case:
    return Case(name, build, top, reason, frozenset(present), frozenset(absent), check, top_info_ok)
