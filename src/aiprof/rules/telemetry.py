"""Rules on system telemetry: ``cpu_saturation``, ``noisy_neighbour`` and ``io_bound``.

Telemetry is not in the trace: ``aiprof run`` / ``aiprof.profile`` write ``telemetry.csv`` next to the
traces in the run directory (one row per ~100 ms: ``t_unix_ns``, ``cpu_pct`` (the machine, mean over its
cores), ``cpuN_pct``, ``proc_cpu_pct`` (the profiled process tree: root and descendants, 100 = one core, as
in top), ``disk_read_bytes`` cumulative since the start, optional ``cpu_iowait_pct``, ``gpuN_util_pct``…).
:func:`load_run_inputs` reads it in the worker (``meta.json`` comes decoded, read once at the root), and the rules line it up with the steps
through the trace's ``baseTimeNanoseconds`` (``ctx.inputs``, :class:`aiprof.rules.context.RunInputs`).

The machine's CPU is not the run's CPU: other processes on a shared host can saturate it while the profiled
tree uses one core of two. :func:`cpu_view` splits every sample into the run's share and the others', so a
saturated machine is blamed on the run only when the run is what keeps it busy; when others use a sizeable
part of it, ``noisy_neighbour`` says the measurement was perturbed instead. No verdict comes from fewer than
``telemetry_min_samples`` samples inside the steady steps. Older run directories without ``proc_cpu_pct``
stay readable: the split is then unknown and ``cpu_saturation`` says so (confidence low).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from aiprof import rundir
from aiprof.rules.context import RankContext
from aiprof.rules.finding import Finding
from aiprof.rules.machine import machine_facts, telemetry_core_count
from aiprof.rules.spec import Saving, rank_rule
from aiprof.rundir import read_telemetry

def load_run_inputs(trace_path: Path, found: rundir.RunDir | None | Literal["find"] = "find") -> dict[str, Any]:
    """What the run directory ``found`` around a trace adds to the trace (found once at the analysis' root,
    :class:`aiprof.rundir.RunContext`: aiprof's own run directories only): ``run_meta`` (``meta.json``'s
    known fields: host cores, torch threads…), the telemetry table (column → list), and ``loader_waits``
    (step number → ns the training loop waited in ``DataLoader.__next__``, measured by the loader itself)
    for the process that wrote this trace. ``"find"``: look the run directory up (:func:`aiprof.rundir.owner_of`),
    for a caller without a run context."""
    if found == "find":
        found = rundir.owner_of(trace_path)
    if found is None:
        return {}
    out: dict[str, Any] = {}
    meta = found.meta.to_dict()
    if meta:
        out["run_meta"] = meta
    csv_path = found.telemetry_path
    if csv_path is not None:
        out["telemetry"] = read_telemetry(csv_path)
        out["telemetry_path"] = str(csv_path)
    waits_path = found.waits_path(trace_path)
    waits = rundir.read_waits(waits_path) if waits_path is not None else None
    if waits is not None and waits.steps:
        out["loader_waits"] = waits.by_step()
        out["loader_waits_path"] = str(waits_path)
    return out


def _window_rows(ctx: RankContext) -> tuple[dict[str, list[float]], list[int]] | None:
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


def _values(table: dict[str, list[float]], column: str, idx: list[int]) -> list[float]:
    col = table.get(column)
    if not col:
        return []
    return [col[i] for i in idx if not math.isnan(col[i])]


def _starved_share(ctx: RankContext) -> float:
    """Share of the step the device idled for host-side reasons (data loading, host overhead)."""
    return ctx.share(ctx.per_step("idle_causes_ns", "data_loading") + ctx.per_step("idle_causes_ns", "host"))


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
        return _mean(others) / 100 * self.cores


def cpu_view(ctx: RankContext) -> CpuView | None:
    """The machine's and the process tree's CPU in the samples inside the steady steps, or ``None`` when the
    telemetry is missing or holds fewer than ``telemetry_min_samples`` samples there (no verdict from a
    handful of samples). Shared by the telemetry rules (``ctx.views.cpu_view``: computed once per rank)."""
    return ctx.views.cpu_view


def find_cpu_view(ctx: RankContext) -> CpuView | None:
    """What :func:`cpu_view` returns, computed."""
    found = _window_rows(ctx)
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
    unknown = _tree_misses_ranks(ctx.inputs.meta)
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


def _tree_misses_ranks(meta: Any) -> str:
    """Why the sampled process tree is not the whole job, or "": ``aiprof.profile`` in several ranks samples
    from each rank's own process, so the other ranks on the host would read as other processes."""
    if not isinstance(meta, dict) or meta.get("mode") != "api":
        return ""
    ranks = meta.get("ranks")
    if isinstance(ranks, list) and len(ranks) > 1:
        return (f"{len(ranks)} ranks each sampled their own process: the machine's CPU includes the other "
                "ranks, so whose load it was is unknown")
    return ""


def _saturated_share(view: CpuView, ctx: RankContext) -> float:
    """Share of the samples with the machine's CPU at ≥ cpu_saturation_pct."""
    return sum(1 for m in view.machine_pct if m >= ctx.options.cpu_saturation_pct) / view.samples


def _noisy(view: CpuView, ctx: RankContext) -> bool:
    others = view.others_pct
    return others is not None and _mean(others) >= ctx.options.noisy_neighbour_pct


@rank_rule(saving=Saving.NONE,
           options=("cpu_saturation_pct", "cpu_saturation_time_share", "noisy_neighbour_pct", "telemetry_min_samples"),
           needs=("cpu_view", "machine", "idle_causes", "telemetry", "run_meta"))
def cpu_saturation(ctx: RankContext) -> list[Finding]:
    """The run's own processes saturate the host CPUs while the device (or, on CPU-only runs, the training
    loop) waits for host work: more loader workers will not help. Not said when processes outside the profiled
    tree used ≥ ``noisy_neighbour_pct`` of the machine on average (they are part of the load, and
    ``noisy_neighbour`` speaks instead), nor from fewer than ``telemetry_min_samples`` samples."""
    view = cpu_view(ctx)
    if view is None or _noisy(view, ctx):
        return []
    busy = _saturated_share(view, ctx)
    starved = _starved_share(ctx)
    if busy < ctx.options.cpu_saturation_time_share or starved < ctx.options.medium_share:
        return []
    facts = machine_facts(ctx)
    cores = facts.cores or view.cores or None
    evidence: dict[str, Any] = {
        "samples": view.samples,
        "sampled_ns": view.span_ns,
        "saturated_sample_share": round(busy, 3),
        "mean_cpu_pct": round(_mean(view.machine_pct), 1),
        "cores": cores,
        "device_starved_share": round(starved, 3),
        "process_tree_cpu_pct": round(_mean(view.tree_pct) * view.cores, 1) if view.tree_pct is not None else None,
    }
    notes = (view.tree_unknown,) if view.tree_unknown else ()
    if facts.is_gpu:
        fix = (
            "The run's own processes keep the CPUs busy, so more loader workers will not help: move "
            "decoding/augmentation to the GPU (torchvision.transforms.v2 on CUDA tensors, DALI), cache "
            "preprocessed samples, set torch.set_num_threads / OMP_NUM_THREADS=1 in loader workers to stop "
            "oversubscription, or run on a host with more cores per GPU."
        )
        title = f"Host CPU saturated by the run in {busy:.0%} of samples while the device starves"
    else:
        on = f"all {cores} cores" if cores else "the cores"
        fix = (
            f"The run's own processes keep {on} busy, so more loader workers will not help: they compete with "
            "the model's compute threads. Cut the CPU work per sample (cheaper transforms, cache preprocessed "
            "samples), keep compute threads + workers ≤ cores (torch.set_num_threads; OMP_NUM_THREADS=1 in "
            "loader workers), or run on a host with more cores."
        )
        title = f"CPU saturated by the run in {busy:.0%} of samples while the training loop waits"
    return [
        ctx.finding(
            "cpu_saturation",
            title,
            0,
            evidence=evidence,
            fix=fix,
            formula="no separate saving: it explains the data_loading / host_bound time (share of samples with "
            "CPU ≥ cpu_saturation_pct while the device idles for host reasons; not when processes outside the "
            "profiled tree used ≥ noisy_neighbour_pct of the machine)",
            confidence="medium" if view.tree_pct is not None or view.restricted else "low",
            severity="low",
            notes=notes,
        )
    ]


@rank_rule(saving=Saving.NONE, options=("noisy_neighbour_pct", "cpu_saturation_pct", "telemetry_min_samples"),
           needs=("cpu_view", "machine", "telemetry", "run_meta"))
def noisy_neighbour(ctx: RankContext) -> list[Finding]:
    """Processes outside the profiled tree used a sizeable part of the machine's CPU during the steps: the
    timings (and every host-side verdict) were measured on a shared machine. A note (``info``), no saving."""
    view = cpu_view(ctx)
    if view is None or not _noisy(view, ctx):
        return []
    others = view.others_pct or []
    others_cores = view.mean_others_cores() or 0.0
    tree_cores = _mean(view.tree_pct or []) / 100 * view.cores
    evidence: dict[str, Any] = {
        "samples": view.samples,
        "sampled_ns": view.span_ns,
        "cores": view.cores,
        "mean_cpu_pct": round(_mean(view.machine_pct), 1),
        "mean_others_pct": round(_mean(others), 1),
        "others_cores": round(others_cores, 2),
        "process_tree_cores": round(tree_cores, 2),
        "saturated_sample_share": round(_saturated_share(view, ctx), 3),
    }
    return [
        ctx.finding(
            "noisy_neighbour",
            f"Other processes used {others_cores:.1f} of {view.cores} cores during the steps "
            f"(the profiled run {tree_cores:.1f}): the timings are perturbed",
            0,
            evidence=evidence,
            fix=(
                "Profile again on a quiet machine, or give the run cores of its own (taskset / cgroups), before "
                "acting on host-side findings: step times, data_loading and host_bound include time the run "
                "waited for cores other processes held, and a saturated CPU here is not the run's own."
            ),
            formula="no saving: mean over the steady steps' telemetry samples of the machine's CPU minus the "
            "profiled process tree's (proc_cpu_pct / cores)",
            confidence="high" if view.samples >= 2 * ctx.options.telemetry_min_samples else "medium",
            severity="info",
        )
    ]


@rank_rule(saving=Saving.NONE,
           options=("telemetry_min_samples", "data_loading_share", "io_wait_pct", "io_read_bytes_per_s"),
           needs=("idle_causes", "telemetry"))
def io_bound(ctx: RankContext) -> list[Finding]:
    """The loader waits on storage: iowait high (or heavy reads with idle CPUs) while the device starves."""
    found = _window_rows(ctx)
    if found is None or len(found[1]) < max(ctx.options.telemetry_min_samples, 2):
        return []  # no verdict from a handful of samples
    table, idx = found
    starved = ctx.share(ctx.per_step("idle_causes_ns", "data_loading"))
    if starved < ctx.options.data_loading_share:
        return []
    iowait = _values(table, "cpu_iowait_pct", idx)
    cpu = _values(table, "cpu_pct", idx)
    read_rate = _read_rate(table, idx)
    if iowait:
        hit = _mean(iowait) >= ctx.options.io_wait_pct
    else:
        hit = read_rate >= ctx.options.io_read_bytes_per_s and bool(cpu) and _mean(cpu) < 50.0
    if not hit:
        return []
    evidence = {
        "mean_iowait_pct": round(_mean(iowait), 1) if iowait else None,
        "disk_read_bytes_per_s": int(read_rate),
        "mean_cpu_pct": round(_mean(cpu), 1) if cpu else None,
        "data_loading_share": round(starved, 3),
    }
    return [
        ctx.finding(
            "io_bound",
            f"Data loading waits on storage ({read_rate / 1e6:.0f} MB/s read, CPUs mostly idle)",
            0,
            evidence=evidence,
            fix=(
                "Feed from faster or closer storage: copy the dataset to local NVMe / RAM disk, use a sharded "
                "sequential format (WebDataset, MosaicML streaming, TFRecord-like shards) instead of many small "
                "files, cache decoded samples, and raise num_workers / prefetch_factor to keep more reads in flight."
            ),
            formula="no separate saving: it explains the data_loading time (iowait ≥ io_wait_pct, or disk reads "
            "≥ io_read_bytes_per_s with CPU < 50 %, while the device waits for batches)",
            confidence="low" if not iowait else "medium",
            severity=ctx.options.severity(starved),
        )
    ]


def _read_rate(table: dict[str, list[float]], idx: list[int]) -> float:
    """Bytes per second read from disk across the samples (the column is cumulative since the start)."""
    reads = table.get("disk_read_bytes")
    times = table.get("t_unix_ns")
    if not reads or not times or len(idx) < 2:
        return 0.0
    first, last = idx[0], idx[-1]
    dt = (times[last] - times[first]) / 1e9
    dr = reads[last] - reads[first]
    return dr / dt if dt > 0 and not math.isnan(dr) else 0.0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
