"""A run directory's data as types: ``meta.json`` as :class:`RunMeta` and its per-process :class:`RankMeta`
(read through :func:`aiprof.rundir.read_run_meta`), and the telemetry counters a report carries
(:class:`RunTelemetry`). Every field of ``meta.json`` has a default, so files written by older versions
decode; keys this version does not know are ignored, so they never reach a report: the fields are the
allow-list of what a report may show of a run directory. The report embeds both as they are
(``Report.run_metadata``, ``Report.telemetry``).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType


class HostInfo(msgspec.Struct, kw_only=True):
    """The machine the run ran on (:func:`aiprof.capture.meta.host_info`): a field the capture could not
    learn is absent (``UNSET``), one it learnt as unknown is null (``os.cpu_count()`` may be None)."""

    hostname: str | UnsetType = UNSET
    os: str | UnsetType = UNSET
    python: str | UnsetType = UNSET
    cpu_model: str | UnsetType = UNSET
    cores_logical: int | None | UnsetType = UNSET
    cores_available: int | None | UnsetType = UNSET  # the process' CPU affinity
    cores_physical: int | None | UnsetType = UNSET  # with psutil
    memory_bytes: int | None | UnsetType = UNSET  # with psutil


class DeviceMeta(msgspec.Struct, kw_only=True):
    """One device as torch saw it in a profiled process (:func:`aiprof.capture.meta.torch_info`): the CPU
    (``type`` and ``name``), then each CUDA device with its index, memory, compute capability and SMs."""

    type: str = ""  # "cpu" or "cuda"
    index: int | UnsetType = UNSET
    name: str | UnsetType = UNSET
    memory_bytes: int | UnsetType = UNSET
    capability: str | UnsetType = UNSET  # "9.0"
    sms: int | UnsetType = UNSET


class TorchInfo(msgspec.Struct, kw_only=True):
    """Versions and devices as torch saw them in a profiled process (its ``meta.json`` entry, lifted to the
    run's top level from the first process that has them)."""

    torch: str
    cuda: str | None
    cudnn: int | None
    torch_threads: int
    devices: list[DeviceMeta]


Num = int | float  # a number as the file holds it (an int stays an int when the report is written again)


class ScheduleMeta(msgspec.Struct, kw_only=True):
    """The capture's torch.profiler schedule (:class:`aiprof.capture.options.Schedule`), in steps."""

    wait: int | UnsetType = UNSET
    warmup: int | UnsetType = UNSET
    active: int | UnsetType = UNSET
    repeat: int | UnsetType = UNSET
    skip_first: int | UnsetType = UNSET


class OptionsMeta(msgspec.Struct, kw_only=True):
    """The capture's other options (:class:`aiprof.capture.options.CaptureOptions` but its schedule)."""

    record_shapes: bool | UnsetType = UNSET
    profile_memory: bool | UnsetType = UNSET
    with_stack: bool | UnsetType = UNSET
    telemetry: bool | UnsetType = UNSET
    telemetry_interval_s: Num | UnsetType = UNSET
    step_marker: str | None | UnsetType = UNSET
    auto_step: bool | UnsetType = UNSET
    memory: bool | UnsetType = UNSET


class TelemetryMeta(msgspec.Struct, kw_only=True):
    """How the run's telemetry was sampled (``aiprof run``): whether, into which file, how often, from which
    sources, which columns; when the run ended, how many samples and the sampler's errors."""

    enabled: bool | UnsetType = UNSET
    file: str | None | UnsetType = UNSET
    interval_s: Num | UnsetType = UNSET
    sources: dict[str, str] | UnsetType = UNSET
    columns: list[str] | UnsetType = UNSET
    samples: int | UnsetType = UNSET
    errors: list[str] | UnsetType = UNSET


class IdleProcess(msgspec.Struct, kw_only=True):
    """A process that imported torch under the run but never trained (a launcher, a pool worker)."""

    pid: int | UnsetType = UNSET
    argv0: str | None | UnsetType = UNSET
    flushed: bool | UnsetType = UNSET  # False: it was still running when the run ended


class DataloaderMeta(msgspec.Struct, kw_only=True):
    """One process's data loading (:meth:`aiprof.capture.dataloader.DataLoaderTracker.summary`): the loaders' settings
    (as the user's DataLoader objects give them: free-form), batches, and the training loop's waits."""

    loaders: list[dict[str, Any]] | UnsetType = UNSET
    batches: int | UnsetType = UNSET
    wait_total_ms: Num | UnsetType = UNSET
    wait_median_ms_per_step: Num | None | UnsetType = UNSET


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
    dataloader: DataloaderMeta | UnsetType = UNSET
    started_unix_ns: int | None = None
    finished_unix_ns: int | None = None
    telemetry_rows: int | None = None
    torch: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    torch_threads: int | None = None
    devices: list[DeviceMeta] = []
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
    schedule: ScheduleMeta | UnsetType = UNSET
    schedule_text: str = ""
    options: OptionsMeta | UnsetType = UNSET
    host: HostInfo | UnsetType = UNSET
    env: dict[str, str] = {}
    telemetry: TelemetryMeta | UnsetType = UNSET
    ranks: list[RankMeta] = []
    idle_processes: list[IdleProcess] = []
    trace_files: list[str] = []
    write_errors: list[str] = []  # every failed write of the run (a full disk); the first is the reason
    uncombined_cycle_files: list[str] = []  # cycle files kept uncombined (aiprof analyze salvages them)
    torch: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    devices: list[DeviceMeta] = []
    torch_threads: int | None = None
    job: str | None = None
    framework: FrameworkMeta | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, as plain JSON data."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


class RunTelemetry(msgspec.Struct, kw_only=True):
    """The report's ``telemetry``: the run directory's counters (``telemetry.csv``) as columns over time,
    at most a few hundred samples (means over equal chunks; :func:`aiprof.report.runcontext.read_telemetry`).
    ``series`` maps a counter (``cpu_pct``, ``proc_rss_bytes``, ``gpu0_util_pct``, ``disk_read_bytes_per_s``…)
    to one value per time of ``t_unix_ns`` (null: no finite sample in that chunk)."""

    path: str
    samples: int  # rows of the file, before downsampling
    t_unix_ns: list[int]
    series: dict[str, list[float | None]]
