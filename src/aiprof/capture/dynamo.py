"""What Dynamo already knows about its compiles, saved into the run directory at the flush (nearly free:
nothing is hooked or enabled while the program runs; the records below are kept by torch anyway).

Read only when the program itself imported ``torch._dynamo`` (it used ``torch.compile``); never imported
here. From torch 2.13's ``torch._dynamo.utils`` (each piece skipped when the torch in use lacks it):

* ``get_compilation_metrics()``: one record per compile (Dynamo keeps the latest 64): the compile id
  ``F/C``, the frame's function and file, ``recompile_reason`` (the first guard that failed, as Dynamo
  words it: ``0/0: tensor 'x' size mismatch at index 0. expected 4, actual 5``), the compile times and
  why a compile failed or restarted;
* ``counters``: Dynamo's event counts (``stats``, ``graph_break`` by reason, ``recompiles``…);
* ``compilation_time_metrics``: seconds per ``dynamo_timed`` phase (count and total).

Written as ``dynamo.rank<N>[-pid<P>].json`` (:func:`aiprof.rundir.dynamo_path`); the analysis reads it
through :func:`aiprof.rundir.read_dynamo` to give a recompile its cause and guard text when the trace
cannot (no shapes recorded, or the same shapes).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

KEPT = ("compile_id", "co_name", "co_filename", "co_firstlineno", "recompile_reason", "entire_frame_compile_time_s",
        "backend_compile_time_s", "inductor_compile_time_s", "fail_type", "fail_reason", "restart_reasons",
        "graph_op_count", "graph_node_count", "guard_count", "dynamo_cumulative_compile_time_us")


def _utils() -> ModuleType | None:
    """``torch._dynamo.utils`` when the program imported it (never imported here)."""
    return sys.modules.get("torch._dynamo.utils")


@dataclass
class DynamoBaseline:
    """What Dynamo had recorded when a capture session began (its records are per process, and a process
    may run several sessions): the compile records then held (kept, so their ids stay theirs), the counters
    and the phase counts, so the session writes only its own."""

    metrics: list[Any] = field(default_factory=list)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    phases: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def now() -> DynamoBaseline:
        utils = _utils()
        if utils is None:
            return DynamoBaseline()
        try:
            return DynamoBaseline(list(utils.get_compilation_metrics()),
                                  {str(k): {str(n): int(c) for n, c in v.items()} for k, v in utils.counters.items()},
                                  {str(k): len(v) for k, v in utils.compilation_time_metrics.items()})
        except Exception:  # noqa: BLE001 - another torch: no baseline, the whole record is written
            return DynamoBaseline()


def dynamo_record(before: DynamoBaseline | None = None) -> bytes | None:
    """The JSON document to write (what Dynamo recorded since ``before``), or None when the program did not
    use torch.compile (or compiled nothing since). Never raises: what cannot be read is left out."""
    utils = _utils()
    if utils is None:
        return None
    before = before or DynamoBaseline()
    seen = {id(m) for m in before.metrics}
    compiles: list[dict[str, Any]] = []
    try:
        for m in utils.get_compilation_metrics():
            if id(m) in seen:
                continue
            row = {k: _plain(getattr(m, k, None)) for k in KEPT}
            compiles.append({k: v for k, v in row.items() if v not in (None, "", [], {})})
    except Exception:  # noqa: BLE001 - an older or newer torch: record what is there
        compiles = []
    counters: dict[str, dict[str, int]] = {}
    try:
        for k, v in utils.counters.items():
            old = before.counters.get(str(k), {})
            diff = {str(n): int(c) - old.get(str(n), 0) for n, c in v.items()}
            if any(diff.values()):
                counters[str(k)] = {n: c for n, c in diff.items() if c}
    except Exception:  # noqa: BLE001
        counters = {}
    phases: dict[str, dict[str, float]] = {}
    try:
        for k, v in utils.compilation_time_metrics.items():
            mine = list(v)[before.phases.get(str(k), 0):]
            if mine:
                phases[str(k)] = {"count": len(mine), "total_s": float(sum(mine))}
    except Exception:  # noqa: BLE001
        phases = {}
    if not compiles and not counters:
        return None
    doc = {"format": "aiprof-dynamo-1", "compiles": compiles, "counters": counters, "phases": phases}
    return json.dumps(doc, sort_keys=True, default=str).encode()


def _plain(value: Any) -> Any:
    """A JSON-able copy of a metrics field (sets become sorted lists, other objects strings)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (set, frozenset, list, tuple)):
        return sorted(str(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)
