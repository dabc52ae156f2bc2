"""Memory findings, from a :class:`~aiprof.memory.report.MemoryReport` (not from a trace's time accounting).

Each rule is ``rule(report, options: RuleOptions) -> list[Finding]``, declared with ``@memory_rule``
(:mod:`aiprof.rules.spec`) and collected by the registry like every other rule
(:func:`aiprof.rules.registry.memory_findings` runs them). A memory fix saves bytes, not time:
``est_saving_ns_per_step`` is 0 and the saving is in the evidence as ``est_saving_bytes`` (with
``saving_formula`` saying how it was estimated). Thresholds are the ``mem_*`` fields of
:class:`~aiprof.rules.options.RuleOptions` (``--rule-option mem_near_capacity_fraction=0.8``); every id is
documented in docs/findings.md (section "Memory").
"""

from __future__ import annotations

import math

from aiprof.memory.report import DeviceMemory, MemoryReport
from aiprof.memory.units import binary
from aiprof.rules.finding import Finding
from aiprof.rules.options import RuleOptions
from aiprof.rules.spec import memory_rule

# Memory findings that come before the others whatever their bytes: a failed allocation, then a live set
# that grows every step (it runs out of memory in the end, and checkpointing or sharding cannot free it).
MEMORY_FIRST = ("mem_oom", "mem_leak")


def memory_rank(rule_id: str) -> int:
    """Where a memory finding goes among the memory findings before its bytes count (0 first)."""
    return MEMORY_FIRST.index(rule_id) if rule_id in MEMORY_FIRST else len(MEMORY_FIRST)


def finding(
    rule_id: str, title: str, dev: DeviceMemory, saving_bytes: int, evidence: dict[str, object], fix: str,
    formula: str, confidence: str = "medium", severity: str = "low", scope: str = "",
) -> Finding:
    """``scope`` says what the saved bytes are bytes of ("of the peak"), for the reports (evidence
    ``saving_scope``: "frees ≈ 704.0 KiB of the peak")."""
    evidence = {"est_saving_bytes": int(max(saving_bytes, 0)), **({"saving_scope": scope} if scope else {}), **evidence}
    return Finding(
        id=rule_id, title=title, severity=severity, est_saving_ns_per_step=0, share_of_step=0.0,
        saving_kind="estimate", saving_formula=formula, confidence=confidence, evidence=evidence, fix=fix,
        device=dev.device,
    )


def _category(dev: DeviceMemory, name: str) -> int:
    return sum(c.bytes for c in dev.live_at_peak_by_category if c.category == name)


def _reserved_peak(dev: DeviceMemory) -> int:
    return max(dev.peak_reserved_bytes or 0, dev.peak_allocated_bytes)


@memory_rule()
def mem_oom(report: MemoryReport, options: RuleOptions) -> list[Finding]:
    """An allocation failed: the verdict says whether the device was full or the cache was fragmented."""
    out = []
    for dev in report.devices:
        for oom in dev.ooms[:1]:
            fix = ("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or keep shapes static)"
                   if oom.verdict == "fragmentation" else
                   "Reduce live memory: smaller micro-batch, activation checkpointing, bf16")
            sites = ", ".join(s.site for s in oom.top_sites) or "?"
            out.append(finding(
                "mem_oom", f"{dev.device}: out of memory asking for {binary(oom.request_bytes)} ({oom.verdict})", dev,
                oom.request_bytes, {"verdict": oom.verdict, "request_bytes": oom.request_bytes,
                                    "cached_free_bytes": oom.cached_free_bytes, "device_free_bytes": oom.device_free_bytes,
                                    "top_sites": [{"site": s.site, "bytes": s.bytes} for s in oom.top_sites]},
                f"{fix}; the largest live sites: {sites}.", "the failed request", confidence="high", severity="high",
                scope="(the failed request's size)",
            ))
    return out


@memory_rule(options=("mem_near_capacity_fraction",))
def mem_near_capacity(report: MemoryReport, options: RuleOptions) -> list[Finding]:
    """The reserved peak is within 10 % of the device's memory: one larger batch or sequence and it OOMs."""
    out = []
    for dev in report.devices:
        cap = dev.capacity_bytes
        if not cap or _reserved_peak(dev) < options.mem_near_capacity_fraction * cap:
            continue
        peak = _reserved_peak(dev)
        out.append(finding(
            "mem_near_capacity", f"{dev.device}: peak memory {binary(peak)} is {peak / cap:.0%} of {binary(cap)}", dev,
            int(peak - options.mem_near_capacity_fraction * cap),
            {"peak_reserved_bytes": peak, "capacity_bytes": cap, "peak_fraction": round(peak / cap, 4)},
            "Make room before an OOM: activation checkpointing of the largest activation sites, bf16 autocast, or a "
            "smaller micro-batch with gradient accumulation.",
            "bytes above near_capacity_fraction × device memory", severity="medium",
            scope=f"of the peak (down to {options.mem_near_capacity_fraction:.0%} of the device)",
        ))
    return out


@memory_rule(options=("mem_fragmentation_fraction", "mem_fragmentation_min_bytes"))
def mem_fragmentation(report: MemoryReport, options: RuleOptions) -> list[Finding]:
    """Cached but unusable memory at the peak, or cudaMalloc retries (a cache flush and a device sync each)."""
    out = []
    retries = report.stats.num_alloc_retries if report.stats else 0
    for dev in report.devices:
        frag = dev.fragmentation_at_peak_bytes or 0
        reserved = dev.reserved_at_peak_bytes or 0
        fragmented = reserved > 0 and frag >= options.mem_fragmentation_fraction * reserved and frag >= options.mem_fragmentation_min_bytes
        if not fragmented and retries <= 0:
            continue
        if report.expandable_segments:
            fix = ("expandable_segments is already on: keep shapes static (pad or bucket variable lengths), avoid "
                   "torch.cuda.empty_cache() in the loop, and set max_split_size_mb for large odd-sized tensors.")
        else:
            fix = ("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before the first CUDA call: segments grow "
                   "in place instead of leaving cached blocks that fit no request.")
        out.append(finding(
            "mem_fragmentation",
            f"{dev.device}: {binary(frag)} reserved but not allocated at the peak"
            + (f", {retries} allocator retries" if retries else ""), dev, frag,
            {"fragmentation_at_peak_bytes": frag, "reserved_at_peak_bytes": reserved,
             "num_alloc_retries": retries, "expandable_segments": report.expandable_segments},
            fix, "reserved − allocated at the allocated peak (the cached memory no request could use)",
            scope="of reserved memory at the peak",
        ))
    return out


def checkpoint_segments(activation_blocks: int) -> int:
    """Segments for ``checkpoint_sequential``: √n of the activation tensors live at the peak (≥ 4: with fewer,
    the kept inputs and the uncheckpointed last segment leave little to save)."""
    return max(4, round(math.sqrt(max(activation_blocks, 1))))


def checkpoint_saving(activation_bytes: int, blocks: int, segments: int) -> int:
    """What ``checkpoint_sequential(model, s, x)`` frees at the peak, for ``blocks`` equal activations made one
    after another (a chain of modules, one saved tensor each, A/n bytes apiece). torch's checkpoint_sequential
    runs the first s − 1 segments of ⌊n/s⌋ modules checkpointed (each keeps only its input, one activation)
    and the last segment, the rest, normally; at the end of the forward (the peak) that keeps
    (s − 1) + (n − ⌊n/s⌋(s − 1)) activations, so it frees A/n × (s − 1)(⌊n/s⌋ − 1). The recompute in
    backward holds one segment at a time, after the last segment's activations are freed."""
    if blocks <= 0 or segments <= 1:
        return 0
    return max(int(activation_bytes * (segments - 1) * (blocks // segments - 1) / blocks), 0)


@memory_rule(options=("mem_activation_fraction", "mem_leak_min_growth_run"))
def mem_activation_dominant(report: MemoryReport, options: RuleOptions) -> list[Finding]:
    """Activations are most of the peak: checkpointing trades a recompute for most of them. Blocks a leak
    keeps (``dev.leak.held_at_peak_bytes``) are not activations checkpointing could free: left out."""
    out = []
    for dev in report.devices:
        act = _category(dev, "activation") - _leaked(dev, options)
        if dev.peak_allocated_bytes <= 0 or act < options.mem_activation_fraction * dev.peak_allocated_bytes:
            continue
        sites = [g for g in dev.live_at_peak if g.category == "activation"][:5]
        blocks = sum(g.count for g in dev.live_at_peak if g.category == "activation")
        if blocks <= 0:  # a report from before groups counted their blocks: the top sites' blocks
            blocks = sum(s.count for s in dev.live_at_peak_by_site if any(s.site == g.site for g in sites)) or len(sites)
        segments = checkpoint_segments(blocks)
        saving = checkpoint_saving(act, blocks, segments)
        out.append(finding(
            "mem_activation_dominant",
            f"{dev.device}: activations are {act / dev.peak_allocated_bytes:.0%} of the peak ({binary(act)})", dev, saving,
            {"activation_bytes": act, "peak_allocated_bytes": dev.peak_allocated_bytes,
             "top_sites": [{"site": g.site, "bytes": g.bytes} for g in sites], "segments": segments, "activation_blocks": blocks},
            f"Checkpoint the layers around {', '.join(g.site for g in sites[:3])}: "
            f"torch.utils.checkpoint.checkpoint_sequential(model, {segments}, x, use_reentrant=False) or "
            "checkpoint(block, x, use_reentrant=False) per block; their activations are recomputed in backward.",
            "A/n × (s − 1)(⌊n/s⌋ − 1) for A bytes in n activation blocks and s segments: checkpoint_sequential keeps "
            "each checkpointed segment's input (one block) and the last segment's ⌊n/s⌋-or-more blocks",
            scope="of the peak",
        ))
    return out


def _leaking(dev: DeviceMemory, options: RuleOptions) -> bool:
    """End-of-step allocated bytes grew for ``leak_min_growth_run`` steps in a row: :func:`mem_leak`'s trigger."""
    leak = dev.leak
    return leak is not None and leak.longest_growth_run >= options.mem_leak_min_growth_run and leak.growth_bytes_per_step > 0


def _leaked(dev: DeviceMemory, options: RuleOptions) -> int:
    """The bytes live at the peak that :func:`mem_leak` calls leaked (0 when it finds no leak)."""
    return max(dev.leak.held_at_peak_bytes, 0) if dev.leak is not None and _leaking(dev, options) else 0


@memory_rule(options=("mem_optimizer_fraction",))
def mem_optimizer_dominant(report: MemoryReport, options: RuleOptions) -> list[Finding]:
    """Optimizer state is a large share of the peak: 8-bit states, fused optimizers or sharding shrink it."""
    out = []
    for dev in report.devices:
        state = _category(dev, "optimizer_state")
        if dev.peak_allocated_bytes <= 0 or state < options.mem_optimizer_fraction * dev.peak_allocated_bytes:
            continue
        out.append(finding(
            "mem_optimizer_dominant",
            f"{dev.device}: optimizer state is {state / dev.peak_allocated_bytes:.0%} of the peak ({binary(state)})",
            dev, int(state * 0.75),
            {"optimizer_state_bytes": state, "peak_allocated_bytes": dev.peak_allocated_bytes},
            "Shrink the optimizer state: 8-bit Adam (bitsandbytes.optim.AdamW8bit) keeps a quarter of it; across N "
            "ranks, shard it (ZeroRedundancyOptimizer, FSDP) to 1/N; or use a stateless/low-state optimizer (SGD, "
            "Adafactor).",
            "optimizer state × 3/4 (fp32 moments → 8-bit moments)", scope="of the peak",
        ))
    return out


@memory_rule(options=("mem_leak_min_growth_run",))
def mem_leak(report: MemoryReport, options: RuleOptions) -> list[Finding]:
    """End-of-step allocated memory grows step after step: something keeps a reference."""
    out = []
    for dev in report.devices:
        leak = dev.leak
        if leak is None or not _leaking(dev, options):
            continue
        grown = leak.end_of_step_bytes[-1] - leak.end_of_step_bytes[1]
        held = leak.held_at_peak_bytes  # what the leak adds to the peak (older reports: 0, use the growth)
        site = leak.sites[0].site if leak.sites else "?"
        out.append(finding(
            "mem_leak",
            f"{dev.device}: memory grows {binary(leak.growth_bytes_per_step)} per step (kept by {site})", dev,
            held if held > 0 else grown,
            {"growth_bytes_per_step": leak.growth_bytes_per_step, "longest_growth_run": leak.longest_growth_run,
             "end_of_step_bytes": leak.end_of_step_bytes, "sites": [{"site": s.site, "bytes": s.bytes} for s in leak.sites[:5]]},
            f"Release what {site} keeps across steps: store loss.item() or t.detach().cpu() instead of tensors, and "
            "clear lists and caches that grow per step.",
            "the leaked blocks live at the peak (made in an earlier recorded step, never freed by the last step's "
            "end; not parameters, optimizer state or gradients); without them, the growth of end-of-step allocated "
            "bytes after the first step", confidence="high", severity="medium",
            scope="of the peak (more with every step)" if held > 0 else "grown during the recording, and growing",
        ))
    return out


@memory_rule(options=("mem_non_pytorch_bytes",))
def mem_non_pytorch(report: MemoryReport, options: RuleOptions) -> list[Finding]:
    """Memory used on the device outside PyTorch's allocator (NCCL, cuBLAS workspaces, other processes)."""
    stats = report.stats
    if stats is None or stats.non_pytorch_bytes is None or stats.non_pytorch_bytes < options.mem_non_pytorch_bytes:
        return []
    dev = report.devices[0] if report.devices else None
    if dev is None:
        return []
    return [finding(
        "mem_non_pytorch", f"{binary(stats.non_pytorch_bytes)} of device memory is outside PyTorch's allocator", dev,
        0, {"non_pytorch_bytes": stats.non_pytorch_bytes},
        "Check other processes on the device (nvidia-smi), NCCL buffers (NCCL_BUFFSIZE) and cuBLAS/cuDNN "
        "workspaces (CUBLAS_WORKSPACE_CONFIG); none of it can hold tensors.",
        "NVML used − torch reserved, at its largest over the samples", scope="of device memory",
    )]


@memory_rule(options=("mem_underused_fraction",))
def mem_underused(report: MemoryReport, options: RuleOptions) -> list[Finding]:
    """The device's memory is mostly unused: a larger batch would use it (DLProf's rule)."""
    out = []
    for dev in report.devices:
        cap = dev.capacity_bytes
        if not cap or dev.device == "cpu" or _reserved_peak(dev) >= options.mem_underused_fraction * cap:
            continue
        peak = _reserved_peak(dev)
        out.append(finding(
            "mem_underused", f"{dev.device}: the peak uses {peak / cap:.0%} of {binary(cap)}", dev, 0,
            {"peak_reserved_bytes": peak, "capacity_bytes": cap, "unused_bytes": cap - peak},
            "Use the room: a larger batch (scale the learning rate), or a larger model or sequence per device.",
            "no saving: memory left unused at the peak",
        ))
    return out


__all__ = ["MEMORY_FIRST", "checkpoint_saving", "checkpoint_segments", "finding", "mem_activation_dominant",
           "mem_fragmentation", "mem_leak", "mem_near_capacity", "mem_non_pytorch", "mem_oom", "mem_optimizer_dominant",
           "mem_underused", "memory_rank"]
