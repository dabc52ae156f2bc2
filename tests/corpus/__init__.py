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

# ``top=ANY``: the first finding is not this case's point (a "stays quiet" twin); only present/absent count.
ANY = "*"

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
    # The build runs a real PyTorch script (``corpus/scripts/``): marked torch and slow, skipped without torch.
    real: bool = False


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
    real: bool = False,
) -> Case:
    return Case(name, build, top, reason, frozenset(present), frozenset(absent), check, top_info_ok, real)


SCRIPTS = Path(__file__).resolve().parent / "scripts"


def run_script(script: str, out: Path, *args: str, timeout: float = 240) -> Path:
    """Run ``corpus/scripts/<script>`` with this interpreter (``out`` as its first argument), in a clean
    environment; ``out`` back. Skips the case when torch is not installed."""
    import importlib.util
    import os
    import subprocess
    import sys

    import pytest

    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIPROF", "OMP_", "MKL_"))}
    env["OMP_NUM_THREADS"] = "1"
    res = subprocess.run([sys.executable, str(SCRIPTS / script), str(out), *args], capture_output=True, text=True,
                         timeout=timeout, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return out
