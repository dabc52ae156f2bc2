"""Rules on why the device waits: ``data_loading``, ``host_bound``, ``launch_bound``, ``sync``.

They read the idle causes of the timeline accounting (every idle ns of a step has exactly one cause, so
these savings never overlap), and on CPU-only traces the equivalent host-side patterns (tiny ops and
Python between them; per-element ``.item()`` round trips).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from msgspec import UNSET, UnsetType

from aiprof import arrays
from aiprof.arrays import unique
from aiprof.analysis import intervals as iv
from aiprof.rules.context import RankContext, first_user_frame
from aiprof.rules.evidence import long_gaps, ms_text, spread, top_ops
from aiprof.rules.framework import fix_text
from aiprof.rules.finding import Evidence, Finding
from aiprof.rules.spec import ReplayPolicy, Saving, rank_rule
from aiprof.rules.views.host import (DATALOADER, SYNC_CALL, annotation_rows, host_split, ops_in,
                                     stack_cost_ns, steady_set, sync_episodes)
from aiprof.rules.views.idle import idle_sets
from aiprof.rules.views.machine import MachineFacts, loader_workers_reason, loader_workers_text, machine_facts
from aiprof.trace import links
from aiprof.trace.model import I64, Kind

_MULTI_WORKER = "MultiProcessing"


# ---------------------------------------------------------------------------------------------------
# data_loading
# ---------------------------------------------------------------------------------------------------
@rank_rule(saving=Saving.IDLE, options=("data_loading_share",), needs=("idle_causes", "machine", "trace"),
           capture_idle=True)
def data_loading(ctx: RankContext) -> list[Finding]:
    """The device idles while the host waits in ``DataLoader.__next__``. When the run directory holds the
    loader's own per-step waits (``aiprof run``), they are the evidence, and on a CPU-only run the saving:
    the loop's wait is exactly the time the step loses, measured in every step rather than inferred."""
    exposed = ctx.per_step("idle_causes_ns", "data_loading")
    measured = _measured_waits(ctx)
    if measured is not None and not ctx.is_gpu:
        exposed = float(measured)
    if ctx.share(exposed) < ctx.options.data_loading_share:
        return []
    rows = annotation_rows(ctx, DATALOADER)
    names = Counter(ctx.names(rows))
    multi = any(_MULTI_WORKER in n for n in names)
    total = int(ctx.trace.columns.dur[rows].sum()) / ctx.step_count
    evidence: dict[str, Any] = {
        "exposed_data_loading_ns_per_step": int(exposed),
        "data_loader_ns_per_step": int(total),
        "next_calls_per_step": round(rows.size / ctx.step_count, 2),
        "data_loader": names.most_common(1)[0][0] if names else None,
        "workers": "multi-process" if multi else "single-process (num_workers=0)",
    }
    formula = "mean over steady steps of the idle time whose host thread was inside DataLoader.__next__"
    if measured is not None:
        evidence["loader_wait_ns_per_step"] = measured
        evidence["loader_wait_source"] = "the loader's own clock (aiprof run's dataloader.rank<N>.csv)"
        formula = ("mean over steady steps of the time the training loop waited in DataLoader.__next__, timed "
                   "by the loader in every step" if not ctx.is_gpu else formula + "; the loader's own wait is evidence")
    facts = machine_facts(ctx)
    evidence["cores"] = facts.cores
    evidence["recommended_num_workers"] = facts.loader_workers
    fix = _data_loading_fix(facts, multi)
    return [
        ctx.finding(
            "data_loading",
            f"Device idle {ms_text(exposed)} per step waiting for the next batch"
            if facts.is_gpu
            else f"Training loop waits {ms_text(exposed)} per step for the next batch",
            exposed,
            evidence=evidence,
            fix=fix,
            formula=formula,
            confidence="high",
        )
    ]


def _measured_waits(ctx: RankContext) -> int | None:
    """Mean per steady step of the loader's own wait (``loader_waits`` from the run directory), when it has
    every steady ``ProfilerStep#N`` (the loader counts steps the same way); None otherwise."""
    waits = ctx.inputs.loader_waits
    if waits is None or ctx.analysis.step_source != "ProfilerStep" or not ctx.steps:
        return None
    found = [w for w in (waits.get(s.number) for s in ctx.steps) if isinstance(w, int)]
    if len(found) != len(ctx.steps):
        return None
    return sum(found) // len(found)


def _data_loading_fix(facts: MachineFacts, multi: bool) -> str:
    """The loader fix sized to the machine (:mod:`aiprof.rules.machine`): ``num_workers`` from the host's
    cores (no number when the trace does not say them), and pinned memory, non-blocking copies and GPU
    decoding only when the profiled device is a GPU."""
    gpu = facts.is_gpu
    cores = facts.cores
    cheaper = (
        "make __getitem__ cheaper (decode/augment on the GPU, cache decoded samples)"
        if gpu
        else "make __getitem__ cheaper (cache decoded samples, preprocess offline, lighter transforms)"
    )
    share = (
        "" if gpu else " On a CPU-only run the workers share the cores with the model's compute threads: keep "
        "compute threads + workers ≤ cores (torch.set_num_threads)."
    )
    if facts.loader_workers == 0:
        return (
            f"Only {cores} core: background workers cannot load while the step computes, so {cheaper}, or run "
            "on a host with more cores."
        )
    if multi:
        if cores is None:
            more = "raise num_workers (up to the free cores; the trace does not say how many the host has)"
        elif cores - 1 <= 1:
            more = f"more workers will not fit on {cores} cores"
        else:
            more = f"raise num_workers (at most {cores - 1} on this {cores}-core host: one core stays with the training process)"
        keep = "persistent_workers=True, prefetch_factor=4" + (", pin_memory=True" if gpu else "")
        return f"The workers cannot keep up: {more}, {cheaper}, and keep {keep}.{share}"
    args, why = loader_workers_text(facts), loader_workers_reason(facts)
    if gpu:
        return (
            f"Load batches in background workers: DataLoader(dataset, batch_size=..., {args}, "
            "pin_memory=True, persistent_workers=True, prefetch_factor=2) and move batches with "
            f".to(device, non_blocking=True) ({why})."
        )
    return (
        f"Load batches in background workers: DataLoader(dataset, batch_size=..., {args}, "
        f"persistent_workers=True, prefetch_factor=2) ({why}).{share}"
    )


def _has_loader(ctx: RankContext) -> bool:
    """The loop iterates a DataLoader (its ``enumerate(DataLoader)`` spans are in the trace): only then do fixes
    speak of its workers."""
    rows = ctx.trace.rows_of(Kind.USER_ANNOTATION)
    return bool(rows.size and ctx.trace.name_matches(rows, DATALOADER).any())


# ---------------------------------------------------------------------------------------------------
# host_bound, host_gaps, host_stall: the host is what the device (or the CPU run) waits for
# ---------------------------------------------------------------------------------------------------
# Host idle is split by the shape of its gaps (GPU: the ``host`` idle cause; CPU-only: time in tiny ops
# and outside any op):
#   many SHORT gaps              → host_bound  (dispatch / framework overhead: fuse, vectorise, compile)
#   LONG gaps inside one call    → host_stall  (GPU: the host sat in one op or runtime call)
#   LONG gaps outside any op     → host_gaps   (Python between ops: a sleep, logging, data munging)
# "Long" is max(stall_min_ns, stall_factor x the median gap): overhead is µs per op, a sleep is not.
_NO_STACKS = (
    "no stacks in this trace: record them with `aiprof run --with-stack` or "
    "torch.profiler.profile(with_stack=True) to see the source line"
)


def _host_share(ctx: RankContext, saving: float) -> float:
    """``saving`` over the step with_stack did not lengthen (``ctx.views.uninflated_step``)."""
    step = ctx.views.uninflated_step
    return saving / step if step > 0 else 0.0


def _step_note(ctx: RankContext, evidence: dict[str, Any]) -> float:
    """Record in the evidence the step the share is taken of, when with_stack lengthened it; returns that step."""
    step = ctx.views.uninflated_step
    if step < ctx.mean_step_ns:
        evidence["step_ns_without_with_stack"] = int(step)
    return step


def _stack_note(evidence: dict[str, Any], cost_ns: float, steps: int, measured_ns: float) -> None:
    """Say in the evidence how much of the measured time was with_stack's own recording (left out of the saving)."""
    from aiprof.analysis.stacks import WITH_STACK_NS_PER_CALL

    if cost_ns <= 0:
        return
    evidence["with_stack_ns_per_step"] = int(cost_ns / steps)
    evidence["measured_ns_per_step"] = int(measured_ns / steps)
    evidence["with_stack_note"] = (
        f"the trace records Python stacks: {cost_ns / steps / 1e6:,.3f} ms per step of this time is the profiler "
        f"recording them ({round(cost_ns / WITH_STACK_NS_PER_CALL / steps):,} python_function events per step x "
        f"~{WITH_STACK_NS_PER_CALL} ns), left out of the saving")


@rank_rule(saving=Saving.IDLE,
           options=("host_bound_share", "tiny_op_share", "stall_min_ns", "stall_factor", "tiny_cpu_op_ns",
                    "profiler_ns_per_op", "sync_cluster_gap_ns"),
           needs=("idle_causes", "host_split", "idle_sets", "long_calls", "cpu_ops", "source_lines", "uninflated_step"),
           capture_idle=True, graph_replays=ReplayPolicy.UNLESS_HIDDEN)
def host_bound(ctx: RankContext) -> list[Finding]:
    """The device (or, on CPU-only traces, the run) is slowed by many small host costs: framework dispatch
    of tiny ops and the Python between them. Long gaps are not counted here (host_stall, host_gaps)."""
    split = host_split(ctx)
    stack_ns = 0.0
    if split.overhead_set is not None and split.overhead_ns > 0:
        stack_ns = float(min(stack_cost_ns(ctx, *split.overhead_set).sum(), split.overhead_ns))
    saving = (split.overhead_ns - stack_ns) / ctx.step_count
    if ctx.is_gpu:
        formula = (
            "mean over steady steps of the idle time while the host ran ops/Python with no launch pending, "
            "in gaps shorter than max(stall_min_ns, stall_factor x the median such gap)"
        )
        threshold = ctx.options.host_bound_share
    else:
        formula = (
            "mean over steady steps of |tiny top-level ops (< tiny_cpu_op_ns) ∪ short gaps outside any op| "
            "minus data loading and sync round trips, each op's time net of the profiler's own per-op cost; "
            "long gaps outside any op are host_gaps"
        )
        threshold = ctx.options.tiny_op_share
    if _host_share(ctx, saving) < threshold or saving <= 0:
        return []
    evidence: dict[str, Any] = dict(split.evidence)
    evidence.update(split.overhead.evidence("gap", ctx.step_count))
    evidence["top_ops"] = top_ops(ctx, ctx.cpu_ops)
    _stack_note(evidence, stack_ns, ctx.step_count, split.overhead_ns)
    step_ns = _step_note(ctx, evidence)
    line = _hot_line(ctx)
    if line:
        evidence["source_line"] = line
    fix = (
        "Cut per-op host overhead: batch many small ops into few large ones (vectorise Python loops over "
        "tensors: one op on the whole tensor instead of one per element or column), torch.compile(model) to "
        "fuse them, and a larger batch per step"
    )
    if ctx.is_gpu:
        fix += "; CUDA graphs (torch.compile(mode='reduce-overhead')) remove the launch cost of static parts"
    return [
        ctx.finding(
            "host_bound",
            f"Host overhead: {ms_text(saving)} per step in framework dispatch of small ops and the Python between them",
            saving,
            evidence=evidence,
            fix=fix + ".",
            formula=formula,
            # Few events holding the time read less like "many small ops".
            confidence="low" if split.overhead.count < 20 * ctx.step_count else "medium",
            step_ns=step_ns,
        )
    ]


@rank_rule(saving=Saving.IDLE,
           options=("host_bound_share", "tiny_op_share", "stall_min_ns", "stall_factor", "tiny_cpu_op_ns",
                    "profiler_ns_per_op", "sync_cluster_gap_ns"),
           needs=("idle_causes", "host_split", "idle_sets", "long_calls", "cpu_ops", "source_lines", "uninflated_step"),
           graph_replays=ReplayPolicy.UNLESS_HIDDEN)
def host_gaps(ctx: RankContext) -> list[Finding]:
    """Long stretches of Python outside any op (a sleep, logging, metric bookkeeping, data munging): the
    device (or the run) waits for the script itself, not for the framework."""
    split = host_split(ctx)
    if not split.gaps:
        return []
    lengths = np.array([b - a for a, b in split.gaps], dtype=np.int64)
    stack = stack_cost_ns(ctx, np.array([a for a, _ in split.gaps], dtype=np.int64),
                          np.array([b for _, b in split.gaps], dtype=np.int64))
    saving = float((lengths - stack).sum()) / ctx.step_count
    threshold = ctx.options.host_bound_share if ctx.is_gpu else ctx.options.tiny_op_share
    if _host_share(ctx, saving) < threshold:
        return []
    from aiprof.analysis.whatif.edits import HOST_GAP_SPANS

    ctx.trace.cache[HOST_GAP_SPANS] = tuple(split.gaps)  # the fix the what-if replay makes (docs/whatif.md)
    order = np.argsort(-lengths)[:3]
    evidence: dict[str, Any] = {"gap_ns_per_step": int(saving), **spread(lengths).evidence("gap", ctx.step_count)}
    gaps = [_gap_evidence(ctx, *split.gaps[i]) for i in order.tolist()]
    evidence["longest_gaps"] = gaps
    _stack_note(evidence, float(stack.sum()), ctx.step_count, float(lengths.sum()))
    step_ns = _step_note(ctx, evidence)
    lines = [g.source_line for g in gaps if isinstance(g.source_line, str) and g.source_line]
    if not lines:
        evidence["how_to_see_the_line"] = _NO_STACKS
    where = f" at {lines[0]}" if lines else ""
    device = "the GPU idles" if ctx.is_gpu else "no op runs"
    return [
        ctx.finding(
            "host_gaps",
            f"Python outside any op: {ms_text(saving)} per step in {evidence['gaps_per_step']} long gap(s) where {device}",
            saving,
            evidence=evidence,
            fix=(
                f"The time is in your own Python between framework calls{where}: a sleep, logging or printing, "
                "metric bookkeeping, data preparation in Python, a garbage-collection pause. Find it in the "
                "source (py-spy or the stacks of the ops around the gap), then remove it, do it every N steps, "
                "or move it off the step's critical path (a background thread"
                + (", the DataLoader's workers)" if _has_loader(ctx) else ")")
                + ("" if lines else f"; {_NO_STACKS}")
                + ". Gaps of a few ms at random places with no Python in them can also be the process losing its "
                "CPU to others: compare with the machine's CPU load during the run."
            ),
            formula=(
                "mean over steady steps of the gaps outside any op"
                + (" (GPU: idle with the host in no op or runtime call)" if ctx.is_gpu else "")
                + " longer than max(stall_min_ns, stall_factor x the median gap)"
            ),
            confidence="medium" if lengths.size >= ctx.step_count else "low",
            step_ns=step_ns,
        )
    ]


@rank_rule(saving=Saving.IDLE,
           options=("host_bound_share", "stall_min_ns", "stall_factor", "tiny_cpu_op_ns", "profiler_ns_per_op",
                    "sync_cluster_gap_ns"),
           needs=("idle_causes", "host_split", "idle_sets", "long_calls", "source_lines", "uninflated_step"),
           graph_replays=ReplayPolicy.NEVER)
def host_stall(ctx: RankContext) -> list[Finding]:
    """GPU: a few long idle gaps while the host sat inside one op or runtime call (a 600 ms first launch,
    a slow allocation, a CPU-heavy op): a stall with its own cause, named with the call and source line."""
    if not ctx.is_gpu:
        return []
    stalls = host_split(ctx).stalls
    if not stalls:
        return []
    lengths = np.array([b - a for a, b, _ in stalls], dtype=np.int64)
    stack = stack_cost_ns(ctx, np.array([a for a, _, _ in stalls], dtype=np.int64),
                          np.array([b for _, b, _ in stalls], dtype=np.int64))
    saving = float((lengths - stack).sum()) / ctx.step_count
    if _host_share(ctx, saving) < ctx.options.host_bound_share:
        return []
    calls = _stall_calls(ctx, stalls)
    top = calls[0]
    # Fewer times than there are steps (once in a one-window trace): likely warm-up, not steady state.
    once = int(top["count"]) < max(ctx.step_count, 2)
    evidence: dict[str, Any] = {"stall_ns_per_step": int(saving), "stalls": int(lengths.size), "calls": calls[:3]}
    evidence["largest_share"] = round(float(lengths.max()) / float(lengths.sum()), 3)
    _stack_note(evidence, float(stack.sum()), ctx.step_count, float(lengths.sum()))
    step_ns = _step_note(ctx, evidence)
    if int(top["total_ns"]) * 2 >= int(lengths.sum()):
        title = (f"Host stall: the device idles {ms_text(saving)} per step while the host sits in {top['call']} "
                 f"({top['count']}x, longest {ms_text(top['longest_ns'])})")
        fix = _stall_fix(str(top["call"]), once)
    else:  # long gaps inside many different ordinary ops: the host thread, not one call, is slow
        names = ", ".join(str(c["call"]) for c in calls[:3])
        title = (f"Host stalls: the device idles {ms_text(saving)} per step in {lengths.size} long gaps inside "
                 f"{len(calls)} different ops/calls ({names}, …)")
        fix = ("Long gaps inside ordinary ops mean the host thread lost its CPU (other processes or too many "
               "threads on the cores, a GIL held by another Python thread, swapping), not that one op is slow: "
               "check the machine's CPU load during the run, limit OMP/MKL threads"
               + (" and DataLoader workers" if _has_loader(ctx) else "") + " to the free cores, and pin the "
               "training process.")
    return [
        ctx.finding(
            "host_stall",
            title,
            saving,
            evidence=evidence,
            fix=fix,
            formula="mean over steady steps of the long host-idle gaps (≥ max(stall_min_ns, stall_factor x the "
            "median host gap)) that one op or runtime call covers",
            confidence="low" if once else "medium",
            step_ns=step_ns,
        )
    ]


def _stall_fix(call: str, once: bool) -> str:
    """What to do about a long host call, by kind of call."""
    runtime = call.startswith(("cuda", "cu", "hip", "hsa"))
    if "Malloc" in call or "Free" in call or "alloc" in call.lower():
        text = ("The allocator went to the driver inside the step: keep shapes static, reuse buffers, or set "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; after warm-up the caching allocator should not call it")
    elif "Launch" in call or "Module" in call:
        text = ("A launch call this slow loads the kernel's module or compiles it (CUDA lazy loading, JIT): a "
                "one-time cost per kernel. Profile after a few warm-up steps "
                "(torch.profiler.schedule(wait=1, warmup=2, active=3)); CUDA_MODULE_LOADING=EAGER moves it to start-up")
    elif once and runtime:
        text = ("A runtime call this long, once, is CUDA/HIP initialisation (context creation on the first call, "
                "device queries, module loading): a one-time cost, not steady state. Profile after a few warm-up "
                "steps (torch.profiler.schedule(wait=1, warmup=2, active=3)), or initialise the device before the "
                "measured region (torch.cuda.init())")
    elif "conv" in call.lower() or "norm" in call.lower():
        text = ("A convolution / normalisation stalling the host is usually algorithm search (cudnn.benchmark "
                "autotuning, MIOpen find) on new shapes: a one-time cost per shape; keep input shapes static "
                "and profile after warm-up")
    else:
        text = ("Look at the call and its source line: move the work out of the step, make it asynchronous, "
                "or overlap it with device work (a background thread, another stream)")
    return text + (" (seen once in the profiled window: likely a warm-up cost, not steady state)." if once else ".")


def _stall_calls(ctx: RankContext, stalls: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """The calls behind the stalls, by total time: name, count, longest gap, the op around it, the line."""
    by_name: dict[str, dict[str, Any]] = {}
    for a, b, row in stalls:
        name = ctx.trace.strings[int(ctx.trace.columns.name[row])]
        entry = by_name.setdefault(name, {"call": name, "count": 0, "total_ns": 0, "longest_ns": 0})
        entry["count"] += 1
        entry["total_ns"] += b - a
        if b - a > entry["longest_ns"]:
            entry["longest_ns"] = b - a
            entry["call_ns"] = int(ctx.trace.columns.dur[row])
            op = _outer_op(ctx, row)
            if op is not None:
                entry["op"] = ctx.trace.strings[int(ctx.trace.columns.name[op])]
            line = ctx.source_line(op if op is not None else row)
            entry["source_line"] = line or _NO_STACKS
    return sorted(by_name.values(), key=lambda e: -int(e["total_ns"]))


def _outer_op(ctx: RankContext, row: int) -> int | None:
    """The outermost CPU op enclosing ``row`` on its thread (the user-level call), or None."""
    c = ctx.trace.columns
    ops = ctx.trace.rows_of(Kind.CPU_OP)
    ops = ops[(c.tid[ops] == c.tid[row]) & (c.ts[ops] <= c.ts[row]) & (c.ts[ops] + c.dur[ops] >= c.ts[row] + c.dur[row])]
    if ops.size == 0:
        return None
    return int(ops[np.argmax(c.dur[ops])])


class LongGap(Evidence, kw_only=True):
    """One long gap of ``host_gaps``' evidence: its length, the Python function running through it (when the
    trace has Python events) and the user's source line."""

    gap_ns: int
    python: str | UnsetType = UNSET
    source_line: str | UnsetType = UNSET


def _gap_evidence(ctx: RankContext, start: int, end: int) -> LongGap:
    """One long gap: its length, the Python running in it (python_function events), the source line."""
    c = ctx.trace.columns
    out = LongGap(gap_ns=int(end - start))
    py = ctx.python_rows
    overlap = np.minimum(c.ts[py] + c.dur[py], end) - np.maximum(c.ts[py], start)
    py = py[overlap * 2 >= end - start]  # Python frames that ran through most of the gap
    if py.size:
        innermost = py[np.argsort(c.dur[py], kind="stable")]
        out.python = ctx.trace.strings[int(c.name[innermost[0]])]
        line = first_user_frame(ctx.names(innermost))
        if line:
            out.source_line = line
    if not out.source_line:  # the op right after the gap: its stack shows the loop the gap is in
        ops = ctx.cpu_ops
        after = ops[c.ts[ops] >= end]
        if after.size:
            line = ctx.source_line(int(after[np.argmin(c.ts[after])]))
            if line:
                out.source_line = line
    return out


def _hot_line(ctx: RankContext) -> str | None:
    """The user source line seen most often above the steady-state ops (when stacks were recorded)."""
    lines = Counter(
        line for r in ctx.cpu_ops[:: max(ctx.cpu_ops.size // 200, 1)].tolist() if (line := ctx.source_line(r))
    )
    return lines.most_common(1)[0][0] if lines else None


# ---------------------------------------------------------------------------------------------------
# launch_bound
# ---------------------------------------------------------------------------------------------------
@rank_rule(saving=Saving.IDLE,
           options=("launch_bound_share", "launch_bound_min_kernels", "concentrated_share", "tiny_kernel_ns"),
           needs=("idle_causes", "idle_sets", "kernels", "trace"), capture_idle=True, graph_replays=ReplayPolicy.NEVER)
def launch_bound(ctx: RankContext) -> list[Finding]:
    """Many tiny kernels: the GPU waits for launches that were issued but had not started."""
    if not ctx.is_gpu:
        return []
    wait = ctx.per_step("idle_causes_ns", "launch")
    if ctx.share(wait) < ctx.options.launch_bound_share:
        return []
    c = ctx.trace.columns
    k = ctx.kernels
    if k.size / ctx.step_count < ctx.options.launch_bound_min_kernels:
        return []
    # Launch overhead is many short gaps: the timeline already moved gaps too long to be launch latency
    # (a slow first launch, a blocking copy) to their own cause; a few gaps holding the time are not it.
    sets = idle_sets(ctx)
    gaps = spread(sets["launch"][1] - sets["launch"][0])
    if gaps.count / ctx.step_count < ctx.options.launch_bound_min_kernels or gaps.concentrated(ctx.options.concentrated_share):
        return []
    tiny = k[c.dur[k] < ctx.options.tiny_kernel_ns]
    launches = ctx.in_window(ctx.trace.rows_of(Kind.RUNTIME, Kind.DRIVER))
    launches = launches[ctx.trace.name_matches(launches, "Launch")]
    evidence = {
        "launch_wait_ns_per_step": int(wait),
        "kernels_per_step": round(k.size / ctx.step_count, 1),
        "tiny_kernels_per_step": round(tiny.size / ctx.step_count, 1),
        "tiny_kernel_threshold_ns": ctx.options.tiny_kernel_ns,
        "median_kernel_ns": int(arrays.median(c.dur[k])) if k.size else 0,
        "median_launch_call_ns": int(arrays.median(c.dur[launches])) if launches.size else 0,
        **gaps.evidence("launch_gap", ctx.step_count),
        "launch_stall_ns_per_step": int(iv.total(sets["launch_stall"]) / ctx.step_count),
        "top_tiny_kernels": top_ops(ctx, tiny, 3),
    }
    return [
        ctx.finding(
            "launch_bound",
            f"Launch-bound: {evidence['kernels_per_step']} kernels per step, GPU waits {ms_text(wait)} on launches",
            wait,
            evidence=evidence,
            fix=(
                "Launch fewer, larger kernels: torch.compile(model, mode='reduce-overhead') (fusion + CUDA "
                "graphs), torch.cuda.graphs for static parts, fused/foreach optimizers (foreach=True or "
                "fused=True), and a larger batch per step."
            ),
            formula=(
                "mean over steady steps of idle time between a kernel's launch call and its start, in gaps no "
                "longer than max(50 µs, 10 x the median launch call or launch gap) (longer ones are stalls)"
            ),
            confidence="medium",
        )
    ]


# ---------------------------------------------------------------------------------------------------
# sync
# ---------------------------------------------------------------------------------------------------
@rank_rule(saving=Saving.IDLE,
           options=("sync_share", "concentrated_share", "stall_min_ns", "stall_factor", "profiler_ns_per_op",
                    "sync_profiler_cost_share", "tiny_cpu_op_ns", "sync_cluster_gap_ns"),
           needs=("idle_causes", "idle_sets", "cpu_ops", "trace", "source_lines"), capture_idle=True)
def sync(ctx: RankContext) -> list[Finding]:
    """GPU: host-device round trips inside the step (``.item()``, ``.cpu()``, synchronize). CPU-only traces:
    element-wise tensor → Python conversions (``.item()`` in a Python loop); there is no device there."""
    return _sync_gpu(ctx) if ctx.is_gpu else _sync_cpu(ctx)


def _sync_gpu(ctx: RankContext) -> list[Finding]:
    saving = ctx.per_step("idle_causes_ns", "sync")
    if ctx.share(saving) < ctx.options.sync_share or saving <= 0:
        return []
    rows = _sync_calls(ctx)
    pieces = idle_sets(ctx)["sync"]
    gaps = spread(pieces[1] - pieces[0])
    evidence: dict[str, Any] = {"sync_idle_ns_per_step": int(saving), "sync_calls_per_step": round(rows.size / ctx.step_count, 1)}
    evidence.update(gaps.evidence("sync_gap", ctx.step_count))
    evidence["top_calls"] = top_ops(ctx, rows, 3)
    callers = _callers(ctx, rows)
    _add_lines(ctx, evidence, callers)
    title = fix_text(ctx.trace, "sync.title", "Host round trips (.item()/.cpu()/synchronize) cost {saving} per step"
                     ).format(saving=ms_text(saving))
    fix = fix_text(ctx.trace, "sync", (
        "Keep values on the device inside the step: accumulate metrics as tensors "
        "(total += loss.detach()) and call .item() / .cpu() once every N steps or after the loop; "
        "convert whole tensors at once (t.tolist()) instead of element by element; use "
        ".to(device, non_blocking=True) and avoid torch.cuda.synchronize() in the loop."
    ))
    confidence = "medium"
    if gaps.concentrated(ctx.options.concentrated_share):
        # One blocking call holds the time: name it; "many small round trips" is the less likely reading.
        i = int(np.argmax(pieces[1] - pieces[0]))
        row = _sync_call_at(ctx, rows, int(pieces[0][i]), int(pieces[1][i]))
        call = ctx.trace.strings[int(ctx.trace.columns.name[row])] if row >= 0 else "a synchronising call"
        evidence["largest_call"] = call
        title = f"One blocking call ({call}) holds {gaps.largest_share:.0%} of {ms_text(saving)} per step of sync idle"
        lengths = pieces[1] - pieces[0]
        if int(long_gaps(lengths, ctx.options.stall_min_ns, ctx.options.stall_factor).sum()) < max(ctx.step_count, 2):
            once = fix_text(ctx.trace, "sync.once", (
                "Seen once in the profiled window, it may be a one-time cost instead "
                "(CUDA context or library initialisation: cudaFree(0) creates the context; cudnn autotuning): "
                "profile after a few warm-up steps."))
            fix = f"{_blocking_fix(ctx, call)} {once} {fix}"
        else:
            fix = _blocking_fix(ctx, call) + " " + fix
        confidence = "low"
    return [
        ctx.finding(
            "sync",
            title,
            saving,
            evidence=evidence,
            fix=fix,
            formula="mean over steady steps of the idle time from a synchronising call to the next launch",
            confidence=confidence,
        )
    ]


def _sync_call_at(ctx: RankContext, calls: I64, start: int, end: int) -> int:
    """The synchronising call behind a sync gap: the one overlapping it most, else the last one that
    returned before it (the host had not launched again since), else -1."""
    c = ctx.trace.columns
    if calls.size == 0:
        return -1
    overlap = np.minimum(c.ts[calls] + c.dur[calls], end) - np.maximum(c.ts[calls], start)
    if overlap.max() > 0:
        return int(calls[np.argmax(overlap)])
    ended = calls[c.ts[calls] + c.dur[calls] <= start]
    return int(ended[np.argmax(c.ts[ended] + c.dur[ended])]) if ended.size else -1


def _blocking_fix(ctx: RankContext, call: str) -> str:
    """The fix for one blocking call, in the program's language (:mod:`aiprof.rules.framework`)."""
    if "Free" in call:
        return fix_text(ctx.trace, "sync.free", (
            "cudaFree synchronises the whole device: the caching allocator gave memory back (an explicit "
            "torch.cuda.empty_cache(), or a retry after an allocation failed). Keep empty_cache() out of the "
            "loop and shapes static (or PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)."))
    if "Memcpy" in call or "memcpy" in call or "copy" in call:
        return fix_text(ctx.trace, "sync.copy", (
            "A blocking copy: copy from pinned memory (pin_memory=True) with .to(device, non_blocking=True), "
            "or move it out of the step."))
    if "Event" in call and "conv" not in call:
        return fix_text(ctx.trace, "sync.event", (
            "An event wait: find what it waits for (cudnn.benchmark autotuning waits on events the first time "
            "it sees a shape; that is warm-up, profile after it)."))
    return fix_text(ctx.trace, "sync.explicit",
                    "One explicit synchronisation: remove it from the step, or do it every N steps.")


def _sync_cpu(ctx: RankContext) -> list[Finding]:
    cover, rows = sync_episodes(ctx)
    if rows.size == 0:
        return []
    spans = iv.total(iv.intersect(cover, steady_set(ctx)))
    capped = _capped_loops(ctx, cover, rows)
    # The profiler inflates the loop: each recorded op costs it; view / scalar ops about
    # sync_profiler_cost_share of the per-op cost calibrated on allocating ops.
    cost = ctx.options.profiler_ns_per_op * ctx.options.sync_profiler_cost_share
    per_step = [max(iv.total(iv.intersect(capped, step)) - ops_in(ctx, iv.intersect(cover, step), every=True) * cost, 0)
                for step in _step_sets(ctx)]
    # The median step, not the mean: one loop the scheduler pre-empted for 9 ms is not every step's cost
    saving = arrays.median(np.array(per_step, dtype=np.float64)) if per_step else 0.0
    if ctx.share(saving) < ctx.options.sync_share or saving <= 0:
        return []
    loops = spread(cover[1] - cover[0])
    evidence: dict[str, Any] = {
        "conversion_loop_ns_per_step": int(saving),
        "profiled_loop_ns_per_step": int(spans / ctx.step_count),
        "loop_ns_by_step": [int(v) for v in per_step],
        "item_calls_per_step": round(rows.size / ctx.step_count, 1),
        **loops.evidence("loop", ctx.step_count),
    }
    _add_lines(ctx, evidence, rows)
    return [
        ctx.finding(
            "sync",
            f"Element-wise tensor→Python conversions (.item() in a loop) cost {ms_text(saving)} per step",
            saving,
            evidence=evidence,
            fix=(
                "Convert whole tensors at once: values = t.tolist() (one call) instead of t[i].item() per "
                "element; keep metrics as tensors (total += loss.detach()) and convert them once per step or "
                "every N steps; vectorise the Python loop over elements into tensor ops."
            ),
            formula=(
                "median over steady steps of the span of each loop of .item()-like ops (ops closer than "
                "sync_cluster_gap_ns; a loop at most its calls x 2 x the median call period, so a pre-empted "
                "call does not count), net of the profiler's cost per recorded op (profiler_ns_per_op x "
                "sync_profiler_cost_share: view and scalar ops cost it less than allocating ones); calls inside "
                "Optimizer.step/zero_grad (the optimizer's own step counters) left out"
            ),
            kind="estimate",
            confidence="medium",
        )
    ]


def _add_lines(ctx: RankContext, evidence: dict[str, Any], callers: I64) -> None:
    evidence["top_ops"] = top_ops(ctx, callers, 3)
    lines = Counter(line for r in callers[:200].tolist() if (line := ctx.source_line(r)))
    if lines:
        evidence["source_lines"] = [line for line, _ in lines.most_common(3)]


def _sync_calls(ctx: RankContext) -> I64:
    rows = ctx.in_window(ctx.trace.rows_of(Kind.RUNTIME, Kind.DRIVER))
    selected: I64 = rows[ctx.trace.name_matches(rows, SYNC_CALL)]
    return selected


def _callers(ctx: RankContext, calls: I64) -> I64:
    """The CPU ops that issued runtime calls (aten::item → cudaMemcpyAsync + cudaStreamSynchronize)."""
    ops = links.issuing_op(ctx.trace)[calls]
    found: I64 = unique(ops[ops >= 0])
    return found


def _step_sets(ctx: RankContext) -> list[iv.IntervalSet]:
    """Each steady step's window, as an interval set cut to the steady time (one-time costs left out)."""
    steady = steady_set(ctx)
    return [iv.intersect(steady, iv.as_set([s.start_ns], [s.start_ns + s.duration_ns])) for s in ctx.steps]


def _capped_loops(ctx: RankContext, cover: iv.IntervalSet, rows: I64) -> iv.IntervalSet:
    """Each loop of :func:`sync_episodes` cut to at most its calls x 2 x the median call period (start to
    next start within the loop): a loop stretched by one call the scheduler pre-empted counts as the loop."""
    c = ctx.trace.columns
    ts = c.ts[rows]
    loop = np.searchsorted(cover[0], ts, side="right") - 1
    same = np.r_[False, loop[1:] == loop[:-1]]
    period = np.where(same, np.diff(ts, prepend=ts[:1]), c.dur[rows])
    typical = arrays.median(period) if period.size else 0.0
    calls = np.bincount(loop[loop >= 0], minlength=cover[0].size)
    ends = np.minimum(cover[1], cover[0] + (calls * 2 * typical).astype(np.int64))
    return cover[0], np.maximum(ends, cover[0])


__all__ = ["data_loading", "host_bound", "host_gaps", "host_stall", "launch_bound", "sync"]
