"""Rules on system telemetry: ``cpu_saturation``, ``noisy_neighbour`` and ``io_bound``.

Telemetry is not in the trace: ``aiprof run`` / ``aiprof.profile`` write ``telemetry.csv`` next to the
traces in the run directory (one row per ~100 ms: ``t_unix_ns``, ``cpu_pct`` (the machine, mean over its
cores), ``cpuN_pct``, ``proc_cpu_pct`` (the profiled process tree: root and descendants, 100 = one core, as
in top), ``disk_read_bytes`` cumulative since the start, optional ``cpu_iowait_pct``, ``gpuN_util_pct``…).
:func:`aiprof.rules.context.load_run_inputs` reads it in the worker (``meta.json`` comes decoded, read once at the root), and the rules line it up with the steps
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

from aiprof.rules.context import RankContext
from aiprof.rules.finding import Evidence, Finding
from aiprof.rules.spec import Saving, rank_rule
from aiprof.rules.views.machine import machine_facts
from aiprof.rules.views.telemetry import CpuView, column_values, cpu_view, mean, window_rows

def _starved_share(ctx: RankContext) -> float:
    """Share of the step the device idled for host-side reasons (data loading, host overhead)."""
    return ctx.share(ctx.per_step("idle_causes_ns", "data_loading") + ctx.per_step("idle_causes_ns", "host"))


def _saturated_share(view: CpuView, ctx: RankContext) -> float:
    """Share of the samples with the machine's CPU at ≥ cpu_saturation_pct."""
    return sum(1 for m in view.machine_pct if m >= ctx.options.cpu_saturation_pct) / view.samples


def _noisy(view: CpuView, ctx: RankContext) -> bool:
    others = view.others_pct
    return others is not None and mean(others) >= ctx.options.noisy_neighbour_pct


class CpuSaturationEvidence(Evidence, kw_only=True):
    """``cpu_saturation``'s evidence: the steady steps' telemetry samples, the share of saturated ones, the
    machine's mean CPU and cores, the share of the step the device starved for host work, the profiled
    tree's CPU (100 = one core; None when the telemetry has no per-tree column)."""

    samples: int
    sampled_ns: int
    saturated_sample_share: float
    mean_cpu_pct: float
    cores: int | None
    device_starved_share: float
    process_tree_cpu_pct: float | None


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
    evidence = CpuSaturationEvidence(
        samples=view.samples, sampled_ns=view.span_ns, saturated_sample_share=round(busy, 3),
        mean_cpu_pct=round(mean(view.machine_pct), 1), cores=cores, device_starved_share=round(starved, 3),
        process_tree_cpu_pct=round(mean(view.tree_pct) * view.cores, 1) if view.tree_pct is not None else None,
    )
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


class NoisyNeighbourEvidence(Evidence, kw_only=True):
    """``noisy_neighbour``'s evidence: the steady steps' telemetry samples, the machine's and the other
    processes' mean CPU, in cores the others' and the profiled tree's, the share of saturated samples."""

    samples: int
    sampled_ns: int
    cores: int
    mean_cpu_pct: float
    mean_others_pct: float
    others_cores: float
    process_tree_cores: float
    saturated_sample_share: float


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
    tree_cores = mean(view.tree_pct or []) / 100 * view.cores
    evidence = NoisyNeighbourEvidence(
        samples=view.samples, sampled_ns=view.span_ns, cores=view.cores, mean_cpu_pct=round(mean(view.machine_pct), 1),
        mean_others_pct=round(mean(others), 1), others_cores=round(others_cores, 2),
        process_tree_cores=round(tree_cores, 2), saturated_sample_share=round(_saturated_share(view, ctx), 3),
    )
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
    found = window_rows(ctx)
    if found is None or len(found[1]) < max(ctx.options.telemetry_min_samples, 2):
        return []  # no verdict from a handful of samples
    table, idx = found
    starved = ctx.share(ctx.per_step("idle_causes_ns", "data_loading"))
    if starved < ctx.options.data_loading_share:
        return []
    iowait = column_values(table, "cpu_iowait_pct", idx)
    cpu = column_values(table, "cpu_pct", idx)
    read_rate = _read_rate(table, idx)
    if iowait:
        hit = mean(iowait) >= ctx.options.io_wait_pct
    else:
        hit = read_rate >= ctx.options.io_read_bytes_per_s and bool(cpu) and mean(cpu) < 50.0
    if not hit:
        return []
    evidence = {
        "mean_iowait_pct": round(mean(iowait), 1) if iowait else None,
        "disk_read_bytes_per_s": int(read_rate),
        "mean_cpu_pct": round(mean(cpu), 1) if cpu else None,
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


