"""The Python API: ``with aiprof.profile(...) as prof: ... prof.step()``, also a decorator.

Inside a script started by ``aiprof run`` the CLI's capture is already running; ``profile()`` then
attaches to it (its ``step()`` marks steps) instead of starting a second profiler.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any

from aiprof.capture import rundir
from aiprof.capture import session as session_mod
from aiprof.capture.options import CaptureOptions, Schedule
from aiprof.capture.recorder import discard_empty_log
from aiprof.capture.rundir import RunDirError
from aiprof.errors import AiprofError, AiprofWarning


class Profile(contextlib.ContextDecorator):
    """A capture of the enclosed code into a run directory (made by :func:`aiprof.profile`, whose help
    lists every option with its meaning and default). Re-entering starts a fresh run."""

    def __init__(
        self,
        out: str | os.PathLike[str] | None = None,
        *,
        schedule: Schedule | tuple[int, ...] | dict[str, int] | None = None,
        record_shapes: bool = True,
        profile_memory: bool = True,
        with_stack: bool = False,
        telemetry: bool = True,
        telemetry_interval: float = 0.1,
        step_marker: str | None = None,
        auto_step: bool = True,
        quiet: bool = False,
        memory: bool = False,
    ) -> None:
        self.out = Path(out) if out is not None else None
        self.options = CaptureOptions(
            schedule=Schedule.coerce(schedule),
            record_shapes=record_shapes,
            profile_memory=profile_memory or memory,
            with_stack=with_stack,
            memory=memory,
            telemetry=telemetry,
            telemetry_interval_s=telemetry_interval,
            step_marker=step_marker,
            auto_step=auto_step,
        )
        self.quiet = quiet
        self.run_dir: Path | None = None
        self._session: session_mod.CaptureSession | None = None
        self._attached = False

    # --- context manager -------------------------------------------------------------------
    def __enter__(self) -> Profile:
        running = session_mod.current()
        if running is not None:
            self._session, self._attached, self.run_dir = running, True, running.run_dir
            if self.out is not None:
                warnings.warn("aiprof run is already profiling this script; out= and the schedule are ignored", AiprofWarning, stacklevel=2)
            return self
        try:
            import torch  # noqa: F401 - fail here, clearly, when torch is missing
        except ImportError:
            raise AiprofError("torch is not installed in this Python; install it (pip install torch) to profile") from None

        self._attached = False
        self.run_dir = self._claim_run_dir()
        sampler = self._sampler(self.run_dir) if self.options.telemetry else None
        session = session_mod.CaptureSession(self.options, self.run_dir, lazy_start=False, write_traces=True, sampler=sampler)
        self._write_header(session, sampler)
        if sampler is not None:
            sampler.start()
        try:
            session.start()
        except BaseException:
            session.finalize("incomplete", "capture failed to start")  # stops the sampler thread too
            raise
        session.install_signal_handlers()
        session_mod.set_current(session)
        self._session = session
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        session, self._session = self._session, None
        if session is None or self._attached:
            return
        if exc_type is None:
            status, reason = "complete", None
        elif issubclass(exc_type, KeyboardInterrupt):
            status, reason = "incomplete", "interrupted (KeyboardInterrupt)"
        else:
            status, reason = "incomplete", f"raised {exc_type.__name__}: {exc}"[:300]
        session.finalize(status, reason)
        session.restore_signal_handlers()
        session_mod.set_current(None)
        assert self.run_dir is not None
        meta = rundir.update_meta(self.run_dir, lambda m: settle(m, time.time_ns()))
        discard_empty_log(self.run_dir)
        if not self.quiet:
            print(f"aiprof: {meta.get('status')} run in {self.run_dir}  (next: aiprof analyze {self.run_dir})", file=sys.stderr)

    def step(self) -> None:
        """End the current step (call once per training or inference iteration)."""
        if self._session is not None:
            self._session.mark("explicit")

    # --- pieces ----------------------------------------------------------------------------
    def _claim_run_dir(self) -> Path:
        if self.out is None:
            return rundir.create_new(rundir.default_run_dir(_script_name()), explicit=False)
        path = self.out
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise RunDirError(f"{path}: cannot create the run directory ({err.strerror}); pass a writable out=") from None
        rundir.check_writable(path)
        job = job_key()

        def claim(meta: dict[str, Any]) -> None:
            others = [p for p in path.iterdir() if not p.name.startswith(".") or p.name == rundir.CLAIM]
            if meta and job is not None and meta.get("job") == job:
                return  # another rank of this job created it
            if others:
                raise RunDirError(f"{path}: already holds files; aiprof never overwrites a run, pass another out= or none")
            meta["job"] = job

        rundir.update_meta(path, claim)
        return path

    def _sampler(self, run_dir: Path) -> Any:
        from aiprof.capture.telemetry import TelemetrySampler, default_probes

        probes, notes = default_probes()
        self._telemetry_notes = notes
        if not probes:
            return None
        return TelemetrySampler(run_dir / rundir.TELEMETRY, probes, self.options.telemetry_interval_s)

    def _write_header(self, session: session_mod.CaptureSession, sampler: Any) -> None:
        header = run_header(self.options, sys.argv, mode="api")
        header["telemetry"] = telemetry_header(self.options, sampler, getattr(self, "_telemetry_notes", {}))

        def write(meta: dict[str, Any]) -> None:
            for key, value in header.items():
                meta.setdefault(key, value)
            meta["status"] = "running"

        rundir.update_meta(session.run_dir, write)


def profile(
    out: str | os.PathLike[str] | None = None,
    *,
    schedule: Schedule | tuple[int, ...] | dict[str, int] | None = None,
    record_shapes: bool = True,
    profile_memory: bool = True,
    with_stack: bool = False,
    telemetry: bool = True,
    telemetry_interval: float = 0.1,
    step_marker: str | None = None,
    auto_step: bool = True,
    quiet: bool = False,
    memory: bool = False,
) -> Profile:
    """Profile a block (``with``), a function (decorator) or a notebook cell into a run directory.

    ::

        with aiprof.profile(out="runs/exp1") as prof:
            for batch in loader:
                train_step(batch)
                prof.step()          # or aiprof.step(); optimizer.step() also ends a step

    Then ``aiprof analyze runs/exp1`` (or ``aiprof.app.analyze(["runs/exp1"])``). Inside a script started
    by ``aiprof run``, ``profile()`` joins that capture (its ``step()`` marks steps; ``out`` and the
    schedule are ignored, with a warning). Options, the same switches as ``aiprof run``:

    out
        The run directory to create (default None: ``./aiprof-runs/<time>-<script>/``). It is never
        overwritten: a folder that already holds files is refused (the ranks of one ``torchrun`` job share it).
    schedule
        Which steps to record, as torch.profiler's schedule counted from the first step: a
        :class:`aiprof.Schedule`, a ``(wait, warmup, active[, repeat[, skip_first]])`` tuple or a dict of
        those names (default None: ``Schedule()``, wait 5, warm-up 2, record 4, once; the code must run
        at least 11 steps).
    record_shapes
        Record the input shapes of ops: FLOPs, bytes and the roofline (default True).
    profile_memory
        Record allocator events: memory timeline and peak (default True).
    with_stack
        Record Python call stacks for source lines; costly per op (default False).
    telemetry
        Sample CPU, memory, disk, network and GPU (NVML) counters into ``telemetry.csv`` (default True).
    telemetry_interval
        Seconds between telemetry samples (default 0.1).
    step_marker
        What ends a step besides ``optimizer.step()``: an ``nn.Module`` class name (``"Model"``: each
        forward of it is a step, for inference loops) or ``"module:function"`` (default None).
    auto_step
        Count every ``optimizer.step()`` as the end of a step (default True).
    quiet
        Do not print the run directory's path at the end (default False).
    memory
        CUDA allocator history around the recorded steps (dumped at the end and on OOM) and
        ``memory_stats()`` per step; read it with ``aiprof memory RUN_DIR``. Implies ``profile_memory``
        (default False).

    Returns a :class:`Profile`: a context manager and decorator with ``step()`` and, once entered,
    ``run_dir`` (the run directory's path). Raises :class:`aiprof.AiprofError` when torch is missing
    or the run directory cannot be created."""
    return Profile(
        out,
        schedule=schedule,
        record_shapes=record_shapes,
        profile_memory=profile_memory,
        with_stack=with_stack,
        telemetry=telemetry,
        telemetry_interval=telemetry_interval,
        step_marker=step_marker,
        auto_step=auto_step,
        quiet=quiet,
        memory=memory,
    )


def step() -> None:
    """End the current step of whatever capture is running in this process; a no-op when none is."""
    running = session_mod.current()
    if running is not None:
        running.mark("explicit")


def job_key() -> str | None:
    """Identifies one distributed job across its ranks (torchrun sets these); None for one process."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return None
    parts = [os.environ.get(k, "") for k in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT")]
    return "/".join(parts) if any(parts) else None


def _script_name() -> str:
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if "ipykernel" in argv0 or "IPython" in sys.modules and not argv0.endswith(".py"):
        return "notebook"
    return argv0 or "python"


def run_header(options: CaptureOptions, command: list[str], mode: str) -> dict[str, Any]:
    """The process-independent part of ``meta.json``."""
    import dataclasses

    import msgspec

    from aiprof import __version__
    from aiprof.capture.meta import allowed_env, host_info, redact_command

    return {
        "format": "aiprof-run",
        "format_version": 1,
        "aiprof": __version__,
        "mode": mode,
        "created_unix_ns": time.time_ns(),
        "command": redact_command(command),
        "cwd": os.getcwd(),
        "schedule": dataclasses.asdict(options.schedule),
        "schedule_text": options.schedule.describe(),
        "options": {k: v for k, v in dataclasses.asdict(options).items() if k != "schedule"},
        "host": msgspec.to_builtins(host_info()),
        "env": allowed_env(),
    }


def telemetry_header(options: CaptureOptions, sampler: Any, notes: dict[str, str]) -> dict[str, Any]:
    if not options.telemetry:
        return {"enabled": False}
    return {
        "enabled": sampler is not None,
        "file": rundir.TELEMETRY if sampler is not None else None,
        "interval_s": options.telemetry_interval_s,
        "sources": notes,
        "columns": list(sampler.columns) if sampler is not None else [],
    }


def settle(meta: dict[str, Any], now_ns: int) -> None:
    """Top-level status from the ranks: complete only if every rank completed and wrote a trace."""
    ranks = meta.get("ranks", [])
    traces = [f for r in ranks for f in r.get("trace_files", [])]
    bad = [r for r in ranks if r.get("status") != "complete"]
    meta["finished_unix_ns"] = now_ns
    meta["trace_files"] = sorted(traces)
    if bad:
        who = f"rank {bad[0]['rank']}" if bad[0].get("rank") is not None else f"process {bad[0].get('pid')}"
        meta["status"], meta["reason"] = "incomplete", f"{who}: {bad[0].get('reason')}"
    elif not traces:
        meta["status"], meta["reason"] = "incomplete", "no steps recorded"
    else:
        meta["status"], meta["reason"] = "complete", None
    _lift_versions(meta)


def _lift_versions(meta: dict[str, Any]) -> None:
    """torch / CUDA versions and devices as the profiled processes saw them (rank 0 first)."""
    for rank in meta.get("ranks", []):
        if "torch" in rank:
            for key in ("torch", "cuda", "cudnn", "devices", "torch_threads"):
                meta[key] = rank.get(key)
            return
