"""``meta.json`` as types: :class:`RunMeta` and its per-process :class:`RankMeta` (read through
:func:`aiprof.rundir.read_run_meta`). Every field has a default, so files written by older versions decode;
keys this version does not know are ignored, so they never reach a report: the fields are the allow-list
of what a report may show of a run directory.
"""

from __future__ import annotations

from typing import Any

import msgspec


class RankMeta(msgspec.Struct, omit_defaults=True):
    """One profiled process's part of ``meta.json``."""

    rank: int | None = None
    pid: int = 0
    status: str = ""
    reason: str | None = None
    steps_seen: int = 0
    profiler_steps: int = 0
    recorded_steps: list[int] = []
    cycles: int = 0
    cycle_files: list[str] = []
    trace_files: list[str] = []
    export_errors: list[str] = []
    partial_cycle_files: list[str] = []  # cycles torch.profiler's write left cut off (a full disk): kept
    write_errors: list[str] = []  # this process's files that could not be written
    dataloader: dict[str, Any] = {}
    started_unix_ns: int | None = None
    finished_unix_ns: int | None = None
    telemetry_rows: int | None = None
    torch: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    torch_threads: int | None = None
    devices: list[dict[str, Any]] = []
    torch_info_error: str | None = None


class FrameworkMeta(msgspec.Struct, omit_defaults=True):
    """The training framework that drove the capture (``aiprof.hf.Callback``, ``aiprof.lightning.Profiler``):
    its name and version, its speed-relevant settings (plain scalars), and how its step numbers map to the
    trace's: ``ProfilerStep#N`` is the framework's step ``N + step_offset``."""

    name: str = ""
    version: str | None = None
    integration: str = ""
    settings: dict[str, str | int | float | bool | None] = {}
    step_offset: int | None = None
    steps_marked: int | None = None
    global_step: int | None = None
    first_global_step: int | None = None
    evaluations_after_steps: list[int] = []
    loops: dict[str, int] = {}


class RunMeta(msgspec.Struct, omit_defaults=True):
    """``meta.json``: what ran, where, and how it ended. Every field has a default, so files written by
    older versions decode; keys this version does not know are ignored (and never reach a report)."""

    format: str = ""
    format_version: int = 0
    aiprof: str = ""
    mode: str = ""
    status: str = ""
    reason: str | None = None
    exit_code: int | None = None
    signals_received: list[str] = []
    created_unix_ns: int | None = None
    finished_unix_ns: int | None = None
    command: list[str] = []
    cwd: str = ""
    schedule: dict[str, Any] = {}
    schedule_text: str = ""
    options: dict[str, Any] = {}
    host: dict[str, Any] = {}
    env: dict[str, str] = {}
    telemetry: dict[str, Any] = {}
    ranks: list[RankMeta] = []
    idle_processes: list[dict[str, Any]] = []
    trace_files: list[str] = []
    write_errors: list[str] = []  # every failed write of the run (a full disk); the first is the reason
    uncombined_cycle_files: list[str] = []  # cycle files kept uncombined (aiprof analyze salvages them)
    torch: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    devices: list[dict[str, Any]] = []
    torch_threads: int | None = None
    job: str | None = None
    framework: FrameworkMeta | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, as plain JSON data."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out
