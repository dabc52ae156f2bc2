"""Whether the run ended well: a crashed, stopped or incomplete run, or a cut-off trace, says so at the top
of every report (one banner line; the JSON field ``run_status``).

Sources: the run directory's ``meta.json`` (``status``, ``reason``, ``exit_code``, ``signals_received``,
per-process ``recorded_steps``: :class:`~aiprof.runmeta.RunMeta`; ``aiprof run`` writes them when the script ends, whatever way) and the
traces' coverage (``Coverage.partial`` / ``cut_off``, the steps left out). A run that ended well and whose
traces are whole has no ``run_status``.
"""

from __future__ import annotations

import signal
from typing import Literal

import msgspec

from aiprof.runmeta import RunMeta

State = Literal["crashed", "interrupted", "incomplete", "partial"]

# Signals a user (or a scheduler asking politely) stops a run with: "stopped", not "crashed".
_STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


class RunStatus(msgspec.Struct, kw_only=True, omit_defaults=True):
    """How the run ended, when not well. ``banner`` is the one line every renderer shows at the top."""

    state: State
    banner: str
    exit_code: int | None = None
    signal: str | None = None
    reason: str | None = None
    complete_steps: int = 0
    recorded_steps: int = 0


def run_status(
    run_metadata: RunMeta | None,
    *,
    complete_steps: int,
    incomplete_steps: int,
    partial: bool,
    cut_off: bool,
) -> RunStatus | None:
    """The run's status from its metadata and its traces' coverage, or None when it ended well."""
    meta = run_metadata if run_metadata is not None else RunMeta()
    status = meta.status
    code = meta.exit_code
    sig = _signal_of(code)
    recorded = max(complete_steps + incomplete_steps, max((len(r.recorded_steps) for r in meta.ranks), default=0))
    if code not in (None, 0):
        state: State = "interrupted" if sig in _STOP_SIGNALS else "crashed"
        how = f"exit {code}" + (f", killed by {sig}" if sig and state == "crashed" else f", {sig}" if sig else "")
        head = f"This run {'was stopped' if state == 'interrupted' else 'crashed'} ({how})"
    elif status == "running":
        state, head = "crashed", "This run did not finish (its run directory still says running: aiprof itself was stopped)"
    elif status == "incomplete":
        state, head = "incomplete", "This run is incomplete" + (f" ({meta.reason})" if meta.reason else "")
    elif partial:
        state = "partial"
        head = "This trace is cut off mid-write" if cut_off else "This trace lacks the device side of some steps"
    else:
        return None
    if recorded:
        steps = f"{complete_steps} of {recorded} recorded step{'s' if recorded != 1 else ''} complete"
        tail = "; numbers cover complete steps only" if complete_steps < recorded else ""
    else:
        steps, tail = "no step recorded", ""
    return RunStatus(
        state=state,
        banner=f"{head} — {steps}{tail}",
        exit_code=code,
        signal=sig,
        reason=meta.reason,
        complete_steps=complete_steps,
        recorded_steps=recorded,
    )


def _signal_of(code: int | None) -> str | None:
    """The signal behind a shell-style exit status (128 + N), or None."""
    if code is None or code <= 128:
        return None
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return None

