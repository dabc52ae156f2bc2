"""The ``cpu_view`` view: the steady steps' telemetry CPU samples (``telemetry.csv`` of the run directory)
split between the run's own processes and the others."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiprof.rules.views.machine import machine_facts, telemetry_core_count

if TYPE_CHECKING:
    from aiprof.rules.context import RankContext

def window_rows(ctx: RankContext) -> tuple[dict[str, list[float]], list[int]] | None:
    """The telemetry table and the indices of its samples inside the steady steps (all samples when the
    trace has no wall-clock base time to line them up with)."""
    table = ctx.inputs.telemetry
    if not isinstance(table, dict) or not table.get("t_unix_ns"):
        return None
    times = table["t_unix_ns"]
    base = ctx.trace.base_time_ns
    lo, hi = ctx.window
    if base > 0 and hi > lo:
        idx = [i for i, t in enumerate(times) if base + lo <= t <= base + hi]
    else:
        idx = list(range(len(times)))
    return (table, idx) if idx else None


def column_values(table: dict[str, list[float]], column: str, idx: list[int]) -> list[float]:
    col = table.get(column)
    if not col:
        return []
    return [col[i] for i in idx if not math.isnan(col[i])]


@dataclass(frozen=True)
class CpuView:
    """The steady steps' CPU samples, split between the profiled process tree and everything else.

    All percentages are of the whole machine (100 = every core busy). ``tree_pct`` / ``others_pct`` are
    ``None`` when the telemetry has no ``proc_cpu_pct`` column (an older or foreign run directory)."""

    machine_pct: list[float]  # per sample
    tree_pct: list[float] | None  # per sample: the process tree's CPU over all cores
    cores: int  # logical cores the telemetry sampled (cpuN_pct columns); 0 when it has none
    span_ns: int  # first to last sample
    tree_unknown: str = ""  # why ``tree_pct`` is None (empty when it is known)
    restricted: bool = False  # the run may use fewer cores than the machine has: machine_pct is the tree's

    @property
    def samples(self) -> int:
        return len(self.machine_pct)

    @property
    def others_pct(self) -> list[float] | None:
        """Per sample: the machine's CPU not used by the profiled tree (other processes, the kernel)."""
        if self.tree_pct is None:
            return None
        return [max(m - t, 0.0) for m, t in zip(self.machine_pct, self.tree_pct)]

    def mean_others_cores(self) -> float | None:
        others = self.others_pct
        if others is None or not self.cores:
            return None
        return mean(others) / 100 * self.cores


def cpu_view(ctx: RankContext) -> CpuView | None:
    """The machine's and the process tree's CPU in the samples inside the steady steps, or ``None`` when the
    telemetry is missing or holds fewer than ``telemetry_min_samples`` samples there (no verdict from a
    handful of samples). Shared by the telemetry rules (``ctx.views.cpu_view``: computed once per rank)."""
    return ctx.views.cpu_view


def find_cpu_view(ctx: RankContext) -> CpuView | None:
    """What :func:`cpu_view` returns, computed."""
    found = window_rows(ctx)
    if found is None:
        return None
    table, idx = found
    machine = table.get("cpu_pct") or []
    tree = table.get("proc_cpu_pct") or []
    cores = telemetry_core_count(table)
    keep = [i for i in idx if not math.isnan(machine[i])] if machine else []
    if len(keep) < max(ctx.options.telemetry_min_samples, 1):
        return None
    tree_pct: list[float] | None = None
    unknown = tree_misses_ranks(ctx.inputs.meta)
    if not unknown and not (tree and cores and any(not math.isnan(tree[i]) for i in keep)):
        unknown = "the telemetry has no proc_cpu_pct column: other processes may be part of the load"
    machine_pct: list[float] | None = None
    if not unknown:
        keep = [i for i in keep if not math.isnan(tree[i])]
        if len(keep) < max(ctx.options.telemetry_min_samples, 1):
            return None
        allowed = machine_facts(ctx).cores or cores
        if allowed < cores:
            # The run may use only some of the cores (taskset, a cpuset container): the machine's other cores
            # are not its to saturate, nor its neighbours'. Judge the tree on the cores it may use.
            machine_pct = [min(tree[i] / allowed, 100.0) for i in keep]
            unknown = (f"the run may use {allowed} of the machine's {cores} cores: saturation is the process "
                       "tree's CPU over its own cores; other processes' load is not judged")
        else:
            tree_pct = [min(tree[i] / cores, 100.0) for i in keep]
    times = table["t_unix_ns"]
    return CpuView(
        machine_pct=machine_pct if machine_pct is not None else [machine[i] for i in keep],
        tree_pct=tree_pct,
        cores=cores,
        span_ns=int(times[keep[-1]] - times[keep[0]]),
        tree_unknown=unknown,
        restricted=machine_pct is not None,
    )


def tree_misses_ranks(meta: Any) -> str:
    """Why the sampled process tree is not the whole job, or "": ``aiprof.profile`` in several ranks samples
    from each rank's own process, so the other ranks on the host would read as other processes."""
    if not isinstance(meta, dict) or meta.get("mode") != "api":
        return ""
    ranks = meta.get("ranks")
    if isinstance(ranks, list) and len(ranks) > 1:
        return (f"{len(ranks)} ranks each sampled their own process: the machine's CPU includes the other "
                "ranks, so whose load it was is unknown")
    return ""


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


__all__ = ["CpuView", "column_values", "cpu_view", "find_cpu_view", "mean", "tree_misses_ranks",
           "window_rows"]
