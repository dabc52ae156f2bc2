"""What the framework integrations share: one capture per training run, driven by the framework's own hooks.

``aiprof.hf.Callback`` (Hugging Face ``Trainer``) and ``aiprof.lightning.Profiler`` (Lightning ``Trainer``)
are thin adapters over :class:`FrameworkRun`: it enters an :func:`aiprof.profile` capture when training
begins (or joins the one ``aiprof run`` is already running), ends a step when the framework ends one, writes
which framework ran and its settings into ``meta.json`` (``framework``: the rules word their fixes in that
framework's arguments), and at the end prints the same end-of-run summary as ``aiprof run``.

The capture itself is :mod:`aiprof.capture.api`'s; nothing here records anything. Every framework import
happens in the adapter modules (``aiprof.hf``, ``aiprof.lightning``), never here or in the core.
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from typing import Any

from aiprof import rundir
from aiprof.capture import session as session_mod
from aiprof.capture.api import Profile
from aiprof.capture.options import Schedule

# Settings copied into meta.json: plain scalars only (a setting's value is never a path, token or object).
_MAX_TEXT = 120


def scalar_settings(source: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """``{name: value}`` for the attributes of ``source`` in ``names`` that are plain scalars (an enum's
    value; text capped); anything else is left out, so no object, path list or secret reaches meta.json."""
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(source, name, None)
        value = getattr(value, "value", value)  # str enums (OptimizerNames, IntervalStrategy)
        if value is None or isinstance(value, (bool, int, float)):
            out[name] = value
        elif isinstance(value, str):
            out[name] = value[:_MAX_TEXT]
    return out


class FrameworkRun:
    """One training run of a framework under aiprof: :meth:`begin`, :meth:`step` per framework step,
    :meth:`end`. ``step_offset`` in ``meta.json`` maps the trace's ``ProfilerStep#N`` to the framework's
    step number ``N + step_offset`` (the Trainer's global step)."""

    def __init__(
        self,
        framework: str,
        version: str | None,
        integration: str,
        *,
        out: str | os.PathLike[str] | None,
        schedule: Schedule | tuple[int, ...] | dict[str, int] | None,
        profile_options: dict[str, Any],
        summary: bool,
        auto_step: bool = False,
    ) -> None:
        self.framework = framework
        self.version = version
        self.integration = integration
        self.summary = summary
        # auto_step: every optimizer.step() ends a step (aiprof's hook), where the framework has no step hook.
        self.profile = Profile(out, schedule=schedule, auto_step=auto_step, quiet=True, **profile_options)
        self.steps = 0
        self.step_offset: int | None = None
        self._active = False
        self._extra: dict[str, Any] = {}

    @property
    def run_dir(self) -> Path | None:
        return self.profile.run_dir

    @property
    def active(self) -> bool:
        """Between :meth:`begin` and :meth:`end`."""
        return self._active

    @property
    def attached(self) -> bool:
        """Inside ``aiprof run``: its capture records, and it prints the summary."""
        return bool(self.profile._attached)

    def begin(self, settings: dict[str, Any]) -> None:
        """Training begins: start (or join) the capture and record the framework and its ``settings``."""
        if self._active:
            return
        self.profile.__enter__()
        self._active = True
        atexit.register(self._abandoned)
        self.note(settings=settings)

    def step(self, framework_step: int) -> None:
        """The framework finished its step number ``framework_step``: a step boundary."""
        if not self._active:
            return
        self.profile.step()
        self.steps += 1
        if self.step_offset is None:
            session = session_mod.current()
            if session is not None and session.recorder.started:
                # The open ProfilerStep is the framework's step framework_step + 1.
                self.step_offset = framework_step + 1 - session.recorder.steps
                self.note(step_offset=self.step_offset)

    def note(self, **fields: Any) -> None:
        """Merge ``fields`` into ``meta.json``'s ``framework`` entry (this process's)."""
        self._extra.update(fields)
        run_dir = self.run_dir
        if run_dir is None:
            return
        entry = {"name": self.framework, "version": self.version, "integration": self.integration, **self._extra}

        def write(meta: dict[str, Any]) -> None:
            meta["framework"] = {**(meta.get("framework") or {}), **entry}

        rundir.update_meta(run_dir, write)

    def end(self, error: BaseException | None = None, **fields: Any) -> None:
        """Training ended: the capture is flushed, and (rank 0, own capture) the summary is printed."""
        if not self._active:
            return
        self._active = False
        atexit.unregister(self._abandoned)
        session = session_mod.current()
        exc = (type(error), error, error.__traceback__) if error is not None else (None, None, None)
        self.profile.__exit__(*exc)
        # Steps the framework ended, or (auto_step) the optimizer steps the capture counted, the last included.
        marked = self.steps if self.steps or session is None else session.markers
        self.note(steps_marked=marked, **fields)
        if not self.attached:
            self._summarise()

    def _abandoned(self) -> None:
        """At exit without :meth:`end` (the training loop raised): flush what was recorded, marked incomplete."""
        if self._active:
            self._active = False
            self.profile.__exit__(RuntimeError, RuntimeError(f"{self.framework} training ended without its end hook"), None)

    def _summarise(self) -> None:
        run_dir = self.run_dir
        if run_dir is None or not self.summary:
            return
        _wait_for_other_ranks()  # every rank: rank 0 summarises once all have flushed
        if session_mod.current_rank() != 0:
            return
        from aiprof.cli.run import report

        report(run_dir, 0, rundir.read_meta(run_dir), self.profile.options, summary=True)


def _wait_for_other_ranks() -> None:
    """Under torch.distributed, wait until every rank has flushed its trace into the run directory."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()
    except Exception:  # noqa: BLE001 - a broken process group must not hide the run directory
        pass


__all__ = ["FrameworkRun", "scalar_settings"]
