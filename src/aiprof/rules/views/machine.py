"""Facts about the machine a run was captured on, for rules whose fix must follow the hardware.

A fix text is only as good as the machine it is written for: ``num_workers=4`` on a 2-core host
oversubscribes it, and ``pin_memory=True`` / ``.to(device, non_blocking=True)`` / GPU decoding mean nothing
on a CPU-only run. Rules ask this module instead of guessing::

    from aiprof.rules.views.machine import loader_workers_reason, loader_workers_text, machine_facts

    facts = machine_facts(ctx)          # ctx.views.machine: computed once per rank
    if facts.is_gpu: ...                # GPU advice only where the profiled device is a GPU
    facts.cores                         # usable logical cores, or None (a foreign trace)
    loader_workers_text(facts)          # "num_workers=1" on 2 cores; "num_workers=N" when unknown
    loader_workers_reason(facts)        # "1 worker for 2 cores: one core stays with the training
                                        # process" / "N up to the free cores: the trace does not say…"

Where the facts come from:

- ``device_kind`` / ``device_name``: the trace itself (the primary device of the timeline accounting:
  ``gpu`` when it has kernels, else ``cpu``). Always known.
- ``cores``: only when aiprof captured the run — ``meta.json`` next to the trace (``host.cores_available``,
  the process's CPU affinity, else ``host.cores_logical``), else the number of ``cpuN_pct`` columns of
  ``telemetry.csv``. A trace found in the wild carries no core count: ``cores`` is ``None`` and fix texts
  must not invent a number.
- ``torch_threads``: the intra-op thread count the profiled process used (``meta.json``), when known.

Everything here is read from ``ctx.inputs`` (the run directory's inputs, from
:func:`aiprof.rules.context.load_run_inputs`) and ``ctx.device``; no file is opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiprof.rules.context import RankContext, RunInputs

MAX_LOADER_WORKERS = 4  # beyond ~4 workers per device, loaders rarely gain: the common starting point


@dataclass(frozen=True)
class MachineFacts:
    """What the rules may assume about the machine. ``None`` means unknown, never zero."""

    device_kind: str  # "gpu" or "cpu": the profiled device
    device_name: str
    cores: int | None  # usable logical CPU cores of the host (None: not recorded, e.g. a foreign trace)
    cores_source: str  # where ``cores`` came from ("meta.json host.cores_available", "telemetry", "unknown")
    torch_threads: int | None = None  # intra-op threads of the profiled process (meta.json), when recorded

    @property
    def is_gpu(self) -> bool:
        """The profiled device is a GPU: GPU-side advice (pinned memory, non_blocking copies, GPU decoding,
        CUDA graphs) applies."""
        return self.device_kind == "gpu"

    @property
    def loader_workers(self) -> int | None:
        """DataLoader workers that fit the host: ``min(4, cores - 1)`` (one core stays with the training
        process), 0 on a single core, ``None`` when the cores are unknown."""
        if self.cores is None:
            return None
        return max(min(MAX_LOADER_WORKERS, self.cores - 1), 0)


def machine_facts(ctx: RankContext) -> MachineFacts:
    """The facts of ``ctx``'s machine (``ctx.views.machine``: computed once per rank)."""
    return ctx.views.machine


def find_machine_facts(ctx: RankContext) -> MachineFacts:
    """The facts of ``ctx``'s machine, from its primary device and the run directory's inputs."""
    cores, source = _cores(ctx.inputs)
    return MachineFacts(
        device_kind=ctx.device.kind,
        device_name=ctx.device.name,
        cores=cores,
        cores_source=source,
        torch_threads=_torch_threads(ctx.inputs.meta),
    )


def _cores(inputs: RunInputs) -> tuple[int | None, str]:
    """Usable cores: meta.json's affinity, then its logical count, then telemetry's per-core columns."""
    meta = inputs.meta
    host = meta.get("host") if isinstance(meta, dict) else None
    if isinstance(host, dict):
        for key in ("cores_available", "cores_logical"):
            value = _positive_int(host.get(key))
            if value is not None:
                return value, f"meta.json host.{key}"
    table = inputs.telemetry
    if isinstance(table, dict):
        count = telemetry_core_count(table)
        if count:
            return count, "telemetry.csv cpuN_pct columns"
    return None, "unknown"


def telemetry_core_count(table: Mapping[str, list[float]]) -> int:
    """Logical cores the telemetry sampled: its ``cpu0_pct``, ``cpu1_pct``… columns (0 when none)."""
    return sum(1 for name in table if name.startswith("cpu") and name.endswith("_pct") and name[3:-4].isdecimal())


def _torch_threads(meta: Any) -> int | None:
    if not isinstance(meta, dict):
        return None
    value = _positive_int(meta.get("torch_threads"))
    if value is not None:
        return value
    for rank in meta.get("ranks") or []:
        if isinstance(rank, dict) and (value := _positive_int(rank.get("torch_threads"))) is not None:
            return value
    return None


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if value >= 1 else None


def loader_workers_text(facts: MachineFacts) -> str:
    """The ``num_workers=`` argument to recommend, sized to the machine: ``num_workers=1`` on 2 cores,
    ``num_workers=N`` when the cores are unknown (:func:`loader_workers_reason` says why)."""
    workers = facts.loader_workers
    return "num_workers=N" if workers is None else f"num_workers={workers}"


def loader_workers_reason(facts: MachineFacts) -> str:
    """Why that number ("1 worker for 2 cores: one core stays with the training process"), or "N up to the
    free cores" without a number when the trace does not say how many cores the host has."""
    workers = facts.loader_workers
    cores = facts.cores
    if workers is None or cores is None:
        return "N up to the free cores: the trace does not say how many the host has"
    if workers == 0:
        return f"{cores} core: no room for a background worker"
    if workers == MAX_LOADER_WORKERS and cores - 1 > workers:
        return f"{workers} workers to start with on this {cores}-core host; more while the loader still stalls"
    return f"{workers} worker{'s' if workers != 1 else ''} for {cores} cores: one core stays with the training process"


__all__ = [
    "MAX_LOADER_WORKERS",
    "MachineFacts",
    "loader_workers_reason",
    "loader_workers_text",
    "machine_facts",
    "telemetry_core_count",
]
